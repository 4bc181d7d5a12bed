//! Incremental fetch sessions (KIP-227) from the client's side: kafka-python
//! 3, a client that opens them, consumes through one; raw requests pin what
//! a session answers (only partitions with news), its errors, its close, and
//! the broker setting that turns sessions off.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::clients::{Report, python3_path, run, script};
use brook_tests::raw::{self, connect, exchange};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "sessions";
/// With two shards, the partitions live on both.
const PARTITIONS: i32 = 4;
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

fn start(dir: &std::path::Path, extra: &[&str]) -> (Broker, TcpStream) {
    start_with(dir, extra, PARTITIONS)
}

fn start_with(dir: &std::path::Path, extra: &[&str], partitions: i32) -> (Broker, TcpStream) {
    let broker = Broker::start(BROOK, dir, 2, extra);
    let mut stream = connect(&broker);
    raw::create_topic(&mut stream, TOPIC, partitions);
    (broker, stream)
}

/// Appends `records` records to `partition`; returns the log end after them.
fn produce(stream: &mut TcpStream, partition: i32, records: usize) -> i64 {
    raw::produce_filler(stream, TOPIC, partition, records, 10).0 + records as i64
}

/// A fetch (v12, topics by name) of `partitions` at their offsets, waiting
/// at most 100 ms for a byte.
fn fetch_request(session_id: i32, epoch: i32, partitions: &[(i32, i64)]) -> FetchRequest {
    fetch_waiting(session_id, epoch, partitions, 100)
}

fn fetch_waiting(
    session_id: i32,
    epoch: i32,
    partitions: &[(i32, i64)],
    max_wait_ms: i32,
) -> FetchRequest {
    let partitions: Vec<FetchPartition> = partitions
        .iter()
        .map(|(partition, offset)| {
            FetchPartition::default()
                .with_partition(*partition)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let topics = if partitions.is_empty() {
        Vec::new()
    } else {
        vec![
            FetchTopic::default()
                .with_topic(topic_name())
                .with_partitions(partitions),
        ]
    };
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

fn fetch(stream: &mut TcpStream, version: i16, request: &FetchRequest) -> FetchResponse {
    exchange(stream, ApiKey::Fetch, version, request)
}

/// The partitions a response carries, with whether each had records.
fn answered(response: &FetchResponse) -> Vec<(i32, bool)> {
    response
        .responses
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .map(|partition| {
            assert_eq!(partition.error_code, 0, "{response:?}");
            let records = partition
                .records
                .as_ref()
                .is_some_and(|bytes| !bytes.is_empty());
            (partition.partition_index, records)
        })
        .collect()
}

fn every_partition_at_zero() -> Vec<(i32, i64)> {
    (0..PARTITIONS).map(|partition| (partition, 0)).collect()
}

/// A full fetch opens a session; each incremental fetch then answers only
/// the partitions with news (records, a moved high watermark), carries only
/// the offsets that moved, and stops fetching what it forgets.
#[test]
fn a_session_answers_only_partitions_with_news() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, mut stream) = start(dir.path(), &[]);
    let end_0 = produce(&mut stream, 0, 3);
    let end_2 = produce(&mut stream, 2, 5);

    let full = fetch(
        &mut stream,
        12,
        &fetch_request(0, 0, &every_partition_at_zero()),
    );
    assert_eq!(full.error_code, 0);
    let session = full.session_id;
    assert!(session > 0, "a full fetch at epoch 0 opens a session");
    assert_eq!(
        answered(&full),
        vec![(0, true), (1, false), (2, true), (3, false)]
    );

    // The consumer moves on past what it read; nothing new since.
    let moved = fetch(
        &mut stream,
        12,
        &fetch_request(session, 1, &[(0, end_0), (2, end_2)]),
    );
    assert_eq!((moved.error_code, moved.session_id), (0, session));
    assert_eq!(answered(&moved), vec![]);

    // Only partition 3 has news; the request names no partition at all.
    produce(&mut stream, 3, 2);
    let news = fetch(&mut stream, 12, &fetch_request(session, 2, &[]));
    assert_eq!(answered(&news), vec![(3, true)]);

    // Forgotten, partition 3 is no longer read; partition 1 still is.
    let mut forget = fetch_request(session, 3, &[]);
    forget.forgotten_topics_data = vec![
        ForgottenTopic::default()
            .with_topic(topic_name())
            .with_partitions(vec![3]),
    ];
    produce(&mut stream, 3, 1);
    produce(&mut stream, 1, 1);
    assert_eq!(answered(&fetch(&mut stream, 12, &forget)), vec![(1, true)]);
}

/// The top-level session errors of Kafka, answered with no partitions and
/// session id 0; a wrong epoch leaves the session usable at the right one,
/// and epoch -1 closes it.
#[test]
fn session_errors_and_close_are_kafkas() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, mut stream) = start(dir.path(), &[]);
    produce(&mut stream, 0, 1);
    let full = fetch(
        &mut stream,
        12,
        &fetch_request(0, 0, &every_partition_at_zero()),
    );
    let session = full.session_id;
    assert!(session > 0);

    let refused = |stream: &mut TcpStream, version, request: FetchRequest| {
        let response = fetch(stream, version, &request);
        assert_eq!(response.session_id, 0, "{response:?}");
        assert!(response.responses.is_empty(), "{response:?}");
        response.error_code
    };
    assert_eq!(
        refused(&mut stream, 12, fetch_request(session, 5, &[])),
        INVALID_FETCH_SESSION_EPOCH
    );
    assert_eq!(
        refused(
            &mut stream,
            12,
            fetch_request(session.wrapping_add(2), 1, &[])
        ),
        FETCH_SESSION_ID_NOT_FOUND
    );
    // v13 names topics by id; this session named them by name.
    assert_eq!(
        refused(&mut stream, 13, fetch_request(session, 1, &[])),
        FETCH_SESSION_TOPIC_ID_ERROR
    );
    let right = fetch(&mut stream, 12, &fetch_request(session, 1, &[]));
    assert_eq!((right.error_code, right.session_id), (0, session));

    // Epoch -1 closes the session and is answered in full, sessionless.
    let last = fetch(&mut stream, 12, &fetch_request(session, -1, &[(0, 0)]));
    assert_eq!((last.error_code, last.session_id), (0, 0));
    assert_eq!(answered(&last), vec![(0, true)]);
    assert_eq!(
        refused(&mut stream, 12, fetch_request(session, 2, &[])),
        FETCH_SESSION_ID_NOT_FOUND
    );
}

/// From Fetch v13 a session names its topics by id, in requests and answers.
#[test]
fn a_session_by_topic_id_answers_by_topic_id() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, mut stream) = start(dir.path(), &[]);
    let metadata: MetadataResponse = exchange(
        &mut stream,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let topic_id = metadata.topics[0].topic_id;
    let by_id = |session, epoch, partitions: &[(i32, i64)]| {
        let mut request = fetch_request(session, epoch, partitions);
        for topic in &mut request.topics {
            topic.topic = TopicName::default();
            topic.topic_id = topic_id;
        }
        request
    };
    let full = fetch(&mut stream, 13, &by_id(0, 0, &every_partition_at_zero()));
    assert!(full.session_id > 0, "{full:?}");
    produce(&mut stream, 1, 4);
    let news = fetch(&mut stream, 13, &by_id(full.session_id, 1, &[]));
    assert_eq!(news.responses.len(), 1);
    assert_eq!(news.responses[0].topic_id, topic_id);
    assert_eq!(answered(&news), vec![(1, true)]);
}

/// A fetch of many partitions per shard waits for news of any partition of
/// the shard (not a waiter per partition): an append to one of them, on
/// either shard, answers it long before its wait is out.
#[test]
fn a_waiting_fetch_of_many_partitions_wakes_on_an_append_to_any() {
    const MANY: i32 = 100;
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut stream) = start_with(dir.path(), &[], MANY);
    let everything: Vec<(i32, i64)> = (0..MANY).map(|partition| (partition, 0)).collect();
    let full = fetch(&mut stream, 12, &fetch_request(0, 0, &everything));
    let session = full.session_id;
    assert!(session > 0);
    // The second fetch tells the session it read partition 7's record.
    for (epoch, partition, moved) in [(1, 7, vec![]), (2, 58, vec![(7, 1)])] {
        let address = broker.address.clone();
        let appender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            produce(&mut TcpStream::connect(address).unwrap(), partition, 1)
        });
        let started = Instant::now();
        let request = fetch_waiting(session, epoch, &moved, 20_000);
        let woken = fetch(&mut stream, 12, &request);
        let waited = started.elapsed();
        appender.join().unwrap();
        assert_eq!(answered(&woken), vec![(partition, true)]);
        assert!(
            waited < Duration::from_secs(10),
            "answered after {waited:?}"
        );
    }
}

/// `max.incremental.fetch.session.cache.slots=0` turns sessions off, as in
/// Kafka: a full fetch at epoch 0 is answered with session id 0.
#[test]
fn no_session_slots_means_no_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, mut stream) = start(
        dir.path(),
        &["--set", "max.incremental.fetch.session.cache.slots=0"],
    );
    let full = fetch(
        &mut stream,
        12,
        &fetch_request(0, 0, &every_partition_at_zero()),
    );
    assert_eq!((full.error_code, full.session_id), (0, 0));
    assert_eq!(answered(&full).len(), PARTITIONS as usize);
}

/// kafka-python 3 consumes 12 partitions through one session: every record
/// once; then, with news on one partition only, each incremental response
/// carries at most that partition.
#[test]
fn kafka_python_3_consumes_through_an_incremental_session() {
    const RECORDS: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let output = run(
        Command::new("python3")
            .env("PYTHONPATH", python3_path())
            .arg(script("kafka_python_fetch_sessions.py"))
            .args([&broker.address, "python-sessions", "12"])
            .arg(RECORDS.to_string()),
        None,
        &broker,
    );
    let report = Report::parse(&output);
    assert!(report.one("kafka-python").starts_with("3."), "{report:#?}");
    for phase in ["first", "second"] {
        assert_eq!(
            report.one(&format!("{phase}.consumed")),
            RECORDS.to_string(),
            "{report:#?}"
        );
        assert_eq!(report.one(&format!("{phase}.again")), "0", "{report:#?}");
    }
    assert_eq!(report.one("first.sessions_created"), "1", "{report:#?}");
    assert_eq!(report.one("sessions_created"), "1", "{report:#?}");
    let incremental: usize = report.one("second.incremental_responses").parse().unwrap();
    assert!(incremental >= 1, "{report:#?}");
    assert_eq!(
        report.one("second.most_partitions_in_a_response"),
        "1",
        "{report:#?}"
    );
}
