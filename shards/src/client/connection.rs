//! One Kafka connection on a glommio executor, pipelined: requests go out in
//! the order they are sent and their responses come back in that order
//! (Kafka answers a connection's requests in order), so a reader task pairs
//! each response frame with the oldest request still waiting.
//!
//! [`Connection::negotiate`] asks the broker's ApiVersions (KIP-35/KIP-511);
//! from then on a request is sent at the highest version both sides serve,
//! up to the one the caller asked for, and one the broker does not serve
//! at all fails before it is sent.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

use crate::net::receive_exact;
use bytes::{BufMut, Bytes, BytesMut};
use futures::channel::oneshot;
use futures::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::client::ClientError;

/// The largest response frame accepted (a fetch of many partitions).
const RESPONSE_BYTES_MAX: usize = 256 << 20;

type Waiter = oneshot::Sender<Result<Bytes, ClientError>>;

/// Requests sent and not yet answered, oldest first; once the connection
/// failed, why (later sends fail at once).
#[derive(Default)]
struct Waiting {
    requests: VecDeque<(i32, ApiKey, i16, Waiter)>,
    failed: Option<ClientError>,
}

/// The versions a broker serves, by API key (its ApiVersions answer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerVersions(BTreeMap<i16, (i16, i16)>);

impl BrokerVersions {
    pub fn from_response(response: &ApiVersionsResponse) -> BrokerVersions {
        BrokerVersions(
            response
                .api_keys
                .iter()
                .map(|key| (key.api_key, (key.min_version, key.max_version)))
                .collect(),
        )
    }

    /// The version to send `api_key` at when the caller speaks up to
    /// `wanted`: the highest the broker serves, at most `wanted`.
    pub fn choose(&self, api_key: ApiKey, wanted: i16) -> Result<i16, ClientError> {
        match self.0.get(&(api_key as i16)) {
            Some(&(min, max)) if min <= wanted => Ok(wanted.min(max)),
            Some(&(min, _)) => Err(ClientError::Protocol(format!(
                "the broker serves {api_key:?} from v{min}, this client up to v{wanted}"
            ))),
            None => Err(ClientError::Protocol(format!(
                "the broker does not serve {api_key:?}"
            ))),
        }
    }
}

/// ApiVersions as this client asks it (v3, KIP-511's client name and
/// version); a broker that does not know v3 answers in v0 with its list.
const API_VERSIONS_VERSION: i16 = 3;

/// A connection to one broker. Cheap to share (`Rc`) between the tasks of
/// one executor.
pub struct Connection {
    address: SocketAddr,
    /// The socket's descriptor (read by the reader task, written by the
    /// writer half), for socket options.
    socket: RawFd,
    client_id: StrBytes,
    writer: RefCell<Option<WriteHalf<TcpStream>>>,
    /// Writes one frame at a time, so frames never interleave.
    writing: Semaphore,
    waiting: Rc<RefCell<Waiting>>,
    next_correlation_id: Cell<i32>,
    reader: RefCell<Option<glommio::Task<()>>>,
    /// Set by [`Connection::negotiate`].
    versions: RefCell<Option<BrokerVersions>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("address", &self.address)
            .field("waiting", &self.waiting.borrow().requests.len())
            .finish()
    }
}

impl Connection {
    pub async fn connect(
        address: SocketAddr,
        client_id: &str,
    ) -> Result<Rc<Connection>, ClientError> {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|error| ClientError::Connect {
                address,
                reason: error.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        let socket = stream.as_raw_fd();
        let (reader, writer) = stream.split();
        let waiting = Rc::new(RefCell::new(Waiting::default()));
        let connection = Rc::new(Connection {
            address,
            socket,
            client_id: StrBytes::from_string(client_id.to_owned()),
            writer: RefCell::new(Some(writer)),
            writing: Semaphore::new(1),
            waiting: waiting.clone(),
            next_correlation_id: Cell::new(1),
            reader: RefCell::new(None),
            versions: RefCell::new(None),
        });
        let task = glommio::spawn_local(read_responses(address, socket, reader, waiting));
        *connection.reader.borrow_mut() = Some(task);
        Ok(connection)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Gives the connection up once its peer acknowledges nothing for
    /// `limit` ([`crate::net::bound_liveness`]): for connections between
    /// brokers.
    pub fn bound_liveness(&self, limit: std::time::Duration) -> Result<(), ClientError> {
        crate::net::bound_liveness(self.socket, limit).map_err(|error| ClientError::Io {
            address: self.address,
            reason: error.to_string(),
        })
    }

    /// Whether the connection has failed (a later request fails at once).
    pub fn is_failed(&self) -> bool {
        self.waiting.borrow().failed.is_some()
    }

    /// Asks the broker which versions it serves; requests are sent at a
    /// version it serves from then on.
    pub async fn negotiate(&self) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("brook"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let receiver = self
            .send(ApiKey::ApiVersions, API_VERSIONS_VERSION, &request, true)
            .await?;
        let mut body = receiver
            .await
            .map_err(|_| ClientError::Closed(self.address))??;
        // UNSUPPORTED_VERSION comes in v0 (KIP-511), whose list is the same.
        let response: ApiVersionsResponse =
            match decode(&mut body.clone(), ApiKey::ApiVersions, API_VERSIONS_VERSION) {
                Ok(response) => response,
                Err(_) => decode(&mut body, ApiKey::ApiVersions, 0)?,
            };
        if response.api_keys.is_empty() {
            return Err(ClientError::Kafka {
                what: "ApiVersions".into(),
                code: response.error_code,
            });
        }
        *self.versions.borrow_mut() = Some(BrokerVersions::from_response(&response));
        Ok(())
    }

    /// The version `api_key` goes out at when the caller asks for `wanted`.
    pub fn version(&self, api_key: ApiKey, wanted: i16) -> Result<i16, ClientError> {
        match &*self.versions.borrow() {
            Some(versions) => versions.choose(api_key, wanted),
            None => Ok(wanted),
        }
    }

    /// Sends a request and returns the future of its response body (after
    /// the response header). Requests sent one after another are answered
    /// in that order; `expect_response` false is for Produce with acks=0.
    pub async fn send<Q: Encodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        body: &Q,
        expect_response: bool,
    ) -> Result<oneshot::Receiver<Result<Bytes, ClientError>>, ClientError> {
        self.send_frame(api_key, version, expect_response, |header| {
            let mut frame = BytesMut::with_capacity(64);
            frame.put_i32(0);
            frame.put_slice(header);
            body.encode(&mut frame, version)
                .map_err(|error| ClientError::Encode(error.to_string()))?;
            let size = (frame.len() - 4) as i32;
            frame[..4].copy_from_slice(&size.to_be_bytes());
            Ok(frame.freeze())
        })
        .await
    }

    /// As [`send`](Self::send), for a caller that writes the frame itself
    /// (a Produce request written around its batch, so the batch is not
    /// copied): `frame` gets this request's header (with its correlation
    /// id) and returns the whole frame: size, that header, the body.
    pub async fn send_frame(
        &self,
        api_key: ApiKey,
        version: i16,
        expect_response: bool,
        frame: impl FnOnce(&[u8]) -> Result<Bytes, ClientError>,
    ) -> Result<oneshot::Receiver<Result<Bytes, ClientError>>, ClientError> {
        let correlation_id = self.next_correlation_id.get();
        self.next_correlation_id.set(correlation_id.wrapping_add(1));
        let mut header = BytesMut::with_capacity(64);
        RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()))
            .encode(&mut header, api_key.request_header_version(version))
            .map_err(|error| ClientError::Encode(error.to_string()))?;
        let frame = frame(&header)?;
        // A frame whose size field is off would desynchronise the stream.
        let well_formed = frame.len() >= 4 + header.len()
            && frame[..4] == ((frame.len() - 4) as i32).to_be_bytes()
            && frame[4..].starts_with(&header);
        if !well_formed {
            return Err(ClientError::Encode(format!(
                "a {api_key:?} frame of {} bytes without its size and header",
                frame.len()
            )));
        }
        let (sender, receiver) = oneshot::channel();
        let _turn = self
            .writing
            .acquire_permit(1)
            .await
            .map_err(|_| ClientError::Closed(self.address))?;
        {
            let mut waiting = self.waiting.borrow_mut();
            if let Some(failure) = &waiting.failed {
                return Err(failure.clone());
            }
            if expect_response {
                waiting
                    .requests
                    .push_back((correlation_id, api_key, version, sender));
            }
        }
        let mut writer = self
            .writer
            .borrow_mut()
            .take()
            .ok_or(ClientError::Closed(self.address))?;
        let written = writer.write_all(&frame).await;
        *self.writer.borrow_mut() = Some(writer);
        written.map_err(|error| ClientError::Io {
            address: self.address,
            reason: error.to_string(),
        })?;
        Ok(receiver)
    }

    /// Sends a request and decodes its response, at `version` or (after
    /// [`Connection::negotiate`]) the highest below it the broker serves.
    pub async fn request<Q: Encodable, R: Decodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        body: &Q,
    ) -> Result<R, ClientError> {
        let version = self.version(api_key, version)?;
        let receiver = self.send(api_key, version, body, true).await?;
        let mut response = receiver
            .await
            .map_err(|_| ClientError::Closed(self.address))??;
        decode(&mut response, api_key, version)
    }

    /// Closes the connection; requests still waiting fail.
    pub async fn close(&self) {
        let writer = self.writer.borrow_mut().take();
        if let Some(mut writer) = writer {
            let _ = writer.close().await;
        }
        let reader = self.reader.borrow_mut().take();
        if let Some(reader) = reader {
            let _ = reader.cancel().await;
        }
        let mut waiting = self.waiting.borrow_mut();
        waiting.failed = Some(ClientError::Closed(self.address));
        waiting.requests.clear();
    }
}

/// Decodes a response body of `api_key` at `version`.
pub fn decode<R: Decodable>(
    body: &mut Bytes,
    api_key: ApiKey,
    version: i16,
) -> Result<R, ClientError> {
    R::decode(body, version).map_err(|error| ClientError::Decode {
        api_key,
        version,
        reason: error.to_string(),
    })
}

async fn read_responses(
    address: SocketAddr,
    socket: RawFd,
    mut reader: ReadHalf<TcpStream>,
    waiting: Rc<RefCell<Waiting>>,
) {
    let failure = loop {
        let mut prefix = [0u8; 4];
        if let Err(error) = reader.read_exact(&mut prefix).await {
            break ClientError::Io {
                address,
                reason: error.to_string(),
            };
        }
        let size = i32::from_be_bytes(prefix);
        let Some(size) = usize::try_from(size)
            .ok()
            .filter(|size| *size <= RESPONSE_BYTES_MAX)
        else {
            break ClientError::Protocol(format!("response frame of {size} bytes"));
        };
        let frame = match receive_exact(&mut reader, socket, size).await {
            Ok(frame) => frame,
            Err(error) => break ClientError::Protocol(format!("truncated response: {error}")),
        };
        let next = waiting.borrow_mut().requests.pop_front();
        let Some((correlation_id, api_key, version, waiter)) = next else {
            break ClientError::Protocol("a response nobody asked for".into());
        };
        let mut body = frame;
        let header = ResponseHeader::decode(&mut body, api_key.response_header_version(version));
        match header {
            Ok(header) if header.correlation_id == correlation_id => {
                let _ = waiter.send(Ok(body));
            }
            Ok(header) => {
                break ClientError::Protocol(format!(
                    "{api_key:?} answered with correlation id {}, expected {correlation_id}",
                    header.correlation_id
                ));
            }
            Err(error) => break ClientError::Protocol(error.to_string()),
        }
    };
    let mut waiting = waiting.borrow_mut();
    for (_, _, _, waiter) in waiting.requests.drain(..) {
        let _ = waiter.send(Err(failure.clone()));
    }
    waiting.failed = Some(failure);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    fn broker(ranges: &[(ApiKey, i16, i16)]) -> BrokerVersions {
        BrokerVersions::from_response(
            &ApiVersionsResponse::default().with_api_keys(
                ranges
                    .iter()
                    .map(|(key, min, max)| {
                        ApiVersion::default()
                            .with_api_key(*key as i16)
                            .with_min_version(*min)
                            .with_max_version(*max)
                    })
                    .collect(),
            ),
        )
    }

    #[test]
    fn the_highest_version_both_serve_is_chosen() {
        let versions = broker(&[(ApiKey::Metadata, 0, 9), (ApiKey::Fetch, 4, 18)]);
        assert_eq!(versions.choose(ApiKey::Metadata, 12), Ok(9));
        assert_eq!(versions.choose(ApiKey::Fetch, 12), Ok(12));
        assert!(
            versions.choose(ApiKey::Fetch, 3).is_err(),
            "below the broker's range"
        );
        assert!(versions.choose(ApiKey::Produce, 9).is_err(), "not served");
    }
}
