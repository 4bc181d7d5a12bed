//! Producer ids for InitProducerId: handed out from blocks whose end is
//! persisted before any id of the block is, so no id is ever given out twice,
//! across restarts included (SPEC P3).
//!
//! Kafka's controller hands brokers blocks of 1000 ids and records the next
//! free id in the metadata log (`ProducerIdsRecord`). Brook's controller shard
//! does the same with a file: [`ProducerIdBlocks::allocate`] either has an
//! id or asks the caller to persist a new block end first. Ids lost with an
//! unused block at a crash are simply skipped, as in Kafka.

use thiserror::Error;

use crate::types::ProducerId;

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

#[cfg(test)]
mod tests {
    use super::*;

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
