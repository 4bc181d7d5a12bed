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
