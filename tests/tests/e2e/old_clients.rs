//! Clients that speak the old, non-flexible protocol versions (Metadata ≤ 8,
//! Fetch 4–11, Produce 7): kafka-python 2.0.2 and kafkajs 2.2.4, installed
//! by `tests/run` into `target/test-clients`.

use std::path::PathBuf;
use std::process::Command;

use brook_tests::broker::Broker;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-clients")
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name)
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .expect("starting the client (tests/run installs it)");
    assert!(
        output.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn kafka_python_2_0_2_round_trips_records() {
    let python = clients_dir().join("python");
    assert!(
        python.join("kafka").exists(),
        "kafka-python is missing: run tests/run (it installs the test clients)"
    );
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let output = run(Command::new("python3")
        .env("PYTHONPATH", &python)
        .arg(script("kafka_python_round_trip.py"))
        .args([&broker.address, "1000"]));
    assert_eq!(
        output.trim(),
        "kafka-python 2.0.2: 1000 of 1000 records round-tripped",
        "{}",
        broker.log()
    );
}

#[test]
fn kafkajs_2_2_4_produces() {
    let node_modules = clients_dir().join("node/node_modules");
    assert!(
        node_modules.join("kafkajs").exists(),
        "kafkajs is missing: run tests/run (it installs the test clients)"
    );
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let output = run(Command::new("node")
        .env("NODE_PATH", &node_modules)
        .arg(script("kafkajs_produce.js"))
        .args([&broker.address, "200"]));
    assert_eq!(
        output.trim(),
        "kafkajs 2.2.4: 200 of 200 records stored",
        "{}",
        broker.log()
    );
}
