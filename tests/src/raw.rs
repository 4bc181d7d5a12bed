//! Raw Kafka requests over a plain `TcpStream`, for tests that need a request
//! no client library would send (or a field no client lets them set).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::broker::Broker;

/// A connection with a read timeout, so a missing answer fails the test.
pub fn connect(broker: &Broker) -> TcpStream {
    let stream = TcpStream::connect(&broker.address).expect("connecting");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
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
    let correlation_id = i32::from(version);
    stream
        .write_all(&frame(api_key, version, correlation_id, request))
        .unwrap();
    let mut body = response(stream, api_key, version, correlation_id)
        .unwrap_or_else(|| panic!("{api_key:?} v{version}: no answer"));
    let response = R::decode(&mut body, version)
        .unwrap_or_else(|error| panic!("{api_key:?} v{version} response: {error}"));
    assert!(
        body.is_empty(),
        "{api_key:?} v{version}: {} bytes left over",
        body.len()
    );
    response
}
