//! `brook dev cluster` as a user runs it: a real command that starts real
//! `brook serve` children, stopped with real signals. Each test holds the
//! machine busy ([`Busy`]) for its length: a stop that races a lost quorum
//! or a slow node shows up under load, not on an idle machine.
//!
//! The nodes' pids are read from `/proc/<command>/task/<command>/children`
//! (the command starts them from its main thread), not from its output, and
//! "gone" means no process with that pid runs a node of this cluster (its
//! command line names the cluster's directory): a pid reused by another
//! process does not count, a zombie has no command line.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use brook_tests::cluster::{Seen, seen_at};
use brook_tests::load::{Busy, rounds};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// Nodes of every test's cluster: three voters.
const NODES: u16 = 3;
/// Where the dev cluster's metrics ports start, from its first client port
/// (its default, 9644, may be taken by another test's broker).
const METRICS_PORT_OFFSET: u16 = 200;
/// A cluster that has not formed by then is broken, not slow (a debug
/// build forms in a few seconds on a busy 2-core machine).
const FORMED_WITHIN: Duration = Duration::from_secs(60);
/// The bar for a hang: a stop not over 20 s after the signal. The
/// command kills what remains after at most 10 s, so this is no measure of
/// speed; the time taken is printed.
const STOPPED_WITHIN: Duration = Duration::from_secs(20);
/// How long a report or an exit may take to show before the test calls it
/// missing (they come within a second when things work).
const SHOWN_WITHIN: Duration = Duration::from_secs(20);
/// Between two looks at something the test waits for.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// One dev-cluster test at a time: each holds the machine busy (two at
/// once would double the load) and probes for free ports (two at once
/// could pick the same).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    // A test that failed holding the lock leaves nothing behind to guard.
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the test does with the command's standard output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    /// Read to its end.
    Kept,
    /// Closed once the command has said how to stop it, as
    /// `brook dev cluster | head -3` does.
    ClosedOnceStarted,
}

/// A running `brook dev cluster` with three nodes, its output collected
/// line by line; killed, with its nodes, when dropped.
#[derive(Debug)]
struct DevCluster {
    command: Child,
    root: tempfile::TempDir,
    base: u16,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
    /// (node id, pid), by id, once formed.
    nodes: Vec<(usize, u32)>,
}

impl DevCluster {
    /// Starts the command and waits until every node sees the three
    /// brokers and the same controller.
    fn formed(output: Output) -> DevCluster {
        let root = tempfile::tempdir().unwrap();
        let base = free_port_range(NODES);
        let mut command = Command::new(BROOK)
            .args(["dev", "cluster", "--brokers", &NODES.to_string()])
            .args(["--first-port", &base.to_string()])
            .args([
                "--first-metrics-port",
                &(base + METRICS_PORT_OFFSET).to_string(),
            ])
            .arg("--dir")
            .arg(root.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let until = match output {
            Output::Kept => None,
            Output::ClosedOnceStarted => Some("Ctrl-C"),
        };
        let readers = vec![
            collect(command.stdout.take().unwrap(), stdout.clone(), until),
            collect(command.stderr.take().unwrap(), stderr.clone(), None),
        ];
        let mut cluster = DevCluster {
            command,
            root,
            base,
            stdout,
            stderr,
            readers,
            nodes: Vec::new(),
        };
        let seen = cluster.wait_until_formed();
        assert!(
            seen.iter()
                .all(|view| view.controller == seen[0].controller),
            "{seen:?}"
        );
        cluster.nodes = cluster.node_pids();
        cluster
    }

    fn address(&self, node: u16) -> String {
        format!("127.0.0.1:{}", self.base + node)
    }

    fn wait_until_formed(&self) -> Vec<Seen> {
        let deadline = Instant::now() + FORMED_WITHIN;
        loop {
            let seen = (0..NODES)
                .map(|node| seen_at(&self.address(node)))
                .collect::<Option<Vec<_>>>();
            if let Some(seen) = seen.clone().filter(|seen| {
                seen.iter()
                    .all(|seen| seen.brokers == [0, 1, 2] && seen.controller >= 0)
            }) {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "the dev cluster did not form: {seen:?}\n{}",
                self.output()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The command's children, by node id (read from their command lines).
    fn node_pids(&self) -> Vec<(usize, u32)> {
        let pid = self.command.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .expect("the command's children (CONFIG_PROC_CHILDREN)");
        let mut nodes: Vec<(usize, u32)> = children
            .split_whitespace()
            .map(|child| {
                let child: u32 = child.parse().unwrap();
                let command_line = command_line(child);
                let id = command_line
                    .split('\0')
                    .find_map(|argument| argument.strip_prefix("node.id="))
                    .unwrap_or_else(|| panic!("{child} is not a node: {command_line:?}"));
                (id.parse().unwrap(), child)
            })
            .collect();
        nodes.sort_unstable();
        assert_eq!(
            nodes.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [0, 1, 2],
            "{nodes:?}"
        );
        nodes
    }

    fn pid_of(&self, node: usize) -> u32 {
        self.nodes[node].1
    }

    /// Whether `pid` runs a node of this cluster.
    fn runs_a_node(&self, pid: u32) -> bool {
        command_line(pid).contains(&*self.root.path().to_string_lossy())
    }

    /// Sends `signal` to node `node`.
    fn signal_node(&self, node: usize, signal: i32) {
        assert!(self.runs_a_node(self.pid_of(node)));
        // SAFETY: kill(2) on a process that runs this test's node.
        assert_eq!(unsafe { libc::kill(self.pid_of(node) as i32, signal) }, 0);
    }

    /// Sends `signal` to the command; returns its exit status and how long
    /// it took to exit, which must be within [`STOPPED_WITHIN`].
    fn stop_with(&mut self, signal: i32) -> (ExitStatus, Duration) {
        let started = Instant::now();
        // SAFETY: kill(2) on the child this test started (not yet reaped).
        assert_eq!(unsafe { libc::kill(self.command.id() as i32, signal) }, 0);
        loop {
            if let Some(status) = self.command.try_wait().unwrap() {
                for reader in self.readers.drain(..) {
                    reader.join().unwrap();
                }
                return (status, started.elapsed());
            }
            assert!(
                started.elapsed() < STOPPED_WITHIN,
                "brook dev cluster did not stop within {STOPPED_WITHIN:?}; nodes still running: \
                 {:?}\n{}",
                self.running_nodes(),
                self.output()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The nodes whose processes still run.
    fn running_nodes(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|(_, pid)| self.runs_a_node(*pid))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Waits until `condition` holds on the output, or fails with `what`.
    fn wait_for(&self, what: &str, condition: impl Fn(&DevCluster) -> bool) {
        let deadline = Instant::now() + SHOWN_WITHIN;
        while !condition(self) {
            assert!(
                Instant::now() < deadline,
                "{what} within {SHOWN_WITHIN:?}\n{}",
                self.output()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The command's own lines (not its nodes'), for a failure message.
    fn output(&self) -> String {
        let own = |lines: Vec<String>| {
            lines
                .into_iter()
                .filter(|line| !line.starts_with("[node "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!(
            "stdout:\n{}\nstderr:\n{}",
            own(self.stdout_lines()),
            own(self.stderr_lines())
        )
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        // A failed test leaves no cluster running behind it.
        let _ = self.command.kill();
        let _ = self.command.wait();
        for (_, pid) in &self.nodes {
            if self.runs_a_node(*pid) {
                // SAFETY: kill(2) on a process that runs this test's node.
                unsafe {
                    libc::kill(*pid as i32, libc::SIGKILL);
                }
            }
        }
    }
}

/// Collects `output`'s lines into `lines`; with `until`, stops reading
/// (and closes the pipe) after the first line that contains it.
fn collect(
    output: impl Read + Send + 'static,
    lines: Arc<Mutex<Vec<String>>>,
    until: Option<&'static str>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            let last = until.is_some_and(|until| line.contains(until));
            lines.lock().unwrap().push(line);
            if last {
                return;
            }
        }
    })
}

/// `/proc/<pid>/cmdline`, NUL-separated; empty when the process is gone
/// or a zombie.
fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Spreads the port ranges of the calls in one test process.
static PORT_RANGES_TAKEN: AtomicU32 = AtomicU32::new(0);

/// A base port whose client, controller and metrics ports (base..,
/// base + 100.., base + 200..) are all free now: one of 200 candidates in
/// 10000..32000 spread by this process's id and the calls before, below
/// the kernel's ephemeral ports (which outgoing connections take; see
/// `brook_launch::free_port`).
fn free_port_range(nodes: u16) -> u16 {
    let pid = std::process::id();
    let taken = PORT_RANGES_TAKEN.fetch_add(1, Ordering::Relaxed);
    (0..200u32)
        .map(|attempt| {
            let spread = pid
                .wrapping_mul(7)
                .wrapping_add(taken.wrapping_add(attempt).wrapping_mul(211));
            // Below 22000, so the sum fits a u16.
            10_000 + (spread % 22_000) as u16
        })
        .find(|base| {
            (0..nodes).all(|node| {
                [
                    base + node,
                    base + 100 + node,
                    base + METRICS_PORT_OFFSET + node,
                ]
                .iter()
                .all(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
            })
        })
        .expect("a free port range")
}

/// Whether the command's stderr reports node `node` killed by it.
fn reported_killed(lines: &[String], node: usize) -> bool {
    let name = format!("node {node} ");
    lines.iter().any(|line| {
        line.starts_with("brook dev cluster:") && line.contains(&name) && line.contains("killed")
    })
}

/// `brook dev cluster`, as a user runs it: three nodes that agree on the
/// cluster, every line prefixed, all stopped by one Ctrl-C, in a loop on
/// a busy machine. A node stops cleanly ("shard stopped"), or, when the
/// others' stops took its quorum away before its controlled shutdown was
/// granted, is killed and said so; either way no node outlives the command.
#[test]
fn brook_dev_cluster_starts_three_nodes_and_stops_them_on_ctrl_c() {
    let _one = one_at_a_time();
    let _busy = Busy::start();
    for round in 0..rounds(3, 10) {
        let mut cluster = DevCluster::formed(Output::Kept);
        let (status, took) = cluster.stop_with(libc::SIGINT);
        assert!(status.success(), "{status}\n{}", cluster.output());
        let lines = cluster.stdout_lines();
        let bootstrap = format!(
            "127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            cluster.base,
            cluster.base + 1,
            cluster.base + 2
        );
        assert!(
            lines.iter().any(|line| line.contains(&bootstrap)),
            "{lines:?}"
        );
        let errors = cluster.stderr_lines();
        let mut killed = Vec::new();
        for node in 0..3 {
            let prefix = format!("[node {node}]");
            let stopped = lines
                .iter()
                .chain(&errors)
                .any(|line| line.starts_with(&prefix) && line.contains("shard stopped"));
            if !stopped {
                assert!(reported_killed(&errors, node), "{}", cluster.output());
                killed.push(node);
            }
        }
        assert_eq!(cluster.running_nodes(), [0usize; 0], "{}", cluster.output());
        for node in 0..NODES {
            assert!(
                seen_at(&cluster.address(node)).is_none(),
                "node {node} still serves"
            );
        }
        println!("round {round}: stopped after {took:?}; killed at the stop: {killed:?}");
    }
}

/// Two of the three voters killed with kill -9, then Ctrl-C: the last node
/// cannot have a controlled shutdown granted by a quorum, and is killed
/// rather than waited for (unless it was the active controller and still
/// led, with nothing to hand over: then it grants its own at once and stops
/// cleanly); no node outlives the command.
#[test]
fn brook_dev_cluster_stops_a_node_that_lost_its_quorum_on_ctrl_c() {
    let _one = one_at_a_time();
    let _busy = Busy::start();
    let mut cluster = DevCluster::formed(Output::Kept);
    for node in [0, 1] {
        cluster.signal_node(node, libc::SIGKILL);
    }
    cluster.wait_for("nodes 0 and 1 gone", |cluster| {
        cluster.running_nodes() == [2]
    });
    let (status, took) = cluster.stop_with(libc::SIGINT);
    assert_eq!(cluster.running_nodes(), [0usize; 0], "{}", cluster.output());
    // A clean exit is not reported; any other end of node 2 is.
    let stopped_cleanly = !cluster
        .stderr_lines()
        .iter()
        .any(|line| line.contains("node 2 "));
    assert!(
        reported_killed(&cluster.stderr_lines(), 2) || stopped_cleanly,
        "{}",
        cluster.output()
    );
    // Nodes died under it: the command says so in its exit status too.
    assert!(!status.success(), "{status}\n{}", cluster.output());
    println!("stopped after {took:?} ({status})");
}

/// A node killed with kill -9 under the command (as a user tries a
/// failover): reported on stderr with its id and exit status while the
/// others keep serving; the exit status after Ctrl-C says a node failed.
#[test]
fn brook_dev_cluster_reports_a_node_killed_under_it_and_keeps_the_others() {
    let _one = one_at_a_time();
    let _busy = Busy::start();
    let mut cluster = DevCluster::formed(Output::Kept);
    cluster.signal_node(1, libc::SIGKILL);
    let pid = cluster.pid_of(1);
    cluster.wait_for("node 1's death reported", |cluster| {
        cluster.stderr_lines().iter().any(|line| {
            line.starts_with("brook dev cluster: node 1 ")
                && line.contains(&format!("pid {pid}"))
                && line.contains("SIGKILL")
        })
    });
    assert_eq!(cluster.running_nodes(), [0, 2], "{}", cluster.output());
    for node in [0, 2] {
        assert!(
            seen_at(&cluster.address(node)).is_some(),
            "node {node} no longer serves\n{}",
            cluster.output()
        );
    }
    let (status, took) = cluster.stop_with(libc::SIGINT);
    assert_eq!(cluster.running_nodes(), [0usize; 0], "{}", cluster.output());
    assert!(!status.success(), "{status}\n{}", cluster.output());
    println!("stopped after {took:?} ({status})");
}

/// The command itself killed with kill -9 (nothing can run in it): its
/// nodes die with it instead of running on as orphans.
#[test]
fn brook_dev_cluster_killed_with_sigkill_leaves_no_node_running() {
    let _one = one_at_a_time();
    let _busy = Busy::start();
    let mut cluster = DevCluster::formed(Output::Kept);
    let (status, _) = cluster.stop_with(libc::SIGKILL);
    assert!(!status.success());
    cluster.wait_for("every node gone with the command", |cluster| {
        cluster.running_nodes().is_empty()
    });
}

/// The command's output closed (`brook dev cluster | head -3`): writing
/// to it fails, and the command must still stop every node on Ctrl-C
/// (it once panicked on its "stopping" line and left them running).
#[test]
fn brook_dev_cluster_whose_output_is_closed_still_stops_every_node() {
    let _one = one_at_a_time();
    let _busy = Busy::start();
    let mut cluster = DevCluster::formed(Output::ClosedOnceStarted);
    let (status, took) = cluster.stop_with(libc::SIGINT);
    assert_eq!(cluster.running_nodes(), [0usize; 0], "{}", cluster.output());
    println!("stopped after {took:?} ({status})");
}
