//! Where a follower's log and its leader's part, decided by leader epoch
//! and never by high watermark (SPEC R5, KIP-101/279/320).
//!
//! The leader checks each replica fetch's `last_fetched_epoch` against its
//! own epoch cache ([`diverging_epoch`], Kafka's `Partition.readRecords`);
//! a follower told of a divergence truncates to the offset
//! [`truncation_for`] gives (Kafka's `getOffsetTruncationState`); a follower
//! whose fetch offset is out of the leader's range restarts where
//! [`out_of_range_restart`] says (Kafka's `fetchOffsetAndTruncate`).

use crate::log::epoch_cache::LeaderEpochCache;
use crate::protocol::errors::ErrorCode;
use crate::types::{LeaderEpoch, Offset};

/// An epoch and the offset where it ended in one replica's log: the
/// Fetch response's `DivergingEpoch`, and OffsetForLeaderEpoch's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: LeaderEpoch,
    pub end_offset: Offset,
}

/// The leader's side: whether a follower that fetches `fetch_offset` after
/// a batch of `last_fetched_epoch` has a suffix the leader does not. `None`
/// when their logs agree up to `fetch_offset` (serve it); the diverging
/// epoch and where it ended here otherwise (serve no records).
///
/// Errors as Kafka's: OFFSET_OUT_OF_RANGE when the leader knows no epoch
/// at or below the follower's, or the fetch is below the log start.
pub fn diverging_epoch(
    epochs: &LeaderEpochCache,
    log_start_offset: Offset,
    log_end_offset: Offset,
    fetch_offset: Offset,
    last_fetched_epoch: LeaderEpoch,
) -> Result<Option<EpochEndOffset>, ErrorCode> {
    if last_fetched_epoch.0 < 0 {
        // A follower with an empty log (or a pre-KIP-320 fetch): nothing
        // of its own to compare.
        return Ok(None);
    }
    let (epoch, end_offset) = epochs
        .end_offset_for(last_fetched_epoch, log_end_offset)
        .ok_or(ErrorCode::OFFSET_OUT_OF_RANGE)?;
    if fetch_offset < log_start_offset {
        return Err(ErrorCode::OFFSET_OUT_OF_RANGE);
    }
    let diverged = epoch < last_fetched_epoch || end_offset < fetch_offset;
    Ok(diverged.then_some(EpochEndOffset { epoch, end_offset }))
}

/// Where a follower truncates to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub offset: Offset,
    /// False when the follower had no batch of the leader's epoch: it
    /// truncated to the end of its own earlier epoch and its next fetch
    /// (carrying that epoch) lets the leader check again.
    pub complete: bool,
}

/// The follower's side: the leader said its log ended epoch
/// `diverging.epoch` at `diverging.end_offset`. The follower keeps what
/// both logs hold in that epoch and drops the rest, however far that is
/// from (and even if below) its high watermark: the HW is a lagging copy of
/// the leader's and truncating to it loses acknowledged records (the
/// seeds' two scenarios, see the tests).
pub fn truncation_for(
    epochs: &LeaderEpochCache,
    log_end_offset: Offset,
    diverging: EpochEndOffset,
) -> Truncation {
    match epochs.end_offset_for(diverging.epoch, log_end_offset) {
        Some((epoch, end_offset)) if epoch == diverging.epoch => Truncation {
            offset: end_offset.min(diverging.end_offset).min(log_end_offset),
            complete: true,
        },
        Some((_, end_offset)) => Truncation {
            offset: end_offset.min(log_end_offset),
            complete: false,
        },
        // No epoch here at or below the leader's: this log predates epoch
        // tracking (or is empty). The leader's end offset is all there is.
        None => Truncation {
            offset: diverging.end_offset.min(log_end_offset),
            complete: true,
        },
    }
}

/// What a follower does after OFFSET_OUT_OF_RANGE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// The leader's log ends below this one (an unclean election chose an
    /// out-of-sync leader): drop everything from the leader's end.
    TruncateTo(Offset),
    /// The leader deleted everything this log holds: empty it and start
    /// at the leader's log start.
    StartAt(Offset),
    /// Nothing to drop: fetch again from this log's end.
    Resume(Offset),
}

pub fn out_of_range_restart(
    log_end_offset: Offset,
    leader_log_start_offset: Offset,
    leader_log_end_offset: Offset,
) -> Restart {
    if leader_log_end_offset < log_end_offset {
        Restart::TruncateTo(leader_log_end_offset)
    } else if leader_log_start_offset > log_end_offset {
        Restart::StartAt(leader_log_start_offset)
    } else {
        Restart::Resume(log_end_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::default();
        for (epoch, start) in entries {
            assert!(cache.assign(LeaderEpoch(*epoch), Offset(*start)));
        }
        cache
    }

    fn end(epoch: i32, offset: i64) -> EpochEndOffset {
        EpochEndOffset {
            epoch: LeaderEpoch(epoch),
            end_offset: Offset(offset),
        }
    }

    #[test]
    fn the_leader_serves_a_follower_whose_last_epoch_it_shares() {
        // Leader: epoch 0 at 0, epoch 2 at 5, log end 9.
        let leader = cache(&[(0, 0), (2, 5)]);
        let check = |fetch: i64, last: i32| {
            diverging_epoch(
                &leader,
                Offset(0),
                Offset(9),
                Offset(fetch),
                LeaderEpoch(last),
            )
        };
        assert_eq!(check(0, -1), Ok(None), "an empty follower");
        assert_eq!(check(3, 0), Ok(None), "inside epoch 0");
        assert_eq!(check(5, 0), Ok(None), "exactly at epoch 0's end");
        assert_eq!(check(9, 2), Ok(None), "caught up");
        // Epoch 0 ended at 5 here: a follower at 7 in epoch 0 wrote 5..7
        // under a leader this log never followed.
        assert_eq!(check(7, 0), Ok(Some(end(0, 5))));
        // The follower saw epoch 1, which this leader never had: epoch 0
        // (the largest at or below 1) ended at 5.
        assert_eq!(check(6, 1), Ok(Some(end(0, 5))));
        // A follower in a later epoch than any here (this leader is
        // stale; its epoch check refuses the fetch before this one would).
        assert_eq!(check(9, 3), Err(ErrorCode::OFFSET_OUT_OF_RANGE));
    }

    #[test]
    fn the_leader_refuses_what_it_cannot_answer_as_kafka_does() {
        let leader = cache(&[(4, 100)]);
        assert_eq!(
            diverging_epoch(
                &leader,
                Offset(100),
                Offset(120),
                Offset(50),
                LeaderEpoch(4)
            ),
            Err(ErrorCode::OFFSET_OUT_OF_RANGE),
            "below the log start"
        );
        assert_eq!(
            diverging_epoch(
                &LeaderEpochCache::default(),
                Offset(0),
                Offset(0),
                Offset(3),
                LeaderEpoch(1)
            ),
            Err(ErrorCode::OFFSET_OUT_OF_RANGE),
            "no epoch known at all"
        );
    }

    /// Seeds, scenario 1 (data loss under HW truncation): A leads epoch 0
    /// and has m0, m1 (HW 2); B has both too but its HW is still 1 when it
    /// restarts. Truncating to its HW would drop m1; if A then dies, B
    /// leads without m1 and A truncates it away too — an acknowledged
    /// record lost. By epoch, B keeps m1.
    #[test]
    fn a_restarted_follower_keeps_what_it_shares_with_the_leader() {
        let a = cache(&[(0, 0)]);
        let b = cache(&[(0, 0)]);
        // B asks after restarting: fetch offset 2, last epoch 0.
        assert_eq!(
            diverging_epoch(&a, Offset(0), Offset(2), Offset(2), LeaderEpoch(0)),
            Ok(None),
            "no divergence: B's log end 2 is A's"
        );
        // And had B fetched while A led epoch 1 from offset 2, its own
        // epoch 0 ends at 2 on both: truncate to 2, not to its HW of 1.
        let a = cache(&[(0, 0), (1, 2)]);
        let told = diverging_epoch(&a, Offset(0), Offset(2), Offset(2), LeaderEpoch(0));
        assert_eq!(told, Ok(None));
        let truncation = truncation_for(&b, Offset(2), end(0, 2));
        assert_eq!(truncation.offset, Offset(2));
        assert!(truncation.complete);
    }

    /// Seeds, scenario 2 (divergence): A (epoch 0) has m0, m1; B only m0.
    /// Both die; B returns first and leads epoch 1, writing m2 at offset 1.
    /// A returns: by HW (2 on both) it would keep its m1 at offset 1 while
    /// B holds m2 there. By epoch: A last fetched epoch 0; B's epoch 0
    /// ended at 1, so A truncates to 1 and fetches m2.
    #[test]
    fn a_returning_leader_drops_the_suffix_the_new_leader_never_had() {
        let b = cache(&[(0, 0), (1, 1)]);
        let a = cache(&[(0, 0)]);
        let told = diverging_epoch(&b, Offset(0), Offset(2), Offset(2), LeaderEpoch(0))
            .expect("answerable")
            .expect("diverged");
        assert_eq!(told, end(0, 1));
        let truncation = truncation_for(&a, Offset(2), told);
        assert_eq!(truncation.offset, Offset(1));
        assert!(truncation.complete);
        // After truncating and fetching m2 at epoch 1 its next fetch agrees.
        assert_eq!(
            diverging_epoch(&b, Offset(0), Offset(2), Offset(2), LeaderEpoch(1)),
            Ok(None)
        );
    }

    #[test]
    fn a_follower_without_the_leaders_epoch_truncates_in_steps() {
        // Follower: epochs 0@0, 3@10, log end 20. The leader says epoch 2
        // ended at 15: the follower never had epoch 2, so it drops its
        // epoch 3 (from 10) and asks again with epoch 0.
        let follower = cache(&[(0, 0), (3, 10)]);
        assert_eq!(
            truncation_for(&follower, Offset(20), end(2, 15)),
            Truncation {
                offset: Offset(10),
                complete: false
            }
        );
        // Same epoch: the smaller of both ends.
        assert_eq!(
            truncation_for(&follower, Offset(20), end(3, 14)).offset,
            Offset(14)
        );
        assert_eq!(
            truncation_for(&follower, Offset(12), end(3, 14)).offset,
            Offset(12),
            "never past its own end"
        );
        // No epochs at all: the leader's end.
        assert_eq!(
            truncation_for(&LeaderEpochCache::default(), Offset(8), end(1, 5)),
            Truncation {
                offset: Offset(5),
                complete: true
            }
        );
    }

    #[test]
    fn out_of_range_restarts_follow_kafka() {
        assert_eq!(
            out_of_range_restart(Offset(50), Offset(0), Offset(40)),
            Restart::TruncateTo(Offset(40))
        );
        assert_eq!(
            out_of_range_restart(Offset(50), Offset(70), Offset(90)),
            Restart::StartAt(Offset(70))
        );
        assert_eq!(
            out_of_range_restart(Offset(50), Offset(10), Offset(90)),
            Restart::Resume(Offset(50))
        );
    }
}
