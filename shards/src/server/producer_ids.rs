//! The broker's producer-id allocator. Lives on the controller shard, the one
//! shard that hands out ids (others ask it over the mesh). It asks the
//! active controller for each block, which the metadata log records (see
//! [`brook_engine::cluster::producer_ids`]), so no two brokers, and no two
//! runs of one, ever hand out one id.

use std::cell::RefCell;

use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::cluster::producer_ids::{Allocation, ProducerIdBlocks};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::{BrokerId, ProducerId};
use glommio::sync::Semaphore;

use crate::server::shard::Shard;

/// Allocation state, loaded on first use. Lives on the controller shard.
pub struct ProducerIds {
    blocks: RefCell<Option<ProducerIdBlocks>>,
    /// One allocation at a time: a block awaits the controller's grant.
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
    /// run of it or another broker. Call on the controller shard. Fails
    /// with COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka answers)
    /// while the controller grants no block.
    pub async fn allocate(&self, shard: &Shard) -> Result<ProducerId, ErrorCode> {
        let _permit = self
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
        let node = shard.context.cluster.node;
        let mut blocks = self
            .blocks
            .borrow()
            .unwrap_or_else(|| ProducerIdBlocks::new(None));
        // At most one grant per allocation: after it, an id is ready.
        for _ in 0..2 {
            match blocks.allocate() {
                Ok(Allocation::Ready(id)) => {
                    *self.blocks.borrow_mut() = Some(blocks);
                    return Ok(id);
                }
                Ok(Allocation::Reserve { .. }) => {
                    let (start, length) = granted_block(shard, node).await?;
                    blocks.granted(start, length);
                }
                Err(error) => {
                    tracing::error!(%error, "no producer id left");
                    return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
                }
            }
        }
        unreachable!("a granted block always has an id")
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
