//! A real Apache Kafka 4.1.2 broker for a test: one node in KRaft mode
//! (broker and controller in one process) started by
//! `bench/kafka/start-kafka.sh` from the jars `tests/run` installs, on free
//! loopback ports, in a directory of the test's. The script is what the
//! benchmarks can use to run Kafka beside Brook.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::java::{Spawned, java_dir};

/// How long Kafka may take to start (JVM, storage format, KRaft election).
pub const KAFKA_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a clean shutdown may take.
pub const KAFKA_STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct KafkaBroker {
    process: Spawned,
    /// `127.0.0.1:<port>`, the client listener.
    pub address: String,
    /// Kafka's `log.dirs`: a `<topic>-<partition>` directory per partition.
    pub log_dir: PathBuf,
}

/// A free port of 127.0.0.1 for a broker to listen on (see
/// [`brook_launch::free_port`]).
fn free_port() -> u16 {
    brook_launch::free_port().expect("a free port")
}

impl KafkaBroker {
    /// Formats `dir` (once) and starts Kafka in it, with `settings`
    /// (`key=value`, Kafka's broker properties) after the script's own.
    pub fn start(dir: &Path, settings: &[&str]) -> KafkaBroker {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/kafka/start-kafka.sh");
        let (port, controller_port) = (free_port(), free_port());
        let mut command = Command::new("bash");
        command
            .arg(script)
            .arg(dir)
            .args([port.to_string(), controller_port.to_string()])
            .args(settings)
            .env("KAFKA_LIB", java_dir().join("lib"));
        let mut process = Spawned::start(&mut command);
        process.wait_for(KAFKA_START_TIMEOUT, |line| {
            line.contains("Kafka Server started")
        });
        KafkaBroker {
            process,
            address: format!("127.0.0.1:{port}"),
            log_dir: dir.join("logs"),
        }
    }

    /// SIGTERM and wait for a clean exit (Kafka trims its indexes and
    /// writes its checkpoints); returns whether it exited cleanly: a JVM
    /// whose shutdown hooks ran after SIGTERM exits 143 (128 + 15).
    pub fn stop(&mut self) -> bool {
        let status = self.process.terminate(KAFKA_STOP_TIMEOUT);
        let clean = status
            .and_then(|status| status.code())
            .is_some_and(|code| code == 0 || code == 143);
        clean && self.log().contains("shut down completed")
    }

    /// Kafka's output so far (for failure messages).
    pub fn log(&self) -> String {
        self.process.output()
    }
}
