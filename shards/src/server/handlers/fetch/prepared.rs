//! Consumer reads prepared one fetch ahead.
//!
//! A consumer catching up asks, fetch after fetch, for the bytes right
//! after those it was just sent. Each read on its path costs the response
//! its start: for a partition another shard owns, a trip there and back
//! (two reactor wake-ups across cores, the larger part of the gap to
//! Kafka's turnaround in kcat's catch-up read; bench/RESULTS.md), and on
//! any shard the index lookup and header reads. So when a fetch answers a
//! partition with a file range, the connection's shard has the read at the
//! offset after it made on the owner (directly when that is this shard),
//! off the response's path, and keeps it here. The next fetch that asks for
//! exactly that read takes it instead of reading.
//!
//! A kept read answers as the owner would have when it made it. It is used
//! only while that is still the answer the owner would give, but for the
//! high watermark having moved up since (a read may always answer with
//! less than there is; the next fetch sees the rest):
//! - the log's [`ReadVersion`] has not moved (the log start offset, the
//!   log going offline, closing or being truncated move it);
//! - this shard still sees this broker lead the partition at the same
//!   leader epoch;
//! - the fetch asks for the same offset, limits and isolation;
//! - it is younger than [`PREPARED_READ_AGE_MAX`]. Older ones are dropped
//!   at the shard's next fetch, which bounds how long a kept file range
//!   holds a deleted segment's descriptor open.
//!
//! Only file ranges are prepared: the reads of sealed data, which a
//! consumer catching up makes fetch after fetch. A read of the tail moves
//! with every append and is made on the fetch's path.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::cluster::image::ShardId;
use brook_engine::protocol::fetch::ResponseBudget;
use brook_engine::types::{LeaderEpoch, Offset, PartitionId};

use super::read_replica::{ClientPlace, not_read_here};
use super::{Fetched, Isolation, Read, Wanted, read_local, received, sendable};
use crate::server::response::Records;
use crate::server::shard::Shard;
use crate::storage::ReadVersion;

/// How long a prepared read may wait for its fetch. A consumer catching up
/// asks again within milliseconds.
pub(super) const PREPARED_READ_AGE_MAX: Duration = Duration::from_secs(1);

/// The most reads a shard keeps (more are not prepared).
const PREPARED_READS_MAX: usize = 1024;

/// Which read: topic, partition, fetch offset.
type ReadKey = (Rc<str>, i32, i64);

/// What a fetch must ask, and the log and leader it must still find, to
/// take a prepared read.
#[derive(Clone, Debug)]
pub(super) struct ReadTerms {
    pub(super) partition_max_bytes: i32,
    /// The read's byte limit, from the response budget of the fetch.
    pub(super) limit: Option<u64>,
    pub(super) isolation: Isolation,
    /// The leader epoch this shard saw this broker lead the partition at.
    pub(super) leader_epoch: LeaderEpoch,
}

struct Prepared {
    terms: ReadTerms,
    version: ReadVersion,
    made: Instant,
    fetched: Fetched<Records>,
}

/// The leader epoch at which this shard sees this broker lead `topic`'s
/// `partition`; `None` if it does not.
pub(super) fn led_at(shard: &Shard, topic: &str, partition: i32) -> Option<LeaderEpoch> {
    shard
        .with_registration(topic, PartitionId(partition), |registration| {
            (registration.leader.0 == shard.context.broker_id).then_some(registration.leader_epoch)
        })
        .flatten()
}

/// A shard's reads prepared for its connections' next fetches.
#[derive(Default)]
pub struct PreparedReads {
    reads: HashMap<ReadKey, Prepared>,
}

impl std::fmt::Debug for PreparedReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PreparedReads({})", self.reads.len())
    }
}

impl PreparedReads {
    /// Keeps `fetched`, read at `version` on `terms`, for the fetch of
    /// `topic`'s `partition` at `offset`.
    pub(super) fn keep(
        &mut self,
        (topic, partition, offset): ReadKey,
        terms: ReadTerms,
        version: ReadVersion,
        fetched: Fetched<Records>,
    ) {
        if self.reads.len() >= PREPARED_READS_MAX {
            return;
        }
        let prepared = Prepared {
            terms,
            version,
            made: Instant::now(),
            fetched,
        };
        self.reads.insert((topic, partition, offset), prepared);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Drops the reads older than [`PREPARED_READ_AGE_MAX`] (a consumer
    /// that stopped, or went elsewhere); returns how many.
    pub(super) fn forget_aged(&mut self) -> usize {
        let before = self.reads.len();
        self.reads
            .retain(|_, prepared| prepared.made.elapsed() < PREPARED_READ_AGE_MAX);
        before - self.reads.len()
    }

    /// The read prepared for this fetch of `topic`'s `partition` at
    /// `offset`, if it still answers as the owner would (taken either
    /// way); `Err(())` if there was one that no longer does.
    pub(super) fn take(
        &mut self,
        key: &ReadKey,
        terms: &ReadTerms,
    ) -> Option<Result<Fetched<Records>, ()>> {
        let prepared = self.reads.remove(key)?;
        let usable = prepared.version.is_current()
            && prepared.made.elapsed() < PREPARED_READ_AGE_MAX
            && prepared.terms.partition_max_bytes == terms.partition_max_bytes
            && prepared.terms.limit == terms.limit
            && prepared.terms.isolation == terms.isolation
            && prepared.terms.leader_epoch == terms.leader_epoch;
        Some(if usable {
            Ok(prepared.fetched)
        } else {
            Err(())
        })
    }
}

/// What a consumer's read of `partition` must match to be answered by a
/// read prepared ahead; `None` if it is not one to prepare (a follower's,
/// one the leader may send elsewhere, one not led here).
pub(super) fn read_terms(
    shard: &Shard,
    partition: &Wanted,
    budget: ResponseBudget,
    isolation: Isolation,
    client: Option<&ClientPlace<'_>>,
) -> Option<(ShardId, ReadTerms)> {
    let owner = *partition.source.as_ref().ok()?;
    let consumer = matches!(
        isolation,
        Isolation::ReadUncommitted | Isolation::ReadCommitted
    );
    if !consumer || client.is_some() {
        return None;
    }
    let leader_epoch = led_at(shard, &partition.topic, partition.partition)?;
    Some((
        owner,
        ReadTerms {
            partition_max_bytes: partition.partition_max_bytes,
            limit: budget.read_limit(partition.partition_max_bytes),
            isolation,
            leader_epoch,
        },
    ))
}

/// Answers the partitions of `wanted` not answered yet whose reads were
/// prepared here one fetch ahead and still answer as their owner would.
pub(super) fn take_prepared(
    shard: &Shard,
    wanted: &[Wanted],
    terms: impl Fn(&Wanted) -> Option<(ShardId, ReadTerms)>,
    fetched: &mut [Option<Fetched<Records>>],
) {
    let mut prepared = shard.prepared_reads.borrow_mut();
    let aged = prepared.forget_aged();
    shard.metrics.prepared_reads(false, aged);
    if prepared.is_empty() {
        return;
    }
    for (partition, answer) in wanted.iter().zip(fetched) {
        if answer.is_some() {
            continue;
        }
        let Some((_, terms)) = terms(partition) else {
            continue;
        };
        let key = (
            partition.topic.clone(),
            partition.partition,
            partition.fetch_offset,
        );
        match prepared.take(&key, &terms) {
            None => {}
            Some(Ok(read)) => {
                shard.metrics.prepared_reads(true, 1);
                *answer = Some(read);
            }
            Some(Err(())) => shard.metrics.prepared_reads(false, 1),
        }
    }
}

/// Asks each owning shard, off the response's path, for the reads that
/// follow the file ranges this fetch answers with, to keep for the next
/// fetch (this module's).
pub(super) fn prepare_next(
    shard: &Rc<Shard>,
    wanted: &[Wanted],
    fetched: &[Fetched<Records>],
    terms: impl Fn(&Wanted) -> Option<(ShardId, ReadTerms)>,
    budget: ResponseBudget,
) {
    let mut by_owner: BTreeMap<ShardId, Vec<(ReadTerms, Read<'static>)>> = BTreeMap::new();
    for (partition, answer) in wanted.iter().zip(fetched) {
        let Fetched::Data {
            records: Some(Records::File(range)),
            ..
        } = answer
        else {
            continue;
        };
        let Some((owner, terms)) = terms(partition) else {
            continue;
        };
        let reads = by_owner.entry(owner).or_default();
        let read = Read {
            slot: reads.len(),
            topic: Cow::Owned(partition.topic.to_string()),
            partition: PartitionId(partition.partition),
            offset: range.next_offset,
            partition_max_bytes: partition.partition_max_bytes,
            isolation: terms.isolation,
            last_fetched_epoch: LeaderEpoch(partition.last_fetched_epoch),
            log_start_offset: Offset(partition.log_start_offset),
            client: None,
        };
        reads.push((terms, read));
    }
    for (owner, reads) in by_owner {
        glommio::spawn_local(prepare_on(shard.clone(), owner, reads, budget)).detach();
    }
}

/// Makes `reads` on `owner` and keeps those that read a file range.
async fn prepare_on(
    shard: Rc<Shard>,
    owner: ShardId,
    reads: Vec<(ReadTerms, Read<'static>)>,
    budget: ResponseBudget,
) {
    let (terms, reads): (Vec<ReadTerms>, Vec<Read<'static>>) = reads.into_iter().unzip();
    let keys: Vec<(Rc<str>, i32, i64)> = reads
        .iter()
        .map(|read| (Rc::from(&*read.topic), read.partition.0, read.offset.0))
        .collect();
    let made = shard
        .on_shard(owner, move |owner| async move {
            let mut made = Vec::new();
            for read in &reads {
                let Some(log) = owner.store.partition_at(&read.topic, read.partition) else {
                    continue;
                };
                if not_read_here(&owner, read).is_some() {
                    continue;
                }
                // Before the read: a change while it reads voids it.
                let version = log.read_version();
                let limit = budget.read_limit(read.partition_max_bytes);
                let fetched = read_local(&owner, read, limit).await;
                if let Fetched::Data {
                    records: Some(Records::File(_)),
                    ..
                } = &fetched
                {
                    made.push((read.slot, version, sendable(fetched)));
                }
            }
            made
        })
        .await;
    let Ok(made) = made else {
        return;
    };
    let mut prepared = shard.prepared_reads.borrow_mut();
    for (slot, version, fetched) in made {
        prepared.keep(
            keys[slot].clone(),
            terms[slot].clone(),
            version,
            received(fetched),
        );
    }
}
