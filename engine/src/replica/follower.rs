//! What a follower's fetcher does with its leader's answer for one
//! partition (Kafka's `AbstractFetcherThread.processFetchRequest`, one
//! partition at a time): drop it, restart after OFFSET_OUT_OF_RANGE,
//! truncate a diverged suffix, pause, or take the records and follow the
//! leader's HW and log start.
//!
//! Pure: `shards/src/server/replication/fetcher.rs` performs the step, and
//! the replica simulator (`super::sim`) decides with this same function.

use crate::protocol::errors::ErrorCode;
use crate::replica::divergence::{EpochEndOffset, Restart, out_of_range_restart};
use crate::types::Offset;

/// The errors that say the partition's leadership moved: the fetcher
/// waits for the metadata image to name the new leader rather than
/// backing off.
const LEADER_MOVED: [ErrorCode; 4] = [
    ErrorCode::NOT_LEADER_OR_FOLLOWER,
    ErrorCode::FENCED_LEADER_EPOCH,
    ErrorCode::UNKNOWN_LEADER_EPOCH,
    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
];

/// One partition of a Fetch answer, as the follower reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionAnswer {
    pub error: ErrorCode,
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
    /// The leader's `DivergingEpoch`, when it found one.
    pub diverging_epoch: Option<EpochEndOffset>,
}

/// Why a fetcher pauses before its next fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchPause {
    /// The leadership moved: a short pause until the image follows.
    LeaderMoved,
    /// `replica.fetch.backoff.ms`: the leader refused, or nothing can be
    /// done now.
    Backoff,
}

/// What the follower does with one partition's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowerStep {
    /// The answer no longer applies (its leader, epoch or this log moved
    /// since the fetch was sent:
    /// [`super::replication::PartitionReplication::takes_answer`]).
    Drop,
    /// OFFSET_OUT_OF_RANGE, and the leader's log ends below this one:
    /// drop everything from this offset.
    TruncateTo(Offset),
    /// OFFSET_OUT_OF_RANGE, and the leader deleted everything this log
    /// holds: empty it and start at the leader's log start.
    StartAt(Offset),
    /// The leader found a divergence: truncate by epoch
    /// ([`super::divergence::truncation_for`]), never to the HW.
    TruncateByEpoch(EpochEndOffset),
    Pause(FetchPause),
    /// Append the answer's records (if any), wait until they count here,
    /// then follow the leader's HW and log start.
    Append {
        leader_high_watermark: Offset,
        leader_log_start_offset: Offset,
    },
}

/// The step for `answer`, to a fetch that still applies (`applies`) by a
/// follower whose log ends at `log_end_offset`.
pub fn step_for(applies: bool, answer: &PartitionAnswer, log_end_offset: Offset) -> FollowerStep {
    if !applies {
        return FollowerStep::Drop;
    }
    if answer.error == ErrorCode::OFFSET_OUT_OF_RANGE {
        // The answer's HW stands for the leader's end: what it has
        // committed, which is all a follower must keep.
        return match out_of_range_restart(
            log_end_offset,
            answer.log_start_offset,
            answer.high_watermark,
        ) {
            Restart::TruncateTo(offset) => FollowerStep::TruncateTo(offset),
            Restart::StartAt(offset) => FollowerStep::StartAt(offset),
            Restart::Resume(_) => FollowerStep::Pause(FetchPause::Backoff),
        };
    }
    if LEADER_MOVED.contains(&answer.error) {
        return FollowerStep::Pause(FetchPause::LeaderMoved);
    }
    if answer.error.is_error() {
        return FollowerStep::Pause(FetchPause::Backoff);
    }
    if let Some(diverging) = answer.diverging_epoch {
        return FollowerStep::TruncateByEpoch(diverging);
    }
    FollowerStep::Append {
        leader_high_watermark: answer.high_watermark,
        leader_log_start_offset: answer.log_start_offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderEpoch;

    fn answer(error: ErrorCode) -> PartitionAnswer {
        PartitionAnswer {
            error,
            high_watermark: Offset(50),
            log_start_offset: Offset(10),
            diverging_epoch: None,
        }
    }

    #[test]
    fn an_answer_that_no_longer_applies_is_dropped_whatever_it_says() {
        for error in [ErrorCode::NONE, ErrorCode::OFFSET_OUT_OF_RANGE] {
            assert_eq!(
                step_for(false, &answer(error), Offset(60)),
                FollowerStep::Drop
            );
        }
    }

    #[test]
    fn out_of_range_restarts_as_kafka_does() {
        let out_of_range = answer(ErrorCode::OFFSET_OUT_OF_RANGE);
        assert_eq!(
            step_for(true, &out_of_range, Offset(60)),
            FollowerStep::TruncateTo(Offset(50)),
            "a log past the leader's end drops the rest"
        );
        assert_eq!(
            step_for(true, &out_of_range, Offset(5)),
            FollowerStep::StartAt(Offset(10)),
            "a log wholly below the leader's start starts over there"
        );
        assert_eq!(
            step_for(true, &out_of_range, Offset(30)),
            FollowerStep::Pause(FetchPause::Backoff),
            "within the leader's range: nothing to cut, fetch again later"
        );
    }

    #[test]
    fn a_moved_leadership_waits_for_the_image_and_other_refusals_back_off() {
        for error in LEADER_MOVED {
            assert_eq!(
                step_for(true, &answer(error), Offset(60)),
                FollowerStep::Pause(FetchPause::LeaderMoved)
            );
        }
        assert_eq!(
            step_for(true, &answer(ErrorCode::KAFKA_STORAGE_ERROR), Offset(60)),
            FollowerStep::Pause(FetchPause::Backoff)
        );
    }

    #[test]
    fn a_divergence_truncates_by_epoch_before_anything_is_appended() {
        let diverging = EpochEndOffset {
            epoch: LeaderEpoch(3),
            end_offset: Offset(42),
        };
        let diverged = PartitionAnswer {
            diverging_epoch: Some(diverging),
            ..answer(ErrorCode::NONE)
        };
        assert_eq!(
            step_for(true, &diverged, Offset(60)),
            FollowerStep::TruncateByEpoch(diverging)
        );
        assert_eq!(
            step_for(true, &answer(ErrorCode::NONE), Offset(60)),
            FollowerStep::Append {
                leader_high_watermark: Offset(50),
                leader_log_start_offset: Offset(10),
            }
        );
    }
}
