//! What DescribeQuorum reports about each replica of the metadata log, as
//! Kafka's `LeaderState` keeps it: every voter's log end offset (raft-rs's
//! `matched`), when the leader last heard from it and when it was last
//! caught up with the leader's log end; and the same for observers, the
//! brokers that follow the log without voting.
//!
//! Timestamps are whatever clock the driver passes (the runtime passes
//! wall-clock milliseconds, which is what Kafka reports and its tools
//! subtract from the current time).

use std::collections::BTreeMap;

use crate::types::BrokerId;

/// How long an observer stays listed after its last fetch (Kafka's
/// `OBSERVER_SESSION_TIMEOUT_MS`).
pub const OBSERVER_SESSION_TIMEOUT_MS: u64 = 300_000;

/// One replica as DescribeQuorum reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub node: BrokerId,
    pub log_end_offset: u64,
    pub last_fetch_ms: Option<u64>,
    pub last_caught_up_ms: Option<u64>,
}

/// The active controller's answer to DescribeQuorum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader: BrokerId,
    pub epoch: u64,
    pub high_watermark: u64,
    pub voters: Vec<ReplicaProgress>,
    pub observers: Vec<ReplicaProgress>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    log_end_offset: u64,
    last_fetch_ms: Option<u64>,
    last_caught_up_ms: Option<u64>,
}

impl Seen {
    /// Kafka's `updateFollowerState`: caught up when the replica's end
    /// reaches the leader's end at the time it asked.
    fn update(&mut self, log_end_offset: u64, leader_end: u64, now_ms: u64) {
        if log_end_offset >= leader_end {
            self.last_caught_up_ms = Some(self.last_caught_up_ms.unwrap_or(0).max(now_ms));
        }
        self.last_fetch_ms = Some(self.last_fetch_ms.unwrap_or(0).max(now_ms));
        self.log_end_offset = log_end_offset;
    }
}

/// Replicas' progress as seen by this node while it leads.
#[derive(Clone, Debug, Default)]
pub struct QuorumProgress {
    voters: BTreeMap<BrokerId, Seen>,
    observers: BTreeMap<BrokerId, Seen>,
}

impl QuorumProgress {
    /// A voter answered the leader; `matched` is its log end as the leader
    /// now knows it.
    pub fn voter_heard(&mut self, voter: BrokerId, matched: u64, leader_end: u64, now_ms: u64) {
        self.voters
            .entry(voter)
            .or_default()
            .update(matched, leader_end, now_ms);
    }

    /// A broker that is not a voter fetched the log from `offset` on.
    pub fn observer_fetched(
        &mut self,
        observer: BrokerId,
        offset: u64,
        leader_end: u64,
        now_ms: u64,
    ) {
        self.observers
            .entry(observer)
            .or_default()
            .update(offset, leader_end, now_ms);
    }

    /// The description, voters in `voters` order; the leader is always
    /// caught up now (as Kafka reports it), observers silent for longer
    /// than [`OBSERVER_SESSION_TIMEOUT_MS`] are left out.
    #[allow(clippy::too_many_arguments)]
    pub fn describe(
        &self,
        leader: BrokerId,
        epoch: u64,
        high_watermark: u64,
        leader_end: u64,
        voters: &[BrokerId],
        matched: impl Fn(BrokerId) -> u64,
        now_ms: u64,
    ) -> QuorumDescription {
        let voters = voters
            .iter()
            .map(|&node| {
                if node == leader {
                    return ReplicaProgress {
                        node,
                        log_end_offset: leader_end,
                        last_fetch_ms: Some(now_ms),
                        last_caught_up_ms: Some(now_ms),
                    };
                }
                let seen = self.voters.get(&node).copied().unwrap_or_default();
                ReplicaProgress {
                    node,
                    log_end_offset: matched(node),
                    last_fetch_ms: seen.last_fetch_ms,
                    last_caught_up_ms: seen.last_caught_up_ms,
                }
            })
            .collect();
        let observers = self
            .observers
            .iter()
            .filter(|(_, seen)| {
                seen.last_fetch_ms
                    .is_some_and(|at| now_ms.saturating_sub(at) < OBSERVER_SESSION_TIMEOUT_MS)
            })
            .map(|(&node, seen)| ReplicaProgress {
                node,
                log_end_offset: seen.log_end_offset,
                last_fetch_ms: seen.last_fetch_ms,
                last_caught_up_ms: seen.last_caught_up_ms,
            })
            .collect();
        QuorumDescription {
            leader,
            epoch,
            high_watermark,
            voters,
            observers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_caught_up_when_it_reaches_the_leaders_end() {
        let mut progress = QuorumProgress::default();
        progress.voter_heard(BrokerId(2), 5, 9, 1_000);
        progress.voter_heard(BrokerId(3), 9, 9, 1_000);
        progress.voter_heard(BrokerId(2), 9, 12, 2_000);
        let described = progress.describe(
            BrokerId(1),
            4,
            9,
            12,
            &[BrokerId(1), BrokerId(2), BrokerId(3)],
            |node| if node == BrokerId(2) { 9 } else { 12 },
            3_000,
        );
        assert_eq!(described.leader, BrokerId(1));
        assert_eq!(
            described.voters,
            vec![
                ReplicaProgress {
                    node: BrokerId(1),
                    log_end_offset: 12,
                    last_fetch_ms: Some(3_000),
                    last_caught_up_ms: Some(3_000),
                },
                ReplicaProgress {
                    node: BrokerId(2),
                    log_end_offset: 9,
                    last_fetch_ms: Some(2_000),
                    last_caught_up_ms: None,
                },
                ReplicaProgress {
                    node: BrokerId(3),
                    log_end_offset: 12,
                    last_fetch_ms: Some(1_000),
                    last_caught_up_ms: Some(1_000),
                },
            ]
        );
        assert!(described.observers.is_empty());
    }

    #[test]
    fn observers_are_listed_until_their_session_times_out() {
        let mut progress = QuorumProgress::default();
        progress.observer_fetched(BrokerId(4), 7, 7, 10_000);
        let at = |now_ms| {
            progress
                .describe(BrokerId(1), 1, 7, 7, &[BrokerId(1)], |_| 7, now_ms)
                .observers
        };
        assert_eq!(
            at(20_000),
            vec![ReplicaProgress {
                node: BrokerId(4),
                log_end_offset: 7,
                last_fetch_ms: Some(10_000),
                last_caught_up_ms: Some(10_000),
            }]
        );
        assert!(at(10_000 + OBSERVER_SESSION_TIMEOUT_MS).is_empty());
    }
}
