//! Hosting the group coordinator on the shard that owns each
//! `__consumer_offsets` partition: loading a partition's groups from its
//! log, running the engine's [`GroupCoordinator`] and performing its actions
//! (answering waiting JoinGroup/SyncGroup requests, writing records), and
//! its timers. Lives on its shard; requests reach it over the mesh.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use brook_engine::group::Persist;
use brook_engine::group::coordinator::{
    Action, GroupCoordinator, JoinResponse, SyncResponse, WritePurpose,
};
use brook_engine::group::records::{GroupRecord, OFFSETS_TOPIC_NAME, offsets_partition_for};
use brook_engine::group::state::Token;
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::{TimestampMs, TopicPartition};
use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use glommio::sync::Semaphore;
use kafka_protocol::records::RecordBatchDecoder;

use crate::server::controller::{self, Change, NewTopic};
use crate::server::handlers::produce::with_timeout;
use crate::server::shard::{LEADER_EPOCH, Shard, now_ms};
use crate::storage::{LogData, PartitionLog, ReadOptions};

/// How long a request waits for its partition to finish loading before it
/// is told COORDINATOR_LOAD_IN_PROGRESS (the client retries).
const LOAD_WAIT_MAX: Duration = Duration::from_secs(5);

/// Bytes read at a time while loading a partition.
const LOAD_READ_BYTES: usize = 1 << 20;

/// Records written in one batch at most (a group's tombstones can be many).
const RECORDS_PER_BATCH_MAX: usize = 1_000;

/// The timer loop sleeps at most this long between checks.
const TIMER_SLEEP_MAX: Duration = Duration::from_secs(1);

enum Hosted {
    Loading,
    Loaded(GroupCoordinator),
}

enum Waiter {
    Join(oneshot::Sender<JoinResponse>),
    Sync(oneshot::Sender<SyncResponse>),
}

/// The coordinators of one shard's `__consumer_offsets` partitions.
pub struct GroupHost {
    partitions: RefCell<HashMap<i32, Hosted>>,
    waiters: RefCell<HashMap<Token, Waiter>>,
    next_token: Cell<Token>,
    /// Rung when a deadline may have moved earlier.
    bell: Semaphore,
}

impl std::fmt::Debug for GroupHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupHost").finish_non_exhaustive()
    }
}

impl Default for GroupHost {
    fn default() -> GroupHost {
        GroupHost {
            partitions: RefCell::new(HashMap::new()),
            waiters: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
            bell: Semaphore::new(0),
        }
    }
}

/// Where a group's coordinator lives: its `__consumer_offsets` partition
/// and that partition's shard. NOT_COORDINATOR when the topic does not exist
/// here (the client finds the coordinator again, which creates it).
pub fn locate(
    shard: &Shard,
    group_id: &str,
) -> Result<(i32, brook_engine::cluster::image::ShardId), ErrorCode> {
    let image = shard.image();
    let topic = image
        .topic(OFFSETS_TOPIC_NAME)
        .ok_or(ErrorCode::NOT_COORDINATOR)?;
    let count = i32::try_from(topic.partitions.len()).map_err(|_| ErrorCode::NOT_COORDINATOR)?;
    if count == 0 {
        return Err(ErrorCode::NOT_COORDINATOR);
    }
    let partition = offsets_partition_for(group_id, count);
    let owner = image
        .owner(&offsets_partition(partition))
        .ok_or(ErrorCode::NOT_COORDINATOR)?;
    Ok((partition, owner))
}

fn offsets_partition(partition: i32) -> TopicPartition {
    TopicPartition::new(OFFSETS_TOPIC_NAME, partition)
}

/// Creates `__consumer_offsets` if it does not exist (compacted, Kafka's
/// segment size), as Kafka does on the first FindCoordinator.
pub async fn ensure_offsets_topic(shard: &Rc<Shard>) -> Result<(), ErrorCode> {
    if shard.image().topic(OFFSETS_TOPIC_NAME).is_some() {
        return Ok(());
    }
    let config = &shard.context.config;
    let configs = BTreeMap::from([
        ("cleanup.policy".to_owned(), "compact".to_owned()),
        (
            "segment.bytes".to_owned(),
            config.offsets_topic_segment_bytes.to_string(),
        ),
    ]);
    let change = Change::Create {
        topics: vec![NewTopic {
            name: OFFSETS_TOPIC_NAME.to_owned(),
            partitions: config.offsets_topic_partitions,
            configs,
        }],
        validate_only: false,
    };
    let outcomes = controller::apply(shard, change).await;
    match outcomes.first().map(|outcome| outcome.error) {
        Some(ErrorCode::NONE) | Some(ErrorCode::TOPIC_ALREADY_EXISTS) => Ok(()),
        other => {
            tracing::error!(error = ?other, "creating {OFFSETS_TOPIC_NAME} failed");
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }
    }
}

impl GroupHost {
    /// Runs `decide` on the partition's coordinator once it is loaded.
    pub async fn with<R>(
        &self,
        shard: &Rc<Shard>,
        partition: i32,
        decide: impl FnOnce(&mut GroupCoordinator) -> R,
    ) -> Result<R, ErrorCode> {
        self.loaded(shard, partition).await?;
        let mut partitions = self.partitions.borrow_mut();
        match partitions.get_mut(&partition) {
            Some(Hosted::Loaded(coordinator)) => Ok(decide(coordinator)),
            Some(Hosted::Loading) => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            None => Err(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// A token and the receiver its answer will come through.
    pub fn register_join(&self) -> (Token, oneshot::Receiver<JoinResponse>) {
        let (sender, receiver) = oneshot::channel();
        (self.register(Waiter::Join(sender)), receiver)
    }

    pub fn register_sync(&self) -> (Token, oneshot::Receiver<SyncResponse>) {
        let (sender, receiver) = oneshot::channel();
        (self.register(Waiter::Sync(sender)), receiver)
    }

    fn register(&self, waiter: Waiter) -> Token {
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        self.waiters.borrow_mut().insert(token, waiter);
        token
    }

    /// Forgets a waiter whose request never reached the coordinator.
    pub fn forget(&self, token: Token) {
        self.waiters.borrow_mut().remove(&token);
    }

    /// Waits until `partition` is loaded here, loading it if its log is
    /// open on this shard and nobody is loading it yet.
    async fn loaded(&self, shard: &Rc<Shard>, partition: i32) -> Result<(), ErrorCode> {
        let started = std::time::Instant::now();
        loop {
            let loading = match self.partitions.borrow().get(&partition) {
                Some(Hosted::Loaded(_)) => return Ok(()),
                Some(Hosted::Loading) => true,
                None => false,
            };
            if !loading {
                return self.load(shard, partition).await;
            }
            if started.elapsed() >= LOAD_WAIT_MAX {
                return Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
            }
            glommio::timer::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Reads the partition's log from its start and replays every record.
    async fn load(&self, shard: &Rc<Shard>, partition: i32) -> Result<(), ErrorCode> {
        let Some(log) = shard.log(&offsets_partition(partition)) else {
            return Err(ErrorCode::NOT_COORDINATOR);
        };
        self.partitions
            .borrow_mut()
            .insert(partition, Hosted::Loading);
        let mut coordinator = GroupCoordinator::new(shard.context.config.groups.clone());
        let started = std::time::Instant::now();
        match replay_log(&log, &mut coordinator).await {
            Ok(records) => {
                tracing::info!(partition, records, groups = coordinator.groups.len(), elapsed = ?started.elapsed(), "loaded consumer groups");
                self.partitions
                    .borrow_mut()
                    .insert(partition, Hosted::Loaded(coordinator));
                self.bell.signal(1);
                Ok(())
            }
            Err(error) => {
                tracing::error!(partition, %error, "loading consumer groups failed");
                self.partitions.borrow_mut().remove(&partition);
                Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    /// Performs a coordinator's actions.
    pub fn apply(&self, shard: &Rc<Shard>, partition: i32, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::JoinDone { token, response } => {
                    if let Some(Waiter::Join(sender)) = self.waiters.borrow_mut().remove(&token) {
                        let _ = sender.send(response);
                    }
                }
                Action::SyncDone { token, response } => {
                    if let Some(Waiter::Sync(sender)) = self.waiters.borrow_mut().remove(&token) {
                        let _ = sender.send(response);
                    }
                }
                Action::Write { records, purpose } => {
                    glommio::spawn_local(write_then(shard.clone(), partition, records, purpose))
                        .detach();
                }
            }
        }
        self.bell.signal(1);
    }

    /// Partitions loaded here.
    fn loaded_partitions(&self) -> Vec<i32> {
        self.partitions
            .borrow()
            .iter()
            .filter(|(_, hosted)| matches!(hosted, Hosted::Loaded(_)))
            .map(|(partition, _)| *partition)
            .collect()
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

    /// Every group of every loaded partition, for ListGroups.
    pub fn each_loaded<R>(&self, mut visit: impl FnMut(&GroupCoordinator) -> R) -> Vec<R> {
        self.partitions
            .borrow()
            .values()
            .filter_map(|hosted| match hosted {
                Hosted::Loaded(coordinator) => Some(visit(coordinator)),
                Hosted::Loading => None,
            })
            .collect()
    }

    /// Forgets committed offsets of deleted topics in every group hosted
    /// here, writing their tombstones.
    pub async fn forget_topics(&self, shard: &Rc<Shard>, topics: &BTreeSet<String>) {
        for partition in self.loaded_partitions() {
            let forgotten = self
                .with(shard, partition, |coordinator| {
                    coordinator.forget_topics(topics)
                })
                .await;
            if let Some(records) = forgotten.ok().filter(|records| !records.is_empty()) {
                let action = Action::Write {
                    records,
                    purpose: WritePurpose::Background,
                };
                self.apply(shard, partition, vec![action]);
            }
        }
    }

    /// Drops a partition's coordinator (its topic was deleted).
    pub fn unload(&self, partition: i32) {
        self.partitions.borrow_mut().remove(&partition);
    }
}

/// Writes `records` to the partition and waits until they are durable.
pub async fn write_records(
    shard: &Rc<Shard>,
    partition: i32,
    records: &[Persist],
) -> Result<(), ErrorCode> {
    let Some(log) = shard.log(&offsets_partition(partition)) else {
        return Err(ErrorCode::NOT_COORDINATOR);
    };
    let now = now_ms();
    let mut end = None;
    for chunk in records.chunks(RECORDS_PER_BATCH_MAX) {
        let mut batch_records = Vec::with_capacity(chunk.len());
        for record in chunk {
            let (key, value) = record.to_record().try_encode().map_err(|error| {
                tracing::warn!(%error, "a group record over Kafka's limits was not written");
                ErrorCode::INVALID_REQUEST
            })?;
            batch_records.push(NewRecord {
                key: Some(key),
                value,
                timestamp: TimestampMs(now),
                headers: Vec::new(),
            });
        }
        if batch_records.is_empty() {
            continue;
        }
        let batch = encode_batch(&batch_records, &BatchOptions::default());
        let appended = log
            .append(&batch, LEADER_EPOCH, now)
            .await
            .map_err(|error| {
                tracing::warn!(partition, %error, "writing group records failed");
                ErrorCode::COORDINATOR_NOT_AVAILABLE
            })?;
        end = Some(appended.log_end_offset);
    }
    let Some(end) = end else {
        return Ok(());
    };
    let timeout = Duration::from_millis(shard.context.config.offsets_commit_timeout_ms);
    match with_timeout(timeout, log.wait_durable(end)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => {
            tracing::warn!(partition, %error, "syncing group records failed");
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }
        Err(()) => Err(ErrorCode::REQUEST_TIMED_OUT),
    }
}

async fn write_then(
    shard: Rc<Shard>,
    partition: i32,
    records: Vec<Persist>,
    purpose: WritePurpose,
) {
    let written = write_records(&shard, partition, &records).await;
    match purpose {
        WritePurpose::Assignment {
            group_id,
            generation,
        } => {
            let persisted = written.is_ok();
            let decided = shard
                .groups
                .with(&shard, partition, |coordinator| {
                    coordinator.assignment_persisted(now_ms(), &group_id, generation, persisted)
                })
                .await;
            if let Ok(actions) = decided {
                shard.groups.apply(&shard, partition, actions);
            }
        }
        WritePurpose::Background => {
            if let Err(error) = written {
                tracing::warn!(partition, ?error, "a background group write failed");
            }
        }
    }
}

/// Replays every record of `log` into `coordinator`; returns how many.
async fn replay_log(log: &PartitionLog, coordinator: &mut GroupCoordinator) -> Result<u64, String> {
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    let mut count = 0;
    let now = now_ms();
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
            if batch.records.first().is_some_and(|record| record.control) {
                continue;
            }
            for record in batch.records {
                let Some(key) = record.key else { continue };
                match GroupRecord::decode(&key, record.value.as_deref()) {
                    Ok(decoded) => {
                        if let Some(persisted) = Persist::from_record(decoded) {
                            coordinator.replay(now, persisted);
                        }
                        count += 1;
                    }
                    Err(error) => {
                        tracing::warn!(offset = record.offset, %error, "skipping an unreadable group record");
                    }
                }
            }
        }
    }
    Ok(count)
}

/// Runs the coordinators' timers on this shard until it stops: session
/// expiry, rebalance and initial delays, offset retention.
pub async fn run_timers(shard: Rc<Shard>) {
    let expiry_interval_ms = shard.context.config.offsets_retention_check_interval_ms as i64;
    let mut next_expiry_ms = now_ms() + expiry_interval_ms;
    // Groups loaded at start-up: their members' sessions run from now.
    for (topic_partition, _) in shard.store.partitions() {
        if topic_partition.topic == OFFSETS_TOPIC_NAME {
            let partition = topic_partition.partition.0;
            let _ = shard.groups.with(&shard, partition, |_| ()).await;
        }
    }
    while !shard.is_stopping() {
        let now = now_ms();
        let expire = now >= next_expiry_ms;
        if expire {
            next_expiry_ms = now + expiry_interval_ms;
        }
        for partition in shard.groups.loaded_partitions() {
            let decided = shard
                .groups
                .with(&shard, partition, |coordinator| {
                    let mut actions = coordinator.tick(now);
                    if expire {
                        let records = coordinator.expire_offsets(now);
                        if !records.is_empty() {
                            actions.push(Action::Write {
                                records,
                                purpose: WritePurpose::Background,
                            });
                        }
                    }
                    actions
                })
                .await;
            if let Ok(actions) = decided {
                shard.groups.apply(&shard, partition, actions);
            }
        }
        while shard.groups.bell.try_acquire(1).unwrap_or(false) {}
        let until_ms = shard
            .groups
            .next_deadline_ms()
            .unwrap_or(i64::MAX)
            .min(next_expiry_ms);
        let sleep = Duration::from_millis((until_ms - now_ms()).max(0) as u64).min(TIMER_SLEEP_MAX);
        let timer = std::pin::pin!(glommio::timer::sleep(sleep));
        let bell = std::pin::pin!(shard.groups.bell.acquire(1));
        futures::future::select(timer, bell).await;
    }
}
