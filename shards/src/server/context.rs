//! What every shard of one broker shares: its settings, identity and the
//! shard mesh's senders. Immutable after start-up (`Send + Sync`).

use std::net::SocketAddr;
use std::path::PathBuf;

use brook_engine::cluster::broker_config::BrokerConfig;
use brook_engine::cluster::image::ShardId;

use crate::server::mesh::MeshSender;

#[derive(Debug)]
pub struct ServerContext {
    pub broker_id: i32,
    pub cluster_id: String,
    /// The address listeners bind (every shard, SO_REUSEPORT).
    pub listen: SocketAddr,
    /// What Metadata tells clients to connect to.
    pub advertised_host: String,
    pub advertised_port: u16,
    pub data_dir: PathBuf,
    pub config: BrokerConfig,
    pub shards: u16,
    pub mesh: Vec<MeshSender>,
    /// The Prometheus metric families every shard counts into.
    pub metrics: std::sync::Arc<crate::server::metrics::BrokerMetrics>,
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
