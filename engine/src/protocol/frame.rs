//! Request framing: a 4-byte big-endian size, then the request header and
//! body. Everything here is checked before anything is allocated or decoded,
//! so a hostile frame costs at most its (bounded) size.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use thiserror::Error;

use crate::protocol::versions;

/// Kafka's default `socket.request.max.bytes` (100 MiB).
pub const SOCKET_REQUEST_MAX_BYTES_DEFAULT: usize = 104_857_600;
/// The fixed start of every request header: api key, version, correlation id.
const HEADER_FIXED_BYTES: usize = 8;

/// Why a connection must be closed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds socket.request.max.bytes {max}")]
    TooLarge { size: i64, max: usize },
    #[error("frame of {size} bytes is too short for a request header")]
    TooShort { size: i64 },
    #[error("the connection closed inside a frame of {size} bytes")]
    Truncated { size: usize },
    #[error("unknown API key {api_key}")]
    UnknownApiKey { api_key: i16 },
    #[error("{api_key:?} v{version} is not supported")]
    UnsupportedVersion {
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api_key:?} v{version} request: {reason}")]
    Malformed {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
}

/// Reads a frame's size prefix: the number of bytes that follow it.
pub fn frame_size(prefix: [u8; 4], max_bytes: usize) -> Result<usize, FrameError> {
    let size = i32::from_be_bytes(prefix);
    if size < HEADER_FIXED_BYTES as i32 {
        return Err(FrameError::TooShort {
            size: i64::from(size),
        });
    }
    if size as usize > max_bytes {
        return Err(FrameError::TooLarge {
            size: i64::from(size),
            max: max_bytes,
        });
    }
    Ok(size as usize)
}

/// A request whose header is decoded and whose version is served.
#[derive(Clone, Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// The encoded request body.
    pub body: Bytes,
    /// Where the request came from as Kafka shows it (`/127.0.0.1`); set by
    /// the connection, empty until then.
    pub client_host: String,
    /// Which of the broker's client listeners it came in on (0: the
    /// inter-broker one); set by the connection.
    pub listener: usize,
}

impl Request {
    /// Decodes the body as `T` (a `kafka-protocol` request message).
    ///
    /// Bytes after the message are ignored, as Kafka ignores them: librdkafka
    /// (2.12) sends an all-topics Metadata v9+ request whose 4-byte array
    /// placeholder was never shrunk to the 1-byte null it holds.
    pub fn decode_body<T: Decodable>(&self) -> Result<T, FrameError> {
        let mut body = self.body.clone();
        T::decode(&mut body, self.api_version).map_err(|error| self.malformed(error.to_string()))
    }

    fn malformed(&self, reason: String) -> FrameError {
        FrameError::Malformed {
            api_key: self.api_key,
            version: self.api_version,
            reason,
        }
    }
}

/// Decodes a frame's header. An unknown API key, an unsupported version or
/// a malformed header is an error (the caller answers an unsupported
/// ApiVersions version, and closes the connection otherwise).
pub fn parse_request(mut frame: Bytes) -> Result<Request, FrameError> {
    if frame.len() < HEADER_FIXED_BYTES {
        return Err(FrameError::TooShort {
            size: frame.len() as i64,
        });
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key =
        ApiKey::try_from(raw_key).map_err(|()| FrameError::UnknownApiKey { api_key: raw_key })?;
    if !versions::is_supported(api_key, api_version) {
        return Err(FrameError::UnsupportedVersion {
            api_key,
            version: api_version,
            correlation_id,
        });
    }
    let header_version = api_key.request_header_version(api_version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|error| {
        FrameError::Malformed {
            api_key,
            version: api_version,
            reason: format!("header: {error}"),
        }
    })?;
    Ok(Request {
        client_host: String::new(),
        listener: 0,
        api_key,
        api_version,
        correlation_id,
        client_id: header.client_id.map(|id| id.to_string()),
        body: frame,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn frame_of<T: Encodable>(api_key: ApiKey, version: i16, body: &T) -> Bytes {
        let mut buffer = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        header
            .encode(&mut buffer, api_key.request_header_version(version))
            .unwrap();
        body.encode(&mut buffer, version).unwrap();
        buffer.freeze()
    }

    #[test]
    fn sizes_are_checked_before_anything_is_read() {
        assert_eq!(frame_size(100i32.to_be_bytes(), 1000), Ok(100));
        assert!(matches!(
            frame_size(2000i32.to_be_bytes(), 1000),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(
            frame_size((-5i32).to_be_bytes(), 1000),
            Err(FrameError::TooShort { .. })
        ));
        assert!(matches!(
            frame_size(3i32.to_be_bytes(), 1000),
            Err(FrameError::TooShort { .. })
        ));
    }

    #[test]
    fn headers_decode_in_every_header_version() {
        for version in [0, 4, 9, 12] {
            let frame = frame_of(ApiKey::Metadata, version, &MetadataRequest::default());
            let request = parse_request(frame).unwrap();
            assert_eq!(
                (request.api_key, request.api_version, request.correlation_id),
                (ApiKey::Metadata, version, 42)
            );
            assert_eq!(request.client_id.as_deref(), Some("test"));
            request.decode_body::<MetadataRequest>().unwrap();
        }
    }

    /// A few bytes declaring 2^31 array elements must be an error, not a
    /// multi-gigabyte reservation that aborts the process (fuzz finding; see
    /// vendor/kafka-protocol/BROOK.md).
    #[test]
    fn huge_declared_array_lengths_are_errors() {
        let mut frame = frame_of(ApiKey::Metadata, 0, &MetadataRequest::default()).to_vec();
        let len = frame.len();
        frame[len - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
        let request = parse_request(Bytes::from(frame)).unwrap();
        assert!(matches!(
            request.decode_body::<MetadataRequest>(),
            Err(FrameError::Malformed { .. })
        ));
        let mut compact = frame_of(ApiKey::Metadata, 12, &MetadataRequest::default()).to_vec();
        let len = compact.len();
        compact.truncate(len - 4);
        compact.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
        let request = parse_request(Bytes::from(compact)).unwrap();
        assert!(matches!(
            request.decode_body::<MetadataRequest>(),
            Err(FrameError::Malformed { .. })
        ));
    }

    #[test]
    fn unknown_keys_unsupported_versions_and_garbage_are_errors() {
        let mut unknown = frame_of(ApiKey::Metadata, 1, &MetadataRequest::default()).to_vec();
        unknown[0..2].copy_from_slice(&999i16.to_be_bytes());
        assert_eq!(
            parse_request(Bytes::from(unknown)).unwrap_err(),
            FrameError::UnknownApiKey { api_key: 999 }
        );
        let frame = frame_of(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).to_vec();
        let mut future = frame.clone();
        future[2..4].copy_from_slice(&77i16.to_be_bytes());
        assert!(matches!(
            parse_request(Bytes::from(future)),
            Err(FrameError::UnsupportedVersion {
                version: 77,
                correlation_id: 42,
                ..
            })
        ));
        let truncated = Bytes::from(frame[..frame.len() - 3].to_vec());
        let request = parse_request(truncated);
        let malformed = request.map(|request| request.decode_body::<ApiVersionsRequest>());
        assert!(matches!(
            malformed,
            Err(_) | Ok(Err(FrameError::Malformed { .. }))
        ));
    }
}
