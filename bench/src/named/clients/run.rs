//! Finding and running the clients Brook did not write: Kafka's Java tools
//! (from the jars `tests/run` installs, as `bench/kafka/start-kafka.sh`
//! finds them) and kcat; and the broker's peak resident memory while one
//! runs, sampled from `/proc`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::parse::OutputTail;
use crate::log::error::BenchError;
use crate::named::NamedOptions;

/// The longest a client may run before it is killed and its workload
/// failed (ProducerPerformance's 2 M records took ~50 s on Kafka here).
const CLIENT_TIME_MAX: Duration = Duration::from_secs(30 * 60);

/// How often the broker's resident memory is sampled while a client runs.
const RSS_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Lines of a failed client's stderr quoted in its error.
const ERROR_LINES_MAX: usize = 20;

/// The JVM flags Kafka's `bin/kafka-producer-perf-test.sh` and
/// `kafka-consumer-perf-test.sh` run their tools with
/// (`KAFKA_HEAP_OPTS=-Xmx512M`, then kafka-run-class.sh's G1 settings).
const JVM_OPTIONS: &[&str] = &[
    "-Xmx512M",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
];

/// Where Kafka's jars are, as `start-kafka.sh` finds them: `KAFKA_LIB`, or
/// `target/test-clients/java/lib` of the checkout the launcher is in.
const KAFKA_LIB_BESIDE_LAUNCHER: &str = "../../target/test-clients/java/lib";

/// The path of `program` on the `PATH`, if it is there.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Kafka's tools, ready to run: `java` is on the PATH and the directory of
/// Kafka's jars holds them.
#[derive(Clone, Debug)]
pub(super) struct KafkaTools {
    java: PathBuf,
    lib: PathBuf,
}

impl KafkaTools {
    /// Finds `java` and Kafka's jars for `workload`, or says what is
    /// missing and how to get it.
    pub(super) fn find(options: &NamedOptions, workload: &str) -> Result<KafkaTools, BenchError> {
        let java = on_path("java").ok_or_else(|| {
            BenchError::Client(format!(
                "{workload} runs Kafka's Java tools, and java is not on the PATH \
                 (tests/run installs OpenJDK 17: apt-get install openjdk-17-jdk-headless)"
            ))
        })?;
        let lib = match std::env::var_os("KAFKA_LIB") {
            Some(lib) => PathBuf::from(lib),
            None => {
                let script = super::super::kafka_script(options).map_err(|error| {
                    BenchError::Client(format!(
                        "{workload} runs Kafka's Java tools, found beside the Kafka \
                         launcher or in KAFKA_LIB: {error}"
                    ))
                })?;
                let dir = script.parent().unwrap_or(Path::new("."));
                dir.join(KAFKA_LIB_BESIDE_LAUNCHER)
            }
        };
        let has_tools = std::fs::read_dir(&lib).is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                name.starts_with("kafka-tools-") && name.ends_with(".jar")
            })
        });
        if !has_tools {
            return Err(BenchError::Client(format!(
                "{workload} runs Kafka's Java tools, and their jars (kafka-tools-*.jar) are \
                 not in {}: run tests/run (it installs them) or set KAFKA_LIB",
                lib.display()
            )));
        }
        Ok(KafkaTools { java, lib })
    }

    /// `java … <main_class>` with Kafka's jars on the class path.
    pub(super) fn command(&self, main_class: &str) -> Command {
        let mut command = Command::new(&self.java);
        command
            .args(JVM_OPTIONS)
            .arg("-cp")
            // The JVM expands the wildcard to every jar of the directory.
            .arg(self.lib.join("*"))
            .arg(main_class);
        command
    }
}

/// kcat on the PATH, or what to install.
pub(super) fn kcat() -> Result<PathBuf, BenchError> {
    on_path("kcat").ok_or_else(|| {
        BenchError::Client(
            "kcat-read runs kcat, and it is not on the PATH \
             (tests/run installs Debian's: apt-get install kcat)"
                .into(),
        )
    })
}

/// What a client did.
#[derive(Debug)]
pub(super) struct ClientRun {
    /// Its stdout: the end of it, and its lines counted.
    pub stdout: OutputTail,
    /// From its start to its exit.
    pub elapsed: Duration,
    /// The peak resident memory of each broker process while it ran.
    pub peak_rss_bytes: Vec<u64>,
}

/// Runs `command` (the client `what`) to its end, at most
/// [`CLIENT_TIME_MAX`], while sampling the memory of the processes `pids`:
/// an error if it cannot start, fails or runs too long, quoting its stderr.
pub(super) fn run_client(
    mut command: Command,
    what: &str,
    pids: &[u32],
) -> Result<ClientRun, BenchError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let sampler = PeakRss::start(pids.to_vec());
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|error| BenchError::Client(format!("starting {what}: {error}")))?;
    let stdout = read_all(child.stdout.take());
    let stderr = read_all(child.stderr.take());
    let pid = child.id();
    let (sender, exited) = mpsc::channel();
    // A thread waits, so that the exit is seen at once (kcat's wall clock
    // is the figure) and the client can still be killed on time.
    std::thread::spawn(move || {
        let _ = sender.send(child.wait());
    });
    let status = match exited.recv_timeout(CLIENT_TIME_MAX) {
        Ok(status) => Some(status),
        Err(_) => {
            // SAFETY: our own child, not yet reaped: the waiting thread
            // reaps it once it is killed.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = exited.recv();
            None
        }
    };
    let elapsed = started.elapsed();
    let peak_rss_bytes = sampler.stop();
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let failed = |why: String| {
        let text = stderr.text();
        let lines: Vec<&str> = text.lines().collect();
        let quoted = lines[lines.len().saturating_sub(ERROR_LINES_MAX)..].join("\n");
        BenchError::Client(format!("{what} {why}; its stderr ends:\n{quoted}"))
    };
    match status {
        None => Err(failed(format!("ran longer than {CLIENT_TIME_MAX:?}"))),
        Some(Err(error)) => Err(failed(format!("could not be waited for: {error}"))),
        Some(Ok(status)) if !status.success() => Err(failed(exit_text(status))),
        Some(Ok(_)) => Ok(ClientRun {
            stdout,
            elapsed,
            peak_rss_bytes,
        }),
    }
}

fn exit_text(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("was stopped ({status})"),
    }
}

/// A thread reading `pipe` to its end into an [`OutputTail`].
fn read_all(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<OutputTail> {
    std::thread::spawn(move || {
        let mut tail = OutputTail::default();
        let Some(mut pipe) = pipe else {
            return tail;
        };
        let mut buffer = vec![0u8; 64 << 10];
        while let Ok(read) = pipe.read(&mut buffer) {
            if read == 0 {
                break;
            }
            tail.push(&buffer[..read]);
        }
        tail
    })
}

/// The peak resident memory of some processes, sampled every
/// [`RSS_SAMPLE_INTERVAL`] on a thread of its own until stopped. Sampling
/// over a client's run measures that run alone, where VmHWM would also
/// count what the broker held before (writing the data that is read).
struct PeakRss {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Vec<u64>>,
}

impl PeakRss {
    fn start(pids: Vec<u32>) -> PeakRss {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut peaks = vec![0u64; pids.len()];
            loop {
                for (peak, pid) in peaks.iter_mut().zip(&pids) {
                    *peak = (*peak).max(rss_bytes(*pid).unwrap_or(0));
                }
                match stopped.recv_timeout(RSS_SAMPLE_INTERVAL) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return peaks,
                }
            }
        });
        PeakRss { stop, thread }
    }

    /// Each process's peak, in bytes (0: never read), in the order given.
    fn stop(self) -> Vec<u64> {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// VmRSS of `pid`.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The process that holds a broker's memory: `pid` itself, unless it is
/// still a shell (a launcher that started its JVM instead of exec-ing it;
/// `start-kafka.sh` execs, so there Kafka's JVM has the launcher's pid),
/// and then its child.
pub(super) fn memory_pid(pid: u32) -> u32 {
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if !matches!(command.trim(), "bash" | "sh" | "dash") {
        return pid;
    }
    children(pid).into_iter().next().unwrap_or(pid)
}

/// The processes whose parent is `pid`, from `/proc/*/stat`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent_of = |child: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        // The parent is the second field after the command name, which is
        // in brackets and may hold spaces.
        let after_name = stat.get(stat.rfind(')')? + 2..)?;
        after_name.split_whitespace().nth(1)?.parse().ok()
    };
    let mut found: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| parent_of(*child) == Some(pid))
        .collect();
    found.sort_unstable();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_shell_is_seen_through_to_its_child() {
        // `; exit` keeps bash from exec-ing sleep: bash stays the parent.
        let mut shell = Command::new("bash")
            .args(["-c", "sleep 30; exit 0"])
            .spawn()
            .unwrap();
        let shell_pid = shell.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let child = loop {
            let child = memory_pid(shell_pid);
            if child != shell_pid || Instant::now() > deadline {
                break child;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let command = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap();
        assert_eq!(command.trim(), "sleep");
        assert_eq!(children(shell_pid), vec![child]);
        // SAFETY: our own child's child, still running (bash waits on it).
        unsafe { libc::kill(child as i32, libc::SIGKILL) };
        shell.wait().unwrap();
        // A process that is no shell is its own memory.
        assert_eq!(memory_pid(std::process::id()), std::process::id());
    }

    #[test]
    fn a_client_runs_with_its_output_counted_and_memory_sampled() {
        let mut command = Command::new("bash");
        command.args(["-c", "seq 1 5000; echo done >&2"]);
        let run = run_client(command, "seq", &[std::process::id()]).unwrap();
        assert_eq!(run.stdout.lines, 5000);
        assert!(run.stdout.text().ends_with("4999\n5000\n"));
        assert_eq!(run.peak_rss_bytes.len(), 1);
        assert!(run.peak_rss_bytes[0] > 0);
        let mut failing = Command::new("bash");
        failing.args(["-c", "echo 'no broker at 127.0.0.1:9' >&2; exit 3"]);
        let error = run_client(failing, "kcat", &[]).unwrap_err().to_string();
        assert!(error.contains("kcat exited with status 3"), "{error}");
        assert!(error.contains("no broker at 127.0.0.1:9"), "{error}");
        let missing = Command::new("/nonexistent/kcat");
        let error = run_client(missing, "kcat", &[]).unwrap_err().to_string();
        assert!(error.starts_with("starting kcat: "), "{error}");
    }
}
