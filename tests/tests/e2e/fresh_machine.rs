//! What a new user meets first: the README's command run verbatim (no
//! flags: port 9092, the relative default data directory `./brook-data`)
//! from an empty working directory, a relative `--data-dir`, and a second
//! `brook serve` on the same port or the same data directory, which Kafka
//! refuses to start and so must Brook.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use brook_tests::broker::Broker;
use brook_tests::cluster::free_port;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// The README's broker address (its defaults).
const README_ADDRESS: &str = "127.0.0.1:9092";
/// Where it serves Prometheus metrics by default.
const README_METRICS: &str = "127.0.0.1:9644";

/// A `brook serve` started by hand; killed when dropped.
pub(crate) struct Serve {
    child: Child,
    first_line: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `brook serve ARGS` in `cwd` and waits for its first line; its
/// log goes to `cwd/brook.log`.
fn serve(cwd: &Path, args: &[&str]) -> Serve {
    let log = std::fs::File::create(cwd.join("brook.log")).unwrap();
    let mut child = Command::new(BROOK)
        .arg("serve")
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("brook starts");
    let mut first_line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    Serve { child, first_line }
}

/// Produces `count` records to a topic through `address` (new ones are
/// auto-created) and reads them all back.
fn round_trip(address: &str, topic: &str, count: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .expect("a producer");
    for index in 0..count {
        let value = format!("record-{index}");
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(&value))
            .expect("queued");
    }
    producer.flush(Duration::from_secs(30)).expect("delivered");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("group.id", "fresh-machine")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("a consumer");
    consumer.subscribe(&[topic]).unwrap();
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while values.len() < count && std::time::Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("a record");
            values.push(String::from_utf8_lossy(message.payload().unwrap()).into_owned());
        }
    }
    // Each partition's records in order; partitions interleave.
    let mut expected: Vec<String> = (0..count).map(|index| format!("record-{index}")).collect();
    expected.sort();
    values.sort();
    assert_eq!(values, expected);
}

/// `brook serve`, exactly as the README says (the test runs the built
/// binary; `cargo run --release -p brook -- serve` builds and runs the same
/// program), from an empty directory: it listens on 127.0.0.1:9092 and
/// keeps its data in `./brook-data`, and clients produce and consume.
#[test]
fn the_readme_command_starts_a_working_broker_from_an_empty_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let broker = serve(cwd.path(), &[]);
    assert!(
        broker
            .first_line
            .starts_with(&format!("brook listening on {README_ADDRESS} ")),
        "{:?} (is another broker on port 9092?)",
        broker.first_line
    );
    round_trip(README_ADDRESS, "readme", 10);
    // Prometheus metrics on their default port.
    assert!(
        broker
            .first_line
            .contains(&format!("metrics on {README_METRICS})")),
        "{:?}",
        broker.first_line
    );
    let mut scrape = std::net::TcpStream::connect(README_METRICS).expect("metrics listen");
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: brook\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    scrape.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("brook_produce_records_total{"), "{answer}");
    let data = cwd.path().join("brook-data");
    assert!(data.join("meta.properties").exists());
    assert!(data.join("readme-0").is_dir());
}

/// Kafka 4.1's stock KRaft `config/server.properties` (its comments left
/// out), with only the ports and `log.dirs` changed, as a user moving from
/// Kafka keeps it: node 1, its own controller the only bootstrap server.
fn kafka_stock_properties(port: u16, controller_port: u16, log_dirs: &Path) -> String {
    let quorum = format!("controller.quorum.bootstrap.servers=localhost:{controller_port}");
    kafka_node_properties(1, &quorum, port, controller_port, log_dirs.display())
}

/// The stock file for node `id`, its quorum given by `quorum` (a
/// `controller.quorum.*` line).
pub(crate) fn kafka_node_properties(
    id: usize,
    quorum: &str,
    port: u16,
    controller_port: u16,
    log_dirs: impl std::fmt::Display,
) -> String {
    format!(
        "process.roles=broker,controller
node.id={id}
{quorum}
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"
    )
}

/// A broker started from Kafka's own `server.properties` and no Brook
/// setting listens where `listeners` says (every address), advertises
/// `advertised.listeners`, keeps its data in `log.dirs`, warns about none
/// of Kafka's stock settings, and serves librdkafka and the Java client.
/// `--metrics-listen none` only keeps Brook's metrics port from colliding
/// with other tests'.
#[test]
fn kafkas_stock_server_properties_start_a_broker_where_kafka_would() {
    let cwd = tempfile::tempdir().unwrap();
    let (port, controller_port) = (free_port(), free_port());
    let log_dirs = cwd.path().join("kraft-combined-logs");
    std::fs::write(
        cwd.path().join("server.properties"),
        kafka_stock_properties(port, controller_port, &log_dirs),
    )
    .unwrap();
    let broker = serve(
        cwd.path(),
        &["--config", "server.properties", "--metrics-listen", "none"],
    );
    assert!(
        broker
            .first_line
            .starts_with(&format!("brook listening on 0.0.0.0:{port} ")),
        "{:?}\n{}",
        broker.first_line,
        std::fs::read_to_string(cwd.path().join("brook.log")).unwrap_or_default()
    );
    let listing = Command::new("kcat")
        .args(["-b", &format!("127.0.0.1:{port}"), "-L", "-m", "10"])
        .output()
        .expect("kcat runs");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains(&format!("broker 1 at localhost:{port}")),
        "Metadata names advertised.listeners: {listing}"
    );
    round_trip(&format!("127.0.0.1:{port}"), "stock", 10);
    java_producer_checks_pass(&format!("localhost:{port}"));
    assert!(log_dirs.join("stock-0").is_dir(), "data in log.dirs");
    assert!(!cwd.path().join("brook-data").exists());
    let log = std::fs::read_to_string(cwd.path().join("brook.log")).unwrap();
    assert!(!log.contains("ignoring unknown config"), "{log}");
}

/// The Java client's producer checks (every codec, ordering) through
/// `bootstrap` report no error.
fn java_producer_checks_pass(bootstrap: &str) {
    let java = brook_tests::java::checks("producer", bootstrap)
        .output()
        .expect("java runs");
    let report = String::from_utf8_lossy(&java.stdout);
    assert!(
        java.status.success() && report.contains("producer.order") && !report.contains(".error"),
        "{report}\n{}",
        String::from_utf8_lossy(&java.stderr)
    );
}

/// Three nodes from Kafka's stock file, each with its own ports and
/// `log.dirs` and the static quorum of three (`controller.quorum.voters`,
/// which Kafka 4.1 takes too), form one cluster: kcat lists the three
/// brokers at their advertised addresses, and the Java client's producer
/// checks pass through it.
#[test]
fn three_nodes_from_kafkas_stock_files_form_one_cluster() {
    let cwd = tempfile::tempdir().unwrap();
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let quorum = quorum_of(&ports);
    let nodes = start_nodes(cwd.path(), &ports, |index, dir| {
        let (port, controller) = ports[index];
        kafka_node_properties(
            index + 1,
            &quorum,
            port,
            controller,
            dir.join("logs").display(),
        )
    });
    let listed: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(index, (port, _))| format!("broker {} at localhost:{port}", index + 1))
        .collect();
    wait_listed(&format!("127.0.0.1:{}", ports[0].0), &listed);
    java_producer_checks_pass(&format!("localhost:{}", ports[1].0));
    for (dir, _) in &nodes {
        let log = std::fs::read_to_string(dir.join("brook.log")).unwrap();
        assert!(!log.contains("ignoring unknown config"), "{log}");
    }
}

/// `controller.quorum.voters` of nodes 1.. on `ports`' controller ports.
pub(crate) fn quorum_of(ports: &[(u16, u16)]) -> String {
    let voters = ports
        .iter()
        .enumerate()
        .map(|(index, (_, controller))| format!("{}@localhost:{controller}", index + 1))
        .collect::<Vec<_>>()
        .join(",");
    format!("controller.quorum.voters={voters}")
}

/// Starts one node per entry of `ports` (client, controller), node `i + 1`
/// in `cwd/node-<i + 1>` from the file `properties(i, dir)`, and checks
/// each listens on its client port on every address.
pub(crate) fn start_nodes(
    cwd: &Path,
    ports: &[(u16, u16)],
    properties: impl Fn(usize, &Path) -> String,
) -> Vec<(std::path::PathBuf, Serve)> {
    let starting: Vec<_> = (0..ports.len())
        .map(|index| {
            let dir = cwd.join(format!("node-{}", index + 1));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("server.properties"), properties(index, &dir)).unwrap();
            std::thread::spawn(move || {
                let node = serve(
                    &dir,
                    &["--config", "server.properties", "--metrics-listen", "none"],
                );
                (dir, node)
            })
        })
        .collect();
    let nodes: Vec<(std::path::PathBuf, Serve)> = starting
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect();
    for ((dir, node), (port, _)) in nodes.iter().zip(ports) {
        assert!(
            node.first_line
                .starts_with(&format!("brook listening on 0.0.0.0:{port} ")),
            "{:?}\n{}",
            node.first_line,
            std::fs::read_to_string(dir.join("brook.log")).unwrap_or_default()
        );
    }
    nodes
}

/// Waits (at most 30 s) until `kcat -L` through `bootstrap` lists every
/// one of `brokers` (its "broker N at host:port" lines); the listing.
fn wait_listed(bootstrap: &str, brokers: &[String]) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listing = Command::new("kcat")
            .args(["-b", bootstrap, "-L", "-m", "10"])
            .output()
            .expect("kcat runs");
        let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
        if brokers
            .iter()
            .all(|broker| listing.contains(broker.as_str()))
        {
            return listing;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{brokers:?} through {bootstrap}: {listing}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kafka's usual pair of client listeners (as in its Docker images):
/// brokers dial each other on INTERNAL (`inter.broker.listener.name`),
/// clients elsewhere dial EXTERNAL. Each is served, and Metadata through
/// each names every broker at its address on that listener; a topic with
/// three in-sync replicas required (replication over INTERNAL) takes and
/// gives back records through EXTERNAL, its group coordinator found there.
#[test]
fn two_client_listeners_each_advertise_their_own_addresses() {
    let cwd = tempfile::tempdir().unwrap();
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let external: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let quorum = quorum_of(&ports);
    let _nodes = start_nodes(cwd.path(), &ports, |index, dir| {
        let (internal, controller) = ports[index];
        let outside = external[index];
        let stock = kafka_node_properties(
            index + 1,
            &quorum,
            internal,
            controller,
            dir.join("logs").display(),
        );
        stock
            .lines()
            .map(|line| match line.split_once('=').map(|(key, _)| key) {
                Some("listeners") => format!(
                    "listeners=INTERNAL://:{internal},EXTERNAL://:{outside},CONTROLLER://:{controller}"
                ),
                Some("advertised.listeners") => format!(
                    "advertised.listeners=INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{outside}"
                ),
                Some("inter.broker.listener.name") => "inter.broker.listener.name=INTERNAL".into(),
                Some("listener.security.protocol.map") => {
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"
                        .into()
                }
                _ => line.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let on = |host: &str, ports: &[u16]| -> Vec<String> {
        ports
            .iter()
            .enumerate()
            .map(|(index, port)| format!("broker {} at {host}:{port}", index + 1))
            .collect()
    };
    let internal: Vec<u16> = ports.iter().map(|(port, _)| *port).collect();
    let inside = wait_listed(
        &format!("127.0.0.1:{}", internal[0]),
        &on("127.0.0.1", &internal),
    );
    assert!(!inside.contains("at localhost:"), "{inside}");
    let outside = wait_listed(
        &format!("127.0.0.1:{}", external[0]),
        &on("localhost", &external),
    );
    assert!(!outside.contains("at 127.0.0.1:"), "{outside}");

    let bootstrap = format!("localhost:{}", external[1]);
    let mut stream = brook_tests::raw::connect_to(&format!("127.0.0.1:{}", external[1]));
    brook_tests::raw::create(
        &mut stream,
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("outside")))
            .with_num_partitions(3)
            .with_replication_factor(3)
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("min.insync.replicas"))
                    .with_value(Some(StrBytes::from_static_str("3"))),
            ]),
    );
    round_trip(&bootstrap, "outside", 30);
    java_producer_checks_pass(&bootstrap);
}

#[test]
fn bad_listener_and_log_settings_stop_the_start_with_a_reason() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let data_arg = data.to_str().unwrap().to_owned();
    let port = free_port();
    // A log directory of another broker (node.id 7).
    let foreign = cwd.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(
        foreign.join("meta.properties"),
        "version=1\nnode.id=7\ncluster.id=elsewhere\n",
    )
    .unwrap();
    let foreign = foreign.to_str().unwrap().to_owned();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![format!("listeners=PLAINTEXT//:{port}")],
            "is not NAME://host:port",
        ),
        (
            vec![format!(
                "listeners=PLAINTEXT://:{port},PLAINTEXT://:{}",
                port + 1
            )],
            "listed twice",
        ),
        (
            vec![format!(
                "listeners=PLAINTEXT://:{port},CONTROLLER://:{port}"
            )],
            "Each listener must have a different port",
        ),
        (
            vec![
                format!("listeners=PLAINTEXT://:{port}"),
                "listener.security.protocol.map=PLAINTEXT:TLS".to_owned(),
            ],
            "unknown security protocol TLS",
        ),
        (
            vec![format!("listeners=SSL://:{port}")],
            "listener SSL uses SSL, which Brook does not serve yet",
        ),
        (
            vec![format!("listeners=EXTERNAL://:{port}")],
            "No security protocol defined for listener EXTERNAL",
        ),
        (
            vec![format!("log.dirs={data_arg}/a,{data_arg}/b,{data_arg}/a/")],
            "Duplicate log directory found",
        ),
        (
            vec!["log.dirs=/proc/brook-cannot-write-here".to_owned()],
            "/proc/brook-cannot-write-here",
        ),
        // One of several: the good one is not left behind.
        (
            vec![format!(
                "log.dirs={data_arg}/a,/proc/brook-cannot-write-here"
            )],
            "/proc/brook-cannot-write-here",
        ),
        (
            vec![format!("log.dirs={data_arg}/a,{foreign}")],
            "written by node.id 7",
        ),
    ];
    for (settings, reason) in cases {
        let mut args = vec!["--metrics-listen".to_owned(), "none".to_owned()];
        for setting in &settings {
            args.extend(["--set".to_owned(), setting.clone()]);
        }
        if !settings[0].starts_with("log.dirs") {
            args.extend(["--data-dir".to_owned(), data_arg.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = refused(&args);
        assert!(stderr.contains(reason), "{settings:?}: {stderr}");
        assert!(!data.exists(), "{settings:?} wrote {}", data.display());
    }
}

/// A relative `--data-dir` is taken from the working directory.
#[test]
fn a_relative_data_directory_works() {
    let cwd = tempfile::tempdir().unwrap();
    let broker = serve(
        cwd.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "rel/data",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let address = broker
        .first_line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("{:?}", broker.first_line))
        .to_owned();
    round_trip(&address, "relative", 5);
    assert!(cwd.path().join("rel/data/relative-0").is_dir());
}

/// Runs `brook serve ARGS` to its end (it must not start) and returns its
/// stderr.
fn refused(args: &[&str]) -> String {
    let mut child = Command::new(BROOK)
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("brook runs");
    let deadline = std::time::Instant::now() + REFUSAL_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second broker started ({args:?}) and ran for {REFUSAL_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        !output.status.success() && output.stdout.is_empty(),
        "a second broker started: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// How long a refused `brook serve` may take to give up.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(30);

/// A second process on the same address does not start (the shards of one
/// process share the port with SO_REUSEPORT; another process may not), nor
/// one on the same data directory; the first broker goes on serving.
#[test]
fn a_second_broker_on_the_same_port_or_data_dir_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let elsewhere = tempfile::tempdir().unwrap();
    let same_port = refused(&[
        "--listen",
        &broker.address,
        "--data-dir",
        elsewhere.path().to_str().unwrap(),
    ]);
    assert!(
        same_port.contains(&format!(
            "cannot listen on {}: Address already in use",
            broker.address
        )),
        "{same_port}"
    );
    let same_dir = refused(&[
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        same_dir.contains("another process is using this directory"),
        "{same_dir}"
    );
    // Another program's socket on the port: refused at once, naming it
    // (a killed broker's leftover socket, which no process holds, is
    // waited for instead; see crash_restart.rs).
    let program = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = program.local_addr().unwrap().to_string();
    let other_program = refused(&[
        "--listen",
        &taken,
        "--data-dir",
        elsewhere.path().to_str().unwrap(),
    ]);
    assert!(
        other_program.contains(&format!("held by pid {}", std::process::id())),
        "{other_program}"
    );
    // Another port, the same metrics port: the error says it is the
    // metrics listener, who holds it, and the flag that moves it.
    let metrics = broker.metrics_address().expect("the broker serves metrics");
    let same_metrics = refused(&[
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        elsewhere.path().to_str().unwrap(),
        "--metrics-listen",
        metrics,
    ]);
    assert!(
        same_metrics.contains(&format!(
            "cannot serve metrics on {metrics} (--metrics-listen"
        )) && same_metrics.contains(&format!("held by pid {}", broker.pid())),
        "{same_metrics}"
    );
    round_trip(&broker.address, "still-serving", 3);
}
