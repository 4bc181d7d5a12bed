//! `brook dev cluster` as a user runs it: a real command that starts real
//! `brook serve` children, stopped with real signals.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brook_tests::cluster::seen_at;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

/// Where the dev cluster's metrics ports start, from its first client port
/// (its default, 9644, may be taken by another test's broker).
const METRICS_PORT_OFFSET: u16 = 200;

/// A base port whose client, controller and metrics ports (base..,
/// base + 100.., base + 200..) are all free now.
fn free_port_range(nodes: u16) -> u16 {
    let pid = std::process::id() as u16;
    (0..200u16)
        .map(|attempt| 20_000 + (pid.wrapping_mul(7) + attempt * 211) % 20_000)
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

/// `brook dev cluster`, as a user runs it: three nodes that agree on the
/// cluster, every line prefixed, all stopped by one Ctrl-C.
#[test]
fn brook_dev_cluster_starts_three_nodes_and_stops_them_on_ctrl_c() {
    let root = tempfile::tempdir().unwrap();
    let base = free_port_range(3);
    let mut child = Command::new(BROOK)
        .args([
            "dev",
            "cluster",
            "--brokers",
            "3",
            "--first-port",
            &base.to_string(),
            "--first-metrics-port",
            &(base + METRICS_PORT_OFFSET).to_string(),
            "--dir",
        ])
        .arg(root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let seen = (0..3)
            .map(|node| seen_at(&format!("127.0.0.1:{}", base + node)))
            .collect::<Option<Vec<_>>>();
        if let Some(seen) = seen.clone().filter(|seen| {
            seen.iter()
                .all(|seen| seen.brokers == [0, 1, 2] && seen.controller >= 0)
        }) {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "the dev cluster did not form: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        seen.iter()
            .all(|view| view.controller == seen[0].controller),
        "{seen:?}"
    );
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "brook dev cluster did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success());
    let lines = lines.join().unwrap();
    let bootstrap = format!(
        "127.0.0.1:{base},127.0.0.1:{},127.0.0.1:{}",
        base + 1,
        base + 2
    );
    assert!(
        lines.iter().any(|line| line.contains(&bootstrap)),
        "{lines:?}"
    );
    for node in 0..3 {
        let prefix = format!("[node {node}]");
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with(&prefix) && line.contains("shard stopped")),
            "{lines:?}"
        );
    }
    for node in 0..3 {
        assert!(
            seen_at(&format!("127.0.0.1:{}", base + node)).is_none(),
            "node {node} still serves"
        );
    }
}
