//! Fetch: whole batches from each partition's owning shard, up to the high
//! watermark (what a crash cannot take back), within the response and
//! partition byte limits; if fewer than `min_bytes` are available the fetch
//! waits (up to `max_wait_ms`) for an append to any of its partitions.
//!
//! Each owning shard is asked once per pass, all of them at the same time.
//! A waiting fetch waits on each owning shard, and the first shard whose
//! partition moves reads its partitions there and then: the answer needs no
//! second trip to it (a woken consumer's long poll, a follower's fetch).
//! Record bytes are never copied on this shard: the tail comes as shared
//! slices of the log's DMA memory, sealed segments as a file range sent with
//! sendfile. Data from another shard's memory is copied once to cross over.
//! A consumer reading sealed data is answered from reads made ready after
//! its previous fetch, off the response's path ([`prepared`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::cluster::image::{LocalImage, ShardId, TopicId};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::fetch::{
    AbortedTransaction, FetchPiece, FetchResponseData, PartitionData, ResponseBudget, TopicData,
    encode_fetch_response, whole_batches_within,
};
use brook_engine::protocol::fetch_session::{
    FINAL_EPOCH, FetchContext, FetchList, INVALID_SESSION_ID, PartitionAnswer, PartitionFetch,
    SessionPartition, SessionRequest, TopicKey,
};
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::replica::read_replica::{Fetcher, leader_epoch_error};
use brook_engine::types::{BrokerId, LeaderEpoch, Offset, PartitionId, TopicPartition};
use futures::future::join_all;
use kafka_protocol::messages::FetchRequest;

use crate::server::error_counts::{ErrorCodes, ErrorCounts};
use crate::server::handlers::produce::storage_error_code;
use crate::server::replication::{FollowerFetched, ReplicaHost};
use crate::server::response::{FetchPart, Records, Response};
use crate::server::shard::{Shard, now_ms};
use crate::storage::{LogData, ReadOptions, StorageError};

/// The longest a fetch may wait, whatever it asks for.
const FETCH_WAIT_MAX: Duration = Duration::from_secs(60);

mod cross_shard;
mod prepared;
mod read_replica;
mod wait;

pub use prepared::PreparedReads;

use cross_shard::{received, sendable};
use prepared::{prepare_next, read_terms, take_prepared};
use read_replica::{ClientPlace, Elsewhere, access, client_place, not_read_here};
use wait::{WaitThere, Waited, wait_for_data};

/// One requested partition, in request order.
#[derive(Clone, Debug)]
struct Wanted {
    topic_slot: usize,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: i32,
    last_fetched_epoch: i32,
    /// A follower's log start offset (-1: not sent).
    log_start_offset: i64,
    /// The topic's name (shared by the topic's partitions), if known.
    topic: Rc<str>,
    /// The shard to read it on, or why it cannot be read.
    source: Result<ShardId, ErrorCode>,
}

/// One partition read on its owner: borrowed from the request on the
/// connection's shard, owned when sent to another.
#[derive(Clone, Debug)]
struct Read<'a> {
    slot: usize,
    topic: Cow<'a, str>,
    partition: PartitionId,
    offset: Offset,
    partition_max_bytes: i32,
    isolation: Isolation,
    last_fetched_epoch: LeaderEpoch,
    log_start_offset: Offset,
    /// A consumer the leader may send to another replica (KIP-392).
    client: Option<ClientPlace<'a>>,
}

/// Fetch's `isolation_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isolation {
    ReadUncommitted,
    /// Only up to the last stable offset, with the aborted transactions.
    ReadCommitted,
    /// A follower's fetch: up to the log end (Kafka's `FetchIsolation.LOG_END`),
    /// after the divergence check of its last fetched epoch; from this
    /// follower.
    Replica(BrokerId),
}

/// What one partition read produced: `R` is [`Records`] on the
/// connection's shard and [`SendableRecords`] when it crosses shards.
enum Fetched<R> {
    Error(ErrorCode),
    Elsewhere(Elsewhere),
    Data {
        high_watermark: i64,
        last_stable_offset: i64,
        log_start_offset: i64,
        /// For read_committed: the aborted transactions overlapping the
        /// records, as (producer id, first offset).
        aborted: Option<Vec<(i64, i64)>>,
        /// For a follower whose log diverged: (epoch, end offset) here.
        diverging_epoch: Option<(i32, i64)>,
        records: Option<R>,
    },
}

fn records_len(records: &Records) -> u64 {
    match records {
        Records::Local(pieces) => pieces.iter().map(|piece| piece.len() as u64).sum(),
        Records::Owned(bytes) => bytes.len() as u64,
        Records::File(range) => range.len,
    }
}

fn fetched_len(fetched: &Fetched<Records>) -> u64 {
    match fetched {
        Fetched::Data {
            records: Some(records),
            ..
        } => records_len(records),
        _ => 0,
    }
}

/// Puts a partition's records in the response as far as the budget allows:
/// whole batches only; a file range that does not fit is left for the next
/// fetch (its batch boundaries are not known without reading it).
fn spend(budget: &mut ResponseBudget, fetched: &mut Fetched<Records>, partition_max_bytes: i32) {
    let Fetched::Data { records, .. } = fetched else {
        return;
    };
    let Some(found) = records.take() else {
        return;
    };
    let len = records_len(&found);
    let kept = match budget.room(partition_max_bytes) {
        Some(room) if len > room => cut_to_whole_batches(found, room),
        _ => Some(found),
    };
    if let Some(kept) = &kept {
        budget.take(records_len(kept));
    }
    *records = kept;
}

/// The longest run of whole batches of `records` within `room` bytes.
fn cut_to_whole_batches(records: Records, room: u64) -> Option<Records> {
    let cut = match &records {
        Records::Local(pieces) => {
            let total: u64 = pieces.iter().map(|piece| piece.len() as u64).sum();
            let byte_at = |mut at: u64| {
                for piece in pieces {
                    if at < piece.len() as u64 {
                        return piece[at as usize];
                    }
                    at -= piece.len() as u64;
                }
                0
            };
            whole_batches_within(total, room, byte_at)
        }
        Records::Owned(bytes) => {
            whole_batches_within(bytes.len() as u64, room, |at| bytes[at as usize])
        }
        Records::File(_) => 0,
    };
    if cut == 0 {
        return None;
    }
    match records {
        Records::Local(pieces) => {
            let mut left = cut as usize;
            let mut kept = Vec::new();
            for piece in pieces {
                if left == 0 {
                    break;
                }
                let take = piece.len().min(left);
                kept.push(if take == piece.len() {
                    piece
                } else {
                    piece.slice(0, take)
                });
                left -= take;
            }
            Some(Records::Local(kept))
        }
        Records::Owned(bytes) => Some(Records::Owned(bytes.slice(..cut as usize))),
        Records::File(_) => None,
    }
}

pub async fn handle(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: FetchRequest = request.decode_body()?;
    let version = request.api_version;
    let session_request = session_request(&body, version);
    let (requested, forgotten) = requested(&body, session_request.uses_topic_ids);
    let context = shard.fetch_sessions.borrow_mut().context(
        now_ms().max(0) as u64,
        session_request,
        requested,
        &forgotten,
    );
    let partitions = match &context {
        FetchContext::Sessionless { partitions }
        | FetchContext::Full { partitions }
        | FetchContext::Incremental { partitions, .. } => partitions,
        FetchContext::Error(error) => {
            let data = FetchResponseData {
                error_code: error.0,
                ..FetchResponseData::default()
            };
            return Ok(respond(request.correlation_id, version, data, Vec::new()));
        }
    };
    let image = shard.local_image();
    let replica = replica_of(&body, version);
    let fetcher = match replica {
        Some(_) => Fetcher::Follower,
        None => Fetcher::Consumer {
            client_metadata: version >= 11,
        },
    };
    let (topics, wanted) = resolve(shard, &image, partitions, replica, fetcher);
    let client = client_place(shard, request, &body, replica);
    let isolation = match (replica, body.isolation_level) {
        (Some(replica), _) => Isolation::Replica(replica),
        (None, 1) => Isolation::ReadCommitted,
        (None, _) => Isolation::ReadUncommitted,
    };
    let deadline =
        Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MAX);
    let budget = ResponseBudget::new(body.max_bytes, shard.context.config.fetch_max_bytes);
    let mut pass = read_all(shard, &wanted, budget, isolation, client.as_ref()).await;
    loop {
        let bytes: u64 = pass.fetched.iter().map(fetched_len).sum();
        // An error, or a consumer sent elsewhere, is answered at once.
        let answer_now = pass
            .fetched
            .iter()
            .any(|fetched| matches!(fetched, Fetched::Error(_) | Fetched::Elsewhere(_)));
        let enough = bytes >= body.min_bytes.max(0) as u64 || answer_now;
        let expired = !enough && Instant::now() >= deadline;
        if enough || expired || shard.is_stopping() {
            let (session_id, topics, answered) = answer(
                shard,
                session_request,
                context,
                topics,
                wanted,
                pass.fetched,
            );
            let to_replica = matches!(isolation, Isolation::Replica(_));
            if expired && body.max_wait_ms > 0 {
                shard.metrics.fetch_expired(to_replica);
            }
            for (wanted, fetched) in &answered {
                shard
                    .metrics
                    .fetched(&wanted.topic, fetched_len(fetched), to_replica);
            }
            let data = FetchResponseData {
                session_id,
                topics,
                ..FetchResponseData::default()
            };
            return Ok(respond(request.correlation_id, version, data, answered));
        }
        let waited = Waited {
            pass: &pass,
            budget,
            isolation,
            client: client.as_ref(),
            deadline,
        };
        pass = match wait_for_data(shard, &wanted, waited).await {
            // The shard whose partition moved read it as it woke: only its
            // partitions are read again.
            Some(woken) => pass.with(woken, &wanted, budget),
            None => read_all(shard, &wanted, budget, isolation, client.as_ref()).await,
        };
    }
}

/// The session fields of a request; before v7 there are none and every
/// fetch is sessionless.
fn session_request(body: &FetchRequest, version: i16) -> SessionRequest {
    if version < 7 {
        return SessionRequest {
            session_id: INVALID_SESSION_ID,
            epoch: FINAL_EPOCH,
            uses_topic_ids: false,
        };
    }
    SessionRequest {
        session_id: body.session_id,
        epoch: body.session_epoch,
        uses_topic_ids: version >= 13,
    }
}

fn topic_key(name: &str, id: uuid::Uuid, uses_topic_ids: bool) -> TopicKey {
    if uses_topic_ids {
        TopicKey::Id(*id.as_bytes())
    } else {
        TopicKey::Name(Rc::from(name))
    }
}

/// The request's partitions in order, and those it forgets (v7+).
fn requested(body: &FetchRequest, uses_topic_ids: bool) -> (FetchList, Vec<SessionPartition>) {
    let mut requested = Vec::new();
    for topic in &body.topics {
        let key = topic_key(&topic.topic, topic.topic_id, uses_topic_ids);
        for partition in &topic.partitions {
            let fetch = PartitionFetch {
                fetch_offset: partition.fetch_offset,
                partition_max_bytes: partition.partition_max_bytes,
                current_leader_epoch: partition.current_leader_epoch,
                last_fetched_epoch: partition.last_fetched_epoch,
                log_start_offset: partition.log_start_offset,
            };
            let at = SessionPartition {
                topic: key.clone(),
                partition: partition.partition,
            };
            requested.push((at, fetch));
        }
    }
    let mut forgotten = Vec::new();
    for topic in &body.forgotten_topics_data {
        let key = topic_key(&topic.topic, topic.topic_id, uses_topic_ids);
        forgotten.extend(topic.partitions.iter().map(|partition| SessionPartition {
            topic: key.clone(),
            partition: *partition,
        }));
    }
    (requested, forgotten)
}

/// The partitions to read in order, with the topic list of the response
/// (one entry per run of partitions of the same topic).
fn resolve(
    shard: &Shard,
    image: &LocalImage,
    partitions: &FetchList,
    replica: Option<BrokerId>,
    fetcher: Fetcher,
) -> (Vec<TopicData>, Vec<Wanted>) {
    let mut topics = Vec::new();
    let mut wanted = Vec::new();
    let mut current: Option<(&TopicKey, Option<Rc<str>>)> = None;
    for (at, fetch) in partitions {
        if current.as_ref().is_none_or(|(key, _)| **key != at.topic) {
            let (name, id) = match &at.topic {
                TopicKey::Id(id) => (
                    image
                        .topic_by_id(TopicId(*id))
                        .map(|known| Rc::from(known.name.as_str())),
                    TopicId(*id),
                ),
                TopicKey::Name(name) => (
                    Some(name.clone()),
                    image
                        .topic(name)
                        .map_or(TopicId::default(), |known| known.id),
                ),
            };
            topics.push(TopicData {
                name: name.as_deref().unwrap_or_default().to_owned(),
                topic_id: id.0,
                partitions: Vec::new(),
            });
            current = Some((&at.topic, name));
        }
        let name = current.as_ref().and_then(|(_, name)| name.clone());
        let source = match &name {
            None => Err(ErrorCode::UNKNOWN_TOPIC_ID),
            Some(name) => match image.owner_at(name, PartitionId(at.partition)) {
                None => Err(image.not_here(&TopicPartition::new(&**name, at.partition))),
                Some(owner) => match access(shard, name, at.partition, fetcher, fetch) {
                    Err(error) => Err(error),
                    Ok(()) => match replica_error(shard, name, at.partition, replica, fetch) {
                        Some(error) => Err(error),
                        None => Ok(owner),
                    },
                },
            },
        };
        wanted.push(Wanted {
            topic_slot: topics.len() - 1,
            topic: name.unwrap_or_else(|| Rc::from("")),
            partition: at.partition,
            fetch_offset: fetch.fetch_offset,
            partition_max_bytes: fetch.partition_max_bytes,
            last_fetched_epoch: fetch.last_fetched_epoch,
            log_start_offset: fetch.log_start_offset,
            source,
        });
    }
    (topics, wanted)
}

/// A follower's fetch of a partition it is not a replica of: Kafka's
/// UNKNOWN_LEADER_EPOCH when it named an epoch (it may learn of a
/// reassignment yet), NOT_LEADER_OR_FOLLOWER otherwise.
fn replica_error(
    shard: &Shard,
    topic: &str,
    partition: i32,
    replica: Option<BrokerId>,
    fetch: &PartitionFetch,
) -> Option<ErrorCode> {
    let replica = replica?;
    let is_replica = shard
        .with_registration(topic, PartitionId(partition), |registration| {
            replica.0 != shard.context.broker_id && registration.replicas.contains(&replica)
        })
        .unwrap_or(false);
    match is_replica {
        true => None,
        false if fetch.current_leader_epoch >= 0 => Some(ErrorCode::UNKNOWN_LEADER_EPOCH),
        false => Some(ErrorCode::NOT_LEADER_OR_FOLLOWER),
    }
}

/// The follower a fetch comes from, if it is a replica fetch: its
/// `ReplicaState` (v15+, KIP-903) or `ReplicaId` (earlier).
fn replica_of(body: &FetchRequest, version: i16) -> Option<BrokerId> {
    let id = if version >= 15 {
        body.replica_state.replica_id.0
    } else {
        body.replica_id.0
    };
    (id >= 0).then_some(BrokerId(id))
}

/// The partitions a response carries, with what was read of each.
type Answered = Vec<(Wanted, Fetched<Records>)>;

/// What the session remembers of one partition's answer.
fn partition_answer(fetched: &Fetched<Records>) -> PartitionAnswer {
    match fetched {
        Fetched::Error(error) => PartitionAnswer {
            error: *error,
            high_watermark: -1,
            log_start_offset: -1,
            has_records: false,
            must_send: false,
        },
        Fetched::Elsewhere(elsewhere) => PartitionAnswer {
            error: ErrorCode::NONE,
            high_watermark: elsewhere.high_watermark,
            log_start_offset: elsewhere.log_start_offset,
            has_records: false,
            must_send: true,
        },
        Fetched::Data {
            high_watermark,
            log_start_offset,
            diverging_epoch,
            ..
        } => PartitionAnswer {
            error: ErrorCode::NONE,
            high_watermark: *high_watermark,
            log_start_offset: *log_start_offset,
            has_records: fetched_len(fetched) > 0,
            must_send: diverging_epoch.is_some(),
        },
    }
}

/// Settles the session side of the answer: the response's session id, and
/// the partitions it carries (an incremental fetch carries only those with
/// news), with their topics.
fn answer(
    shard: &Shard,
    request: SessionRequest,
    context: FetchContext,
    topics: Vec<TopicData>,
    wanted: Vec<Wanted>,
    fetched: Vec<Fetched<Records>>,
) -> (i32, Vec<TopicData>, Answered) {
    let answers: Vec<PartitionAnswer> = fetched.iter().map(partition_answer).collect();
    let all = wanted.into_iter().zip(fetched).collect();
    let mut cache = shard.fetch_sessions.borrow_mut();
    match context {
        FetchContext::Sessionless { .. } | FetchContext::Error(_) => {
            (INVALID_SESSION_ID, topics, all)
        }
        FetchContext::Full { partitions } => {
            let opened = partitions
                .into_iter()
                .zip(answers)
                .map(|((at, fetch), answer)| (at, fetch, answer))
                .collect();
            let random = RandomState::new().hash_one(Instant::now());
            let session_id = cache.open(
                now_ms().max(0) as u64,
                random,
                request.uses_topic_ids,
                opened,
            );
            (session_id, topics, all)
        }
        FetchContext::Incremental {
            session_id,
            partitions,
        } => {
            let chosen = cache.answered(session_id, &partitions, &answers);
            let (topics, kept) = keep_chosen(topics, all, &chosen);
            (session_id, topics, kept)
        }
    }
}

/// The chosen partitions, with only the topics they name, renumbered.
fn keep_chosen(
    topics: Vec<TopicData>,
    all: Answered,
    chosen: &[bool],
) -> (Vec<TopicData>, Answered) {
    let mut topics: Vec<Option<TopicData>> = topics.into_iter().map(Some).collect();
    let mut kept_topics = Vec::new();
    let mut kept = Vec::new();
    let mut last_slot = None;
    for ((mut wanted, fetched), chosen) in all.into_iter().zip(chosen) {
        if !chosen {
            continue;
        }
        if last_slot != Some(wanted.topic_slot) {
            last_slot = Some(wanted.topic_slot);
            // Slots only grow along the list, so each is taken once.
            debug_assert!(topics[wanted.topic_slot].is_some());
            kept_topics.extend(topics[wanted.topic_slot].take());
        }
        wanted.topic_slot = kept_topics.len() - 1;
        kept.push((wanted, fetched));
    }
    (kept_topics, kept)
}

/// What one pass read, and each owner's news generation before it read (a
/// wait for news starts from there).
struct Pass {
    fetched: Vec<Fetched<Records>>,
    generations: BTreeMap<ShardId, u64>,
}

/// One owning shard's reads: the owner, its news generation before it read,
/// and each slot's answer.
struct OwnerReads {
    owner: ShardId,
    generation: u64,
    results: Vec<(usize, Fetched<Records>)>,
}

impl Pass {
    /// This pass with one owner's partitions read again, the response
    /// budget spent again over every partition in request order.
    fn with(self, reread: OwnerReads, wanted: &[Wanted], budget: ResponseBudget) -> Pass {
        let Pass {
            mut fetched,
            mut generations,
        } = self;
        generations.insert(reread.owner, reread.generation);
        for (slot, result) in reread.results {
            fetched[slot] = result;
        }
        spend_in_order(&mut fetched, wanted, budget);
        Pass {
            fetched,
            generations,
        }
    }
}

/// Spends `budget` over every partition's records in request order (each
/// owner spent it as if its partitions were alone).
fn spend_in_order(fetched: &mut [Fetched<Records>], wanted: &[Wanted], budget: ResponseBudget) {
    let mut budget = budget;
    for (result, partition) in fetched.iter_mut().zip(wanted) {
        spend(&mut budget, result, partition.partition_max_bytes);
    }
}

/// The request's readable partitions (slots of `wanted`) by owning shard,
/// but for those `answered` already.
fn slots_by_owner(wanted: &[Wanted], answered: &[bool]) -> BTreeMap<ShardId, Vec<usize>> {
    let mut by_owner: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
    for (slot, partition) in wanted.iter().enumerate() {
        if answered.get(slot) == Some(&true) {
            continue;
        }
        if let Ok(owner) = &partition.source {
            by_owner.entry(*owner).or_default().push(slot);
        }
    }
    by_owner
}

/// The reads of the request's readable partitions, by owning shard, but
/// for those `answered` already.
fn reads_by_owner<'a>(
    wanted: &'a [Wanted],
    isolation: Isolation,
    client: Option<&'a ClientPlace<'_>>,
    answered: &[bool],
) -> Vec<(ShardId, Vec<Read<'a>>)> {
    slots_by_owner(wanted, answered)
        .into_iter()
        .map(|(owner, slots)| {
            let reads = slots.into_iter().map(|slot| {
                let partition = &wanted[slot];
                Read {
                    slot,
                    topic: Cow::Borrowed(&*partition.topic),
                    partition: PartitionId(partition.partition),
                    offset: Offset(partition.fetch_offset),
                    partition_max_bytes: partition.partition_max_bytes,
                    isolation,
                    last_fetched_epoch: LeaderEpoch(partition.last_fetched_epoch),
                    log_start_offset: Offset(partition.log_start_offset),
                    client: client.map(ClientPlace::borrowed),
                }
            });
            (owner, reads.collect())
        })
        .collect()
}

/// Reads every partition, asking each owning shard once and all at the same
/// time (but for reads prepared here one fetch ahead), then spends the
/// response budget in request order, and prepares the next reads.
async fn read_all(
    shard: &Rc<Shard>,
    wanted: &[Wanted],
    budget: ResponseBudget,
    isolation: Isolation,
    client: Option<&ClientPlace<'_>>,
) -> Pass {
    let mut fetched: Vec<Option<Fetched<Records>>> = wanted
        .iter()
        .map(|partition| {
            partition
                .source
                .as_ref()
                .err()
                .map(|error| Fetched::Error(*error))
        })
        .collect();
    let terms = |partition: &Wanted| read_terms(shard, partition, budget, isolation, client);
    take_prepared(shard, wanted, terms, &mut fetched);
    let answered: Vec<bool> = fetched.iter().map(Option::is_some).collect();
    let reads = reads_by_owner(wanted, isolation, client, &answered)
        .into_iter()
        .map(|(owner, reads)| read_on(shard, owner, reads, budget, None));
    let mut generations = BTreeMap::new();
    // Without a wait first, every owner reads.
    for read in join_all(reads).await.into_iter().flatten() {
        generations.insert(read.owner, read.generation);
        for (slot, result) in read.results {
            fetched[slot] = Some(result);
        }
    }
    let mut fetched: Vec<Fetched<Records>> = fetched
        .into_iter()
        .map(|result| result.unwrap_or(Fetched::Error(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)))
        .collect();
    spend_in_order(&mut fetched, wanted, budget);
    prepare_next(shard, wanted, &fetched, terms, budget);
    Pass {
        fetched,
        generations,
    }
}

/// Reads `reads` on `owner` (after `wait` there, if any): directly if that
/// is this shard, else with one trip over the mesh, so that a waiting fetch
/// woken on the owner reads there at once rather than coming back first.
/// Also answers the owner's news generation before the reads. `None`: the
/// wait ended with nothing appended.
async fn read_on(
    shard: &Rc<Shard>,
    owner: ShardId,
    reads: Vec<Read<'_>>,
    budget: ResponseBudget,
    wait: Option<WaitThere>,
) -> Option<OwnerReads> {
    if owner == shard.id {
        if !WaitThere::ended_with_append(wait, shard).await {
            return None;
        }
        let generation = shard.store.news_generation();
        let results = read_partitions(shard, &reads, budget).await;
        return Some(OwnerReads {
            owner,
            generation,
            results,
        });
    }
    let slots: Vec<usize> = reads.iter().map(|read| read.slot).collect();
    let reads: Vec<Read<'static>> = reads
        .into_iter()
        .map(|read| Read {
            topic: Cow::Owned(read.topic.into_owned()),
            client: read.client.map(ClientPlace::into_owned),
            ..read
        })
        .collect();
    let remote = shard
        .on_shard(owner, move |owner| async move {
            if !WaitThere::ended_with_append(wait, &owner).await {
                return None;
            }
            let generation = owner.store.news_generation();
            let results = read_partitions(&owner, &reads, budget)
                .await
                .into_iter()
                .map(|(slot, fetched)| (slot, sendable(fetched)))
                .collect::<Vec<_>>();
            Some((generation, results))
        })
        .await;
    let results = match remote {
        Ok(None) => return None,
        Ok(Some((generation, results))) => OwnerReads {
            owner,
            generation,
            results: results
                .into_iter()
                .map(|(slot, fetched)| (slot, received(fetched)))
                .collect(),
        },
        Err(_) => OwnerReads {
            owner,
            generation: 0,
            results: slots
                .into_iter()
                .map(|slot| (slot, Fetched::Error(ErrorCode::NOT_LEADER_OR_FOLLOWER)))
                .collect(),
        },
    };
    Some(results)
}

/// Reads on the owning shard, spending this shard's share of the budget as
/// the whole response would (the caller spends it again across shards).
async fn read_partitions(
    shard: &Rc<Shard>,
    reads: &[Read<'_>],
    mut budget: ResponseBudget,
) -> Vec<(usize, Fetched<Records>)> {
    let mut results = Vec::with_capacity(reads.len());
    for read in reads {
        if let Some(answered) = not_read_here(shard, read) {
            results.push((read.slot, answered));
            continue;
        }
        let limit = budget.read_limit(read.partition_max_bytes);
        let mut fetched = read_local(shard, read, limit).await;
        spend(&mut budget, &mut fetched, read.partition_max_bytes);
        results.push((read.slot, fetched));
    }
    results
}

/// The leader-epoch check of Fetch and ListOffsets (KIP-320): the client's
/// `current_leader_epoch` against the one the partition is served at.
pub(crate) fn epoch_error(current_leader_epoch: i32, served: LeaderEpoch) -> Option<ErrorCode> {
    leader_epoch_error(current_leader_epoch, served)
}

/// Reads on the owning shard; with no `limit` only the partition's offsets.
async fn read_local(shard: &Rc<Shard>, read: &Read<'_>, limit: Option<u64>) -> Fetched<Records> {
    let offset = read.offset;
    let Some(log) = shard.store.partition_at(&read.topic, read.partition) else {
        return Fetched::Error(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    };
    let mut diverging = None;
    if let Isolation::Replica(replica) = read.isolation {
        match log.diverging_epoch(offset, read.last_fetched_epoch) {
            // The follower's position moves the leader's state (its LEO,
            // the ISR, the HW) before the answer carries the HW.
            Ok(None) => {
                let topic_partition = TopicPartition {
                    topic: read.topic.to_string(),
                    partition: read.partition,
                };
                let fetched = FollowerFetched {
                    replica,
                    fetch_offset: offset,
                    log_start_offset: read.log_start_offset,
                };
                if let Err(error) =
                    ReplicaHost::follower_fetched(shard, &topic_partition, &log, fetched)
                {
                    return Fetched::Error(error);
                }
            }
            Ok(Some(diverged)) => diverging = Some(diverged),
            Err(error) => return Fetched::Error(error),
        }
    }
    let high_watermark = log.high_watermark();
    let last_stable_offset = log.last_stable_offset(high_watermark);
    let max_offset = match read.isolation {
        Isolation::ReadUncommitted => high_watermark,
        Isolation::ReadCommitted => last_stable_offset,
        Isolation::Replica(_) => log.log_end_offset(),
    };
    let log_start_offset = log.log_start_offset();
    if let Some(diverged) = diverging {
        return Fetched::Data {
            high_watermark: high_watermark.0,
            last_stable_offset: last_stable_offset.0,
            log_start_offset: log_start_offset.0,
            aborted: None,
            diverging_epoch: Some((diverged.epoch.0, diverged.end_offset.0)),
            records: None,
        };
    }
    // Nothing new (the usual case for most partitions of a session): no
    // read, but what a read of nothing would answer.
    let nothing_new = offset == max_offset && offset >= log_start_offset && log.is_usable();
    let Some(limit) = limit.filter(|_| !nothing_new) else {
        let committed = read.isolation == Isolation::ReadCommitted;
        return Fetched::Data {
            high_watermark: high_watermark.0,
            last_stable_offset: last_stable_offset.0,
            log_start_offset: log_start_offset.0,
            aborted: (limit.is_some() && committed).then(Vec::new),
            diverging_epoch: None,
            records: None,
        };
    };
    let options = ReadOptions {
        // At least one byte: the first batch comes whole whatever its size.
        max_bytes: usize::try_from(limit).unwrap_or(usize::MAX).max(1),
        max_offset,
        allow_file_range: true,
    };
    let outcome = match log.read(offset, options).await {
        Ok(outcome) => outcome,
        Err(error) => {
            let code = storage_error_code(&error);
            // An offline log was logged once, with its cause, when it went
            // offline; its consumers retry, and must not flood the log.
            let already_logged = matches!(error, StorageError::Offline { .. });
            if code == ErrorCode::KAFKA_STORAGE_ERROR && !already_logged {
                let partition = format!("{}-{}", read.topic, read.partition.0);
                tracing::error!(%partition, %offset, %error, "fetch failed");
            }
            return Fetched::Error(code);
        }
    };
    let aborted = (read.isolation == Isolation::ReadCommitted).then(|| {
        log.aborted_transactions(offset, outcome.next_offset)
            .into_iter()
            .map(|(producer_id, first_offset)| (producer_id.0, first_offset.0))
            .collect()
    });
    let records = match outcome.data {
        LogData::Empty => None,
        LogData::Memory(pieces) => Some(Records::Local(pieces)),
        LogData::File(range) => Some(Records::File(range)),
    };
    Fetched::Data {
        high_watermark: high_watermark.0,
        last_stable_offset: last_stable_offset.0,
        log_start_offset: outcome.log_start_offset.0,
        aborted,
        diverging_epoch: None,
        records,
    }
}

/// Encodes the response: `data` has the topics, each partition of
/// `answered` joins its topic, and records are spliced in request order.
fn respond(
    correlation_id: i32,
    version: i16,
    mut data: FetchResponseData,
    answered: Answered,
) -> Response {
    let mut records_by_slot: Vec<Option<Records>> = Vec::with_capacity(answered.len());
    for (partition, fetched) in answered {
        let (error, high_watermark, last_stable_offset, log_start_offset) = match &fetched {
            Fetched::Error(error) => (*error, -1, -1, -1),
            Fetched::Elsewhere(elsewhere) => (
                ErrorCode::NONE,
                elsewhere.high_watermark,
                elsewhere.last_stable_offset,
                elsewhere.log_start_offset,
            ),
            Fetched::Data {
                high_watermark,
                last_stable_offset,
                log_start_offset,
                ..
            } => (
                ErrorCode::NONE,
                *high_watermark,
                *last_stable_offset,
                *log_start_offset,
            ),
        };
        let preferred_read_replica = match &fetched {
            Fetched::Elsewhere(elsewhere) => elsewhere.replica.0,
            _ => -1,
        };
        let (aborted, diverging_epoch, records) = match fetched {
            Fetched::Error(_) | Fetched::Elsewhere(_) => (None, None, None),
            Fetched::Data {
                aborted,
                diverging_epoch,
                records,
                ..
            } => (aborted, diverging_epoch, records),
        };
        let records_bytes = records
            .as_ref()
            .map_or(0, |records| records_len(records) as usize);
        data.topics[partition.topic_slot]
            .partitions
            .push(PartitionData {
                partition_index: partition.partition,
                error_code: error.0,
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted_transactions: aborted.map(|aborted| {
                    aborted
                        .into_iter()
                        .map(|(producer_id, first_offset)| AbortedTransaction {
                            producer_id,
                            first_offset,
                        })
                        .collect()
                }),
                preferred_read_replica,
                records_bytes,
                diverging_epoch,
            });
        records_by_slot.push(records);
    }
    let mut errors = ErrorCounts::default();
    data.error_codes(&mut errors);
    // Partitions are numbered in request order, the order of the slots.
    match encode_fetch_response(correlation_id, version, &data) {
        Ok(pieces) => Response::Fetch(
            pieces
                .into_iter()
                .filter_map(|piece| match piece {
                    FetchPiece::Bytes(bytes) => Some(FetchPart::Bytes(bytes)),
                    FetchPiece::Records { index } => records_by_slot
                        .get_mut(index)
                        .and_then(Option::take)
                        .map(FetchPart::Records),
                })
                .collect(),
            errors,
        ),
        Err(error) => Response::Close(format!("encoding a fetch response: {error}")),
    }
}
