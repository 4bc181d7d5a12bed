//! The broker's producer-id allocator. Lives on the controller shard, the one
//! shard that hands out ids (others ask it over the mesh). A one-node broker
//! persists its block end in `brook-producer-ids` in the data directory
//! before any id of the block is given out; a broker of a cluster asks the
//! active controller for each block, which the metadata log records (see
//! [`brook_engine::cluster::producer_ids`]), so no two brokers ever hand out
//! one id.

use std::cell::RefCell;
use std::path::Path;

use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::cluster::producer_ids::{Allocation, ProducerIdBlocks};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::{BrokerId, ProducerId};
use glommio::sync::Semaphore;

use crate::server::shard::Shard;
use crate::storage::write_file_atomically;

/// The allocator's file in the data directory.
pub const PRODUCER_IDS_FILE: &str = "brook-producer-ids";

/// Allocation state, loaded on first use. Lives on the controller shard.
pub struct ProducerIds {
    blocks: RefCell<Option<ProducerIdBlocks>>,
    /// One allocation at a time: a reservation awaits its write.
    lock: Semaphore,
}

impl std::fmt::Debug for ProducerIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerIds")
            .field("blocks", &self.blocks.borrow())
            .finish()
    }
}

impl Default for ProducerIds {
    fn default() -> ProducerIds {
        ProducerIds {
            blocks: RefCell::new(None),
            lock: Semaphore::new(1),
        }
    }
}

impl ProducerIds {
    /// A producer id never handed out before, by this broker, an earlier
    /// run of it or (in a cluster) another broker. Call on the controller
    /// shard. Fails with a Kafka error code (and a log line) when the file
    /// cannot be read or written, since handing out an id without it could
    /// reuse one; in a cluster, COORDINATOR_LOAD_IN_PROGRESS (retriable, as
    /// Kafka answers) while the controller grants no block.
    pub async fn allocate(&self, shard: &Shard) -> Result<ProducerId, ErrorCode> {
        let _permit = self
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
        let data_dir = &shard.context.data_dir;
        let cluster = shard
            .context
            .config
            .cluster
            .as_ref()
            .map(|settings| settings.node);
        if self.blocks.borrow().is_none() {
            let loaded = match cluster {
                Some(_) => None,
                None => load(data_dir)?,
            };
            *self.blocks.borrow_mut() = Some(ProducerIdBlocks::new(loaded));
        }
        // At most one reservation per allocation: after it, an id is ready.
        for _ in 0..2 {
            let step = self
                .blocks
                .borrow_mut()
                .as_mut()
                .expect("loaded above")
                .allocate();
            match step {
                Ok(Allocation::Ready(id)) => return Ok(id),
                Ok(Allocation::Reserve { .. }) if let Some(node) = cluster => {
                    let (start, length) = granted_block(shard, node).await?;
                    self.blocks
                        .borrow_mut()
                        .as_mut()
                        .expect("loaded above")
                        .granted(start, length);
                }
                Ok(Allocation::Reserve { end }) => {
                    let path = data_dir.join(PRODUCER_IDS_FILE);
                    let contents = ProducerIdBlocks::encode(end);
                    if let Err(error) = write_file_atomically(&path, contents.as_bytes()).await {
                        tracing::error!(%error, "persisting a producer id block failed");
                        return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
                    }
                    self.blocks
                        .borrow_mut()
                        .as_mut()
                        .expect("loaded above")
                        .reserved(end);
                }
                Err(error) => {
                    tracing::error!(%error, "no producer id left");
                    return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
                }
            }
        }
        unreachable!("a reserved block always has an id")
    }
}

/// How long a block is asked for while no controller answers; the client
/// meanwhile waits, then hears COORDINATOR_LOAD_IN_PROGRESS and retries.
const GRANT_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A block from the active controller, asked for at this broker's epoch
/// as the metadata log registers it.
async fn granted_block(shard: &Shard, node: BrokerId) -> Result<(i64, i64), ErrorCode> {
    let not_yet = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
    let broker_epoch = shard
        .cluster_view()
        .and_then(|view| view.image.brokers.get(&node).map(|broker| broker.epoch))
        .ok_or(not_yet)?;
    let request = PeerRequest::AllocateProducerIds {
        broker: node,
        broker_epoch,
    };
    match crate::server::quorum::ask_controller(shard, request, GRANT_WAIT_MAX).await {
        Some(PeerResponse::ProducerIds {
            error,
            start,
            length,
        }) if error == ErrorCode::NONE && start >= 0 && length > 0 => Ok((start, length)),
        Some(PeerResponse::ProducerIds { error, .. }) => {
            tracing::warn!(code = error.0, "the controller granted no producer ids");
            Err(not_yet)
        }
        _ => Err(not_yet),
    }
}

fn load(data_dir: &Path) -> Result<Option<i64>, ErrorCode> {
    let path = data_dir.join(PRODUCER_IDS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match ProducerIdBlocks::decode(&text) {
            Some(end) => Ok(Some(end)),
            None => {
                tracing::error!(path = %path.display(), "unreadable producer id file; refusing to hand out ids that could repeat");
                Err(ErrorCode::UNKNOWN_SERVER_ERROR)
            }
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "reading the producer id file failed");
            Err(ErrorCode::UNKNOWN_SERVER_ERROR)
        }
    }
}
