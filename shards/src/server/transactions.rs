//! Transaction coordinators on their shards: the shard owning partition
//! `abs(javaStringHash(transactional.id)) % 50` of the compacted internal topic
//! `__transaction_state` hosts that id's coordinator
//! ([`brook_engine::txn::coordinator::TransactionCoordinator`], which decides
//! everything). This module loads a partition's coordinator by replaying the
//! partition, and performs its actions: persisting state records (answered
//! only once durable), writing COMMIT/ABORT markers to every participant
//! partition on its owner shard (retried until written), answering waiting
//! requests, and running its timers (transaction timeouts, id expiry).

use std::rc::Rc;
use std::time::Duration;

use brook_engine::cluster::image::ShardId;
use brook_engine::group::records::OFFSETS_TOPIC_NAME;
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::control::MarkerKind;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::txn::config::TransactionConfig;
use brook_engine::txn::coordinator::{
    AddPartitionsRequest, BatchedAddPartitions, TransactionCoordinator,
};
use brook_engine::txn::records::{TransactionRecord, partition_for};
use brook_engine::txn::{
    Action, MarkerOutcome, MarkerWrite, Response, Token, TransactionResult, WriteId,
    coordinator_error_for_append,
};
use brook_engine::types::{TimestampMs, TopicPartition};
use futures::channel::oneshot;

use crate::server::coordinator_host::{
    Coordinator, CoordinatorHost, Waiters, ensure_internal_topic, locate_in, read_partition_batches,
};
use crate::server::peers;
use crate::server::replication::{NotReplicated, led_log, wait_replicated};
use crate::server::shard::{Shard, now_ms};
use crate::storage::{PartitionLog, StorageError};

/// Kafka's internal topic of transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// How long a durable write of a state record may take.
const PERSIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between attempts to write a marker that failed retriably.
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// The transaction coordinators of one shard's `__transaction_state`
/// partitions and the requests waiting on them. Lives on its shard.
#[derive(Default)]
pub struct TxnHost {
    coordinators: CoordinatorHost<TransactionCoordinator>,
    waiters: Waiters<oneshot::Sender<Response>>,
}

impl std::fmt::Debug for TxnHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnHost").finish_non_exhaustive()
    }
}

/// The coordinator settings (Kafka's `transaction.*` broker configs).
pub fn transaction_config(shard: &Shard) -> TransactionConfig {
    shard.context.config.transactions.clone()
}

/// The `__transaction_state` partition of `transactional_id` and its shard.
pub fn locate(shard: &Shard, transactional_id: &str) -> Result<(i32, ShardId), ErrorCode> {
    locate_in(
        shard,
        TRANSACTION_STATE_TOPIC,
        transactional_id,
        partition_for,
    )
}

fn state_partition(partition: i32) -> TopicPartition {
    TopicPartition::new(TRANSACTION_STATE_TOPIC, partition)
}

/// Creates `__transaction_state` (compacted) if it does not exist yet, as
/// Kafka does on the first FindCoordinator for a transactional id.
pub async fn ensure_state_topic(shard: &Rc<Shard>) -> Result<(), ErrorCode> {
    let config = transaction_config(shard);
    // Positive: `transaction.state.log.segment.bytes` is parsed as a positive i32.
    let segment_bytes = u64::from(config.state_log_segment_bytes.unsigned_abs());
    ensure_internal_topic(
        shard,
        TRANSACTION_STATE_TOPIC,
        config.state_log_num_partitions,
        segment_bytes,
        shard
            .context
            .config
            .transaction_state_log_replication_factor,
        Some(config.state_log_min_isr),
    )
    .await
}

/// Runs `decide` on `transactional_id`'s coordinator (on its shard) with a
/// token for the answer, performs the actions, and waits for the answer.
pub async fn request(
    shard: &Rc<Shard>,
    transactional_id: &str,
    decide: impl FnOnce(&mut TransactionCoordinator, Token) -> Vec<Action> + Send + 'static,
) -> Result<Response, ErrorCode> {
    let (partition, owner) = locate(shard, transactional_id)?;
    shard
        .on_shard(owner, move |owner| async move {
            let host = &owner.transactions;
            let (sender, receiver) = oneshot::channel();
            let token = host.waiters.register(sender);
            match host
                .with(&owner, partition, |coordinator| decide(coordinator, token))
                .await
            {
                Ok(actions) => host.apply(&owner, partition, actions),
                Err(error) => {
                    host.waiters.take(token);
                    return Err(error);
                }
            }
            receiver
                .await
                .map_err(|_| ErrorCode::COORDINATOR_NOT_AVAILABLE)
        })
        .await
        .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE))
}

/// The coordinator's answer to one transaction's AddPartitionsToTxn.
#[derive(Debug)]
pub enum PartitionsAnswer {
    /// Adding: one outcome for every partition.
    All(ErrorCode),
    /// Verifying (KIP-890): each partition's outcome.
    Each(Vec<(TopicPartition, ErrorCode)>),
}

impl PartitionsAnswer {
    /// The outcome for `partition`; one the coordinator did not mention is
    /// not in the transaction (TRANSACTION_ABORTABLE, as Kafka answers).
    pub fn code_of(&self, partition: &TopicPartition) -> ErrorCode {
        match self {
            PartitionsAnswer::All(code) => *code,
            PartitionsAnswer::Each(results) => results
                .iter()
                .find(|(verified, _)| verified == partition)
                .map_or(ErrorCode::TRANSACTION_ABORTABLE, |(_, code)| *code),
        }
    }
}

/// A partition leader's check (KIP-890) that `request`'s partitions are in
/// the open transaction: asked of the coordinator here, or of the broker
/// leading the transaction's `__transaction_state` partition.
pub async fn verify_partitions(
    shard: &Rc<Shard>,
    request: AddPartitionsRequest,
) -> Result<PartitionsAnswer, ErrorCode> {
    let (partition, _) = locate(shard, &request.transactional_id)?;
    match peers::leader_elsewhere(shard, &state_partition(partition)) {
        Some(coordinator) => peers::verify_partitions(shard, coordinator, &request)
            .await
            .map(PartitionsAnswer::Each),
        None => add_partitions(shard, request, true).await,
    }
}

/// One transaction's AddPartitionsToTxn at its coordinator: adds the
/// partitions, or with `verify_only` checks that they are in the open
/// transaction (what a partition leader asks before the first
/// transactional append, KIP-890).
pub async fn add_partitions(
    shard: &Rc<Shard>,
    request: AddPartitionsRequest,
    verify_only: bool,
) -> Result<PartitionsAnswer, ErrorCode> {
    let transactional_id = request.transactional_id.clone();
    let answer = self::request(shard, &transactional_id, move |coordinator, token| {
        let batch = [BatchedAddPartitions {
            token,
            request,
            verify_only,
        }];
        coordinator.add_partitions_batch(now_ms(), &batch)
    })
    .await?;
    match answer {
        Response::AddPartitions(code) => Ok(PartitionsAnswer::All(code)),
        Response::Verified(results) => Ok(PartitionsAnswer::Each(results)),
        _ => Err(ErrorCode::UNKNOWN_SERVER_ERROR),
    }
}

impl TxnHost {
    /// Runs `decide` on the partition's coordinator once it is loaded. A
    /// coordinator just loaded first performs its `finish_loading` actions.
    pub async fn with<R>(
        &self,
        shard: &Rc<Shard>,
        partition: i32,
        decide: impl FnOnce(&mut TransactionCoordinator) -> R,
    ) -> Result<R, ErrorCode> {
        let on_load = |actions| self.apply(shard, partition, actions);
        self.coordinators
            .with(shard, partition, on_load, decide)
            .await
    }

    /// Every loaded coordinator, for ListTransactions.
    pub fn each_loaded<R>(&self, visit: impl FnMut(&TransactionCoordinator) -> R) -> Vec<R> {
        self.coordinators.each_loaded(visit)
    }

    /// Performs a coordinator's actions.
    pub fn apply(&self, shard: &Rc<Shard>, partition: i32, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Respond { token, response } => {
                    if let Some(sender) = self.waiters.take(token) {
                        let _ = sender.send(response);
                    }
                }
                Action::Persist { write_id, record } => {
                    glommio::spawn_local(persist_then(shard.clone(), partition, write_id, record))
                        .detach();
                }
                Action::WriteMarkers { write_id, markers } => {
                    glommio::spawn_local(markers_then(shard.clone(), partition, write_id, markers))
                        .detach();
                }
            }
        }
        self.coordinators.ring();
    }

    /// Drops a partition's coordinator (its topic was deleted).
    pub fn unload(&self, partition: i32) {
        self.coordinators.unload(partition);
    }
}

/// Appends one state record and waits until it is durable.
async fn persist(
    shard: &Rc<Shard>,
    partition: i32,
    record: &TransactionRecord,
) -> Result<(), ErrorCode> {
    let Some(log) = led_log(shard, &state_partition(partition)) else {
        return Err(ErrorCode::NOT_COORDINATOR);
    };
    let (key, value) = record.encode().map_err(|error| {
        tracing::error!(%error, "a transaction state record could not be encoded");
        ErrorCode::UNKNOWN_SERVER_ERROR
    })?;
    let now = now_ms();
    let batch = encode_batch(
        &[NewRecord {
            key: Some(key),
            value,
            timestamp: TimestampMs(now),
            headers: Vec::new(),
        }],
        &BatchOptions::default(),
    );
    let code = |error: &StorageError| {
        coordinator_error_for_append(crate::server::handlers::produce::storage_error_code(error))
    };
    let appended = log
        .append(
            &batch,
            shard.leader_epoch_of(&state_partition(partition)),
            now,
        )
        .await
        .map_err(|error| code(&error))?;
    let end = appended.log_end_offset;
    match wait_replicated(
        shard,
        &state_partition(partition),
        &log,
        end,
        PERSIST_TIMEOUT,
    )
    .await
    {
        Ok(()) => Ok(()),
        Err(NotReplicated::Storage(error)) => Err(code(&error)),
        Err(NotReplicated::Replication(error)) => Err(coordinator_error_for_append(error)),
    }
}

async fn persist_then(
    shard: Rc<Shard>,
    partition: i32,
    write_id: WriteId,
    record: TransactionRecord,
) {
    let result = persist(&shard, partition, &record).await;
    if let Err(error) = result {
        tracing::warn!(partition, ?error, "persisting transaction state failed");
    }
    let decided = shard
        .transactions
        .with(&shard, partition, |coordinator| {
            coordinator.on_persisted(now_ms(), write_id, result)
        })
        .await;
    if let Ok(actions) = decided {
        shard.transactions.apply(&shard, partition, actions);
    }
}

async fn markers_then(shard: Rc<Shard>, partition: i32, write_id: WriteId, markers: MarkerWrite) {
    let outcome = write_markers(&shard, &markers).await;
    let decided = shard
        .transactions
        .with(&shard, partition, |coordinator| {
            coordinator.on_markers_written(write_id, outcome)
        })
        .await;
    if let Ok(actions) = decided {
        shard.transactions.apply(&shard, partition, actions);
    }
}

/// Writes the markers to every partition at once, each on its owner shard,
/// retrying retriable failures until written; a partition that no longer
/// exists counts as done.
async fn write_markers(shard: &Rc<Shard>, markers: &MarkerWrite) -> MarkerOutcome {
    let writes = markers.partitions.iter().map(|topic_partition| {
        let markers = markers.clone();
        let topic_partition = topic_partition.clone();
        async move {
            loop {
                match write_marker(shard, &markers, &topic_partition).await {
                    Ok(()) => return MarkerOutcome::Written,
                    Err(ErrorCode::TRANSACTION_COORDINATOR_FENCED)
                    | Err(ErrorCode::INVALID_PRODUCER_EPOCH) => return MarkerOutcome::CoordinatorFenced,
                    Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION) => return MarkerOutcome::Written,
                    Err(error) => {
                        if shard.is_stopping() {
                            return MarkerOutcome::Written;
                        }
                        tracing::warn!(partition = %topic_partition, ?error, "writing a transaction marker failed; retrying");
                        glommio::timer::sleep(MARKER_RETRY_BACKOFF).await;
                    }
                }
            }
        }
    });
    let outcomes = futures::future::join_all(writes).await;
    if outcomes.contains(&MarkerOutcome::CoordinatorFenced) {
        MarkerOutcome::CoordinatorFenced
    } else {
        MarkerOutcome::Written
    }
}

/// One partition's marker: written here when this broker leads the
/// partition, else sent to its leader (WriteTxnMarkers).
async fn write_marker(
    shard: &Rc<Shard>,
    markers: &MarkerWrite,
    topic_partition: &TopicPartition,
) -> Result<(), ErrorCode> {
    let started = std::time::Instant::now();
    let leader = peers::leader_elsewhere(shard, topic_partition);
    let written = match leader {
        Some(leader) => peers::write_marker(shard, leader, markers, topic_partition).await,
        None => write_marker_here(shard, markers, topic_partition).await,
    };
    tracing::debug!(partition = %topic_partition, ?leader, ?written, took = ?started.elapsed(), "marker");
    written
}

/// One partition's marker, appended on its owner shard and waited on until
/// every in-sync replica holds it; NOT_LEADER_OR_FOLLOWER unless this
/// broker leads the partition.
pub(crate) async fn write_marker_here(
    shard: &Rc<Shard>,
    markers: &MarkerWrite,
    topic_partition: &TopicPartition,
) -> Result<(), ErrorCode> {
    let image = shard.local_image();
    let Some(owner) = image.owner(topic_partition) else {
        return Err(image.not_here(topic_partition));
    };
    let kind = match markers.result {
        TransactionResult::Commit => MarkerKind::Commit,
        TransactionResult::Abort => MarkerKind::Abort,
    };
    let (producer_id, producer_epoch, coordinator_epoch) = (
        markers.producer_id,
        markers.producer_epoch,
        markers.coordinator_epoch,
    );
    let topic_partition = topic_partition.clone();
    shard
        .on_shard(owner, move |owner| async move {
            let Some(log) = led_log(&owner, &topic_partition) else {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            };
            let code =
                |error: StorageError| crate::server::handlers::produce::storage_error_code(&error);
            let appended = log
                .append_marker(
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    kind,
                    owner.leader_epoch_of(&topic_partition),
                    now_ms(),
                )
                .await
                .map_err(code)?;
            let end = appended.log_end_offset;
            match wait_replicated(&owner, &topic_partition, &log, end, PERSIST_TIMEOUT).await {
                Ok(()) => {}
                Err(NotReplicated::Storage(error)) => return Err(code(error)),
                Err(NotReplicated::Replication(error)) => return Err(error),
            }
            // Group offsets of the transaction become visible (or are
            // dropped) before the coordinator hears the marker is written.
            if topic_partition.topic == OFFSETS_TOPIC_NAME {
                let partition = topic_partition.partition.0;
                crate::server::groups::on_transaction_marker(&owner, partition, producer_id, kind)
                    .await;
            }
            Ok(())
        })
        .await
        .unwrap_or(Err(ErrorCode::NOT_LEADER_OR_FOLLOWER))
}

impl Coordinator for TransactionCoordinator {
    const TOPIC: &'static str = TRANSACTION_STATE_TOPIC;
    const STATE: &'static str = "transaction state";
    /// The `finish_loading` actions: a transaction found between its
    /// prepare and complete records has its markers written again.
    type Found = Vec<Action>;

    /// Replays every record of the partition into a new coordinator.
    async fn load(
        shard: &Shard,
        partition: i32,
        log: &PartitionLog,
    ) -> Result<(TransactionCoordinator, Vec<Action>), String> {
        let epoch = shard.leader_epoch_of(&state_partition(partition)).0;
        let mut coordinator =
            TransactionCoordinator::new(transaction_config(shard), partition, epoch);
        let mut records = 0_u64;
        read_partition_batches(log, |batch| {
            for record in batch.records {
                if record.control {
                    continue;
                }
                let Some(key) = record.key else { continue };
                match coordinator.replay(&key, record.value.as_deref()) {
                    Ok(()) => records += 1,
                    Err(error) => {
                        tracing::warn!(offset = record.offset, %error, "skipping an unreadable transaction record");
                    }
                }
            }
        })
        .await?;
        let actions = coordinator.finish_loading(now_ms());
        if records > 0 {
            tracing::info!(partition, records, "loaded transaction state");
        } else {
            tracing::debug!(partition, "loaded transaction state: none");
        }
        Ok((coordinator, actions))
    }

    fn next_deadline_ms(&self) -> Option<i64> {
        TransactionCoordinator::next_deadline_ms(self)
    }
}

/// Runs the coordinators' timers on this shard until it stops: loads the
/// partitions this shard hosts (finishing any two-phase commit a crash
/// interrupted), then aborts timed-out transactions and expires ids.
pub async fn run_timers(shard: Rc<Shard>) {
    let transactions = &shard.transactions;
    for partition in transactions.coordinators.held_partitions(&shard) {
        let _ = transactions.with(&shard, partition, |_| ()).await;
    }
    while !shard.is_stopping() {
        let now = now_ms();
        for partition in transactions.coordinators.loaded_partitions() {
            let decided = transactions
                .with(&shard, partition, |coordinator| coordinator.tick(now))
                .await;
            if let Ok(actions) = decided {
                transactions.apply(&shard, partition, actions);
            }
        }
        transactions.coordinators.wait_for_timers(i64::MAX).await;
    }
}
