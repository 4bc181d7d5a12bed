//! Incremental fetch sessions (KIP-227): a consumer of many partitions names
//! them all once; later fetches carry only what changed (new fetch offsets,
//! added and forgotten partitions) and their answers only the partitions with
//! news (records, a moved high watermark or log start, an error). Without
//! them a consumer of 10,000 mostly idle partitions sends and receives all
//! 10,000 on every fetch.
//!
//! The rules are Kafka's (`FetchSession.scala`, `FetchMetadata`):
//! - epoch 0 (initial) or -1 (final) is a *full* fetch: any session it names
//!   is closed; epoch 0 then opens a new session holding the request's
//!   partitions once answered (if the cache has room), epoch -1 does not.
//! - any other epoch is *incremental*: the named session must exist
//!   (`FETCH_SESSION_ID_NOT_FOUND`), be at that epoch
//!   (`INVALID_FETCH_SESSION_EPOCH`) and name topics the same way, by name
//!   before Fetch v13 and by id from v13 (`FETCH_SESSION_TOPIC_ID_ERROR`).
//!   Its partitions are updated, added and forgotten; the whole session is
//!   read, and the epoch moves on. A session left empty is closed.
//! - partitions that returned records move to the end of the session, so a
//!   response budget that runs out is shared fairly across fetches.
//!
//! The cache holds at most `slots_max` sessions. A new one may take the place
//! of a session unused for [`SESSION_EVICTION_MS`], else of the smallest
//! session if it has fewer partitions than the new one (Kafka's rules less
//! the follower privilege: Brook has no followers yet).
//!
//! One cache lives on each shard and holds the sessions of the connections
//! on that shard; session ids carry the shard in their residue (`id mod
//! shards`), so ids are unique broker-wide and a fetch arriving on another
//! shard is told `FETCH_SESSION_ID_NOT_FOUND` and starts a new session.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::protocol::errors::ErrorCode;

/// The session id of a fetch outside any session.
pub const INVALID_SESSION_ID: i32 = 0;
/// The epoch of a full fetch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch of a full fetch that closes its session and opens none.
pub const FINAL_EPOCH: i32 = -1;
/// How long a session must go unused before any new one may evict it
/// (Kafka's `min.incremental.fetch.session.eviction.ms` default).
pub const SESSION_EVICTION_MS: u64 = 120_000;
/// The most partitions one session holds: a full fetch of more opens none
/// (the client stays sessionless), and an incremental one that grows a
/// session past it closes the session (answered `FETCH_SESSION_ID_NOT_FOUND`,
/// as if evicted).
pub const SESSION_PARTITIONS_MAX: usize = 100_000;
/// The most partitions one shard's sessions hold together (a bound on the
/// cache's memory, ~100 bytes each), enforced the same way.
pub const CACHE_PARTITIONS_MAX: usize = 1_000_000;

/// How a fetch names a topic: by name before Fetch v13, by id from v13.
/// The name is shared by the topic's partitions (a session of 10,000
/// partitions of one topic holds one copy).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TopicKey {
    Name(Rc<str>),
    Id([u8; 16]),
}

/// A partition as a fetch names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionPartition {
    pub topic: TopicKey,
    pub partition: i32,
}

/// What a fetch asks of one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionFetch {
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
    /// A follower's epoch of the batch before `fetch_offset` (v12+; -1
    /// none), for the divergence check.
    pub last_fetched_epoch: i32,
    /// A follower's log start offset (v5+; -1 none).
    pub log_start_offset: i64,
}

/// What the broker answered for one partition, as a session remembers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionAnswer {
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub has_records: bool,
    /// A preferred read replica or a diverging epoch: sent whatever else
    /// changed (Kafka's `maybeUpdateResponseData`).
    pub must_send: bool,
}

/// The session fields of a Fetch request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRequest {
    pub session_id: i32,
    pub epoch: i32,
    /// Fetch v13+: topics are named by id.
    pub uses_topic_ids: bool,
}

/// The partitions one fetch reads, in order.
pub type FetchList = Vec<(SessionPartition, PartitionFetch)>;

/// How one fetch is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchContext {
    /// Read and answer the request's partitions; the response's session id
    /// is 0.
    Sessionless { partitions: FetchList },
    /// Read and answer the request's partitions, then call
    /// [`FetchSessionCache::open`] for the response's session id.
    Full { partitions: FetchList },
    /// Read `partitions` (the whole session, in its order), then call
    /// [`FetchSessionCache::answered`] to learn which to answer.
    Incremental {
        session_id: i32,
        partitions: FetchList,
    },
    /// Answer only this top-level error, with session id 0.
    Error(ErrorCode),
}

#[derive(Clone, Debug)]
struct Cached {
    key: SessionPartition,
    fetch: PartitionFetch,
    high_watermark: i64,
    log_start_offset: i64,
}

impl Cached {
    /// Whether the answer must be sent (Kafka's `maybeUpdateResponseData`),
    /// remembering what it tells the client.
    fn must_answer(&mut self, answer: &PartitionAnswer) -> bool {
        let mut must = answer.has_records || answer.must_send;
        if self.high_watermark != answer.high_watermark {
            self.high_watermark = answer.high_watermark;
            must = true;
        }
        if self.log_start_offset != answer.log_start_offset {
            self.log_start_offset = answer.log_start_offset;
            must = true;
        }
        if answer.error.is_error() {
            // Forget the watermark, so the partition is sent again when the
            // error goes away.
            self.high_watermark = -1;
            must = true;
        }
        must
    }
}

/// One client's session: its partitions in fetch order.
#[derive(Debug)]
struct FetchSession {
    epoch: i32,
    uses_topic_ids: bool,
    last_used_ms: u64,
    /// Partitions by position; a partition that returned records moves to a
    /// new, last, position.
    order: BTreeMap<u64, Cached>,
    positions: HashMap<SessionPartition, u64>,
    next_position: u64,
}

impl FetchSession {
    fn push(&mut self, cached: Cached) {
        let position = self.next_position;
        self.next_position += 1;
        self.positions.insert(cached.key.clone(), position);
        self.order.insert(position, cached);
    }

    /// Applies an incremental request: updates, additions, removals.
    fn update(&mut self, requested: FetchList, forgotten: &[SessionPartition]) {
        for (key, fetch) in requested {
            match self.positions.get(&key) {
                Some(position) => {
                    let cached = self.order.get_mut(position).expect("positions index order");
                    cached.fetch = fetch;
                }
                None => self.push(Cached {
                    key,
                    fetch,
                    high_watermark: -1,
                    log_start_offset: -1,
                }),
            }
        }
        for key in forgotten {
            if let Some(position) = self.positions.remove(key) {
                self.order.remove(&position);
            }
        }
        debug_assert_eq!(self.order.len(), self.positions.len());
    }

    fn size(&self) -> usize {
        self.order.len()
    }
}

/// The successor of a session epoch (Kafka's `FetchMetadata.nextEpoch`):
/// positive, wrapping from `i32::MAX` to 1.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// The fetch sessions of one shard. Lives on that shard.
#[derive(Debug)]
pub struct FetchSessionCache {
    sessions: HashMap<i32, FetchSession>,
    slots_max: usize,
    /// [`SESSION_PARTITIONS_MAX`] and [`CACHE_PARTITIONS_MAX`] (smaller in
    /// tests).
    session_partitions_max: usize,
    cache_partitions_max: usize,
    shard: u16,
    shards: u16,
}

impl FetchSessionCache {
    /// A cache of `slots_max` sessions for shard `shard` of `shards`.
    pub fn new(slots_max: usize, shard: u16, shards: u16) -> FetchSessionCache {
        assert!(shard < shards.max(1), "shard {shard} of {shards}");
        FetchSessionCache {
            sessions: HashMap::new(),
            slots_max,
            session_partitions_max: SESSION_PARTITIONS_MAX,
            cache_partitions_max: CACHE_PARTITIONS_MAX,
            shard,
            shards: shards.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Decides how a fetch is served, applying an incremental request to its
    /// session (and moving its epoch on).
    pub fn context(
        &mut self,
        now_ms: u64,
        request: SessionRequest,
        requested: FetchList,
        forgotten: &[SessionPartition],
    ) -> FetchContext {
        let full = request.epoch == INITIAL_EPOCH || request.epoch == FINAL_EPOCH;
        if full {
            if request.session_id != INVALID_SESSION_ID {
                self.sessions.remove(&request.session_id);
            }
            return if request.epoch == FINAL_EPOCH || self.slots_max == 0 {
                FetchContext::Sessionless {
                    partitions: requested,
                }
            } else {
                FetchContext::Full {
                    partitions: requested,
                }
            };
        }
        let total_before = self.partitions_total();
        let Some(session) = self.sessions.get_mut(&request.session_id) else {
            return FetchContext::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.epoch != request.epoch {
            return FetchContext::Error(ErrorCode::INVALID_FETCH_SESSION_EPOCH);
        }
        if session.uses_topic_ids != request.uses_topic_ids {
            return FetchContext::Error(ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR);
        }
        let size_before = session.size();
        session.update(requested, forgotten);
        let size = session.size();
        let total = total_before - size_before + size;
        let too_big = size > self.session_partitions_max
            || (size > size_before && total > self.cache_partitions_max);
        if too_big {
            self.sessions.remove(&request.session_id);
            return FetchContext::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        }
        if size == 0 {
            self.sessions.remove(&request.session_id);
            return FetchContext::Sessionless {
                partitions: Vec::new(),
            };
        }
        session.epoch = next_epoch(session.epoch);
        session.last_used_ms = now_ms;
        FetchContext::Incremental {
            session_id: request.session_id,
            partitions: session
                .order
                .values()
                .map(|cached| (cached.key.clone(), cached.fetch))
                .collect(),
        }
    }

    /// After a full fetch was answered: opens a session of its partitions if
    /// there is room, returning its id for the response (0 if none).
    /// `random` picks the id (the caller's randomness).
    pub fn open(
        &mut self,
        now_ms: u64,
        random: u64,
        uses_topic_ids: bool,
        answered: Vec<(SessionPartition, PartitionFetch, PartitionAnswer)>,
    ) -> i32 {
        let size = answered.len();
        let fits = size <= self.session_partitions_max
            && self.partitions_total() + size <= self.cache_partitions_max;
        if size == 0 || !fits || !self.make_room(now_ms, size) {
            return INVALID_SESSION_ID;
        }
        let id = self.new_id(random);
        let mut session = FetchSession {
            epoch: next_epoch(INITIAL_EPOCH),
            uses_topic_ids,
            last_used_ms: now_ms,
            order: BTreeMap::new(),
            positions: HashMap::with_capacity(size),
            next_position: 0,
        };
        for (key, fetch, answer) in answered {
            let mut cached = Cached {
                key,
                fetch,
                high_watermark: -1,
                log_start_offset: -1,
            };
            cached.must_answer(&answer);
            // A partition named twice keeps its last request, as Kafka's
            // map of the request's partitions does.
            if let Some(position) = session.positions.remove(&cached.key) {
                session.order.remove(&position);
            }
            session.push(cached);
        }
        self.sessions.insert(id, session);
        debug_assert!(self.sessions.len() <= self.slots_max);
        id
    }

    /// After an incremental fetch was read: which of `answers` the response
    /// carries, for the partitions `listed` by [`FetchContext::Incremental`].
    /// Remembers what it tells the client; partitions that returned records
    /// move to the end of the session.
    pub fn answered(
        &mut self,
        session_id: i32,
        listed: &[(SessionPartition, PartitionFetch)],
        answers: &[PartitionAnswer],
    ) -> Vec<bool> {
        assert_eq!(listed.len(), answers.len(), "one answer per partition");
        let Some(session) = self.sessions.get_mut(&session_id) else {
            // Closed meanwhile (a full fetch of the same client): answer all.
            return vec![true; answers.len()];
        };
        let same = session.order.len() == listed.len()
            && session
                .order
                .values()
                .zip(listed)
                .all(|(cached, (key, _))| cached.key == *key);
        if !same {
            // Changed meanwhile, by a fetch sent before this one was
            // answered (clients do not): answer all, remember nothing.
            return vec![true; answers.len()];
        }
        let mut moved = Vec::new();
        let chosen = session
            .order
            .iter_mut()
            .zip(answers)
            .map(|((position, cached), answer)| {
                if answer.has_records {
                    moved.push(*position);
                }
                cached.must_answer(answer)
            })
            .collect();
        for position in moved {
            let cached = session.order.remove(&position).expect("listed just now");
            session.positions.remove(&cached.key);
            session.push(cached);
        }
        chosen
    }

    /// Partitions held by all sessions (at most `slots_max` of them).
    fn partitions_total(&self) -> usize {
        self.sessions.values().map(FetchSession::size).sum()
    }

    /// Frees a slot for a session of `size` partitions if the rules allow.
    fn make_room(&mut self, now_ms: u64, size: usize) -> bool {
        if self.sessions.len() < self.slots_max {
            return true;
        }
        let stale = self
            .sessions
            .iter()
            .filter(|(_, session)| {
                now_ms.saturating_sub(session.last_used_ms) >= SESSION_EVICTION_MS
            })
            .min_by_key(|(_, session)| session.last_used_ms)
            .map(|(id, _)| *id);
        let smaller = || {
            self.sessions
                .iter()
                .min_by_key(|(_, session)| (session.size(), session.last_used_ms))
                .filter(|(_, session)| session.size() < size)
                .map(|(id, _)| *id)
        };
        match stale.or_else(smaller) {
            Some(id) => {
                self.sessions.remove(&id);
                true
            }
            None => false,
        }
    }

    /// A positive id unused in this cache whose residue names this shard.
    fn new_id(&self, mut random: u64) -> i32 {
        let shards = i64::from(self.shards);
        let per_shard = (i64::from(i32::MAX) - i64::from(self.shard)) / shards;
        loop {
            let slot = (random % per_shard as u64) as i64;
            let id = slot * shards + i64::from(self.shard);
            let id = i32::try_from(id).expect("below i32::MAX by construction");
            if id != INVALID_SESSION_ID && !self.sessions.contains_key(&id) {
                return id;
            }
            // Xorshift to the next candidate; the cache is far from full.
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random = random.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests;
