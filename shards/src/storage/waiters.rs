//! Tasks waiting for an offset to become written or durable, and for any
//! partition of a shard to show new records.

use std::cell::RefCell;
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

/// Wakes everyone waiting for new records on any partition of one shard: a
/// fetch of thousands of partitions waits here once instead of once per
/// partition (which cost a waiter and a future per partition per wait).
/// Lives on its shard, shared by the shard's logs.
#[derive(Debug, Default)]
pub struct ShardNews {
    waiting: RefCell<Vec<oneshot::Sender<()>>>,
    subscribed: std::cell::Cell<u64>,
    /// Rings so far: a fetch notes it before reading, and waits only if it
    /// has not moved since.
    generation: std::cell::Cell<u64>,
}

impl ShardNews {
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Resolves at the next [`ShardNews::ring`], or at once if there was one
    /// since `generation`.
    pub fn after(&self, generation: u64) -> oneshot::Receiver<()> {
        if self.generation.get() == generation {
            return self.subscribe();
        }
        // Already moved: only this waiter is told (ringing would wake every
        // other waiter of the shard for nothing).
        let (sender, receiver) = oneshot::channel();
        let _ = sender.send(());
        receiver
    }

    /// Resolves at the next [`ShardNews::ring`].
    pub fn subscribe(&self) -> oneshot::Receiver<()> {
        let (sender, receiver) = oneshot::channel();
        let mut waiting = self.waiting.borrow_mut();
        waiting.push(sender);
        self.subscribed.set(self.subscribed.get() + 1);
        if self.subscribed.get() % PRUNE_EVERY == 0 {
            // Fetches that timed out on an idle shard.
            waiting.retain(|waiter| !waiter.is_canceled());
        }
        receiver
    }

    /// Some partition's high watermark or written offset moved.
    pub fn ring(&self) {
        self.generation.set(self.generation.get() + 1);
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        for waiter in waiting {
            let _ = waiter.send(());
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.borrow().len()
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

    #[test]
    fn shard_news_wakes_every_subscriber_once_and_sweeps_abandoned_ones() {
        let news = ShardNews::default();
        for _ in 0..10 * PRUNE_EVERY {
            drop(news.subscribe());
        }
        assert!(news.len() < PRUNE_EVERY as usize, "{} kept", news.len());
        let (first, second) = (news.subscribe(), news.subscribe());
        let seen = news.generation();
        news.ring();
        assert_eq!(news.len(), 0);
        assert!(futures::executor::block_on(first).is_ok());
        assert!(futures::executor::block_on(second).is_ok());
        // A wait that starts after a ring it did not see ends at once,
        // without waking anyone else.
        let other = news.subscribe();
        assert!(futures::executor::block_on(news.after(seen)).is_ok());
        assert_eq!(news.len(), 1, "the other waiter still waits");
        drop(other);
        let mut current = news.after(news.generation());
        assert_eq!(current.try_recv(), Ok(None), "nothing new yet");
    }
}
