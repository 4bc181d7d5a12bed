//! Raw Kafka requests over a plain `TcpStream`, for tests that need a request
//! no client library would send (or a field no client lets them set).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::broker::Broker;

/// How long a connection from [`connect`] waits for an answer to a request
/// that carries no timeout of its own.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The `timeout_ms` of the Produce requests sent here: how long the broker
/// waits for `acks=all` before it answers REQUEST_TIMED_OUT.
pub const PRODUCE_TIMEOUT: Duration = Duration::from_secs(10);
/// How much longer than a request's own timeout a test waits for its
/// answer. The broker answers by its timeout at the latest; the answer
/// then still has to be written and read on a loaded machine. With no
/// margin the two timeouts raced: a test read nothing at 10 s while the
/// broker's REQUEST_TIMED_OUT, right, was on its way.
pub const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// The `replica_id` a consumer's ListOffsets and Fetch carry.
pub const CONSUMER: kafka_protocol::messages::BrokerId = kafka_protocol::messages::BrokerId(-1);

/// A connection with a read timeout ([`READ_TIMEOUT`]), so a missing
/// answer fails the test.
pub fn connect(broker: &Broker) -> TcpStream {
    connect_to(&broker.address)
}

/// [`connect`] to `address`.
pub fn connect_to(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connecting");
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream
}

/// One request frame (size prefix, header, body).
pub fn frame<T: Encodable>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Vec<u8> {
    let mut buffer = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut buffer, api_key.request_header_version(version))
        .unwrap();
    body.encode(&mut buffer, version)
        .unwrap_or_else(|error| panic!("{api_key:?} v{version} request: {error}"));
    let mut framed = (buffer.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&buffer);
    framed
}

/// Reads one response frame's body after its header (checking the
/// correlation id), or `None` if the broker closed the connection.
pub fn response(
    stream: &mut TcpStream,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
) -> Option<Bytes> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).ok()?;
    let mut body = Bytes::from(body);
    let header =
        ResponseHeader::decode(&mut body, api_key.response_header_version(version)).unwrap();
    assert_eq!(
        header.correlation_id, correlation_id,
        "{api_key:?} v{version}"
    );
    Some(body)
}

/// Sends `request` and decodes its answer, which must use the whole frame.
pub fn exchange<Q: Encodable, R: Decodable>(
    stream: &mut TcpStream,
    api_key: ApiKey,
    version: i16,
    request: &Q,
) -> R {
    try_exchange(stream, api_key, version, request)
        .unwrap_or_else(|| panic!("{api_key:?} v{version}: no answer, or not a whole response"))
}

/// [`exchange`] for a request that carries its own `timeout`: its answer
/// is waited for `timeout` + [`ANSWER_MARGIN`], then the stream's read
/// timeout is what it was.
pub fn exchange_within<Q: Encodable, R: Decodable>(
    stream: &mut TcpStream,
    api_key: ApiKey,
    version: i16,
    request: &Q,
    timeout: Duration,
) -> R {
    let read_timeout = stream.read_timeout().unwrap();
    stream
        .set_read_timeout(Some(timeout + ANSWER_MARGIN))
        .unwrap();
    let answer = try_exchange(stream, api_key, version, request);
    stream.set_read_timeout(read_timeout).unwrap();
    answer.unwrap_or_else(|| {
        panic!(
            "{api_key:?} v{version}: no answer within {:?} (its timeout {timeout:?}), or not a \
             whole response",
            timeout + ANSWER_MARGIN
        )
    })
}

/// [`exchange`], with `None` when the broker does not answer (closed, timed
/// out) or answers with something that is not a whole response.
pub fn try_exchange<Q: Encodable, R: Decodable>(
    stream: &mut TcpStream,
    api_key: ApiKey,
    version: i16,
    request: &Q,
) -> Option<R> {
    let correlation_id = i32::from(version);
    stream
        .write_all(&frame(api_key, version, correlation_id, request))
        .ok()?;
    let mut body = response(stream, api_key, version, correlation_id)?;
    let response = R::decode(&mut body, version).ok()?;
    body.is_empty().then_some(response)
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// Creates `name` with `partitions` single-replica partitions.
pub fn create_topic(stream: &mut TcpStream, name: &str, partitions: i32) {
    create(
        stream,
        CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    );
}

/// How long an admin request sent here may take (its `timeout_ms`).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates `topic` as described (waiting up to 30 s), or panics with why not.
pub fn create(stream: &mut TcpStream, topic: CreatableTopic) {
    let name = topic.name.to_string();
    let created: CreateTopicsResponse = exchange_within(
        stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(ADMIN_TIMEOUT.as_millis() as i32),
        ADMIN_TIMEOUT,
    );
    assert_eq!(
        created.topics[0].error_code, 0,
        "creating {name}: {:?}",
        created.topics[0].error_message
    );
}

/// Deletes topic `name` (waiting up to 30 s), or panics with why not.
pub fn delete_topic(stream: &mut TcpStream, name: &str) {
    let deleted: DeleteTopicsResponse = exchange_within(
        stream,
        ApiKey::DeleteTopics,
        4,
        &DeleteTopicsRequest::default()
            .with_topic_names(vec![topic_name(name)])
            .with_timeout_ms(ADMIN_TIMEOUT.as_millis() as i32),
        ADMIN_TIMEOUT,
    );
    assert_eq!(deleted.responses[0].error_code, 0, "deleting {name}");
}

/// Appends one batch of `records` records of `value_bytes` filler bytes to
/// a partition with acks=all (acknowledged means visible to fetches);
/// returns the batch's base offset and its length in bytes.
pub fn produce_filler(
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    records: usize,
    value_bytes: usize,
) -> (i64, usize) {
    let batch = filler_batch(records, value_bytes);
    let len = batch.len();
    let answer = produce_batch(stream, topic, partition, -1, batch);
    assert_eq!(answer.error_code, 0, "producing to {topic}-{partition}");
    (answer.base_offset, len)
}

/// One batch of `records` records of `value_bytes` filler bytes each.
pub fn filler_batch(records: usize, value_bytes: usize) -> Vec<u8> {
    encode_batch(
        &(0..records)
            .map(|_| NewRecord::value(vec![b'x'; value_bytes], TimestampMs(1)))
            .collect::<Vec<_>>(),
        &BatchOptions::default(),
    )
}

/// Produces `batch` to one partition with `acks` (not 0) and returns the
/// partition's answer, waiting past the request's timeout
/// ([`PRODUCE_TIMEOUT`]) for it: REQUEST_TIMED_OUT is an answer too.
pub fn produce_batch(
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    acks: i16,
    batch: Vec<u8>,
) -> PartitionProduceResponse {
    let data = PartitionProduceData::default()
        .with_index(partition)
        .with_records(Some(Bytes::from(batch)));
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(PRODUCE_TIMEOUT.as_millis() as i32)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![data]),
        ]);
    let mut response: ProduceResponse =
        exchange_within(stream, ApiKey::Produce, 9, &request, PRODUCE_TIMEOUT);
    response.responses.remove(0).partition_responses.remove(0)
}

/// ListOffsets for one partition at `timestamp` (-1 latest, -2 earliest),
/// read_uncommitted, as a consumer asks: the offset answered. A new leader
/// that cannot answer yet (OFFSET_NOT_AVAILABLE, KIP-207) is asked again
/// for up to 30 s, as Kafka's consumer retries it.
pub fn list_offset(stream: &mut TcpStream, topic: &str, partition: i32, timestamp: i64) -> i64 {
    const OFFSET_NOT_AVAILABLE: i16 = 78;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer =
            list_offset_answer(stream, topic, partition, timestamp).expect("a ListOffsets answer");
        if answer.0 == OFFSET_NOT_AVAILABLE && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        assert_eq!(
            answer.0, 0,
            "ListOffsets of {topic}-{partition}: error {}",
            answer.0
        );
        return answer.1;
    }
}

/// ListOffsets for one partition: its error code and offset, or `None` if
/// the broker did not answer.
pub fn list_offset_answer(
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Option<(i16, i64)> {
    let topic = ListOffsetsTopic::default()
        .with_name(topic_name(topic))
        .with_partitions(vec![
            ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp),
        ]);
    let response: ListOffsetsResponse = try_exchange(
        stream,
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(CONSUMER)
            .with_topics(vec![topic]),
    )?;
    let answer = response.topics.first()?.partitions.first()?;
    Some((answer.error_code, answer.offset))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };

    use super::*;

    /// Kafka's REQUEST_TIMED_OUT.
    const REQUEST_TIMED_OUT: i16 = 7;
    /// How late, past the request's timeout, the fake broker answers: a
    /// broker on a loaded machine is that late, well inside the margin.
    const ANSWER_LATE_BY: Duration = Duration::from_secs(1);

    /// A broker that takes one Produce and answers REQUEST_TIMED_OUT
    /// [`ANSWER_LATE_BY`] after the request's `timeout_ms`.
    fn answer_after_the_timeout(listener: TcpListener) {
        let (mut stream, _) = listener.accept().unwrap();
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut body).unwrap();
        let mut body = Bytes::from(body);
        let version = 9;
        let header =
            RequestHeader::decode(&mut body, ApiKey::Produce.request_header_version(version))
                .unwrap();
        let request = ProduceRequest::decode(&mut body, version).unwrap();
        let timeout = Duration::from_millis(request.timeout_ms as u64);
        std::thread::sleep(timeout + ANSWER_LATE_BY);
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default()
                .with_name(request.topic_data[0].name.clone())
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(0)
                        .with_error_code(REQUEST_TIMED_OUT),
                ]),
        ]);
        let mut buffer = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(
                &mut buffer,
                ApiKey::Produce.response_header_version(version),
            )
            .unwrap();
        response.encode(&mut buffer, version).unwrap();
        stream
            .write_all(&(buffer.len() as i32).to_be_bytes())
            .unwrap();
        stream.write_all(&buffer).unwrap();
    }

    /// The broker was right to answer REQUEST_TIMED_OUT at the request's
    /// timeout; the test must read that answer, not give up at the same
    /// moment (the socket's read timeout once equalled `timeout_ms`).
    #[test]
    fn an_answer_that_comes_at_the_produce_timeout_is_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let broker = std::thread::spawn(move || answer_after_the_timeout(listener));
        let mut stream = connect_to(&address);
        let answer = produce_batch(&mut stream, "late", 0, -1, Vec::new());
        assert_eq!(answer.error_code, REQUEST_TIMED_OUT, "{answer:?}");
        assert_eq!(
            stream.read_timeout().unwrap(),
            Some(READ_TIMEOUT),
            "the connection's own read timeout is back"
        );
        broker.join().unwrap();
    }
}
