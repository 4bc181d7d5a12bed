//! Brook's own Kafka client, for the load generator, the `brook` tools and
//! (next) the broker's replica fetchers: metadata, topic creation, produce,
//! fetch, list offsets, on the executor that drives it, with no threads or
//! locks of its own. Requests
//! and responses are `kafka-protocol`'s; record batches are written and
//! walked here ([`records`]) because that is the hot path.

pub mod cluster;
pub mod connection;
pub mod fetch_session;
pub mod produce;
pub mod records;

use std::net::SocketAddr;

use kafka_protocol::messages::ApiKey;
use thiserror::Error;

pub use cluster::{Cluster, PartitionLeader};
pub use connection::{BrokerVersions, Connection};

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClientError {
    #[error("connecting to {address}: {reason}")]
    Connect { address: SocketAddr, reason: String },
    #[error("connection to {address}: {reason}")]
    Io { address: SocketAddr, reason: String },
    #[error("connection to {0} is closed")]
    Closed(SocketAddr),
    #[error("encoding a request: {0}")]
    Encode(String),
    #[error("decoding a {api_key:?} v{version} response: {reason}")]
    Decode {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("{what}: Kafka error {code}")]
    Kafka { what: String, code: i16 },
    #[error("resolving {0}: no address")]
    Resolve(String),
    #[error("{what}: no answer within {after:?}")]
    TimedOut {
        what: String,
        after: std::time::Duration,
    },
}
