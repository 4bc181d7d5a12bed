//! Pipelined Produce requests on one connection append in request order,
//! as Kafka's one-request-at-a-time connections do: a client with several
//! requests in flight (and no idempotence) relies on it for ordering.

use std::io::Write;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::raw::{connect, exchange, frame, response};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

fn topic_data(topic: &str, value: &str) -> TopicProduceData {
    let batch = encode_batch(
        &[NewRecord::value(
            value.to_owned().into_bytes(),
            TimestampMs(1),
        )],
        &BatchOptions::default(),
    );
    TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
        .with_partition_data(vec![
            PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch))),
        ])
}

#[test]
fn pipelined_produces_append_in_request_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let mut stream = connect(&broker);
    let topics = ["first", "second"].map(|name| {
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(name)))
            .with_num_partitions(1)
            .with_replication_factor(1)
    });
    let created: CreateTopicsResponse = exchange(
        &mut stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default().with_topics(topics.to_vec()),
    );
    assert!(created.topics.iter().all(|topic| topic.error_code == 0));
    // Each round: request 1 writes "first" (fsynced before acks=all answers)
    // and then "second"; request 2, sent right behind it, writes "second".
    for round in 0..20 {
        let request = |topics: Vec<TopicProduceData>| {
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(topics)
        };
        let mut frames = frame(
            ApiKey::Produce,
            9,
            1,
            &request(vec![topic_data("first", "1"), topic_data("second", "1")]),
        );
        frames.extend(frame(
            ApiKey::Produce,
            9,
            2,
            &request(vec![topic_data("second", "2")]),
        ));
        stream.write_all(&frames).unwrap();
        let mut base_offsets = Vec::new();
        for correlation_id in [1, 2] {
            let mut body = response(&mut stream, ApiKey::Produce, 9, correlation_id).unwrap();
            let produced = ProduceResponse::decode(&mut body, 9).unwrap();
            let second = produced
                .responses
                .iter()
                .find(|topic| topic.name.as_str() == "second")
                .unwrap();
            assert_eq!(second.partition_responses[0].error_code, 0);
            base_offsets.push(second.partition_responses[0].base_offset);
        }
        assert_eq!(
            base_offsets,
            vec![2 * round, 2 * round + 1],
            "round {round}: request 1's batch comes first"
        );
    }
}

/// Requests one connection sends before it reads any answer: far past the
/// broker's own in-flight bound, so its reading pauses and resumes.
const DEEP_PIPELINE_REQUESTS: usize = 1_000;
/// Each request's one record: large enough that a few dozen of them fill a
/// log's unwritten backlog and appends wait for the writer inside the log.
const LARGE_RECORD_BYTES: usize = 512 << 10;

/// A deep pipeline of large acks=1 produces to two partitions on one
/// connection, with no reading until every request is sent: each request's
/// batch gets the next offset of its partition, in send order (appends that
/// queue behind a waiting one must not be overtaken by later arrivals).
#[test]
fn a_deep_pipeline_of_large_batches_appends_in_send_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let mut stream = connect(&broker);
    brook_tests::raw::create_topic(&mut stream, "deep", 2);
    let mut writer = stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        for index in 0..DEEP_PIPELINE_REQUESTS {
            let mut value = format!("{index}/").into_bytes();
            value.resize(LARGE_RECORD_BYTES, b'x');
            let batch = encode_batch(
                &[NewRecord::value(value, TimestampMs(1))],
                &BatchOptions::default(),
            );
            let data = TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("deep")))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index((index % 2) as i32)
                        .with_records(Some(Bytes::from(batch))),
                ]);
            let request = ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![data]);
            writer
                .write_all(&frame(ApiKey::Produce, 9, index as i32, &request))
                .unwrap();
        }
    });
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut base_offsets = Vec::with_capacity(DEEP_PIPELINE_REQUESTS);
    for index in 0..DEEP_PIPELINE_REQUESTS {
        let mut body = response(&mut stream, ApiKey::Produce, 9, index as i32)
            .unwrap_or_else(|| panic!("no answer to request {index}"));
        let produced = ProduceResponse::decode(&mut body, 9).unwrap();
        let answer = &produced.responses[0].partition_responses[0];
        assert_eq!(answer.error_code, 0, "request {index}");
        base_offsets.push(answer.base_offset);
    }
    sending.join().unwrap();
    let expected: Vec<i64> = (0..DEEP_PIPELINE_REQUESTS as i64)
        .map(|index| index / 2)
        .collect();
    let misplaced: Vec<(usize, i64)> = base_offsets
        .iter()
        .enumerate()
        .filter(|(index, offset)| **offset != expected[*index])
        .map(|(index, offset)| (index, *offset))
        .collect();
    assert!(
        misplaced.is_empty(),
        "(request, base offset) stored out of send order: {misplaced:?}"
    );
}

/// Records the librdkafka producer sends, alternating over two partitions.
const LIBRDKAFKA_RECORDS: usize = 2_000;
/// Each record's value (the report's 500 KB).
const LIBRDKAFKA_RECORD_BYTES: usize = 500_000;

/// librdkafka with its defaults (not idempotent, up to 1,000,000 requests
/// in flight per connection, no retries needed): records of 500 KB to two
/// partitions land at offsets in the order they were sent.
#[test]
fn librdkafka_at_its_default_pipelining_depth_keeps_send_order() {
    use brook_tests::deliveries::Deliveries;
    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let mut stream = connect(&broker);
    brook_tests::raw::create_topic(&mut stream, "large", 2);
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("message.timeout.ms", "60000")
        .set("queue.buffering.max.kbytes", "2097151")
        .create_with_context(Deliveries::default())
        .expect("a producer");
    let value = vec![b'v'; LIBRDKAFKA_RECORD_BYTES];
    for index in 0..LIBRDKAFKA_RECORDS {
        let key = index.to_string();
        let record = BaseRecord::to("large")
            .key(&key)
            .payload(&value)
            .partition((index % 2) as i32);
        brook_tests::librdkafka::send_when_queued(&producer, record);
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let deliveries = producer.context();
    assert_eq!(*deliveries.errors.lock().unwrap(), Vec::<String>::new());
    let delivered = deliveries.delivered.lock().unwrap();
    let mut misplaced = Vec::new();
    for index in 0..LIBRDKAFKA_RECORDS {
        let (partition, offset) = delivered[&index.to_string()];
        assert_eq!(partition, (index % 2) as i32);
        if offset != (index / 2) as i64 {
            misplaced.push((index, offset));
        }
    }
    assert!(
        misplaced.is_empty(),
        "(record sent, offset) out of send order: {misplaced:?}"
    );
}
