//! A `brook serve` process started by the benchmark or a test: on a free
//! port of 127.0.0.1, in its own data directory, optionally pinned to CPUs;
//! killed (as a crash) or stopped on demand, and killed when dropped. Also
//! what the process costs: resident memory and CPU time from `/proc`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Why a broker process could not be started (or restarted).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("broker: {0}")]
    Broker(String),
}

/// How long a broker may take to start (recovery of a large log included).
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// How to start a broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerLaunch {
    /// The `brook` binary.
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    /// `--cores`.
    pub cores: usize,
    /// CPUs the process may run on (empty: any).
    pub cpus: Vec<usize>,
    /// More `serve` arguments (`--config`, `--set k=v`, …).
    pub extra: Vec<String>,
    /// The network namespace to run in (its `/run/netns/<name>` file);
    /// `None`: this process's.
    pub namespace: Option<PathBuf>,
    /// The address to listen on (`host:port`, port 0 for one the kernel
    /// chooses); `None`: a [`free_port`] of 127.0.0.1.
    pub listen: Option<String>,
}

/// How to start an Apache Kafka broker instead (`bench/kafka/start-kafka.sh`:
/// one KRaft node, broker and controller in one process), to measure Kafka
/// beside Brook on the same machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaLaunch {
    /// `start-kafka.sh`.
    pub script: PathBuf,
    /// The client port and the KRaft controller port on 127.0.0.1.
    pub port: u16,
    pub controller_port: u16,
    /// `node.id`, and every voter as `id@host:port` (empty: this node alone).
    pub node_id: u32,
    pub voters: String,
    /// The same on every node of one cluster (empty: the script draws one).
    pub cluster_id: String,
    /// Broker properties (`key=value`) after the script's own.
    pub settings: Vec<String>,
    /// `-Xmx`/`-Xms`.
    pub heap: String,
}

impl KafkaLaunch {
    /// One node on two free ports, Kafka's start script's heap (1 GiB) and
    /// otherwise Kafka's defaults.
    pub fn single(script: PathBuf) -> Result<KafkaLaunch, LaunchError> {
        Ok(KafkaLaunch {
            script,
            port: free_port()?,
            controller_port: free_port()?,
            node_id: 1,
            voters: String::new(),
            cluster_id: String::new(),
            settings: Vec::new(),
            heap: "1g".into(),
        })
    }
}

/// A port of 127.0.0.1 that nothing holds now, for a process about to be
/// told to listen on it, never the same twice in this process.
///
/// It is taken below the kernel's range of ephemeral ports
/// (`ip_local_port_range`): a port the kernel chose (`bind` to port 0) and
/// this released could be the local port of any outgoing connection before
/// the process binds it, which then fails to start. Below that range only
/// another explicit choice takes it; the candidates are spread by process
/// id and time so that concurrent test processes rarely try the same one.
pub fn free_port() -> Result<u16, LaunchError> {
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (low, span) = (FREE_PORT_LOW, ephemeral_low.saturating_sub(FREE_PORT_LOW));
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if span >= 1_000 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let mut state = (u64::from(std::process::id()) << 32) ^ u64::from(nanos);
        for _ in 0..1_000 {
            state = splitmix(state);
            let port = low + (state % u64::from(span)) as u16;
            if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return Ok(port);
            }
        }
    }
    // A machine whose ephemeral range starts low: the kernel's choice.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| LaunchError::Broker(format!("finding a free port: {error}")))?;
    given.insert(port);
    Ok(port)
}

/// The lowest port [`free_port`] gives (above the well-known services).
const FREE_PORT_LOW: u16 = 10_000;

/// One step of SplitMix64: a well-spread 64-bit sequence from any seed.
fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The line Kafka logs once it serves clients.
const KAFKA_STARTED: &str = "Kafka Server started";

#[derive(Debug)]
pub struct BrokerProcess {
    launch: BrokerLaunch,
    /// Apache Kafka rather than `brook serve` (`launch` then gives only the
    /// data directory and the CPUs).
    kafka: Option<KafkaLaunch>,
    child: Option<Child>,
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// Where it serves Prometheus metrics (a free port of 127.0.0.1 unless
    /// `extra` says otherwise), if it does.
    pub metrics_address: Option<String>,
    /// The namespace file, open while a child may be spawned into it.
    namespace_file: Option<std::fs::File>,
}

/// How long [`BrokerProcess::restart`] waits for its port to be free again.
const RESTART_PORT_WAIT: Duration = Duration::from_secs(20);

impl BrokerProcess {
    /// Starts `binary serve` on a free port and waits until it listens.
    pub fn start(launch: BrokerLaunch) -> Result<BrokerProcess, LaunchError> {
        let mut broker = BrokerProcess {
            launch,
            kafka: None,
            child: None,
            address: String::new(),
            metrics_address: None,
            namespace_file: None,
        };
        // Not port 0: a restart binds the same port again, and one the
        // kernel chose is an ephemeral one that any outgoing connection on
        // the machine (a restarted peer's, reconnecting) may hold by then.
        let listen = match broker.launch.listen.clone() {
            Some(listen) => listen,
            None => format!("127.0.0.1:{}", free_port()?),
        };
        broker.launch(&listen)?;
        Ok(broker)
    }

    /// Starts Apache Kafka in `data_dir` (formatted on its first start),
    /// on `cpus` (empty: any), and waits until it serves clients.
    pub fn start_kafka(
        kafka: KafkaLaunch,
        data_dir: PathBuf,
        cpus: Vec<usize>,
    ) -> Result<BrokerProcess, LaunchError> {
        let mut broker = BrokerProcess {
            launch: BrokerLaunch {
                binary: kafka.script.clone(),
                data_dir,
                cores: 0,
                cpus,
                extra: Vec::new(),
                namespace: None,
                listen: None,
            },
            address: format!("127.0.0.1:{}", kafka.port),
            kafka: Some(kafka),
            child: None,
            metrics_address: None,
            namespace_file: None,
        };
        broker.launch_kafka()?;
        Ok(broker)
    }

    /// Whether this is Apache Kafka rather than `brook serve`.
    pub fn is_kafka(&self) -> bool {
        self.kafka.is_some()
    }

    fn launch_kafka(&mut self) -> Result<(), LaunchError> {
        let kafka = self.kafka.clone().expect("a Kafka launch");
        let data_dir = self.launch.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(io("creating", &data_dir))?;
        let log_path = self.log_path();
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(io("opening", &log_path))
        };
        let mut log = open_log()?;
        let mut command = Command::new("bash");
        command
            .arg(&kafka.script)
            .arg(&data_dir)
            .args([kafka.port.to_string(), kafka.controller_port.to_string()])
            .args(&kafka.settings)
            .env("KAFKA_HEAP", &kafka.heap)
            .env("KAFKA_NODE_ID", kafka.node_id.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(open_log()?));
        for (name, value) in [
            ("KAFKA_VOTERS", &kafka.voters),
            ("KAFKA_CLUSTER_ID", &kafka.cluster_id),
        ] {
            if !value.is_empty() {
                command.env(name, value);
            }
        }
        pin(&mut command, self.launch.cpus.clone());
        let mut child = command.spawn().map_err(io("starting", &kafka.script))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = mpsc::channel();
        // Kafka logs to stdout: every line goes to the log file, and the
        // first "started" line says it serves clients.
        std::thread::spawn(move || {
            use std::io::Write;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains(KAFKA_STARTED) {
                    let _ = sender.send(());
                }
                let _ = writeln!(log, "{line}");
            }
        });
        if receiver.recv_timeout(START_TIMEOUT).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(LaunchError::Broker(format!(
                "Kafka did not start; its log:\n{log}"
            )));
        }
        self.child = Some(child);
        Ok(())
    }

    /// The file the broker's log (stderr) goes to.
    pub fn log_path(&self) -> PathBuf {
        self.launch.data_dir.join("broker.log")
    }

    pub fn data_dir(&self) -> &Path {
        &self.launch.data_dir
    }

    fn launch(&mut self, listen: &str) -> Result<(), LaunchError> {
        let data_dir = self.launch.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(io("creating", &data_dir))?;
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io("opening", &log_path))?;
        let logged_before = log.metadata().map_or(0, |meta| meta.len());
        let mut command = Command::new(&self.launch.binary);
        command
            .args(["serve", "--listen", listen, "--cores"])
            .arg(self.launch.cores.to_string())
            .arg("--data-dir")
            .arg(&data_dir);
        if !self
            .launch
            .extra
            .iter()
            .any(|arg| arg == "--metrics-listen")
        {
            // Many brokers run on one machine: none takes the default port.
            command.args(["--metrics-listen", "127.0.0.1:0"]);
        }
        command
            .args(&self.launch.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if let Some(namespace) = &self.launch.namespace {
            let file = std::fs::File::open(namespace).map_err(io("opening", namespace))?;
            // SAFETY: setns(2) on the child between fork and exec (async-
            // signal-safe); `file` outlives the spawn below.
            unsafe {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
                command.pre_exec(move || {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            self.namespace_file = Some(file);
        }
        pin(&mut command, self.launch.cpus.clone());
        let binary = self.launch.binary.clone();
        let mut child = command.spawn().map_err(io("starting", &binary))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = sender.send(line);
            }
            for _ in lines {}
        });
        let line = match receiver.recv_timeout(START_TIMEOUT) {
            Ok(line) => line,
            Err(waited) => {
                let _ = child.kill();
                let status = child.wait();
                return Err(LaunchError::Broker(self.not_started(
                    waited,
                    status,
                    logged_before,
                )));
            }
        };
        // "brook listening on <address> (<n> shards[; metrics on <address>])"
        self.address = line
            .split_whitespace()
            .nth(3)
            .ok_or_else(|| LaunchError::Broker(format!("unexpected first line {line:?}")))?
            .to_owned();
        self.metrics_address = line
            .split_once("metrics on ")
            .map(|(_, rest)| rest.trim_end_matches(')').to_owned());
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait for a clean exit; returns whether it exited 0.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        child.wait().map(|status| status.success()).unwrap_or(false)
    }

    /// SIGTERM, without waiting (see [`BrokerProcess::wait_exit`]).
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            // SAFETY: sending a signal to our own child process.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
        }
    }

    /// Waits for the process to exit; whether it exited 0.
    pub fn wait_exit(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        child.wait().map(|status| status.success()).unwrap_or(false)
    }

    /// SIGTERM, and wait up to `timeout` for an exit: whether it exited 0,
    /// or `None` (and then it is killed) if it did not exit in time.
    pub fn stop_within(&mut self, timeout: Duration) -> Option<bool> {
        let mut child = self.child.take()?;
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status.success());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Starts the broker again on the same port and data directory.
    ///
    /// The port was free when the broker first took it, from the range the
    /// kernel also hands to outgoing connections; while the broker was down
    /// a connection of another process on this machine may have been given
    /// it as its local port. A start refused for that is tried again, for
    /// a while, until that connection is gone.
    pub fn restart(&mut self) -> Result<(), LaunchError> {
        let listen = self.address.clone();
        let deadline = std::time::Instant::now() + RESTART_PORT_WAIT;
        loop {
            let logged_before = std::fs::metadata(self.log_path()).map_or(0, |meta| meta.len());
            let launched = if self.is_kafka() {
                self.launch_kafka()
            } else {
                self.launch(&listen)
            };
            match launched {
                Err(LaunchError::Broker(_))
                    if self
                        .log_since(logged_before)
                        .contains("Address already in use")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(200));
                }
                launched => return launched,
            }
        }
    }

    /// Starts the broker again on the same port and data directory at
    /// once, with no retry: what a supervisor does right after a crash.
    pub fn restart_once(&mut self) -> Result<(), LaunchError> {
        if self.is_kafka() {
            return self.launch_kafka();
        }
        let listen = self.address.clone();
        self.launch(&listen)
    }

    /// Why `brook serve` did not start, its own words first: a failure
    /// report shows the start of a long message, and a log holds every
    /// earlier start of this broker too.
    fn not_started(
        &self,
        waited: mpsc::RecvTimeoutError,
        status: std::io::Result<std::process::ExitStatus>,
        logged_before: u64,
    ) -> String {
        let log = self.log_since(logged_before);
        let how = match (waited, status) {
            (mpsc::RecvTimeoutError::Timeout, _) => {
                format!("did not say it listens within {START_TIMEOUT:?}")
            }
            (_, Ok(status)) => format!("exited ({status}) before it listened"),
            (_, Err(error)) => format!("closed its output before it listened ({error})"),
        };
        let said: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("brook serve:") || line.contains("panicked"))
            .collect();
        format!(
            "brook serve {how}: {}; its log since this start:\n{log}",
            said.join(" / ")
        )
    }

    /// What the broker logged past the first `offset` bytes of its log.
    fn log_since(&self, offset: u64) -> String {
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        String::from_utf8_lossy(log.get(offset as usize..).unwrap_or_default()).into_owned()
    }

    /// Resident memory (VmRSS) of the running broker.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// The soft open-file limit the running broker has.
    pub fn open_file_limit(&self) -> Option<u64> {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid()?)).ok()?;
        let line = limits
            .lines()
            .find(|line| line.starts_with("Max open files"))?;
        line.split_whitespace().find_map(|field| field.parse().ok())
    }

    /// CPU time (user + system) the broker has used so far.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        // utime and stime: the 14th and 15th fields, counted after the
        // parenthesised command name (which may hold spaces).
        let after_name = stat.get(stat.rfind(')')? + 2..)?;
        let mut fields = after_name.split_whitespace().skip(11);
        let user: u64 = fields.next()?.parse().ok()?;
        let system: u64 = fields.next()?.parse().ok()?;
        // SAFETY: sysconf has no preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Some(Duration::from_millis(
            (user + system) * 1000 / ticks_per_second,
        ))
    }
}

/// Runs the child `command` starts (and what it execs) on `cpus` only
/// (empty: anywhere).
pub fn pin(command: &mut Command, cpus: Vec<usize>) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: sched_setaffinity on the child between fork and exec
    // (async-signal-safe; no allocation: `set` lives on the stack).
    unsafe {
        command.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for cpu in &cpus {
                libc::CPU_SET(*cpu, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `map_err` helper: `.map_err(io("opening", &path))`.
fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LaunchError + 'a {
    move |source| LaunchError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}
