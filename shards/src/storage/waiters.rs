//! Tasks waiting for an offset to become written or durable.

use std::collections::BTreeMap;

use brook_engine::types::Offset;
use futures::channel::oneshot;

use crate::storage::error::StorageError;

pub(crate) type Waiter = oneshot::Sender<Result<(), StorageError>>;

/// Waiters keyed by the offset they wait for: every offset below it.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    by_offset: BTreeMap<Offset, Vec<Waiter>>,
}

impl Waiters {
    pub fn add(&mut self, offset: Offset) -> oneshot::Receiver<Result<(), StorageError>> {
        let (sender, receiver) = oneshot::channel();
        self.by_offset.entry(offset).or_default().push(sender);
        receiver
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
