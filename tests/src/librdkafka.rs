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
    assigned_from_start_with(bootstrap, topic, partitions, &[])
}

/// [`assigned_from_start`] with more client settings (`key`, `value`),
/// which win over the defaults above.
pub fn assigned_from_start_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    settings: &[(&str, &str)],
) -> BaseConsumer {
    let mut config = rdkafka::ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "brook-e2e")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    for (key, value) in settings {
        config.set(*key, *value);
    }
    let consumer: BaseConsumer = config.create().expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

/// What librdkafka's AdminClient DescribeCluster returned: the controller
/// it names (`None`: none) and the brokers, by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    pub controller: Option<i32>,
    pub nodes: Vec<i32>,
}

/// DescribeCluster through librdkafka's AdminClient (`rd_kafka_DescribeCluster`,
/// which the `rdkafka` crate does not wrap: it sends Metadata to the broker
/// the cluster's metadata names as controller, and waits for that one to be
/// known and up), with its `request_timeout`; the admin client's error
/// (name and text) if it gave one.
pub fn describe_cluster(
    admin: &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    request_timeout: Duration,
) -> Result<ClusterDescription, String> {
    use rdkafka::bindings as rd;
    use std::ffi::CStr;
    let client = admin.inner().native_ptr();
    let timeout_ms = request_timeout.as_millis() as i32;
    // SAFETY: librdkafka's C API on a live client handle; every object
    // made here is destroyed here, and the event's result is read before
    // the event is destroyed.
    unsafe {
        let options = rd::rd_kafka_AdminOptions_new(
            client,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER,
        );
        let mut reason = [0 as std::ffi::c_char; 256];
        let set = rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            timeout_ms,
            reason.as_mut_ptr(),
            reason.len(),
        );
        assert_eq!(set, rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
        let queue = rd::rd_kafka_queue_new(client);
        rd::rd_kafka_DescribeCluster(client, options, queue);
        // The admin request ends by its own timeout: wait a little longer.
        let event = rd::rd_kafka_queue_poll(queue, timeout_ms + 5_000);
        let described = if event.is_null() {
            Err("no result event".to_owned())
        } else if rd::rd_kafka_event_error(event)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            let name = CStr::from_ptr(rd::rd_kafka_err2name(rd::rd_kafka_event_error(event)));
            let text = CStr::from_ptr(rd::rd_kafka_event_error_string(event));
            Err(format!(
                "{}: {}",
                name.to_string_lossy(),
                text.to_string_lossy()
            ))
        } else {
            let result = rd::rd_kafka_event_DescribeCluster_result(event);
            let controller = rd::rd_kafka_DescribeCluster_result_controller(result);
            let mut count = 0usize;
            let nodes = rd::rd_kafka_DescribeCluster_result_nodes(result, &mut count);
            let mut ids: Vec<i32> = (0..count)
                .map(|index| rd::rd_kafka_Node_id(*nodes.add(index)))
                .collect();
            ids.sort();
            Ok(ClusterDescription {
                controller: (!controller.is_null()).then(|| rd::rd_kafka_Node_id(controller)),
                nodes: ids,
            })
        };
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        described
    }
}
