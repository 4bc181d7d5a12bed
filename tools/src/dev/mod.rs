//! `brook dev cluster`: a local cluster in one terminal, as
//! `rpk container start -n 3` gives one for Redpanda. Each node is a
//! `brook serve` child process on 127.0.0.1 (client ports from 9092,
//! controller ports from 9192), its own data directory under `--dir`, its
//! log lines prefixed with its node id; the first three nodes are the
//! controller voters.
//!
//! Ctrl-C (or SIGTERM) stops every node, promptly and always: SIGTERM to
//! all at once, then SIGKILL to whatever still runs after a bounded grace
//! period, and the command returns only once no node runs. A node dies
//! with the command even when the command is killed (`PR_SET_PDEATHSIG`).
//! A node that exits on its own while the cluster runs (a crash, a
//! `kill -9` to try a failover) is reported on stderr at once, with its id
//! and exit status; the others keep running, as `docker compose up` does,
//! and the command's exit status is then non-zero.

mod nodes;
mod signals;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use nodes::{Exit, Nodes};
use signals::Wake;

/// Voters a dev cluster has at most (Kafka's usual controller quorum).
const VOTERS_MAX: usize = 3;
/// Controller ports sit this far above the client ports.
const CONTROLLER_PORT_OFFSET: u16 = 100;
/// How long the nodes have, after SIGTERM, to stop on their own before
/// they are killed. Their controlled shutdowns (a broker waits for the
/// controller to move its leaderships, up to 30 s) run at once and took
/// 0.2-0.6 s for three nodes, idle or busy; the 30 s wait pays off in a
/// rolling restart, not when every node stops. 10 s is also what
/// `docker stop` gives a container.
const STOP_GRACE_MAX: Duration = Duration::from_secs(10);
/// How long the nodes still running have once a majority of the voters has
/// exited. No controller can grant a controlled shutdown any more, so a
/// node still waiting for one would wait its full 30 s for nothing; a node
/// already granted one is closing its files and exits within milliseconds.
const QUORUM_LOST_GRACE_MAX: Duration = Duration::from_secs(2);

#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Start a local cluster of `--brokers` nodes on 127.0.0.1 until Ctrl-C.
    ///
    /// Ctrl-C (or SIGTERM) stops every node: SIGTERM to all at once;
    /// whatever still runs 10 s later (2 s once most controller voters have
    /// exited) is killed; a second Ctrl-C kills at once. A node that exits
    /// on its own while the cluster runs is reported on stderr with its id
    /// and exit status and the others keep running; the exit status is then
    /// non-zero. The nodes die with this command if it is killed.
    Cluster(ClusterArgs),
}

#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Nodes to start (the first three are also the controller quorum).
    #[arg(long, default_value_t = 3)]
    brokers: usize,
    /// Where the nodes' data directories go (`node-<id>` each).
    #[arg(long, default_value = "./brook-dev-cluster")]
    dir: PathBuf,
    /// The first node's client port; node N listens on this + N, and its
    /// controller listener on this + 100 + N.
    #[arg(long, default_value_t = 9092)]
    first_port: u16,
    /// Node N serves Prometheus metrics on this port + N.
    #[arg(long, default_value_t = 9644)]
    first_metrics_port: u16,
    /// Shards (cores) each node runs.
    #[arg(long, default_value_t = 1)]
    cores: usize,
    /// Settings given to every node, as key=value (repeatable).
    #[arg(short = 'X', long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

pub fn run(command: DevCommand) -> ExitCode {
    match command {
        DevCommand::Cluster(args) => cluster(args),
    }
}

/// The `brook serve` arguments of node `id` in a cluster of `args.brokers`.
fn node_arguments(args: &ClusterArgs, id: usize) -> Vec<String> {
    let voters = (0..args.brokers.min(VOTERS_MAX))
        .map(|voter| format!("{voter}@127.0.0.1:{}", controller_port(args, voter)))
        .collect::<Vec<_>>()
        .join(",");
    let mut arguments = vec![
        "serve".to_owned(),
        "--listen".to_owned(),
        format!("127.0.0.1:{}", args.first_port + id as u16),
        "--data-dir".to_owned(),
        args.dir.join(format!("node-{id}")).display().to_string(),
        "--cores".to_owned(),
        args.cores.to_string(),
        "--metrics-listen".to_owned(),
        format!("127.0.0.1:{}", args.first_metrics_port + id as u16),
        "--set".to_owned(),
        format!("node.id={id}"),
        "--set".to_owned(),
        format!("controller.quorum.voters={voters}"),
    ];
    if id < VOTERS_MAX {
        arguments.push("--set".to_owned());
        arguments.push(format!(
            "listeners=CONTROLLER://127.0.0.1:{}",
            controller_port(args, id)
        ));
    }
    for setting in &args.settings {
        arguments.push("--set".to_owned());
        arguments.push(setting.clone());
    }
    arguments
}

fn controller_port(args: &ClusterArgs, id: usize) -> u16 {
    args.first_port + CONTROLLER_PORT_OFFSET + id as u16
}

fn cluster(args: ClusterArgs) -> ExitCode {
    if args.brokers == 0
        || args
            .first_port
            .checked_add(CONTROLLER_PORT_OFFSET + args.brokers as u16)
            .is_none()
    {
        report(format_args!(
            "--brokers must be at least 1 and the ports must fit"
        ));
        return ExitCode::FAILURE;
    }
    signals::block();
    let binary = match std::env::current_exe() {
        Ok(binary) => binary,
        Err(error) => {
            report(format_args!("cannot find the brook binary: {error}"));
            return ExitCode::FAILURE;
        }
    };
    let mut nodes = Nodes::new(args.brokers.min(VOTERS_MAX));
    for id in 0..args.brokers {
        match nodes.start(id, &binary, &node_arguments(&args, id)) {
            Ok(pid) => say(format_args!(
                "node {id}: pid {pid}, listening on 127.0.0.1:{}",
                args.first_port + id as u16
            )),
            Err(error) => {
                report(format_args!("cannot start node {id}: {error}"));
                stop(&mut nodes);
                return ExitCode::FAILURE;
            }
        }
    }
    let bootstrap = (0..args.brokers)
        .map(|id| format!("127.0.0.1:{}", args.first_port + id as u16))
        .collect::<Vec<_>>()
        .join(",");
    say(format_args!(
        "{} nodes; bootstrap servers: {bootstrap}",
        args.brokers
    ));
    say(format_args!("Ctrl-C stops them"));
    let watched = watch(&mut nodes);
    let failed_at_stop = match watched.signal {
        Some(signal) => {
            say(format_args!("{signal}: stopping every node"));
            stop(&mut nodes)
        }
        None => {
            nodes.finish_output();
            false
        }
    };
    if watched.failed || failed_at_stop {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// How the cluster's run ended.
#[derive(Debug)]
struct Watched {
    /// The signal that asked for the stop; `None`: every node exited.
    signal: Option<&'static str>,
    /// Whether a node exited on its own.
    failed: bool,
}

/// Until SIGINT or SIGTERM, or until no node is left: reports each node
/// that exits on its own (a crash, a kill from outside) as soon as it does,
/// and keeps the others running.
fn watch(nodes: &mut Nodes) -> Watched {
    let mut failed = false;
    loop {
        let wake = signals::wait(None);
        for exit in nodes.reap() {
            failed = true;
            report(format_args!(
                "node {} (pid {}) exited on its own ({}); the other nodes keep running",
                exit.id, exit.pid, exit.status
            ));
        }
        if let Wake::Termination(signal) = wake {
            return Watched {
                signal: Some(signal),
                failed,
            };
        }
        if nodes.running().is_empty() {
            report(format_args!("every node has exited"));
            return Watched {
                signal: None,
                failed,
            };
        }
    }
}

/// Stops every node and returns whether one failed (exited with an error
/// other than our SIGKILL). SIGTERM goes to all at once, so their
/// controlled shutdowns overlap; each node then has [`STOP_GRACE_MAX`],
/// or [`QUORUM_LOST_GRACE_MAX`] once a majority of the voters has exited,
/// before it is killed. A second SIGINT or SIGTERM kills at once. Returns
/// only once no node runs.
fn stop(nodes: &mut Nodes) -> bool {
    let started = Instant::now();
    nodes.signal_running(libc::SIGTERM);
    let mut deadline = started + STOP_GRACE_MAX;
    let mut quorum_lost = false;
    let mut failed = false;
    loop {
        failed |= report_stops(&nodes.reap(), Ending::Stopped);
        let running = nodes.running();
        if running.is_empty() {
            break;
        }
        if !quorum_lost && nodes.quorum_lost() {
            quorum_lost = true;
            deadline = deadline.min(Instant::now() + QUORUM_LOST_GRACE_MAX);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let why = match signals::wait(Some(left)) {
            Wake::Termination(signal) => format!("a second {signal}"),
            _ if Instant::now() < deadline => continue,
            _ if quorum_lost => "their controlled shutdown cannot finish now that the controller \
                 quorum has stopped (expected when the whole cluster stops; their logs are \
                 recovered at the next start)"
                .to_owned(),
            _ => format!("they did not stop within {STOP_GRACE_MAX:?} of SIGTERM"),
        };
        let running = running
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        report(format_args!("killing node(s) {running}: {why}"));
        failed |= report_stops(&nodes.kill_and_wait(), Ending::Killed);
        break;
    }
    nodes.finish_output();
    say(format_args!(
        "every node has stopped, {} ms after SIGTERM",
        started.elapsed().as_millis()
    ));
    failed
}

/// How the nodes of [`report_stops`] were ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// By SIGTERM: each should exit 0.
    Stopped,
    /// By our SIGKILL.
    Killed,
}

/// Reports each node that did not exit 0, and returns whether one failed:
/// exited otherwise than `ending` expects.
fn report_stops(exits: &[Exit], ending: Ending) -> bool {
    let mut failed = false;
    for exit in exits.iter().filter(|exit| !exit.status.success()) {
        if ending == Ending::Killed && exit.killed() {
            report(format_args!("node {} (pid {}) killed", exit.id, exit.pid));
        } else {
            failed = true;
            report(format_args!(
                "node {} (pid {}) failed while stopping ({})",
                exit.id, exit.pid, exit.status
            ));
        }
    }
    failed
}

/// A line of ours on standard output. Output that cannot be written
/// (closed by `| head`) is dropped: `println!` would panic, and a panic
/// here would skip stopping the nodes.
fn say(message: std::fmt::Arguments) {
    let _ = writeln!(std::io::stdout().lock(), "brook dev cluster: {message}");
}

/// A problem, on standard error; dropped when it cannot be written, as
/// [`say`].
fn report(message: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "brook dev cluster: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_nodes_are_three_voters_and_a_fourth_is_a_broker() {
        let args = ClusterArgs {
            brokers: 4,
            dir: PathBuf::from("/tmp/c"),
            first_port: 9092,
            first_metrics_port: 9644,
            cores: 1,
            settings: vec!["num.partitions=3".into()],
        };
        let first = node_arguments(&args, 0).join(" ");
        assert!(first.contains("--listen 127.0.0.1:9092"), "{first}");
        assert!(first.contains("--metrics-listen 127.0.0.1:9644"), "{first}");
        assert!(
            first.contains(
                "controller.quorum.voters=0@127.0.0.1:9192,1@127.0.0.1:9193,2@127.0.0.1:9194"
            ),
            "{first}"
        );
        assert!(
            first.contains("listeners=CONTROLLER://127.0.0.1:9192"),
            "{first}"
        );
        assert!(first.ends_with("--set num.partitions=3"), "{first}");
        let fourth = node_arguments(&args, 3).join(" ");
        assert!(
            fourth.contains("--listen 127.0.0.1:9095") && !fourth.contains("listeners="),
            "{fourth}"
        );
        assert!(fourth.contains("--data-dir /tmp/c/node-3"), "{fourth}");
    }
}
