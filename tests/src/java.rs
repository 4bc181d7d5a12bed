//! Running Apache Kafka's Java programs in tests: the checker in
//! `tests/clients/java` (Kafka's Java client and Kafka Streams), Kafka's
//! tools by their main classes, and the Kafka broker itself. `tests/run`
//! builds them with Maven into `target/test-clients/java`: Kafka 4.1.2's
//! jars with their dependencies in `lib/`, the checker in `build/`.
//!
//! One-shot programs run through [`crate::clients::run`]; long-lived ones
//! ([`Spawned`]: a Streams application that is killed, a Kafka broker) are
//! read line by line while they run.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clients::clients_dir;

/// The Kafka release every Java artifact is pinned to (`tests/clients/java/pom.xml`).
pub const KAFKA_VERSION: &str = "4.1.2";
/// Heap of each client or tool JVM (the machine has 2 cores and runs
/// several at once; none of them needs more).
pub const CLIENT_HEAP: &str = "-Xmx384m";

/// `target/test-clients/java`.
pub fn java_dir() -> PathBuf {
    clients_dir().join("java")
}

/// The class path: the checker's jar, then every jar in `lib/`.
pub fn classpath() -> String {
    let dir = java_dir();
    let checker = dir.join("build/brook-java-checks-0.jar");
    let kafka = dir.join(format!("lib/kafka-clients-{KAFKA_VERSION}.jar"));
    assert!(
        checker.exists() && kafka.exists(),
        "the Java clients are missing ({} or {}): run tests/run (it builds them with Maven)",
        checker.display(),
        kafka.display()
    );
    let mut jars: Vec<PathBuf> = std::fs::read_dir(dir.join("lib"))
        .expect("target/test-clients/java/lib")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "jar"))
        .collect();
    jars.sort();
    let mut entries = vec![checker];
    entries.extend(jars);
    std::env::join_paths(entries)
        .unwrap()
        .into_string()
        .unwrap()
}

/// `java` with the class path and flags for a short-lived JVM, running
/// `main_class` (a Kafka tool such as `org.apache.kafka.tools.TopicCommand`,
/// or `brook.ClientChecks`).
pub fn java(main_class: &str) -> Command {
    let mut command = Command::new("java");
    command
        .arg(CLIENT_HEAP)
        // Fast start for short programs: the C1 compiler only, one GC thread.
        .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
        .arg("-cp")
        .arg(classpath())
        .arg(main_class);
    command
}

/// What Kafka's `kafka-log-dirs --describe` (`LogDirsCommand`) prints of
/// the brokers behind `bootstrap`: its JSON (`brokers[].logDirs[]`, each
/// with its `logDir`, `error` and `partitions`).
pub fn kafka_log_dirs(bootstrap: &str) -> serde_json::Value {
    let output = java("org.apache.kafka.tools.LogDirsCommand")
        .args(["--bootstrap-server", bootstrap, "--describe"])
        .output()
        .expect("java runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = stdout
        .lines()
        .find(|line| line.starts_with('{'))
        .unwrap_or_else(|| {
            panic!(
                "no JSON from kafka-log-dirs: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    serde_json::from_str(json).expect("kafka-log-dirs' JSON")
}

/// `brook.ClientChecks <scenario> <bootstrap>`.
pub fn checks(scenario: &str, bootstrap: &str) -> Command {
    let mut command = java("brook.ClientChecks");
    command.args([scenario, bootstrap]);
    command
}

/// A long-lived process whose stdout and stderr lines are collected as
/// they come; killed when dropped.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    lines: Receiver<String>,
    /// Everything printed so far, stdout and stderr interleaved (for failure messages).
    output: Arc<Mutex<String>>,
}

impl Spawned {
    pub fn start(command: &mut Command) -> Spawned {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
        let output = Arc::new(Mutex::new(String::new()));
        let (sender, lines) = channel();
        let stdout: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let stderr: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for (pipe, to_channel) in [(stdout, true), (stderr, false)] {
            let sender = sender.clone();
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    output.lock().unwrap().push_str(&format!("{line}\n"));
                    if to_channel {
                        let _ = sender.send(line);
                    }
                }
            });
        }
        Spawned {
            child,
            lines,
            output,
        }
    }

    /// Waits (at most `timeout`) for a stdout line that satisfies `matches`
    /// and returns it; panics with the output so far if none comes.
    pub fn wait_for(&mut self, timeout: Duration, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if matches(&line) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no such line within {timeout:?}:\n{}", self.output())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the process closed its output:\n{}", self.output())
                }
            }
        }
    }

    /// Waits (at most `timeout`) for the process to exit by itself; returns
    /// whether it exited 0 (it is killed if it runs past the timeout).
    pub fn wait(&mut self, timeout: Duration) -> bool {
        self.wait_status(timeout)
            .is_some_and(|status| status.success())
    }

    /// Waits (at most `timeout`) for the process to exit and returns its
    /// status; `None` if it ran past the timeout (then it is killed).
    pub fn wait_status(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(crate::clients::CLIENT_POLL);
        }
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (a clean shutdown), then SIGKILL after `timeout`; the exit
    /// status, `None` if it had to be killed.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        // Safety: a plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.wait_status(timeout)
    }

    /// The stdout lines not taken by [`Spawned::wait_for`] yet: once the
    /// process has exited, all it printed.
    pub fn stdout_lines(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        lines
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}
