//! Hosting the group coordinator on the shard that owns each
//! `__consumer_offsets` partition: loading a partition's groups from its
//! log, running the engine's [`GroupCoordinator`] and performing its actions
//! (answering waiting JoinGroup/SyncGroup requests, writing records), and
//! its timers. Lives on its shard; requests reach it over the mesh.
//!
//! Transactional offset commits are written as transactional batches of
//! their producer, numbered 0 as Kafka's coordinator numbers them: the
//! partition's producer state checks their epoch and transaction but not
//! their sequence (Kafka's `AppendOrigin.COORDINATOR`). Loading feeds the
//! COMMIT/ABORT markers it meets to the coordinator, and
//! [`on_transaction_marker`] does the same for markers written later.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use brook_engine::group::Persist;
use brook_engine::group::coordinator::{
    Action, GroupCoordinator, JoinResponse, SyncResponse, WritePurpose,
};
use brook_engine::group::records::{GroupRecord, OFFSETS_TOPIC_NAME, offsets_partition_for};
use brook_engine::group::state::Token;
use brook_engine::group::txn_offsets::{LoggedRecord, TxnProducer};
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::control::{ControlRecordType, MarkerKind};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::producer_state::ProducerError;
use brook_engine::types::{Offset, ProducerId, TimestampMs, TopicPartition};
use futures::channel::oneshot;
use kafka_protocol::records::RecordSet;

use crate::server::coordinator_host::{
    Coordinator, CoordinatorHost, Waiters, ensure_internal_topic, locate_in, read_partition_batches,
};
use crate::server::replication::{NotReplicated, led_log, wait_replicated};
use crate::server::shard::{Shard, now_ms};
use crate::storage::{AppendInfo, PartitionLog, StorageError};

/// Records written in one batch at most (a group's tombstones can be many).
const RECORDS_PER_BATCH_MAX: usize = 1_000;

enum Waiter {
    Join(oneshot::Sender<JoinResponse>),
    Sync(oneshot::Sender<SyncResponse>),
}

/// The coordinators of one shard's `__consumer_offsets` partitions. Lives
/// on its shard.
#[derive(Default)]
pub struct GroupHost {
    coordinators: CoordinatorHost<GroupCoordinator>,
    waiters: Waiters<Waiter>,
}

impl std::fmt::Debug for GroupHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupHost").finish_non_exhaustive()
    }
}

/// Where a group's coordinator lives: its `__consumer_offsets` partition
/// and that partition's shard. NOT_COORDINATOR when the topic does not exist
/// here (the client finds the coordinator again, which creates it).
pub fn locate(
    shard: &Shard,
    group_id: &str,
) -> Result<(i32, brook_engine::cluster::image::ShardId), ErrorCode> {
    locate_in(shard, OFFSETS_TOPIC_NAME, group_id, offsets_partition_for)
}

fn offsets_partition(partition: i32) -> TopicPartition {
    TopicPartition::new(OFFSETS_TOPIC_NAME, partition)
}

/// Creates `__consumer_offsets` if it does not exist (compacted, Kafka's
/// segment size), as Kafka does on the first FindCoordinator.
pub async fn ensure_offsets_topic(shard: &Rc<Shard>) -> Result<(), ErrorCode> {
    let config = &shard.context.config;
    ensure_internal_topic(
        shard,
        OFFSETS_TOPIC_NAME,
        config.offsets_topic_partitions,
        config.offsets_topic_segment_bytes,
        config.offsets_topic_replication_factor,
        None,
    )
    .await
}

impl GroupHost {
    /// Runs `decide` on the partition's coordinator once it is loaded.
    pub async fn with<R>(
        &self,
        shard: &Rc<Shard>,
        partition: i32,
        decide: impl FnOnce(&mut GroupCoordinator) -> R,
    ) -> Result<R, ErrorCode> {
        self.coordinators
            .with(shard, partition, |_: Replayed| {}, decide)
            .await
    }

    /// A token and the receiver its answer will come through.
    pub fn register_join(&self) -> (Token, oneshot::Receiver<JoinResponse>) {
        let (sender, receiver) = oneshot::channel();
        (self.waiters.register(Waiter::Join(sender)), receiver)
    }

    pub fn register_sync(&self) -> (Token, oneshot::Receiver<SyncResponse>) {
        let (sender, receiver) = oneshot::channel();
        (self.waiters.register(Waiter::Sync(sender)), receiver)
    }

    /// Forgets a waiter whose request never reached the coordinator.
    pub fn forget(&self, token: Token) {
        self.waiters.take(token);
    }

    /// Performs a coordinator's actions.
    pub fn apply(&self, shard: &Rc<Shard>, partition: i32, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::JoinDone { token, response } => {
                    if let Some(Waiter::Join(sender)) = self.waiters.take(token) {
                        let _ = sender.send(response);
                    }
                }
                Action::SyncDone { token, response } => {
                    if let Some(Waiter::Sync(sender)) = self.waiters.take(token) {
                        let _ = sender.send(response);
                    }
                }
                Action::Write { records, purpose } => {
                    glommio::spawn_local(write_then(shard.clone(), partition, records, purpose))
                        .detach();
                }
            }
        }
        self.coordinators.ring();
    }

    /// Every group of every loaded partition, for ListGroups.
    pub fn each_loaded<R>(&self, visit: impl FnMut(&GroupCoordinator) -> R) -> Vec<R> {
        self.coordinators.each_loaded(visit)
    }

    /// Forgets committed offsets of deleted topics in every group hosted
    /// here, writing their tombstones.
    pub async fn forget_topics(&self, shard: &Rc<Shard>, topics: &BTreeSet<String>) {
        for partition in self.coordinators.loaded_partitions() {
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
        self.coordinators.unload(partition);
    }
}

/// Writes `records` to the partition and waits until they are durable.
pub async fn write_records(
    shard: &Rc<Shard>,
    partition: i32,
    records: &[Persist],
) -> Result<(), ErrorCode> {
    write_records_placed(shard, partition, records, None)
        .await
        .map(|_| ())
}

/// Writes `records` to the partition, as transactional batches of
/// `producer` when given, and waits until they are durable. Returns each
/// record's offset in the log, in order.
pub async fn write_records_placed(
    shard: &Rc<Shard>,
    partition: i32,
    records: &[Persist],
    producer: Option<TxnProducer>,
) -> Result<Vec<Offset>, ErrorCode> {
    let Some(log) = led_log(shard, &offsets_partition(partition)) else {
        return Err(ErrorCode::NOT_COORDINATOR);
    };
    let now = now_ms();
    let mut offsets = Vec::with_capacity(records.len());
    let mut end = None;
    for chunk in records.chunks(RECORDS_PER_BATCH_MAX) {
        let batch_records = new_records(chunk, now)?;
        if batch_records.is_empty() {
            continue;
        }
        let appended = match producer {
            None => {
                let batch = encode_batch(&batch_records, &BatchOptions::default());
                log.append(
                    &batch,
                    shard.leader_epoch_of(&offsets_partition(partition)),
                    now,
                )
                .await
                .map_err(|error| append_error(partition, &error))?
            }
            Some(producer) => {
                append_transactional(shard, &log, partition, &batch_records, producer).await?
            }
        };
        offsets.extend((0..batch_records.len() as i64).map(|index| appended.base_offset.0 + index));
        end = Some(appended.log_end_offset);
    }
    let Some(end) = end else {
        return Ok(Vec::new());
    };
    let timeout = Duration::from_millis(shard.context.config.offsets_commit_timeout_ms);
    match wait_replicated(shard, &offsets_partition(partition), &log, end, timeout).await {
        Ok(()) => Ok(offsets.into_iter().map(Offset).collect()),
        Err(NotReplicated::Storage(error)) => {
            tracing::warn!(partition, %error, "syncing group records failed");
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }
        Err(NotReplicated::Replication(ErrorCode::REQUEST_TIMED_OUT)) => {
            Err(ErrorCode::REQUEST_TIMED_OUT)
        }
        // Kafka's answer when the coordinator's partition lost its
        // leadership or in-sync replicas meanwhile.
        Err(NotReplicated::Replication(ErrorCode::NOT_LEADER_OR_FOLLOWER)) => {
            Err(ErrorCode::NOT_COORDINATOR)
        }
        Err(NotReplicated::Replication(_)) => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
    }
}

/// The records of one batch; INVALID_REQUEST for one over Kafka's limits.
fn new_records(chunk: &[Persist], now: i64) -> Result<Vec<NewRecord>, ErrorCode> {
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
    Ok(batch_records)
}

/// The coordinator's answer for a failed append: a producer's fencing
/// (INVALID_PRODUCER_EPOCH, as Kafka's coordinator passes it on) or
/// COORDINATOR_NOT_AVAILABLE.
fn append_error(partition: i32, error: &StorageError) -> ErrorCode {
    tracing::warn!(partition, %error, "writing group records failed");
    match error {
        StorageError::Producer(ProducerError::InvalidProducerEpoch { .. }) => {
            ErrorCode::INVALID_PRODUCER_EPOCH
        }
        StorageError::Producer(ProducerError::InvalidTransactionState { .. }) => {
            ErrorCode::INVALID_TXN_STATE
        }
        _ => ErrorCode::COORDINATOR_NOT_AVAILABLE,
    }
}

/// Appends `records` as one transactional batch of `producer`, at
/// sequence 0 as Kafka's coordinator writes it (the log checks its epoch and
/// transaction, not its sequence).
async fn append_transactional(
    shard: &Rc<Shard>,
    log: &PartitionLog,
    partition: i32,
    records: &[NewRecord],
    producer: TxnProducer,
) -> Result<AppendInfo, ErrorCode> {
    let options = BatchOptions {
        producer_id: producer.producer_id.0,
        producer_epoch: producer.producer_epoch.0,
        base_sequence: 0,
        transactional: true,
        ..BatchOptions::default()
    };
    let batch = encode_batch(records, &options);
    let epoch = shard.leader_epoch_of(&offsets_partition(partition));
    log.append_from_coordinator(&batch, epoch, now_ms())
        .await
        .map_err(|error| append_error(partition, &error))
}

/// Applies a COMMIT or ABORT marker of `producer_id` that is durable in
/// `__consumer_offsets` partition `partition`: the producer's pending
/// transactional offsets in that partition's groups become committed
/// offsets or are dropped. Call it on the shard that owns the partition,
/// and before the marker is reported written to the transaction
/// coordinator (so the producer's next transaction cannot commit offsets
/// that this marker would then complete).
pub async fn on_transaction_marker(
    shard: &Rc<Shard>,
    partition: i32,
    producer_id: ProducerId,
    result: MarkerKind,
) {
    let completed = shard
        .groups
        .with(shard, partition, |coordinator| {
            coordinator.complete_transaction(producer_id, result)
        })
        .await;
    match completed {
        Ok(applied) => {
            tracing::debug!(
                partition,
                producer_id = producer_id.0,
                ?result,
                applied,
                "transaction completed in groups"
            );
        }
        // A partition not hosted here reads the marker when it loads.
        Err(error) => {
            tracing::debug!(
                partition,
                producer_id = producer_id.0,
                ?error,
                "transaction marker not applied"
            );
        }
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

/// What loading a partition found besides the coordinator's state.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Records replayed.
    records: u64,
}

impl Coordinator for GroupCoordinator {
    const TOPIC: &'static str = OFFSETS_TOPIC_NAME;
    const STATE: &'static str = "consumer groups";
    type Found = Replayed;

    /// Replays every record of the partition into a new coordinator.
    async fn load(
        shard: &Shard,
        partition: i32,
        log: &PartitionLog,
    ) -> Result<(GroupCoordinator, Replayed), String> {
        let mut coordinator = GroupCoordinator::new(shard.context.config.groups.clone());
        let started = std::time::Instant::now();
        let mut replayed = Replayed::default();
        let now = now_ms();
        read_partition_batches(log, |batch| {
            replay_batch(batch, &mut coordinator, now, &mut replayed);
        })
        .await?;
        let records = replayed.records;
        // An empty partition (most of the 50, on most brokers) is not news.
        if records > 0 {
            tracing::info!(partition, records, groups = coordinator.groups.len(), elapsed = ?started.elapsed(), "loaded consumer groups");
        } else {
            tracing::debug!(partition, "loaded consumer groups: none");
        }
        Ok((coordinator, replayed))
    }

    fn next_deadline_ms(&self) -> Option<i64> {
        GroupCoordinator::next_deadline_ms(self)
    }
}

/// Replays one batch: a transaction marker completes its producer's
/// transaction; records of a transactional batch are pending for its
/// producer until then.
fn replay_batch(
    batch: RecordSet,
    coordinator: &mut GroupCoordinator,
    now: i64,
    replayed: &mut Replayed,
) {
    let Some(first) = batch.records.first() else {
        // Compaction emptied the batch (a marker without records is ignored, as in Kafka).
        return;
    };
    let producer_id = ProducerId(first.producer_id);
    if first.control {
        let key = first.key.as_deref().unwrap_or_default();
        match ControlRecordType::parse_key(key) {
            Ok(ControlRecordType::Commit) => {
                coordinator.complete_transaction(producer_id, MarkerKind::Commit);
            }
            Ok(ControlRecordType::Abort) => {
                coordinator.complete_transaction(producer_id, MarkerKind::Abort);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(offset = first.offset, %error, "skipping an unreadable control record")
            }
        }
        return;
    }
    let transactional_producer = (first.transactional && producer_id.0 >= 0).then_some(producer_id);
    for record in batch.records {
        let Some(key) = record.key else { continue };
        match GroupRecord::decode(&key, record.value.as_deref()) {
            Ok(decoded) => {
                if let Some(persisted) = Persist::from_record(decoded) {
                    let logged = LoggedRecord {
                        offset: record.offset,
                        transactional_producer,
                    };
                    coordinator.replay_logged(now, persisted, logged);
                }
                replayed.records += 1;
            }
            Err(error) => {
                tracing::warn!(offset = record.offset, %error, "skipping an unreadable group record");
            }
        }
    }
}

/// Runs the coordinators' timers on this shard until it stops: session
/// expiry, rebalance and initial delays, offset retention.
pub async fn run_timers(shard: Rc<Shard>) {
    let groups = &shard.groups;
    let expiry_interval_ms = shard.context.config.offsets_retention_check_interval_ms as i64;
    let mut next_expiry_ms = now_ms() + expiry_interval_ms;
    // Groups loaded at start-up: their members' sessions run from now.
    for partition in groups.coordinators.held_partitions(&shard) {
        let _ = groups.with(&shard, partition, |_| ()).await;
    }
    while !shard.is_stopping() {
        let now = now_ms();
        let expire = now >= next_expiry_ms;
        if expire {
            next_expiry_ms = now + expiry_interval_ms;
        }
        for partition in groups.coordinators.loaded_partitions() {
            let decided = groups
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
                groups.apply(&shard, partition, actions);
            }
        }
        groups.coordinators.wait_for_timers(next_expiry_ms).await;
    }
}

#[cfg(test)]
mod tests {
    use brook_engine::group::state::{CommittedOffset, GroupSettings};
    use brook_engine::group::txn_offsets::Stability;
    use brook_engine::log::control::{EndTxnMarker, encode_end_txn_marker_batch};
    use brook_engine::replica::producer_state::ProducerEpoch;
    use bytes::Bytes;
    use kafka_protocol::records::RecordBatchDecoder;

    use super::*;

    const PRODUCER: TxnProducer = TxnProducer {
        producer_id: ProducerId(4),
        producer_epoch: ProducerEpoch(2),
    };

    fn offset_batch(producer: Option<TxnProducer>, base_sequence: i32, value: i64) -> Bytes {
        let record = Persist::Offset {
            group_id: "g".into(),
            partition: TopicPartition::new("t", 0),
            offset: CommittedOffset {
                offset: value,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 1,
                expire_timestamp_ms: None,
            },
        };
        let records = new_records(&[record], 1).unwrap();
        let options = match producer {
            None => BatchOptions::default(),
            Some(producer) => BatchOptions {
                producer_id: producer.producer_id.0,
                producer_epoch: producer.producer_epoch.0,
                base_sequence,
                transactional: true,
                ..BatchOptions::default()
            },
        };
        Bytes::from(encode_batch(&records, &options))
    }

    fn marker_batch(kind: MarkerKind) -> Bytes {
        let marker = EndTxnMarker {
            kind,
            coordinator_epoch: 0,
        };
        let batch = encode_end_txn_marker_batch(
            PRODUCER.producer_id.0,
            PRODUCER.producer_epoch.0,
            TimestampMs(1),
            marker,
        );
        Bytes::from(batch)
    }

    /// Replays `batches` placed one after another in the log (the base
    /// offset is outside the CRC, as the append path relies on).
    fn replay(batches: &[Bytes]) -> (GroupCoordinator, Replayed) {
        let mut coordinator = GroupCoordinator::new(GroupSettings::default());
        let mut replayed = Replayed::default();
        for (offset, bytes) in batches.iter().enumerate() {
            let mut placed = bytes.to_vec();
            placed[..8].copy_from_slice(&(offset as i64).to_be_bytes());
            let batch = RecordBatchDecoder::decode(&mut Bytes::from(placed)).unwrap();
            replay_batch(batch, &mut coordinator, 1, &mut replayed);
        }
        (coordinator, replayed)
    }

    fn fetched(coordinator: &GroupCoordinator) -> Result<Option<i64>, ErrorCode> {
        let partitions = [TopicPartition::new("t", 0)];
        let fetched =
            coordinator.fetch_offsets_with("g", Some(&partitions), Stability::RequireStable);
        fetched[0]
            .1
            .clone()
            .map(|offset| offset.map(|offset| offset.offset))
    }

    #[test]
    fn loading_completes_transactions_at_their_markers() {
        let plain = offset_batch(None, -1, 5);
        let pending = offset_batch(Some(PRODUCER), 7, 10);
        let (open, replayed) = replay(&[plain.clone(), pending.clone()]);
        assert_eq!(fetched(&open), Err(ErrorCode::UNSTABLE_OFFSET_COMMIT));
        assert_eq!(replayed.records, 2);
        let (committed, _) = replay(&[
            plain.clone(),
            pending.clone(),
            marker_batch(MarkerKind::Commit),
        ]);
        assert_eq!(fetched(&committed), Ok(Some(10)));
        let (aborted, _) = replay(&[plain, pending, marker_batch(MarkerKind::Abort)]);
        assert_eq!(fetched(&aborted), Ok(Some(5)));
    }
}
