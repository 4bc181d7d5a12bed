//! A fetch with too little to answer waits: on each owning shard, for an
//! append to one of its partitions there (or any news of the shard, past
//! [`PER_PARTITION_WAITERS_MAX`] partitions), up to its deadline. The first
//! shard whose wait ends with an append reads its partitions there and
//! then, so the answer needs no second trip to it.

use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::protocol::fetch::ResponseBudget;
use brook_engine::types::{Offset, TopicPartition};
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::{LocalBoxFuture, select_all};

use super::read_replica::ClientPlace;
use super::{Fetched, Isolation, OwnerReads, Pass, Wanted, read_on, reads_by_owner};
use crate::server::shard::Shard;

/// A wait on an owning shard before it reads: for `wait`, at most
/// `remaining`, and no longer than the fetch waits (`stopped` ends when it
/// stops).
pub(super) struct WaitThere {
    wait: WaitFor,
    remaining: Duration,
    stopped: oneshot::Receiver<()>,
}

impl WaitThere {
    /// Whether the reads on `owner` go ahead: with no wait, at once; after
    /// a wait, if what it waited for happened there (not the time, nor the
    /// fetch ending).
    pub(super) async fn ended_with_append(wait: Option<WaitThere>, owner: &Rc<Shard>) -> bool {
        let Some(wait) = wait else {
            return true;
        };
        let appended = appended_on(owner, wait.wait);
        let timer = glommio::timer::sleep(wait.remaining);
        futures::select! {
            _ = appended.fuse() => true,
            _ = wait.stopped.fuse() => false,
            _ = timer.fuse() => false,
        }
    }
}

/// Above this many partitions on one shard, a waiting fetch waits for news
/// of any partition of the shard rather than with a waiter per partition: a
/// spurious wake costs a re-read, a waiter per partition costs on every wait.
const PER_PARTITION_WAITERS_MAX: usize = 32;

/// What a waiting fetch waits for on one owning shard.
enum WaitFor {
    /// Any partition's high watermark (or a follower's written offset) moving past this generation.
    News(u64),
    /// One of these partitions reaching its offset: its high watermark, or
    /// for a follower (`true`) its written end.
    Partitions(Vec<(TopicPartition, Offset)>, bool),
}

/// Resolves once what `wait` names has happened, on the owning shard.
fn appended_on(owner: &Rc<Shard>, wait: WaitFor) -> LocalBoxFuture<'static, ()> {
    let (targets, replica) = match wait {
        WaitFor::News(generation) => {
            return owner.store.news_after(generation).map(|_| ()).boxed_local();
        }
        WaitFor::Partitions(targets, replica) => (targets, replica),
    };
    let appended: Vec<LocalBoxFuture<'static, ()>> = targets
        .into_iter()
        .filter_map(|(topic_partition, target)| {
            let log = owner.log(&topic_partition)?;
            Some(
                async move {
                    let _ = match replica {
                        true => log.wait_written(target).await,
                        false => log.wait_high_watermark(target).await,
                    };
                }
                .boxed_local(),
            )
        })
        .collect();
    if appended.is_empty() {
        futures::future::pending().boxed_local()
    } else {
        select_all(appended).map(|_| ()).boxed_local()
    }
}

/// What a fetch that has too little waits from: the pass that read too
/// little, and what each owner's read after the wait needs.
pub(super) struct Waited<'a> {
    pub(super) pass: &'a Pass,
    pub(super) budget: ResponseBudget,
    pub(super) isolation: Isolation,
    pub(super) client: Option<&'a ClientPlace<'a>>,
    pub(super) deadline: Instant,
}

/// Waits until any partition's high watermark passes the one this pass saw
/// (or its fetch offset), or the deadline. Each owning shard gets one waiting
/// job, which ends as soon as this wait does. The first owner whose wait
/// ends with an append reads its partitions there and then; `None` if the
/// deadline came first.
pub(super) async fn wait_for_data(
    shard: &Rc<Shard>,
    wanted: &[Wanted],
    waited: Waited<'_>,
) -> Option<OwnerReads> {
    let Waited {
        pass,
        budget,
        isolation,
        client,
        deadline,
    } = waited;
    let replica = matches!(isolation, Isolation::Replica(_));
    let remaining = deadline.saturating_duration_since(Instant::now());
    let mut waits: Vec<LocalBoxFuture<'_, Option<OwnerReads>>> =
        vec![glommio::timer::sleep(remaining).map(|_| None).boxed_local()];
    for (owner, reads) in reads_by_owner(wanted, isolation, client, &[]) {
        let wait = if reads.len() > PER_PARTITION_WAITERS_MAX {
            let generation = pass.generations.get(&owner).copied().unwrap_or_default();
            WaitFor::News(generation)
        } else {
            let targets = reads
                .iter()
                .filter_map(|read| {
                    let Fetched::Data { high_watermark, .. } = &pass.fetched[read.slot] else {
                        return None;
                    };
                    let seen = read.offset.0.max(*high_watermark);
                    let topic_partition = TopicPartition {
                        topic: read.topic.to_string(),
                        partition: read.partition,
                    };
                    Some((topic_partition, Offset(seen.saturating_add(1))))
                })
                .collect();
            WaitFor::Partitions(targets, replica)
        };
        let (keep_waiting, stopped) = oneshot::channel::<()>();
        let there = WaitThere {
            wait,
            remaining,
            stopped,
        };
        waits.push(
            async move {
                // Dropping this future drops `keep_waiting`, which ends the
                // job on the owner.
                let _keep_waiting = keep_waiting;
                match read_on(shard, owner, reads, budget, Some(there)).await {
                    Some(read) => Some(read),
                    // Nothing appended there: the other waits go on.
                    None => futures::future::pending().await,
                }
            }
            .boxed_local(),
        );
    }
    select_all(waits).await.0
}
