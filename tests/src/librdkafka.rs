//! Small steps the tests take with librdkafka (the `rdkafka` crate) over
//! and over.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::util::Timeout;
use std::time::Duration;

/// Queues `record`, serving delivery reports while librdkafka's queue is
/// full (a producer faster than the broker fills it).
pub fn send_when_queued<C, K, P>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'_, K, P, C::DeliveryOpaque>,
) where
    C: ProducerContext,
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, returned)) => {
                producer.poll(Timeout::After(Duration::from_millis(10)));
                record = returned;
            }
        }
    }
}

/// A consumer outside any group's management (no commits), assigned every
/// partition of `topic` from its log start.
pub fn assigned_from_start(bootstrap: &str, topic: &str, partitions: i32) -> BaseConsumer {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "brook-e2e")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}
