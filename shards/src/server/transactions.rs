//! Transaction coordinators on their shards: the shard owning partition
//! `abs(javaStringHash(transactional.id)) % 50` of the compacted internal topic
//! `__transaction_state` hosts that id's coordinator
//! ([`brook_engine::txn::coordinator::TransactionCoordinator`], which decides
//! everything). This module loads a partition's coordinator by replaying the
//! partition, and performs its actions: persisting state records (answered
//! only once durable), writing COMMIT/ABORT markers to every participant
//! partition on its owner shard (retried until written), answering waiting
//! requests, and running its timers (transaction timeouts, id expiry).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use brook_engine::cluster::image::ShardId;
use brook_engine::group::records::OFFSETS_TOPIC_NAME;
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::control::MarkerKind;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::txn::config::TransactionConfig;
use brook_engine::txn::coordinator::TransactionCoordinator;
use brook_engine::txn::records::{TransactionRecord, partition_for};
use brook_engine::txn::{
    Action, MarkerOutcome, MarkerWrite, Response, Token, TransactionResult, WriteId,
    coordinator_error_for_append,
};
use brook_engine::types::{TimestampMs, TopicPartition};
use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use glommio::sync::Semaphore;
use kafka_protocol::records::RecordBatchDecoder;

use crate::server::controller::{self, Change, NewTopic};
use crate::server::handlers::produce::with_timeout;
use crate::server::shard::{LEADER_EPOCH, Shard, now_ms};
use crate::storage::{LogData, PartitionLog, ReadOptions, StorageError};

/// Kafka's internal topic of transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// How long a request waits for its partition to finish loading.
const LOAD_WAIT_MAX: Duration = Duration::from_secs(5);
/// Bytes read per step while loading.
const LOAD_READ_BYTES: usize = 1 << 20;
/// Longest sleep of the timer task (it also wakes when actions arrive).
const TIMER_SLEEP_MAX: Duration = Duration::from_secs(1);
/// How long a durable write of a state record may take.
const PERSIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between attempts to write a marker that failed retriably.
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(100);

enum Hosted {
    Loading,
    Loaded(TransactionCoordinator),
}

/// The transaction coordinators of one shard's `__transaction_state`
/// partitions and the requests waiting on them. Lives on its shard.
pub struct TxnHost {
    partitions: RefCell<HashMap<i32, Hosted>>,
    waiters: RefCell<HashMap<Token, oneshot::Sender<Response>>>,
    next_token: Cell<Token>,
    bell: Semaphore,
}

impl std::fmt::Debug for TxnHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnHost").finish_non_exhaustive()
    }
}

impl Default for TxnHost {
    fn default() -> TxnHost {
        TxnHost {
            partitions: RefCell::new(HashMap::new()),
            waiters: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
            bell: Semaphore::new(0),
        }
    }
}

/// The coordinator settings (Kafka's `transaction.*` broker configs).
pub fn transaction_config(shard: &Shard) -> TransactionConfig {
    shard.context.config.transactions.clone()
}

/// The `__transaction_state` partition of `transactional_id` and its shard.
pub fn locate(shard: &Shard, transactional_id: &str) -> Result<(i32, ShardId), ErrorCode> {
    let image = shard.image();
    let topic = image
        .topic(TRANSACTION_STATE_TOPIC)
        .ok_or(ErrorCode::NOT_COORDINATOR)?;
    let count = i32::try_from(topic.partitions.len()).map_err(|_| ErrorCode::NOT_COORDINATOR)?;
    if count == 0 {
        return Err(ErrorCode::NOT_COORDINATOR);
    }
    let partition = partition_for(transactional_id, count);
    let owner = image
        .owner(&state_partition(partition))
        .ok_or(ErrorCode::NOT_COORDINATOR)?;
    Ok((partition, owner))
}

fn state_partition(partition: i32) -> TopicPartition {
    TopicPartition::new(TRANSACTION_STATE_TOPIC, partition)
}

/// Creates `__transaction_state` (compacted) if it does not exist yet, as
/// Kafka does on the first FindCoordinator for a transactional id.
pub async fn ensure_state_topic(shard: &Rc<Shard>) -> Result<(), ErrorCode> {
    if shard.image().topic(TRANSACTION_STATE_TOPIC).is_some() {
        return Ok(());
    }
    let config = transaction_config(shard);
    let configs = BTreeMap::from([
        ("cleanup.policy".to_owned(), "compact".to_owned()),
        (
            "segment.bytes".to_owned(),
            config.state_log_segment_bytes.to_string(),
        ),
    ]);
    let change = Change::Create {
        topics: vec![NewTopic {
            name: TRANSACTION_STATE_TOPIC.to_owned(),
            partitions: config.state_log_num_partitions,
            configs,
        }],
        validate_only: false,
    };
    let outcomes = controller::apply(shard, change).await;
    match outcomes.first().map(|outcome| outcome.error) {
        Some(ErrorCode::NONE) | Some(ErrorCode::TOPIC_ALREADY_EXISTS) => Ok(()),
        other => {
            tracing::error!(error = ?other, "creating {TRANSACTION_STATE_TOPIC} failed");
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }
    }
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
            let token = host.next_token.get();
            host.next_token.set(token + 1);
            host.waiters.borrow_mut().insert(token, sender);
            match host
                .with(&owner, partition, |coordinator| decide(coordinator, token))
                .await
            {
                Ok(actions) => host.apply(&owner, partition, actions),
                Err(error) => {
                    host.waiters.borrow_mut().remove(&token);
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

impl TxnHost {
    /// Runs `decide` on the partition's coordinator once it is loaded.
    pub async fn with<R>(
        &self,
        shard: &Rc<Shard>,
        partition: i32,
        decide: impl FnOnce(&mut TransactionCoordinator) -> R,
    ) -> Result<R, ErrorCode> {
        self.loaded(shard, partition).await?;
        let mut partitions = self.partitions.borrow_mut();
        match partitions.get_mut(&partition) {
            Some(Hosted::Loaded(coordinator)) => Ok(decide(coordinator)),
            Some(Hosted::Loading) => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            None => Err(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// Every loaded coordinator, for ListTransactions.
    pub fn each_loaded<R>(&self, mut visit: impl FnMut(&TransactionCoordinator) -> R) -> Vec<R> {
        self.partitions
            .borrow()
            .values()
            .filter_map(|hosted| match hosted {
                Hosted::Loaded(coordinator) => Some(visit(coordinator)),
                Hosted::Loading => None,
            })
            .collect()
    }

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

    /// Replays the partition's records into a new coordinator; a
    /// transaction found between its prepare and complete records has its
    /// markers written again (the coordinator's `finish_loading` actions).
    async fn load(&self, shard: &Rc<Shard>, partition: i32) -> Result<(), ErrorCode> {
        let Some(log) = shard.log(&state_partition(partition)) else {
            return Err(ErrorCode::NOT_COORDINATOR);
        };
        self.partitions
            .borrow_mut()
            .insert(partition, Hosted::Loading);
        let mut coordinator =
            TransactionCoordinator::new(transaction_config(shard), partition, LEADER_EPOCH.0);
        match replay_log(&log, &mut coordinator).await {
            Ok(records) => {
                let actions = coordinator.finish_loading(now_ms());
                tracing::info!(partition, records, "loaded transaction state");
                self.partitions
                    .borrow_mut()
                    .insert(partition, Hosted::Loaded(coordinator));
                self.apply(shard, partition, actions);
                Ok(())
            }
            Err(error) => {
                tracing::error!(partition, %error, "loading transaction state failed");
                self.partitions.borrow_mut().remove(&partition);
                Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    /// Performs a coordinator's actions.
    pub fn apply(&self, shard: &Rc<Shard>, partition: i32, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Respond { token, response } => {
                    if let Some(sender) = self.waiters.borrow_mut().remove(&token) {
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
        self.bell.signal(1);
    }

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

    /// Drops a partition's coordinator (its topic was deleted).
    pub fn unload(&self, partition: i32) {
        self.partitions.borrow_mut().remove(&partition);
    }
}

/// Appends one state record and waits until it is durable.
async fn persist(
    shard: &Rc<Shard>,
    partition: i32,
    record: &TransactionRecord,
) -> Result<(), ErrorCode> {
    let Some(log) = shard.log(&state_partition(partition)) else {
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
        .append(&batch, LEADER_EPOCH, now)
        .await
        .map_err(|error| code(&error))?;
    match with_timeout(PERSIST_TIMEOUT, log.wait_durable(appended.log_end_offset)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(code(&error)),
        Err(()) => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
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

/// One partition's marker, appended and made durable on its owner.
async fn write_marker(
    shard: &Rc<Shard>,
    markers: &MarkerWrite,
    topic_partition: &TopicPartition,
) -> Result<(), ErrorCode> {
    let Some(owner) = shard.image().owner(topic_partition) else {
        return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
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
            let Some(log) = owner.log(&topic_partition) else {
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
                    LEADER_EPOCH,
                    now_ms(),
                )
                .await
                .map_err(code)?;
            log.wait_durable(appended.log_end_offset)
                .await
                .map_err(code)?;
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

/// Replays every record of `log` into `coordinator`; returns how many.
async fn replay_log(
    log: &PartitionLog,
    coordinator: &mut TransactionCoordinator,
) -> Result<u64, String> {
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    let mut count = 0;
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
            for record in batch.records {
                if record.control {
                    continue;
                }
                let Some(key) = record.key else { continue };
                match coordinator.replay(&key, record.value.as_deref()) {
                    Ok(()) => count += 1,
                    Err(error) => {
                        tracing::warn!(offset = record.offset, %error, "skipping an unreadable transaction record");
                    }
                }
            }
        }
    }
    Ok(count)
}

/// Runs the coordinators' timers on this shard until it stops: loads the
/// partitions this shard hosts (finishing any two-phase commit a crash
/// interrupted), then aborts timed-out transactions and expires ids.
pub async fn run_timers(shard: Rc<Shard>) {
    for (topic_partition, _) in shard.store.partitions() {
        if topic_partition.topic == TRANSACTION_STATE_TOPIC {
            let partition = topic_partition.partition.0;
            let _ = shard.transactions.with(&shard, partition, |_| ()).await;
        }
    }
    while !shard.is_stopping() {
        let now = now_ms();
        for partition in shard.transactions.loaded_partitions() {
            let decided = shard
                .transactions
                .with(&shard, partition, |coordinator| coordinator.tick(now))
                .await;
            if let Ok(actions) = decided {
                shard.transactions.apply(&shard, partition, actions);
            }
        }
        while shard.transactions.bell.try_acquire(1).unwrap_or(false) {}
        let until_ms = shard.transactions.next_deadline_ms().unwrap_or(i64::MAX);
        let sleep = Duration::from_millis((until_ms - now_ms()).max(0) as u64).min(TIMER_SLEEP_MAX);
        let timer = std::pin::pin!(glommio::timer::sleep(sleep));
        let bell = std::pin::pin!(shard.transactions.bell.acquire(1));
        futures::future::select(timer, bell).await;
    }
}
