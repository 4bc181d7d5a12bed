//! Tasks waiting for an offset to become written or durable.

use std::collections::BTreeMap;

use brook_engine::types::Offset;
use futures::channel::oneshot;

use crate::storage::error::StorageError;

pub(crate) type Waiter = oneshot::Sender<Result<(), StorageError>>;

/// Waiters keyed by the offset they wait for: every offset below it.
/// Additions between two sweeps for abandoned waiters.
const PRUNE_EVERY: u64 = 64;

#[derive(Debug, Default)]
pub(crate) struct Waiters {
    by_offset: BTreeMap<Offset, Vec<Waiter>>,
    added: u64,
}

impl Waiters {
    pub fn add(&mut self, offset: Offset) -> oneshot::Receiver<Result<(), StorageError>> {
        let (sender, receiver) = oneshot::channel();
        self.by_offset.entry(offset).or_default().push(sender);
        self.added += 1;
        if self.added % PRUNE_EVERY == 0 {
            self.prune();
        }
        receiver
    }

    /// Forgets waiters nobody waits on any more (a fetch that timed out
    /// before its partition got data), so an idle partition's list stays short.
    fn prune(&mut self) {
        self.by_offset.retain(|_, waiters| {
            waiters.retain(|waiter| !waiter.is_canceled());
            !waiters.is_empty()
        });
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_offset.values().map(Vec::len).sum()
    }

    /// Releases everyone waiting for an offset ≤ `reached`.
    pub fn release(&mut self, reached: Offset) {
        while let Some(entry) = self.by_offset.first_entry() {
            if *entry.key() > reached {
                break;
            }
            for waiter in entry.remove() {
                let _ = waiter.send(Ok(()));
            }
        }
    }

    pub fn fail_all(&mut self, error: &StorageError) {
        for waiter in std::mem::take(&mut self.by_offset).into_values().flatten() {
            let _ = waiter.send(Err(error.clone()));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abandoned_waiters_are_swept() {
        let mut waiters = Waiters::default();
        for _ in 0..10 * PRUNE_EVERY {
            drop(waiters.add(Offset(5)));
        }
        assert!(
            waiters.len() < PRUNE_EVERY as usize,
            "{} waiters kept",
            waiters.len()
        );
        let kept = waiters.add(Offset(5));
        waiters.release(Offset(5));
        assert!(futures::executor::block_on(kept).unwrap().is_ok());
    }
}
