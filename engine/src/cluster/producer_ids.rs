//! Producer ids for InitProducerId: handed out from blocks whose end is
//! persisted before any id of the block is, so no id is ever given out twice,
//! across restarts included (SPEC P3).
//!
//! Kafka's controller hands brokers blocks of 1000 ids and records the next
//! free id in the metadata log (`ProducerIdsRecord`). In a cluster Brook's
//! does the same ([`allocate_producer_ids`], KIP-730's AllocateProducerIds);
//! a one-node Brook's controller shard does it with a file. Either way
//! [`ProducerIdBlocks::allocate`] has an id or asks the caller for a new
//! block first (persisting its end, or asking the controller). Ids lost with
//! an unused block at a crash are simply skipped, as in Kafka.

use thiserror::Error;

use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::controller::Refusal;
use crate::cluster::records::MetadataRecord;
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, ProducerId};

/// Ids reserved per persisted block (Kafka's `PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The next step of an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    Ready(ProducerId),
    /// Persist `end` as the first id not yet handed out, call
    /// [`ProducerIdBlocks::reserved`] with it, then allocate again.
    Reserve {
        end: i64,
    },
}

#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum ProducerIdError {
    #[error("producer ids are exhausted")]
    Exhausted,
}

/// The allocator's state: ids below `next` were handed out, ids up to
/// `reserved_end` may be without persisting anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdBlocks {
    next: i64,
    reserved_end: i64,
}

impl ProducerIdBlocks {
    /// Starts after the persisted end (the first id never reserved), or at 0
    /// on a new broker. Nothing is reserved until the first allocation.
    pub fn new(persisted_end: Option<i64>) -> ProducerIdBlocks {
        let next = persisted_end.unwrap_or(0).max(0);
        ProducerIdBlocks {
            next,
            reserved_end: next,
        }
    }

    pub fn allocate(&mut self) -> Result<Allocation, ProducerIdError> {
        if self.next < self.reserved_end {
            let id = ProducerId(self.next);
            self.next += 1;
            return Ok(Allocation::Ready(id));
        }
        let end = self
            .next
            .checked_add(PRODUCER_ID_BLOCK_SIZE)
            .ok_or(ProducerIdError::Exhausted)?;
        Ok(Allocation::Reserve { end })
    }

    /// `end` is durable: ids up to it may be handed out.
    pub fn reserved(&mut self, end: i64) {
        assert!(end > self.next, "a reservation moves forward");
        self.reserved_end = self.reserved_end.max(end);
    }

    /// The controller granted ids `start ..< start + length` to this
    /// broker: they are handed out next (a cluster's blocks only move
    /// forward, so an earlier block's unused ids are never needed again).
    pub fn granted(&mut self, start: i64, length: i64) {
        self.next = start;
        self.reserved_end = start.saturating_add(length.max(0));
    }

    /// The file's contents for a persisted end.
    pub fn encode(end: i64) -> String {
        format!("next_producer_id={end}\n")
    }

    /// Reads what [`ProducerIdBlocks::encode`] wrote.
    pub fn decode(text: &str) -> Option<i64> {
        let value = text.trim().strip_prefix("next_producer_id=")?;
        value.parse::<i64>().ok().filter(|end| *end >= 0)
    }
}

/// AllocateProducerIds from `broker` at `broker_epoch`, on the active
/// controller's view: the next block of [`PRODUCER_ID_BLOCK_SIZE`] ids and
/// the record that takes it (Kafka's `ProducerIdControlManager`). A broker
/// that is not registered at that epoch is refused, as is a request once
/// ids run out.
pub fn allocate_producer_ids(
    image: &ClusterImage,
    broker: BrokerId,
    broker_epoch: i64,
) -> Result<(i64, Vec<MetadataRecord>), Refusal> {
    let Some(known) = image.brokers.get(&broker) else {
        return Err(Refusal::new(
            ErrorCode::BROKER_ID_NOT_REGISTERED,
            format!("broker {broker} is not registered"),
        ));
    };
    if known.epoch != broker_epoch {
        return Err(Refusal::new(
            ErrorCode::STALE_BROKER_EPOCH,
            format!(
                "broker {broker} is registered at epoch {}, not {broker_epoch}",
                known.epoch
            ),
        ));
    }
    let start = image.next_producer_id.max(0);
    let end = start.checked_add(PRODUCER_ID_BLOCK_SIZE).ok_or_else(|| {
        Refusal::new(
            ErrorCode::UNKNOWN_SERVER_ERROR,
            "producer ids are exhausted",
        )
    })?;
    Ok((
        start,
        vec![MetadataRecord::ProducerIds {
            broker,
            next_producer_id: end,
        }],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::controller::tests::three_brokers;

    #[test]
    fn the_controller_hands_out_consecutive_blocks_to_registered_brokers() {
        let mut image = three_brokers();
        let mut offset = image.offset;
        let mut blocks = Vec::new();
        for broker in [1, 2, 1] {
            let epoch = image.brokers[&BrokerId(broker)].epoch;
            let (start, records) = allocate_producer_ids(&image, BrokerId(broker), epoch).unwrap();
            offset += 1;
            image.apply(offset, &records).unwrap();
            blocks.push(start);
        }
        assert_eq!(blocks, vec![0, 1000, 2000]);
        // The image (and so a snapshot) remembers where the next block starts.
        let restored = ClusterImage::from_snapshot(image.offset, &image.to_records()).unwrap();
        assert_eq!(
            allocate_producer_ids(&restored, BrokerId(3), 3).unwrap().0,
            3000
        );
        assert_eq!(
            allocate_producer_ids(&image, BrokerId(2), 99)
                .unwrap_err()
                .error,
            ErrorCode::STALE_BROKER_EPOCH
        );
        assert_eq!(
            allocate_producer_ids(&image, BrokerId(9), 1)
                .unwrap_err()
                .error,
            ErrorCode::BROKER_ID_NOT_REGISTERED
        );
    }

    #[test]
    fn a_granted_block_is_handed_out_then_another_is_asked_for() {
        let mut blocks = ProducerIdBlocks::new(None);
        assert_eq!(blocks.allocate(), Ok(Allocation::Reserve { end: 1000 }));
        blocks.granted(4000, 2);
        assert_eq!(blocks.allocate(), Ok(Allocation::Ready(ProducerId(4000))));
        assert_eq!(blocks.allocate(), Ok(Allocation::Ready(ProducerId(4001))));
        assert!(matches!(blocks.allocate(), Ok(Allocation::Reserve { .. })));
    }

    fn take(blocks: &mut ProducerIdBlocks, persisted: &mut Option<i64>) -> ProducerId {
        loop {
            match blocks.allocate().unwrap() {
                Allocation::Ready(id) => return id,
                Allocation::Reserve { end } => {
                    *persisted = Some(end);
                    blocks.reserved(end);
                }
            }
        }
    }

    #[test]
    fn ids_are_never_reused_across_restarts() {
        let mut persisted = None;
        let mut blocks = ProducerIdBlocks::new(persisted);
        let first: Vec<i64> = (0..1500)
            .map(|_| take(&mut blocks, &mut persisted).0)
            .collect();
        assert_eq!(first, (0..1500).collect::<Vec<_>>());
        assert_eq!(persisted, Some(2000));
        // A crash here loses ids 1500..2000, never reuses them.
        let mut restarted = ProducerIdBlocks::new(persisted);
        assert_eq!(take(&mut restarted, &mut persisted).0, 2000);
        assert_eq!(persisted, Some(3000));
    }

    #[test]
    fn a_reservation_is_asked_for_before_the_first_id() {
        let mut blocks = ProducerIdBlocks::new(Some(7));
        assert_eq!(blocks.allocate(), Ok(Allocation::Reserve { end: 1007 }));
        blocks.reserved(1007);
        assert_eq!(blocks.allocate(), Ok(Allocation::Ready(ProducerId(7))));
    }

    #[test]
    fn exhaustion_is_an_error_not_an_overflow() {
        let mut blocks = ProducerIdBlocks::new(Some(i64::MAX - 10));
        assert_eq!(blocks.allocate(), Err(ProducerIdError::Exhausted));
    }

    #[test]
    fn the_file_format_round_trips_and_rejects_garbage() {
        assert_eq!(
            ProducerIdBlocks::decode(&ProducerIdBlocks::encode(42)),
            Some(42)
        );
        for bad in [
            "",
            "next_producer_id=",
            "next_producer_id=-3",
            "x=1",
            "next_producer_id=1a",
        ] {
            assert_eq!(ProducerIdBlocks::decode(bad), None, "{bad:?}");
        }
    }
}
