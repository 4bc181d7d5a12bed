//! Driving the other Kafka clients our users run (kafka-python 2.0.2 and
//! 3.0.12, kafkajs 2.2.4, installed by `tests/run` into `target/test-clients`; the
//! scripts in `tests/clients`; franz-go, whose program in `tests/clients/go`
//! `tests/run` builds there; Debian's `kcat`) as processes against a real
//! broker, and reading the `name value` lines the scripts print.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::broker::Broker;

/// The longest a client process may run before the test fails (the
/// scripts give up on any one step after 60 s by themselves).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(150);
/// How often a running client is checked for having exited.
pub const CLIENT_POLL: Duration = Duration::from_millis(50);

/// Where `tests/run` installs the clients.
pub fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-clients")
}

/// A script in `tests/clients`.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name)
}

/// The `PYTHONPATH` that holds kafka-python.
pub fn python_path() -> PathBuf {
    let python = clients_dir().join("python");
    assert!(
        python.join("kafka").exists(),
        "kafka-python is missing: run tests/run (it installs the test clients)"
    );
    python
}

/// The `PYTHONPATH` that holds kafka-python 3, which opens incremental
/// fetch sessions (KIP-227); 2.0.2 does not.
pub fn python3_path() -> PathBuf {
    let python = clients_dir().join("python3");
    assert!(
        python.join("kafka").exists(),
        "kafka-python 3 is missing: run tests/run (it installs the test clients)"
    );
    python
}

/// The `NODE_PATH` that holds kafkajs.
pub fn node_path() -> PathBuf {
    let node_modules = clients_dir().join("node/node_modules");
    assert!(
        node_modules.join("kafkajs").exists(),
        "kafkajs is missing: run tests/run (it installs the test clients)"
    );
    node_modules
}

/// The franz-go program (`tests/clients/go`, franz-go pinned in its
/// `go.mod`), built by `tests/run` into `target/test-clients/go/franz`.
pub fn franz_go() -> PathBuf {
    let binary = clients_dir().join("go/franz");
    assert!(
        binary.exists(),
        "the franz-go program is missing: run tests/run (it builds tests/clients/go)"
    );
    binary
}

/// Runs a client to its end with `input` on its stdin and returns its
/// stdout; fails if it exits non-zero or runs past [`CLIENT_TIMEOUT`]
/// (then it is killed), with its output and the broker's log.
pub fn run(command: &mut Command, input: Option<&str>, broker: &Broker) -> String {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("starting {command:?} (tests/run installs it): {error}"));
    let mut stdin = child.stdin.take().unwrap();
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).unwrap();
    }
    drop(stdin);
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).map(|_| text)
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().unwrap()));
    let stderr = read_all(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(CLIENT_POLL);
    };
    let stdout = stdout.join().unwrap().unwrap();
    let stderr = stderr.join().unwrap().unwrap();
    match status {
        Some(status) if status.success() => stdout,
        _ => panic!(
            "{command:?} {}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- broker log\n{}",
            status.map_or(format!("ran past {CLIENT_TIMEOUT:?}"), |s| s.to_string()),
            broker.log()
        ),
    }
}

/// A script's `name value` lines.
#[derive(Debug, Clone)]
pub struct Report {
    lines: Vec<(String, String)>,
}

impl Report {
    pub fn parse(output: &str) -> Report {
        let lines = output
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        Report { lines }
    }

    /// Every value named `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(line_name, _)| line_name == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The one value named `name`.
    pub fn one(&self, name: &str) -> &str {
        match self.all(name).as_slice() {
            [value] => value,
            values => panic!("{name}: expected one line, got {values:?} in {self:#?}"),
        }
    }
}
