//! A shard's replica fetcher for one leader broker (Kafka's
//! `ReplicaFetcherThread`, one per leader and shard): one Fetch (v12, with
//! this broker's replica id, each partition's current leader epoch and last
//! fetched epoch, in an incremental session) carries every partition the
//! shard follows from that leader.
//!
//! Per partition of an answer:
//! - records: appended as the leader wrote them, then waited on until they
//!   count here (durable, or written under `flush.*`), so the next fetch
//!   offset is this replica's counted position and the leader's HW never
//!   passes what a crash here could lose;
//! - DivergingEpoch: truncate by epoch ([`PartitionLog::truncation_for`]),
//!   never to the HW (R5), and fetch again;
//! - OFFSET_OUT_OF_RANGE: Kafka's restart (truncate to the leader's end, or
//!   start over at its log start);
//! - a leader change (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH):
//!   a pause until the image names the new leader.
//!
//! The task ends when [`ReplicaHost::follow_view`] stops it (the shard
//! follows nothing from this leader any more), even in the middle of a
//! fetch: see `ReplicaHost`'s `fetchers`. A fetch, or a connection to the
//! leader, that takes `replica.socket.timeout.ms` is given up and the
//! connection opened again.

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::divergence::EpochEndOffset;
use brook_engine::replica::follower::{FetchPause, FollowerStep, PartitionAnswer, step_for};
use brook_engine::replica::replication::FetchAsked;
use brook_engine::types::{BrokerId, LeaderEpoch, Offset, PartitionId, TopicPartition};
use futures::channel::oneshot;
use futures::future::Either;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchResponse};

use super::ReplicaHost;
use crate::client::cluster::{reconnect_backoff, within};
use crate::client::fetch_session::{ClientSession, FetchLimits, SessionEntry};
use crate::client::{ClientError, Connection};
use crate::net::{PEER_CONNECT_TIMEOUT, PEER_LIVENESS_TIMEOUT};
use crate::server::shard::{Shard, now_ms};
use crate::storage::LogCut;

/// Fetch as the follower sends it: v12 names topics, carries the replica id
/// at the top level, and the divergence fields (KIP-595's DivergingEpoch).
const FETCH_VERSION: i16 = 12;
/// Kafka's `replica.fetch.wait.max.ms`, `replica.fetch.max.bytes` and
/// `replica.fetch.response.max.bytes` defaults.
const LIMITS: FetchLimits = FetchLimits {
    max_wait_ms: 500,
    max_bytes: 10 << 20,
    partition_max_bytes: 1 << 20,
};
/// Kafka's `replica.fetch.backoff.ms`.
const BACKOFF: Duration = Duration::from_secs(1);
/// A pause after an answer that says the leader moved: the image follows.
const LEADER_MOVED_PAUSE: Duration = Duration::from_millis(100);

pub async fn run(shard: Rc<Shard>, leader: BrokerId, mut stopped: oneshot::Receiver<()>) {
    let local = BrokerId(shard.context.broker_id);
    let client_id = format!("brook-replica-{}-{}", local.0, shard.id.0);
    let socket_timeout = Duration::from_millis(shard.context.config.replica_socket_timeout_ms);
    let mut connection: Option<Rc<Connection>> = None;
    let mut failures = 0u32;
    let mut session = ClientSession::new(0);
    let mut session_set: Vec<TopicPartition> = Vec::new();
    // Each wait on the leader or on time is cut short by the stop; an
    // answer being written to the log is not.
    while !shard.is_stopping() && !is_stopped(&mut stopped) {
        let followed = shard.replication.followed_from(leader);
        // A partition whose log this shard has not opened yet waits: the
        // session's entries are exactly the partitions fetched. One whose
        // log directory failed is not fetched: it cannot take the records,
        // and fetching would tell the leader it is caught up.
        let followed: Vec<_> = followed
            .into_iter()
            .filter_map(|(tp, registration)| {
                let log = shard.log(&tp).filter(|log| !log.is_offline())?;
                Some((tp, registration, log))
            })
            .collect();
        if followed.is_empty() {
            // The image moved on and the stop is on its way.
            if unless_stopped(&mut stopped, glommio::timer::sleep(LEADER_MOVED_PAUSE))
                .await
                .is_none()
            {
                break;
            }
            continue;
        }
        let set: Vec<TopicPartition> = followed.iter().map(|(tp, ..)| tp.clone()).collect();
        if set != session_set {
            session = ClientSession::new(set.len());
            session_set = set;
        }
        let live = match &connection {
            Some(connection) if !connection.is_failed() => connection.clone(),
            _ => {
                let opened = unless_stopped(&mut stopped, async {
                    glommio::timer::sleep(reconnect_backoff(failures)).await;
                    within(
                        "connecting to the leader",
                        socket_timeout.min(PEER_CONNECT_TIMEOUT),
                        connect(&shard, leader, &client_id, socket_timeout),
                    )
                    .await
                })
                .await;
                match opened {
                    None => break,
                    Some(Ok(opened)) => {
                        failures = 0;
                        connection = Some(opened.clone());
                        session = ClientSession::new(session_set.len());
                        opened
                    }
                    Some(Err(error)) => {
                        tracing::debug!(leader = %leader, %error, "no connection to the leader");
                        failures = failures.saturating_add(1);
                        continue;
                    }
                }
            }
        };
        // Each partition's position: its log end, which the last round
        // waited to count here. What each was asked at (by position in
        // `followed`, which is sorted), to check its answer against (the
        // session's cached offsets are these).
        let asked: Vec<FetchAsked> = followed
            .iter()
            .map(|(_, registration, log)| FetchAsked {
                leader,
                leader_epoch: registration.leader_epoch,
                fetch_offset: log.log_end_offset(),
            })
            .collect();
        let entries = followed
            .iter()
            .zip(&asked)
            .map(|((tp, registration, log), asked)| SessionEntry {
                topic: &tp.topic,
                partition: tp.partition.0,
                fetch_offset: asked.fetch_offset.0,
                current_leader_epoch: registration.leader_epoch.0,
                last_fetched_epoch: log.latest_epoch().map_or(-1, |epoch| epoch.0),
                log_start_offset: log.log_start_offset().0,
            });
        let mut request = session.request(entries, LIMITS);
        request.replica_id = kafka_protocol::messages::BrokerId(local.0);
        request.replica_state.replica_id = kafka_protocol::messages::BrokerId(local.0);
        request.replica_state.replica_epoch = shard
            .cluster_view()
            .and_then(|view| view.image.brokers.get(&local).map(|broker| broker.epoch))
            .unwrap_or(-1);
        // Kafka's `replica.socket.timeout.ms`: a leader cut off without a
        // word (no reset, no close) leaves the fetch unanswered until TCP
        // retransmits it, which backs off to a minute and more.
        let answered = unless_stopped(
            &mut stopped,
            within(
                "replica fetch",
                socket_timeout,
                live.request(ApiKey::Fetch, FETCH_VERSION, &request),
            ),
        )
        .await;
        let response: FetchResponse = match answered {
            None => break,
            Some(Ok(response)) => response,
            Some(Err(error)) => {
                tracing::debug!(leader = %leader, %error, "replica fetch failed");
                failures = failures.saturating_add(1);
                live.close().await;
                connection = None;
                continue;
            }
        };
        match session.on_response(response.error_code, response.session_id) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(error) => {
                tracing::warn!(leader = %leader, %error, "the leader refused a replica fetch");
                if unless_stopped(&mut stopped, glommio::timer::sleep(BACKOFF))
                    .await
                    .is_none()
                {
                    break;
                }
                continue;
            }
        }
        let mut pause = None;
        for topic in response.responses {
            for partition in topic.partitions {
                // A fetcher for this leader started after the stop takes
                // what is left.
                if is_stopped(&mut stopped) {
                    break;
                }
                let topic_partition = TopicPartition {
                    topic: topic.topic.to_string(),
                    partition: PartitionId(partition.partition_index),
                };
                let Ok(slot) = followed.binary_search_by(|(tp, ..)| tp.cmp(&topic_partition))
                else {
                    continue;
                };
                let asked = &asked[slot];
                if let Some(wait) = take_answer(&shard, &topic_partition, asked, partition).await {
                    pause = Some(pause.map_or(wait, |longest: Duration| longest.max(wait)));
                }
            }
        }
        if let Some(pause) = pause
            && unless_stopped(&mut stopped, glommio::timer::sleep(pause))
                .await
                .is_none()
        {
            break;
        }
    }
    if let Some(connection) = connection {
        connection.close().await;
    }
}

/// `future`, unless the fetcher is told to stop first (`None`): its sender
/// in [`ReplicaHost`]'s fetchers was dropped. (Not `select!`: there a
/// receiver whose sender is gone counts as terminated, and is skipped.)
async fn unless_stopped<T>(
    stopped: &mut oneshot::Receiver<()>,
    future: impl Future<Output = T>,
) -> Option<T> {
    futures::pin_mut!(future);
    match futures::future::select(stopped, future).await {
        Either::Left(_) => None,
        Either::Right((output, _)) => Some(output),
    }
}

/// Whether the fetcher was told to stop (checked where it does not wait).
fn is_stopped(stopped: &mut oneshot::Receiver<()>) -> bool {
    !matches!(stopped.try_recv(), Ok(None))
}

/// A connection to `leader`, given up once the leader acknowledges nothing
/// for [`PEER_LIVENESS_TIMEOUT`] (or `replica.socket.timeout.ms`, when
/// shorter): a fetch in flight when a partition began then ends within
/// seconds of the heal instead of waiting out TCP's backoff.
async fn connect(
    shard: &Shard,
    leader: BrokerId,
    client_id: &str,
    socket_timeout: Duration,
) -> Result<Rc<Connection>, ClientError> {
    let address = crate::server::peers::broker_address(shard, leader)
        .ok_or_else(|| ClientError::Resolve(format!("broker {leader}")))?;
    let connection = Connection::connect(address, client_id).await?;
    let prepared = match connection.bound_liveness(socket_timeout.min(PEER_LIVENESS_TIMEOUT)) {
        Ok(()) => connection.negotiate().await,
        Err(error) => Err(error),
    };
    if let Err(error) = prepared {
        connection.close().await;
        return Err(error);
    }
    Ok(connection)
}

/// Takes one partition's answer; a pause before the next fetch when it
/// calls for one. An answer that no longer applies (the partition moved to
/// another leader or epoch, or its log moved, while the fetch ran) is
/// dropped: [`PartitionReplication::takes_answer`](brook_engine::replica::replication::PartitionReplication::takes_answer).
async fn take_answer(
    shard: &Rc<Shard>,
    topic_partition: &TopicPartition,
    asked: &FetchAsked,
    answer: PartitionData,
) -> Option<Duration> {
    let log = shard.log(topic_partition)?;
    let log_end_offset = log.log_end_offset();
    let applies = shard
        .replication
        .takes_answer(topic_partition, asked, log_end_offset);
    let diverging_epoch = (answer.diverging_epoch.epoch >= 0).then_some(EpochEndOffset {
        epoch: LeaderEpoch(answer.diverging_epoch.epoch),
        end_offset: Offset(answer.diverging_epoch.end_offset),
    });
    let read = PartitionAnswer {
        error: ErrorCode(answer.error_code),
        high_watermark: Offset(answer.high_watermark),
        log_start_offset: Offset(answer.log_start_offset),
        diverging_epoch,
    };
    match step_for(applies, &read, log_end_offset) {
        FollowerStep::Drop => {
            tracing::debug!(
                partition = %topic_partition,
                ?asked,
                log_end = log_end_offset.0,
                "dropping a replica fetch answer that no longer applies"
            );
            None
        }
        FollowerStep::TruncateTo(offset) => {
            truncate(shard, topic_partition, LogCut::To(offset)).await
        }
        FollowerStep::StartAt(offset) => {
            truncate(shard, topic_partition, LogCut::FullyAndStartAt(offset)).await
        }
        FollowerStep::TruncateByEpoch(diverging) => {
            let truncation = log.truncation_for(diverging);
            tracing::info!(
                partition = %topic_partition,
                offset = truncation.offset.0,
                leader_epoch = diverging.epoch.0,
                "truncating a diverged suffix"
            );
            truncate(shard, topic_partition, LogCut::To(truncation.offset)).await
        }
        FollowerStep::Pause(FetchPause::LeaderMoved) => Some(LEADER_MOVED_PAUSE),
        FollowerStep::Pause(FetchPause::Backoff) => {
            if read.error.is_error() {
                tracing::warn!(partition = %topic_partition, error = ?read.error, "the leader refused a partition's replica fetch");
            }
            Some(BACKOFF)
        }
        FollowerStep::Append {
            leader_high_watermark,
            leader_log_start_offset,
        } => {
            let records = answer.records.as_deref();
            if let Some(pause) = append(topic_partition, &log, records).await {
                return Some(pause);
            }
            ReplicaHost::followed(shard, topic_partition, &log, Some(leader_high_watermark));
            follow_log_start(topic_partition, &log, leader_log_start_offset);
            None
        }
    }
}

/// Appends the leader's records and waits until they count here; the
/// pause after a failure.
async fn append(
    topic_partition: &TopicPartition,
    log: &crate::storage::PartitionLog,
    records: Option<&[u8]>,
) -> Option<Duration> {
    let records = records.filter(|records| !records.is_empty())?;
    let appended = match log.append_as_follower(records, now_ms()).await {
        Ok(appended) => appended,
        Err(error) => {
            tracing::warn!(partition = %topic_partition, %error, "appending the leader's records failed");
            return Some(BACKOFF);
        }
    };
    if let Err(error) = log.wait_counted(appended.log_end_offset).await {
        tracing::warn!(partition = %topic_partition, %error, "replicated records did not become durable");
        return Some(BACKOFF);
    }
    None
}

/// Kafka's follower moves its log start up to the leader's (DeleteRecords
/// on the leader; `maybeIncrementLogStartOffset`), as far as its own high
/// watermark: records the leader deleted are not served again by this
/// replica once it leads.
fn follow_log_start(
    topic_partition: &TopicPartition,
    log: &crate::storage::PartitionLog,
    leader_start: Offset,
) {
    let start = leader_start.min(log.high_watermark());
    if start <= log.log_start_offset() {
        return;
    }
    if let Err(error) = log.delete_records_before(start) {
        tracing::warn!(partition = %topic_partition, %error, "following the leader's log start failed");
    }
}

/// Cuts a follower's log and tells its state machine.
async fn truncate(
    shard: &Rc<Shard>,
    topic_partition: &TopicPartition,
    cut: LogCut,
) -> Option<Duration> {
    match shard
        .store
        .truncate_partition(topic_partition, cut, now_ms())
        .await
    {
        Ok(log) => {
            ReplicaHost::followed(shard, topic_partition, &log, None);
            // The reopened log serves the replica's HW as the old one did.
            let high_watermark = shard
                .replication
                .partitions
                .borrow()
                .get(topic_partition)
                .map(|replication| replication.high_watermark());
            if let Some(high_watermark) = high_watermark {
                log.set_high_watermark(high_watermark);
            }
            None
        }
        Err(error) => {
            tracing::error!(partition = %topic_partition, %error, "truncating a follower's log failed");
            Some(BACKOFF)
        }
    }
}
