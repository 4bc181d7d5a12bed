//! Running the `brook` binary in tests: against a broker (through
//! `BROOK_BROKERS`), with input, bounded in time, its output captured.

use std::io::Write;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use tempfile::TempDir;

/// The CLI under test (the `brook` program, built as `brook-e2e`).
pub const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// A command that has not finished by then is killed and the test fails.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A finished `brook` command.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics (with the output) unless the command succeeded.
    pub fn ok(self) -> Run {
        assert!(self.status.success(), "brook failed: {self:?}");
        self
    }

    /// Panics (with the output) unless the command failed.
    pub fn failed(self) -> Run {
        assert!(!self.status.success(), "brook should have failed: {self:?}");
        self
    }

    /// Non-empty stdout lines.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|line| !line.is_empty())
            .collect()
    }

    /// Stdout as JSON lines (`--format json`).
    pub fn json(&self) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"))
            })
            .collect()
    }
}

/// A broker with one shard in a fresh directory (kept with the broker).
pub fn start_broker() -> (TempDir, Broker) {
    start_broker_with(&[])
}

/// As [`start_broker`], with extra `brook serve` arguments.
pub fn start_broker_with(extra: &[&str]) -> (TempDir, Broker) {
    let dir = tempfile::tempdir().expect("a data directory");
    let broker = Broker::start(BROOK, dir.path(), 1, extra);
    (dir, broker)
}

/// `brook ARGS…` against `broker`.
pub fn brook(broker: &Broker, args: &[&str]) -> Run {
    brook_with_input(broker, args, b"")
}

/// `brook ARGS…` against `broker`, with `input` on stdin.
pub fn brook_with_input(broker: &Broker, args: &[&str], input: &[u8]) -> Run {
    let mut command = Command::new(BROOK);
    command.args(args).env("BROOK_BROKERS", &broker.address);
    run(&mut command, input)
}

/// `brook ARGS…` with no broker (for `log dump`, or an unreachable one
/// given with `--brokers`).
pub fn brook_alone(args: &[&str], cwd: Option<&Path>) -> Run {
    let mut command = Command::new(BROOK);
    command.args(args).env_remove("BROOK_BROKERS");
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    run(&mut command, b"")
}

/// Runs `command` with `input`, killing it after [`COMMAND_TIMEOUT`].
pub fn run(command: &mut Command, input: &[u8]) -> Run {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("brook starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let out_reader = thread::spawn(move || read_all(stdout));
    let err_reader = thread::spawn(move || read_all(stderr));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for brook") {
            break status;
        }
        if started.elapsed() > COMMAND_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "brook {:?} ran over {COMMAND_TIMEOUT:?}; stderr: {}",
                command.get_args().collect::<Vec<_>>(),
                err_reader.join().unwrap()
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    let _ = writer.join();
    Run {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

fn read_all(mut stream: impl std::io::Read) -> String {
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Creates `name` with `partitions` partitions through librdkafka's admin
/// client (so the CLI is checked against what another client set up).
pub fn create_topic(broker: &Broker, name: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let results = futures::executor::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .expect("CreateTopics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// One record for [`produce`]: key, value, partition (None: librdkafka's
/// partitioner), timestamp (None: now).
#[derive(Clone, Debug, Default)]
pub struct Record {
    pub key: Option<String>,
    pub value: String,
    pub partition: Option<i32>,
    pub timestamp: Option<i64>,
}

/// Produces `records` to `topic` with librdkafka, `settings` on top of
/// acks=all; returns where each keyed record landed, by key.
pub fn produce(
    broker: &Broker,
    topic: &str,
    records: &[Record],
    settings: &[(&str, &str)],
) -> std::collections::HashMap<String, (i32, i64)> {
    use brook_tests::deliveries::Deliveries;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let mut config = rdkafka::ClientConfig::new();
    config
        .set("bootstrap.servers", &broker.address)
        .set("acks", "all")
        .set("linger.ms", "5");
    for (key, value) in settings {
        config.set(*key, *value);
    }
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(Deliveries::default())
        .expect("a producer");
    for record in records {
        let mut pending = BaseRecord::to(topic).payload(&record.value);
        if let Some(key) = &record.key {
            pending = pending.key(key);
        }
        if let Some(partition) = record.partition {
            pending = pending.partition(partition);
        }
        if let Some(timestamp) = record.timestamp {
            pending = pending.timestamp(timestamp);
        }
        loop {
            match producer.send(pending) {
                Ok(()) => break,
                Err((_, returned)) => {
                    producer.poll(Duration::from_millis(10));
                    pending = returned;
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let deliveries = producer.context();
    assert!(
        deliveries.errors.lock().unwrap().is_empty(),
        "{:?}",
        deliveries.errors
    );
    deliveries.delivered.lock().unwrap().clone()
}
