//! Several `brook serve` processes as one cluster: a Raft controller quorum
//! (raft-rs), broker registration, heartbeats and fencing, seen through
//! Metadata and DescribeCluster as a client sees them. Sessions are
//! shortened (`broker.session.timeout.ms=4000`) to keep the test short; the
//! rule is the same at Kafka's 9 s default.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brook_engine::cluster::peer_wire::{PeerFrame, encode_frame};
use brook_engine::types::BrokerId;
use brook_tests::broker::Broker;
use brook_tests::cluster::{Cluster, free_port, node_arguments, seen_at};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const SHORT_SESSIONS: &[&str] = &[
    "--set",
    "broker.session.timeout.ms=4000",
    "--set",
    "broker.heartbeat.interval.ms=1000",
];
const ALL: [usize; 3] = [0, 1, 2];

fn signal(broker: &Broker, signal: i32) {
    // SAFETY: kill(2) on a child process this test started.
    assert_eq!(unsafe { libc::kill(broker.pid() as i32, signal) }, 0);
}

#[test]
fn three_nodes_elect_one_controller_fence_a_stopped_broker_and_survive_the_controllers_death() {
    let root = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(BROOK, root.path(), 3, SHORT_SESSIONS);
    let seen = cluster.wait_until(
        &ALL,
        Duration::from_secs(30),
        "three brokers and a controller",
        |seen| seen.brokers == [0, 1, 2] && seen.controller >= 0,
    );
    let controller = seen[0].controller;
    assert!(
        seen.iter().all(|seen| seen.controller == controller),
        "{seen:?}"
    );
    for index in ALL {
        assert_eq!(cluster.described_controller(index), Some(controller));
    }

    // SIGSTOP a broker past its session: fenced; SIGCONT: back.
    let stopped = (controller as usize + 1) % 3;
    let others: Vec<usize> = ALL.into_iter().filter(|index| *index != stopped).collect();
    signal(&cluster.nodes[stopped], libc::SIGSTOP);
    let started = Instant::now();
    cluster.wait_until(
        &others,
        Duration::from_secs(20),
        "the stopped broker fenced",
        |seen| !seen.brokers.contains(&(stopped as i32)),
    );
    println!(
        "a stopped broker was fenced {:?} after SIGSTOP",
        started.elapsed()
    );
    signal(&cluster.nodes[stopped], libc::SIGCONT);
    cluster.wait_until(
        &ALL,
        Duration::from_secs(30),
        "the resumed broker unfenced",
        |seen| seen.brokers == [0, 1, 2],
    );

    // kill -9 the active controller: another voter takes over.
    let controller = cluster.seen_by(0).unwrap().controller as usize;
    let survivors: Vec<usize> = ALL
        .into_iter()
        .filter(|index| *index != controller)
        .collect();
    cluster.nodes[controller].kill();
    let killed = Instant::now();
    let seen = cluster.wait_until(
        &survivors,
        Duration::from_secs(30),
        "a new controller",
        |seen| seen.controller >= 0 && seen.controller != controller as i32,
    );
    println!(
        "a new controller ({}) {:?} after kill -9",
        seen[0].controller,
        killed.elapsed()
    );
    cluster.wait_until(
        &survivors,
        Duration::from_secs(30),
        "the killed node fenced",
        |seen| !seen.brokers.contains(&(controller as i32)),
    );
    // It restarts from its metadata log and joins again.
    cluster.nodes[controller].restart();
    let seen = cluster.wait_until(
        &ALL,
        Duration::from_secs(40),
        "the restarted node back",
        |seen| seen.brokers == [0, 1, 2] && seen.controller >= 0,
    );
    assert!(
        seen.iter()
            .all(|view| view.controller == seen[0].controller),
        "{seen:?}"
    );
    let log = cluster.nodes[controller]
        .data_dir()
        .join("__cluster_metadata-0")
        .join("log");
    assert!(
        std::fs::metadata(&log).unwrap().len() > 0,
        "{}",
        log.display()
    );
}

/// Bytes to the controller listener that are not a peer's: garbage, an
/// oversized frame, another cluster's hello. Each closes its connection
/// with a log line; the node keeps serving.
#[test]
fn the_controller_listener_closes_on_bad_input_and_a_second_node_id_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let voters = format!("0@127.0.0.1:{port}");
    let arguments = node_arguments(0, port, &voters);
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let controller = Broker::start(BROOK, &root.path().join("node-0"), 1, &arguments);
    let cluster = Cluster {
        nodes: vec![controller],
        voters: voters.clone(),
    };
    cluster.wait_until(
        &[0],
        Duration::from_secs(20),
        "a one-voter cluster",
        |seen| seen.brokers == [0] && seen.controller == 0,
    );
    let closed = |bytes: &[u8]| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(bytes).unwrap();
        let mut rest = Vec::new();
        // The node closes (a reset when bytes it did not read remain); only
        // a timeout means it kept the connection.
        match stream.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
        }
    };
    assert!(closed(&[0, 0, 0, 5, 99, 1, 2, 3, 4]), "garbage");
    assert!(closed(&[0xff, 0xff, 0xff, 0xff, 1]), "oversized");
    let other_cluster = encode_frame(&PeerFrame::Hello {
        cluster_id: "another-cluster".into(),
        node: BrokerId(7),
    });
    assert!(closed(&other_cluster), "another cluster's hello");
    // The line follows the close (the connection goes first).
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = |log: &str| {
        log.contains("kind 99 is unknown")
            && log.contains("over the limit")
            && log.contains("another-cluster")
    };
    while !logged(&cluster.nodes[0].log()) {
        assert!(Instant::now() < deadline, "{}", cluster.nodes[0].log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(cluster.seen_by(0).unwrap().controller, 0);

    // Two brokers with one node.id: the second is refused while the first lives.
    let broker = |name: &str| {
        let arguments = [
            "--set",
            "node.id=5",
            "--set",
            &format!("controller.quorum.voters={voters}"),
        ];
        Broker::start(BROOK, &root.path().join(name), 1, &arguments)
    };
    let first = broker("first-5");
    cluster.wait_until(
        &[0],
        Duration::from_secs(20),
        "broker 5 registered",
        |seen| seen.brokers == [0, 5],
    );
    let second = broker("second-5");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !second.log().contains("DUPLICATE_BROKER_REGISTRATION") {
        assert!(Instant::now() < deadline, "{}", second.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(cluster.seen_by(0).unwrap().brokers, [0, 5]);
    drop(first);
}

/// Settings that cannot form a cluster stop `brook serve` at once, saying why.
#[test]
fn malformed_cluster_settings_stop_the_node_with_a_reason() {
    let root = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["controller.quorum.voters=1@localhost", "node.id=1"],
            "controller.quorum.voters",
        ),
        (
            &[
                "controller.quorum.voters=1@127.0.0.1:1,1@127.0.0.1:2",
                "node.id=1",
            ],
            "listed twice",
        ),
        (&["controller.quorum.voters=0@127.0.0.1:1"], "node.id"),
    ];
    for (settings, reason) in cases {
        let mut command = Command::new(BROOK);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(root.path());
        for setting in settings {
            command.args(["--set", setting]);
        }
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{settings:?} started");
        assert!(stderr.contains(reason), "{settings:?}: {stderr}");
    }
}

/// A base port whose client and controller ports (base.., base + 100..) are
/// all free now.
fn free_port_range(nodes: u16) -> u16 {
    let pid = std::process::id() as u16;
    (0..200u16)
        .map(|attempt| 20_000 + (pid.wrapping_mul(7) + attempt * 211) % 20_000)
        .find(|base| {
            (0..nodes).all(|node| {
                [base + node, base + 100 + node]
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
