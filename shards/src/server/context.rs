//! What every shard of one broker shares: its settings, identity and the
//! shard mesh's senders. Immutable after start-up (`Send + Sync`).

use std::net::SocketAddr;
use std::path::PathBuf;

use brook_engine::cluster::broker_config::BrokerConfig;
use brook_engine::cluster::image::ShardId;
use brook_engine::cluster::node_config::ClusterSettings;

use crate::server::mesh::MeshSender;

/// A client listener: where it binds (every shard, SO_REUSEPORT) and what
/// Metadata names for this broker on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientEndpoint {
    pub name: String,
    pub listen: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
}

#[derive(Debug)]
pub struct ServerContext {
    pub broker_id: i32,
    pub cluster_id: String,
    /// The inter-broker client listener's address (`listeners[0]`).
    pub listen: SocketAddr,
    /// What Metadata tells clients of the inter-broker listener to
    /// connect to (`listeners[0]`).
    pub advertised_host: String,
    pub advertised_port: u16,
    /// Every client listener, the inter-broker one first; a request
    /// answers with the endpoints of the listener it came in on.
    pub listeners: Vec<ClientEndpoint>,
    /// Where the broker's metadata lives: the first log directory.
    pub data_dir: PathBuf,
    /// Every log directory, with where each partition is and which failed.
    pub log_dirs: std::sync::Arc<crate::storage::LogDirs>,
    pub config: BrokerConfig,
    /// The quorum this node belongs to: the configured one, or, without
    /// one, its own ([`ClusterSettings::alone`]).
    pub cluster: ClusterSettings,
    pub shards: u16,
    pub mesh: Vec<MeshSender>,
    /// The Prometheus metric families every shard counts into.
    pub metrics: std::sync::Arc<crate::server::metrics::BrokerMetrics>,
    /// Told (once or more) when the cluster image first shows this broker
    /// registered and unfenced.
    pub unfenced: flume::Sender<()>,
    /// Set once the cluster image has shown this incarnation registered and
    /// unfenced (it stays set if the broker is fenced later).
    pub was_unfenced: std::sync::atomic::AtomicBool,
}

impl ServerContext {
    pub fn shard_ids(&self) -> impl Iterator<Item = ShardId> {
        (0..self.shards).map(ShardId)
    }

    /// The controller (metadata changes) lives on shard 0.
    pub fn controller_shard(&self) -> ShardId {
        ShardId(0)
    }
}
