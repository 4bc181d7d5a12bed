//! Issue 32 §2: the active controller killed with kill -9 and restarted at
//! once, round after round, on a busy machine with a produce load running.
//! Right after each restart every broker is asked directly, as an admin
//! client asks, DescribeCluster and then CreateTopics (a new topic each),
//! and must answer each within a client's `request.timeout.ms` with no
//! error; meanwhile librdkafka AdminClients bootstrapped with all three
//! brokers (the client) ask DescribeCluster, and the other two
//! brokers take CreateTopics back to back from a second before the kill
//! (requests they forward while the controller dies).
//!
//! Kafka's default KRaft timings (`broker.session.timeout.ms` 9 s,
//! heartbeats every 2 s), as in the issue: the killed broker's registration
//! outlives it for most of a session, so its new incarnation is refused
//! DUPLICATE_BROKER_REGISTRATION for seconds after the restart, and its
//! requests meet a quorum that is still electing. QUICK_FENCING would
//! shrink that window to under 3 s.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use brook_tests::load::{Busy, rounds};
use brook_tests::raw;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DescribeClusterRequest,
    DescribeClusterResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster_replication::{
    Load, bootstrap, check_exactly_once, consume_all, create_replicated,
};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// A client's `request.timeout.ms` (Kafka's default): how long a broker may
/// take to answer one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// CreateTopics' own `timeout_ms`: inside [`REQUEST_TIMEOUT`], so that a
/// broker answering REQUEST_TIMED_OUT when it runs out is still heard.
const CREATE_TIMEOUT_MS: i32 = 20_000;
/// The request timeout the AdminClient gave DescribeCluster.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the test keeps asking one broker after a retriable error or a
/// missing answer (each is a failure all the same; asking on shows when the
/// broker recovers).
const RETRYING_MAX: Duration = Duration::from_secs(90);
/// A pause between two tries at one broker.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// librdkafka AdminClients asking DescribeCluster in each round, each
/// created [`ADMIN_CLIENTS_APART`] after the one before: what a client
/// hears depends on when in the election it bootstraps.
const ADMIN_CLIENTS: usize = 6;
const ADMIN_CLIENTS_APART: Duration = Duration::from_millis(400);
const PARTITIONS: i32 = 3;

/// One answer, as the test judges it.
enum Answer {
    Done(String),
    /// A retriable Kafka error (or, for DescribeCluster, a controller that
    /// is none of the brokers listed: librdkafka's admin client then waits
    /// for one it never hears of).
    Retriable(String),
    /// A Kafka error no retry cures.
    Refused(String),
    /// No whole answer within [`REQUEST_TIMEOUT`], or the connection closed.
    Silent,
}

/// One request's story at one broker.
#[derive(Debug, Default)]
struct Asked {
    /// From the first try to the answer with no error (`None`: never).
    took: Option<Duration>,
    /// What that answer said.
    answer: String,
    /// Retriable errors before it, each with how long it took.
    retriable: Vec<String>,
    /// Missing answers and errors no retry cures.
    failures: Vec<String>,
}

impl Asked {
    fn summary(&self) -> String {
        let took = self.took.map_or("never".to_owned(), |took| {
            format!("{} ms", took.as_millis())
        });
        let mut summary = format!("{took} ({})", self.answer);
        if !self.retriable.is_empty() {
            summary += &format!(", {} retriable: {:?}", self.retriable.len(), self.retriable);
        }
        if !self.failures.is_empty() {
            summary += &format!(", FAILED: {:?}", self.failures);
        }
        summary
    }
}

/// Asks `ask` of the broker at `address` until it answers with no error
/// (or [`RETRYING_MAX`] passes), on one connection while it answers.
fn keep_asking(address: &str, mut ask: impl FnMut(&mut TcpStream, usize) -> Answer) -> Asked {
    let started = Instant::now();
    let mut asked = Asked::default();
    let mut stream: Option<TcpStream> = None;
    let mut tries = 0;
    while started.elapsed() < RETRYING_MAX {
        let connection = match stream.as_mut() {
            Some(connection) => connection,
            None => match TcpStream::connect(address) {
                Ok(connection) => {
                    connection.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
                    stream.insert(connection)
                }
                Err(error) => {
                    asked.failures.push(format!("connecting: {error}"));
                    std::thread::sleep(RETRY_PAUSE);
                    continue;
                }
            },
        };
        let sent = Instant::now();
        let answer = ask(connection, tries);
        let waited = sent.elapsed().as_millis();
        tries += 1;
        match answer {
            Answer::Done(what) => {
                asked.took = Some(started.elapsed());
                asked.answer = what;
                return asked;
            }
            Answer::Retriable(error) => asked.retriable.push(format!("{error} in {waited} ms")),
            Answer::Refused(error) => {
                asked.failures.push(format!("{error} in {waited} ms"));
                return asked;
            }
            Answer::Silent => {
                asked.failures.push(format!(
                    "no answer, the connection ended or waited {waited} ms"
                ));
                stream = None;
            }
        }
        std::thread::sleep(RETRY_PAUSE);
    }
    asked
}

/// A Kafka error code as the test judges it.
fn judged(code: i16, message: Option<&StrBytes>) -> Answer {
    let error = ResponseError::try_from_code(code);
    let named = format!(
        "{} {}",
        error.map_or(format!("error {code}"), |error| format!("{error:?}")),
        message.map_or("", |message| message.as_str())
    );
    match error {
        Some(error) if error.is_retriable() => Answer::Retriable(named),
        _ => Answer::Refused(named),
    }
}

fn describe_cluster(stream: &mut TcpStream) -> Answer {
    let request = DescribeClusterRequest::default().with_endpoint_type(1);
    let Some(response) = raw::try_exchange::<_, DescribeClusterResponse>(
        stream,
        ApiKey::DescribeCluster,
        1,
        &request,
    ) else {
        return Answer::Silent;
    };
    let mut brokers: Vec<i32> = response
        .brokers
        .iter()
        .map(|broker| broker.broker_id.0)
        .collect();
    brokers.sort();
    if response.error_code != 0 {
        return judged(response.error_code, response.error_message.as_ref());
    }
    // librdkafka's admin client waits for the controller named to be one
    // of the brokers it knows, and asks no more Metadata meanwhile.
    if !brokers.contains(&response.controller_id.0) {
        return Answer::Retriable(format!(
            "controller {} not among brokers {brokers:?}",
            response.controller_id.0
        ));
    }
    // All three are live then (the killed broker's registration outlives
    // it until its session ends, or it is back): a broker that lists fewer
    // (one restarted a moment ago knew only itself) tells a client of a
    // cluster that is not there.
    if brokers != [0, 1, 2] {
        return Answer::Refused(format!(
            "brokers {brokers:?} listed, not the three live ones"
        ));
    }
    Answer::Done(format!(
        "controller {}, brokers {brokers:?}",
        response.controller_id.0
    ))
}

fn create_topic(stream: &mut TcpStream, name: &str, tries: usize) -> Answer {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_num_partitions(1)
                .with_replication_factor(-1),
        ])
        .with_timeout_ms(CREATE_TIMEOUT_MS);
    let Some(response) =
        raw::try_exchange::<_, CreateTopicsResponse>(stream, ApiKey::CreateTopics, 7, &request)
    else {
        return Answer::Silent;
    };
    let Some(topic) = response.topics.first() else {
        return Answer::Refused("no topic in the answer".to_owned());
    };
    match topic.error_code {
        0 => Answer::Done("created".to_owned()),
        // An earlier try created it and its answer was lost.
        36 if tries > 0 => Answer::Done("already created by an earlier try".to_owned()),
        code => judged(code, topic.error_message.as_ref()),
    }
}

/// The active controller, as DescribeQuorum's leader says, once every node
/// sees all three brokers and one voter leads.
fn settled_controller(cluster: &Cluster) -> usize {
    cluster.wait_until(
        &[0, 1, 2],
        Duration::from_secs(60),
        "three live brokers and a controller",
        |seen| seen.brokers == [0, 1, 2] && seen.controller >= 0,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(leader) = cluster.quorum_leader(0) {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "no quorum leader\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a broker logs each time it registers.
const REGISTERED: &str = "registered with the controller";

/// How many times node `index` has logged `line` (its log is kept across
/// restarts).
fn logged(cluster: &Cluster, index: usize, line: &str) -> usize {
    cluster.nodes[index].log().matches(line).count()
}

/// Waits until node `index` has registered more than `before` times: the
/// restarted broker is back, so the next round starts from a whole
/// cluster.
fn wait_for_registration(cluster: &Cluster, index: usize, before: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while logged(cluster, index, REGISTERED) <= before {
        assert!(
            Instant::now() < deadline,
            "node {index} did not register again\n{}",
            cluster.nodes[index].log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What one round found.
struct Round {
    described: Vec<Asked>,
    created: Vec<Asked>,
    /// Each AdminClient's DescribeCluster, and how long it took.
    admins: Vec<(
        Result<brook_tests::librdkafka::ClusterDescription, String>,
        Duration,
    )>,
}

/// Right after the restart: every broker asked in parallel (DescribeCluster,
/// then CreateTopics on the same connection), and librdkafka AdminClients
/// (each new, bootstrapped with all three) asking DescribeCluster, one
/// every [`ADMIN_CLIENTS_APART`] while the quorum elects.
fn ask_everyone(cluster: &Cluster, round: usize) -> Round {
    let servers = bootstrap(cluster);
    let admins: Vec<_> = (0..ADMIN_CLIENTS)
        .map(|index| {
            let servers = servers.clone();
            std::thread::spawn(move || {
                std::thread::sleep(ADMIN_CLIENTS_APART * index as u32);
                let client: rdkafka::admin::AdminClient<_> = rdkafka::ClientConfig::new()
                    .set("bootstrap.servers", &servers)
                    .create()
                    .expect("an admin client");
                let started = Instant::now();
                let described = brook_tests::librdkafka::describe_cluster(&client, ADMIN_TIMEOUT);
                (described, started.elapsed())
            })
        })
        .collect();
    let brokers: Vec<_> = cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let address = node.address.clone();
            std::thread::spawn(move || {
                let described = keep_asking(&address, |stream, _| describe_cluster(stream));
                let topic = format!("round-{round}-through-{index}");
                let created = keep_asking(&address, |stream, tries| {
                    create_topic(stream, &topic, tries)
                });
                (described, created)
            })
        })
        .collect();
    let (described, created) = brokers
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .unzip();
    let admins = admins
        .into_iter()
        .map(|thread| thread.join().unwrap())
        .collect();
    Round {
        described,
        created,
        admins,
    }
}

/// CreateTopics through the broker at `address`, one new topic after
/// another, until `stop`: requests the broker forwards while the
/// controller dies.
fn create_until(
    address: String,
    prefix: String,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<Vec<Asked>> {
    std::thread::spawn(move || {
        let mut asked = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let topic = format!("{prefix}-{}", asked.len());
            asked.push(keep_asking(&address, |stream, tries| {
                create_topic(stream, &topic, tries)
            }));
            answered.fetch_add(1, Ordering::Relaxed);
        }
        asked
    })
}

/// Waits until every creator had a CreateTopics answered: the kill that
/// follows lands on admin traffic that is running, however busy the
/// machine.
fn wait_for_answers(answered: &[Arc<AtomicUsize>]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered
        .iter()
        .any(|count| count.load(Ordering::Relaxed) == 0)
    {
        assert!(Instant::now() < deadline, "a creator got no answer in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Prints what a round found; adds each failed request to `failed`.
fn report(round: usize, found: &Round, during: &[(usize, Vec<Asked>)], failed: &mut Vec<String>) {
    let mut judge = |what: String, asked: &Asked| {
        if asked.took.is_none() || !asked.retriable.is_empty() || !asked.failures.is_empty() {
            failed.push(format!("round {round} {what}: {}", asked.summary()));
        }
    };
    for (index, asked) in during {
        let slowest = asked.iter().filter_map(|asked| asked.took).max();
        println!(
            "  node {index} CreateTopics across the kill: {} topics, the slowest {} ms",
            asked.len(),
            slowest.unwrap_or_default().as_millis()
        );
        for (topic, asked) in asked.iter().enumerate() {
            judge(
                format!("node {index} CreateTopics {topic} across the kill"),
                asked,
            );
        }
    }
    for (index, (described, created)) in found.described.iter().zip(&found.created).enumerate() {
        println!("  node {index} DescribeCluster: {}", described.summary());
        println!("  node {index} CreateTopics: {}", created.summary());
        judge(format!("node {index} DescribeCluster"), described);
        judge(format!("node {index} CreateTopics"), created);
    }
    for (index, (described, took)) in found.admins.iter().enumerate() {
        println!(
            "  librdkafka AdminClient {index} DescribeCluster: {} ms {described:?}",
            took.as_millis()
        );
        if described.is_err() {
            failed.push(format!(
                "round {round} librdkafka AdminClient {index} DescribeCluster: {described:?}"
            ));
        }
    }
}

/// Acceptance of issue 32 §2 (first bullet): see the module's doc.
#[test]
fn every_broker_answers_admin_requests_while_the_controller_is_killed_and_restarted() {
    let _busy = Busy::start();
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    create_replicated(&cluster, "steady", PARTITIONS);
    let load = Load::start(&cluster, "steady", PARTITIONS);
    let mut failed = Vec::new();
    for round in 0..rounds(3, 10) {
        let controller = settled_controller(&cluster);
        let registrations = logged(&cluster, controller, REGISTERED);
        let refusals = logged(&cluster, controller, "registration refused");
        let stop = Arc::new(AtomicBool::new(false));
        let mut answered = Vec::new();
        let creating: Vec<_> = (0..cluster.nodes.len())
            .filter(|index| *index != controller)
            .map(|index| {
                let address = cluster.nodes[index].address.clone();
                let prefix = format!("round-{round}-across-{index}");
                let count = Arc::new(AtomicUsize::new(0));
                answered.push(count.clone());
                (index, create_until(address, prefix, stop.clone(), count))
            })
            .collect();
        wait_for_answers(&answered);
        cluster.nodes[controller].kill();
        cluster.nodes[controller].restart_at_once();
        let found = ask_everyone(&cluster, round);
        stop.store(true, Ordering::Relaxed);
        let during: Vec<(usize, Vec<Asked>)> = creating
            .into_iter()
            .map(|(index, thread)| (index, thread.join().unwrap()))
            .collect();
        println!("round {round}: controller {controller} killed and restarted");
        report(round, &found, &during, &mut failed);
        wait_for_registration(&cluster, controller, registrations);
        println!(
            "  node {controller} registered again after {} refusals",
            logged(&cluster, controller, "registration refused") - refusals
        );
    }
    let deliveries = load.finish();
    let read = consume_all(&cluster, "steady", PARTITIONS);
    check_exactly_once(&deliveries, &read);
    // BROOK_E2E_LOGS=<dir> keeps the brokers' logs.
    assert!(
        failed.is_empty(),
        "{} requests failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
