//! Transactions at the protocol level (issue 6): the guard against hanging
//! transactions (KIP-890 part 1), the last stable offset and aborted
//! transactions a read_committed Fetch returns, and both surviving kill -9.

use std::net::TcpStream;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::raw::{connect, exchange};
use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "txn-raw";
const INVALID_TXN_STATE: i16 = 48;

fn start(dir: &std::path::Path, checkpoint_ms: u64) -> Broker {
    let interval = format!("log.flush.offset.checkpoint.interval.ms={checkpoint_ms}");
    Broker::start(BROOK, dir, 2, &["--set", &interval])
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

fn transactional_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_owned()))
}

fn create_topic(stream: &mut TcpStream) {
    let topic = CreatableTopic::default()
        .with_name(topic_name())
        .with_num_partitions(1)
        .with_replication_factor(1);
    let created: CreateTopicsResponse = exchange(
        stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default().with_topics(vec![topic]),
    );
    assert_eq!(created.topics[0].error_code, 0);
}

/// FindCoordinator (creating `__transaction_state`) and InitProducerId.
fn init(stream: &mut TcpStream, id: &str) -> (i64, i16) {
    let find = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(id.to_owned()))
        .with_key_type(1);
    let found: FindCoordinatorResponse = exchange(stream, ApiKey::FindCoordinator, 3, &find);
    assert_eq!(found.error_code, 0);
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(transactional_id(id)))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let response: InitProducerIdResponse = exchange(stream, ApiKey::InitProducerId, 4, &request);
    assert_eq!(response.error_code, 0, "{response:?}");
    (response.producer_id.0, response.producer_epoch)
}

fn add_partition(stream: &mut TcpStream, id: &str, producer: (i64, i16)) {
    let topic = AddPartitionsToTxnTopic::default()
        .with_name(topic_name())
        .with_partitions(vec![0]);
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(transactional_id(id))
        .with_v3_and_below_producer_id(producer.0.into())
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(vec![topic]);
    let response: AddPartitionsToTxnResponse =
        exchange(stream, ApiKey::AddPartitionsToTxn, 3, &request);
    assert_eq!(
        response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
}

fn end(stream: &mut TcpStream, id: &str, producer: (i64, i16), commit: bool) {
    let request = EndTxnRequest::default()
        .with_transactional_id(transactional_id(id))
        .with_producer_id(producer.0.into())
        .with_producer_epoch(producer.1)
        .with_committed(commit);
    let response: EndTxnResponse = exchange(stream, ApiKey::EndTxn, 3, &request);
    assert_eq!(response.error_code, 0);
}

/// Produces one transactional batch of `count` records; returns the error.
fn produce(
    stream: &mut TcpStream,
    id: Option<&str>,
    producer: (i64, i16),
    sequence: i32,
    count: usize,
) -> i16 {
    let records: Vec<NewRecord> = (0..count)
        .map(|index| NewRecord::value(format!("r{index}"), TimestampMs(1)))
        .collect();
    let batch = encode_batch(
        &records,
        &BatchOptions {
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: sequence,
            transactional: true,
            ..BatchOptions::default()
        },
    );
    let topic = TopicProduceData::default()
        .with_name(topic_name())
        .with_partition_data(vec![
            PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch))),
        ]);
    let request = ProduceRequest::default()
        .with_transactional_id(id.map(transactional_id))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![topic]);
    let response: ProduceResponse = exchange(stream, ApiKey::Produce, 9, &request);
    response.responses[0].partition_responses[0].error_code
}

/// Latest offset at the isolation level (0 uncommitted, 1 committed).
fn latest(stream: &mut TcpStream, isolation: i8) -> i64 {
    let topic = ListOffsetsTopic::default()
        .with_name(topic_name())
        .with_partitions(vec![
            ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1),
        ]);
    let request = ListOffsetsRequest::default()
        .with_replica_id(brook_tests::raw::CONSUMER)
        .with_isolation_level(isolation)
        .with_topics(vec![topic]);
    let response: ListOffsetsResponse = exchange(stream, ApiKey::ListOffsets, 7, &request);
    response.topics[0].partitions[0].offset
}

/// A read_committed Fetch from offset 0: (last stable offset, aborted
/// transactions as (producer id, first offset)).
fn fetch_committed(stream: &mut TcpStream) -> (i64, Vec<(i64, i64)>) {
    let partition = FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1 << 20);
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name())
                .with_partitions(vec![partition]),
        ]);
    let response: FetchResponse = exchange(stream, ApiKey::Fetch, 12, &request);
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    let aborted = partition
        .aborted_transactions
        .iter()
        .flatten()
        .map(|aborted| (aborted.producer_id.0, aborted.first_offset))
        .collect();
    (partition.last_stable_offset, aborted)
}

#[test]
fn an_unverified_transactional_batch_is_refused_and_cannot_hang_the_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), 600_000);
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    let producer = init(&mut stream, "unverified");
    // No AddPartitionsToTxn: the coordinator does not know the partition.
    assert_eq!(
        produce(&mut stream, Some("unverified"), producer, 0, 2),
        INVALID_TXN_STATE
    );
    // A made-up producer without any transactional id.
    assert_eq!(
        produce(&mut stream, None, (987_654, 0), 0, 2),
        INVALID_TXN_STATE
    );
    assert_eq!(latest(&mut stream, 0), 0, "nothing was appended");
    assert_eq!(latest(&mut stream, 1), 0);
    // Once added, the same batch is accepted; the LSO waits for its end.
    add_partition(&mut stream, "unverified", producer);
    assert_eq!(produce(&mut stream, Some("unverified"), producer, 0, 2), 0);
    assert_eq!((latest(&mut stream, 0), latest(&mut stream, 1)), (2, 0));
    end(&mut stream, "unverified", producer, true);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while latest(&mut stream, 1) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        latest(&mut stream, 1),
        3,
        "the COMMIT marker is at offset 2"
    );
}

/// Aborts one transaction and commits another; the aborted one is reported
/// to read_committed fetches before and after kill -9 (with or without a
/// checkpoint round between the abort and the kill).
fn aborted_transactions_survive_a_kill(checkpoint_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path(), checkpoint_ms);
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    let aborted = init(&mut stream, "aborting");
    add_partition(&mut stream, "aborting", aborted);
    assert_eq!(produce(&mut stream, Some("aborting"), aborted, 0, 3), 0);
    let committed = init(&mut stream, "committing");
    add_partition(&mut stream, "committing", committed);
    assert_eq!(produce(&mut stream, Some("committing"), committed, 0, 2), 0);
    end(&mut stream, "aborting", aborted, false);
    end(&mut stream, "committing", committed, true);
    // Offsets: 0-2 aborted data, 3-4 committed data, then two markers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while latest(&mut stream, 1) < 7 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(fetch_committed(&mut stream), (7, vec![(aborted.0, 0)]));
    std::thread::sleep(std::time::Duration::from_millis(
        checkpoint_ms.min(1_000) * 3,
    ));
    drop(stream);
    broker.kill();
    broker.restart();
    let mut stream = connect(&broker);
    assert_eq!(
        fetch_committed(&mut stream),
        (7, vec![(aborted.0, 0)]),
        "after the restart"
    );
    assert_eq!((latest(&mut stream, 0), latest(&mut stream, 1)), (7, 7));
}

#[test]
fn aborted_transactions_survive_a_kill_before_any_checkpoint() {
    aborted_transactions_survive_a_kill(600_000);
}

#[test]
fn aborted_transactions_survive_a_kill_after_checkpoints() {
    aborted_transactions_survive_a_kill(100);
}

/// Makes the broker's `__transaction_state` say that `id`'s transaction is in
/// PrepareCommit, as if the broker had died right after persisting EndTxn:
/// appends that record after the last batch of the partition's active
/// segment (the broker is down).
fn persist_prepare_commit(data_dir: &std::path::Path, id: &str, producer: (i64, i16)) {
    use brook_engine::log::batch::{BatchView, set_base_offset, set_partition_leader_epoch};
    use brook_engine::replica::producer_state::ProducerEpoch;
    use brook_engine::txn::records::{
        TopicPartitions, TransactionLogKey, TransactionLogValue, TransactionRecord, partition_for,
    };
    use brook_engine::txn::state::TransactionState;
    use brook_engine::types::{LeaderEpoch, Offset, ProducerId};

    let dir = data_dir.join(format!("__transaction_state-{}", partition_for(id, 50)));
    let mut logs: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    logs.sort();
    let active = logs.pop().expect("an active segment");
    let mut bytes = std::fs::read(&active).unwrap();
    let (mut end, mut next_offset) = (
        0,
        active
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap(),
    );
    while let Ok(batch) = BatchView::parse_prefix(&bytes[end..]) {
        end += batch.size_bytes();
        next_offset = batch.last_offset().0 + 1;
    }
    bytes.truncate(end);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let record = TransactionRecord::Value {
        key: TransactionLogKey {
            transactional_id: id.to_owned(),
        },
        value: TransactionLogValue {
            producer_id: ProducerId(producer.0),
            previous_producer_id: ProducerId(-1),
            next_producer_id: ProducerId(-1),
            producer_epoch: ProducerEpoch(producer.1),
            timeout_ms: 60_000,
            state: TransactionState::PrepareCommit,
            partitions: Some(vec![TopicPartitions {
                topic: TOPIC.to_owned(),
                partition_ids: vec![0],
            }]),
            last_update_timestamp_ms: now,
            start_timestamp_ms: now,
            client_transaction_version: 0,
            unknown_tagged_fields: Vec::new(),
        },
        version: 1,
    };
    let (key, value) = record.encode().unwrap();
    let mut batch = encode_batch(
        &[NewRecord {
            key: Some(key),
            value,
            timestamp: TimestampMs(now),
            headers: Vec::new(),
        }],
        &BatchOptions::default(),
    );
    set_base_offset(&mut batch, Offset(next_offset)).unwrap();
    set_partition_leader_epoch(&mut batch, LeaderEpoch(0)).unwrap();
    bytes.extend_from_slice(&batch);
    std::fs::write(&active, &bytes).unwrap();
}

#[test]
fn a_transaction_found_in_prepare_commit_after_a_crash_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path(), 100);
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    let producer = init(&mut stream, "prepared");
    add_partition(&mut stream, "prepared", producer);
    assert_eq!(produce(&mut stream, Some("prepared"), producer, 0, 3), 0);
    assert_eq!((latest(&mut stream, 0), latest(&mut stream, 1)), (3, 0));
    drop(stream);
    broker.kill();
    persist_prepare_commit(broker.data_dir(), "prepared", producer);
    broker.restart();
    // Loading the coordinator finds PrepareCommit and writes the markers.
    let mut stream = connect(&broker);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while latest(&mut stream, 1) < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        (latest(&mut stream, 0), latest(&mut stream, 1)),
        (4, 4),
        "COMMIT marker at offset 3: {}",
        broker.log()
    );
    assert_eq!(
        fetch_committed(&mut stream),
        (4, Vec::new()),
        "nothing aborted"
    );
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![transactional_id("prepared")]);
    let mut state = String::new();
    while state != "CompleteCommit" && std::time::Instant::now() < deadline {
        let response: DescribeTransactionsResponse =
            exchange(&mut stream, ApiKey::DescribeTransactions, 0, &request);
        state = response.transaction_states[0].transaction_state.to_string();
    }
    assert_eq!(state, "CompleteCommit");
}
