//! Hosting coordinators on the shards that own their internal topic's
//! partitions, whatever the coordinator: the group coordinators of
//! `__consumer_offsets` ([`crate::server::groups`]) and the transaction
//! coordinators of `__transaction_state` ([`crate::server::transactions`])
//! are hosted the same way, and this module is that way, written once so
//! the two hosts cannot drift apart.
//!
//! A partition's coordinator is built the first time something needs it (a
//! request, or the timer task at start-up) by replaying the partition's log
//! from its start; whoever comes meanwhile waits, up to [`LOAD_WAIT_MAX`].
//! Requests that wait for a coordinator's decision register under a token
//! ([`Waiters`]). A host's timer task sleeps until the earliest deadline of
//! its coordinators, or until an action rings the bell because a deadline
//! may have moved earlier. What differs between coordinators (how one is
//! built from its log, when its timers are due) is the [`Coordinator`]
//! trait. Lives on its shard, like the hosts built on it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::cluster::image::ShardId;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::TopicPartition;
use bytes::{Bytes, BytesMut};
use glommio::sync::Semaphore;
use kafka_protocol::records::{RecordBatchDecoder, RecordSet};

use crate::server::controller::{self, Change, NewTopic};
use crate::server::shard::{Shard, now_ms};
use crate::storage::{LogData, PartitionLog, ReadOptions};

/// How long a request waits for its partition to finish loading before it
/// is told COORDINATOR_LOAD_IN_PROGRESS (the client retries).
const LOAD_WAIT_MAX: Duration = Duration::from_secs(5);

/// Pause between looks at a partition another task is loading.
const LOAD_POLL_INTERVAL: Duration = Duration::from_millis(2);

/// Bytes read at a time while loading a partition.
const LOAD_READ_BYTES: usize = 1 << 20;

/// The timer task sleeps at most this long between rounds.
const TIMER_SLEEP_MAX: Duration = Duration::from_secs(1);

/// What differs between the coordinators a [`CoordinatorHost`] hosts.
pub trait Coordinator: Sized {
    /// The internal topic whose partitions the coordinators serve.
    const TOPIC: &'static str;
    /// What a partition's log holds, for log lines ("consumer groups").
    const STATE: &'static str;
    /// What loading found besides the coordinator, for its host to act on
    /// before any request reaches the coordinator.
    type Found;

    /// Builds the coordinator of `partition` by replaying `log` (the
    /// partition's), or says why it could not.
    async fn load(
        shard: &Shard,
        partition: i32,
        log: &PartitionLog,
    ) -> Result<(Self, Self::Found), String>;

    /// When the coordinator's earliest timer is due, if it has one.
    fn next_deadline_ms(&self) -> Option<i64>;
}

enum Hosted<C> {
    Loading,
    Loaded(C),
}

/// The coordinators of one shard's partitions of `C::TOPIC`. Lives on its
/// shard.
pub struct CoordinatorHost<C> {
    partitions: RefCell<HashMap<i32, Hosted<C>>>,
    /// Rung when a deadline may have moved earlier.
    bell: Semaphore,
}

impl<C> std::fmt::Debug for CoordinatorHost<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorHost").finish_non_exhaustive()
    }
}

impl<C> Default for CoordinatorHost<C> {
    fn default() -> CoordinatorHost<C> {
        CoordinatorHost {
            partitions: RefCell::new(HashMap::new()),
            bell: Semaphore::new(0),
        }
    }
}

impl<C: Coordinator> CoordinatorHost<C> {
    /// Runs `decide` on the partition's coordinator once it is loaded. When
    /// this call is the one that loaded it, `on_load` first gets what
    /// loading found.
    pub async fn with<R>(
        &self,
        shard: &Rc<Shard>,
        partition: i32,
        on_load: impl FnOnce(C::Found),
        decide: impl FnOnce(&mut C) -> R,
    ) -> Result<R, ErrorCode> {
        if let Some(found) = self.loaded(shard, partition).await? {
            on_load(found);
        }
        let mut partitions = self.partitions.borrow_mut();
        match partitions.get_mut(&partition) {
            Some(Hosted::Loaded(coordinator)) => Ok(decide(coordinator)),
            Some(Hosted::Loading) => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            None => Err(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// Waits until `partition` is loaded here, loading it if its log is
    /// open on this shard and nobody is loading it yet; returns what loading
    /// found when this call loaded it.
    async fn loaded(
        &self,
        shard: &Rc<Shard>,
        partition: i32,
    ) -> Result<Option<C::Found>, ErrorCode> {
        let started = Instant::now();
        loop {
            let loading = match self.partitions.borrow().get(&partition) {
                Some(Hosted::Loaded(_)) => return Ok(None),
                Some(Hosted::Loading) => true,
                None => false,
            };
            if !loading {
                return self.load(shard, partition).await.map(Some);
            }
            if started.elapsed() >= LOAD_WAIT_MAX {
                return Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
            }
            glommio::timer::sleep(LOAD_POLL_INTERVAL).await;
        }
    }

    /// Builds the partition's coordinator from its log. The partition is
    /// marked as loading meanwhile, so that nobody else loads it too, and
    /// unmarked if loading fails (the next request tries again).
    async fn load(&self, shard: &Rc<Shard>, partition: i32) -> Result<C::Found, ErrorCode> {
        // Only the partition's leader coordinates (a follower's copy of the
        // log is loaded when it becomes leader).
        let topic_partition = TopicPartition::new(C::TOPIC, partition);
        let Some(log) = crate::server::replication::led_log(shard, &topic_partition) else {
            return Err(ErrorCode::NOT_COORDINATOR);
        };
        self.partitions
            .borrow_mut()
            .insert(partition, Hosted::Loading);
        match C::load(shard, partition, &log).await {
            Ok((coordinator, found)) => {
                self.partitions
                    .borrow_mut()
                    .insert(partition, Hosted::Loaded(coordinator));
                self.ring();
                Ok(found)
            }
            Err(error) => {
                tracing::error!(partition, %error, "loading {} failed", C::STATE);
                self.partitions.borrow_mut().remove(&partition);
                Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    /// Visits every loaded coordinator (for ListGroups, ListTransactions).
    pub fn each_loaded<R>(&self, mut visit: impl FnMut(&C) -> R) -> Vec<R> {
        self.partitions
            .borrow()
            .values()
            .filter_map(|hosted| match hosted {
                Hosted::Loaded(coordinator) => Some(visit(coordinator)),
                Hosted::Loading => None,
            })
            .collect()
    }

    /// Partitions loaded here.
    pub fn loaded_partitions(&self) -> Vec<i32> {
        self.partitions
            .borrow()
            .iter()
            .filter(|(_, hosted)| matches!(hosted, Hosted::Loaded(_)))
            .map(|(partition, _)| *partition)
            .collect()
    }

    /// Partitions of `C::TOPIC` whose logs this shard holds, loaded or not.
    pub fn held_partitions(&self, shard: &Shard) -> Vec<i32> {
        shard
            .store
            .partitions()
            .into_iter()
            .filter(|(topic_partition, _)| topic_partition.topic == C::TOPIC)
            .map(|(topic_partition, _)| topic_partition.partition.0)
            .collect()
    }

    /// Drops a partition's coordinator (its topic was deleted, or this
    /// broker stopped leading it).
    pub fn unload(&self, partition: i32) {
        self.partitions.borrow_mut().remove(&partition);
    }

    /// Wakes the timer task: a deadline may have moved earlier.
    pub fn ring(&self) {
        self.bell.signal(1);
    }

    /// The timer task's sleep between rounds: until the earliest deadline of
    /// the loaded coordinators or `until_ms`, whichever is first (at most
    /// [`TIMER_SLEEP_MAX`]), or until the bell rings. Rings from before the
    /// call are dropped: the round that just ran saw what they announced.
    pub async fn wait_for_timers(&self, until_ms: i64) {
        while self.bell.try_acquire(1).unwrap_or(false) {}
        let until_ms = self.next_deadline_ms().unwrap_or(i64::MAX).min(until_ms);
        let sleep = Duration::from_millis((until_ms - now_ms()).max(0) as u64).min(TIMER_SLEEP_MAX);
        let timer = std::pin::pin!(glommio::timer::sleep(sleep));
        let bell = std::pin::pin!(self.bell.acquire(1));
        futures::future::select(timer, bell).await;
    }

    fn next_deadline_ms(&self) -> Option<i64> {
        self.partitions
            .borrow()
            .values()
            .filter_map(|hosted| match hosted {
                Hosted::Loaded(coordinator) => coordinator.next_deadline_ms(),
                Hosted::Loading => None,
            })
            .min()
    }
}

/// Requests waiting for a coordinator's answer, each under the token the
/// coordinator answers with. Lives on its shard.
pub struct Waiters<W> {
    waiting: RefCell<HashMap<u64, W>>,
    next_token: Cell<u64>,
}

impl<W> std::fmt::Debug for Waiters<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters").finish_non_exhaustive()
    }
}

impl<W> Default for Waiters<W> {
    fn default() -> Waiters<W> {
        Waiters {
            waiting: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
        }
    }
}

impl<W> Waiters<W> {
    /// Registers `waiter` under a new token.
    pub fn register(&self, waiter: W) -> u64 {
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        self.waiting.borrow_mut().insert(token, waiter);
        token
    }

    /// The waiter registered under `token`, no longer registered.
    pub fn take(&self, token: u64) -> Option<W> {
        self.waiting.borrow_mut().remove(&token)
    }
}

/// Reads `log` from its start to its end, [`LOAD_READ_BYTES`] at a time,
/// and hands each record batch to `visit`, decoded. Fails on a read or a
/// batch that does not decode.
pub async fn read_partition_batches(
    log: &PartitionLog,
    mut visit: impl FnMut(RecordSet),
) -> Result<(), String> {
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let options = ReadOptions {
            max_bytes: LOAD_READ_BYTES,
            max_offset: end,
            allow_file_range: false,
        };
        let outcome = log
            .read(offset, options)
            .await
            .map_err(|error| error.to_string())?;
        let mut bytes = match outcome.data {
            LogData::Memory(pieces) => {
                let mut joined = BytesMut::new();
                for piece in &pieces {
                    joined.extend_from_slice(piece);
                }
                joined.freeze()
            }
            LogData::Empty | LogData::File(_) => Bytes::new(),
        };
        if outcome.next_offset <= offset {
            break;
        }
        offset = outcome.next_offset;
        while !bytes.is_empty() {
            let batch =
                RecordBatchDecoder::decode(&mut bytes).map_err(|error| error.to_string())?;
            visit(batch);
        }
    }
    Ok(())
}

/// Where the coordinator of `key` lives: its partition of the internal
/// `topic` (`partition_for(key, partition count)`) and that partition's
/// shard. NOT_COORDINATOR when the topic does not exist here (the client
/// finds the coordinator again, which creates it).
pub fn locate_in(
    shard: &Shard,
    topic: &str,
    key: &str,
    partition_for: fn(&str, i32) -> i32,
) -> Result<(i32, ShardId), ErrorCode> {
    let image = shard.local_image();
    let described = image.topic(topic).ok_or(ErrorCode::NOT_COORDINATOR)?;
    let count =
        i32::try_from(described.partitions.len()).map_err(|_| ErrorCode::NOT_COORDINATOR)?;
    if count == 0 {
        return Err(ErrorCode::NOT_COORDINATOR);
    }
    let partition = partition_for(key, count);
    let owner = image
        .owner(&TopicPartition::new(topic, partition))
        .ok_or(ErrorCode::NOT_COORDINATOR)?;
    Ok((partition, owner))
}

/// Creates the internal topic `name` (compacted, `partitions` partitions of
/// `segment_bytes` segments, `min.insync.replicas` of `min_isr` if given)
/// if it does not exist yet, as Kafka does on the first FindCoordinator
/// that needs it.
pub async fn ensure_internal_topic(
    shard: &Rc<Shard>,
    name: &str,
    partitions: i32,
    segment_bytes: u64,
    replication_factor: i16,
    min_isr: Option<i32>,
) -> Result<(), ErrorCode> {
    if shard.local_image().topic(name).is_some() {
        return Ok(());
    }
    // At most one replica per registered broker (see the setting), and
    // only what a one-node broker has there.
    let brokers = shard
        .cluster_view()
        .map_or(1, |view| view.image.brokers.len().max(1));
    let replication_factor = replication_factor.min(i16::try_from(brokers).unwrap_or(i16::MAX));
    let mut configs = BTreeMap::from([
        ("cleanup.policy".to_owned(), "compact".to_owned()),
        ("segment.bytes".to_owned(), segment_bytes.to_string()),
    ]);
    if let Some(min_isr) = min_isr {
        // No more than the replicas it gets here (see above), so that
        // acks=all writes to it are not refused for good.
        let min_isr = min_isr.min(i32::from(replication_factor));
        configs.insert("min.insync.replicas".to_owned(), min_isr.to_string());
    }
    let change = Change::Create {
        topics: vec![NewTopic {
            name: name.to_owned(),
            partitions,
            replication_factor,
            configs,
            id: None,
            assignments: Vec::new(),
        }],
        validate_only: false,
    };
    let outcomes = controller::apply(shard, change).await;
    match outcomes.first().map(|outcome| outcome.error) {
        Some(ErrorCode::NONE) | Some(ErrorCode::TOPIC_ALREADY_EXISTS) => Ok(()),
        other => {
            tracing::error!(error = ?other, "creating {name} failed");
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_get_distinct_tokens_and_are_taken_once() {
        let waiters = Waiters::default();
        let first = waiters.register("first");
        let second = waiters.register("second");
        assert_ne!(first, second);
        assert_eq!(waiters.take(second), Some("second"));
        assert_eq!(waiters.take(second), None);
        assert_eq!(waiters.take(first), Some("first"));
    }
}
