//! The rules of `reset-offsets`, with no IO: which partitions `--topic
//! T[:P,P…]` names, and which offset each strategy picks for a partition,
//! clamped to the log as Kafka's `ConsumerGroupCommand` clamps it (a new
//! offset below the log start becomes the log start, above the log end the
//! log end).

use thiserror::Error;

/// `--topic`: a topic, alone (every partition) or with partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    /// `None`: every partition of the topic. Sorted, without repeats.
    pub partitions: Option<Vec<i32>>,
}

/// `T` or `T:P,P…` (Kafka topic names cannot hold a `:`).
pub fn parse_topic_spec(text: &str) -> Result<TopicSpec, String> {
    let text = text.trim();
    let (topic, partitions) = match text.split_once(':') {
        None => (text, None),
        Some((topic, list)) => (topic, Some(list)),
    };
    if topic.is_empty() {
        return Err(format!(
            "'{text}': the topic name is missing (TOPIC or TOPIC:P,P…)"
        ));
    }
    let partitions = match partitions {
        None => None,
        Some(list) => {
            let mut parsed = list
                .split(',')
                .map(|part| match part.trim().parse::<i32>() {
                    Ok(partition) if partition >= 0 => Ok(partition),
                    _ => Err(format!(
                        "'{text}': '{part}' is not a partition number (TOPIC:P,P…)"
                    )),
                })
                .collect::<Result<Vec<i32>, String>>()?;
            parsed.sort_unstable();
            parsed.dedup();
            Some(parsed)
        }
    };
    Ok(TopicSpec {
        topic: topic.to_owned(),
        partitions,
    })
}

/// How each partition's new offset is chosen (exactly one per reset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// The log start offset.
    Earliest,
    /// The log end offset.
    Latest,
    /// This offset.
    Offset(i64),
    /// The first record whose timestamp is at or after this time
    /// (milliseconds since the epoch); the log end when there is none.
    Datetime(i64),
    /// The committed offset moved by this many records (negative: back).
    ShiftBy(i64),
}

impl Strategy {
    /// The ListOffsets timestamp this strategy needs besides the log start
    /// and end, if any.
    pub fn timestamp(self) -> Option<i64> {
        match self {
            Strategy::Datetime(time) => Some(time),
            _ => None,
        }
    }
}

/// What is known of one partition when its new offset is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub log_start: i64,
    pub log_end: i64,
    /// The group's committed offset, if it has one.
    pub committed: Option<i64>,
    /// The first offset at the `--to-datetime` time, `None` when no record
    /// is that late (or the strategy is not by time).
    pub at_time: Option<i64>,
}

/// Whether the wanted offset was outside the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clamp {
    Within,
    /// It was below the log start (records deleted), so the log start.
    ToLogStart,
    /// It was past the log end, so the log end.
    ToLogEnd,
}

/// A partition's new offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub offset: i64,
    /// What the strategy asked for before clamping.
    pub wanted: i64,
    pub clamp: Clamp,
}

#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("--shift-by needs a committed offset to shift, and there is none")]
    NothingToShift,
    /// A broker's answer no log can have.
    #[error("the broker gave a log start offset {log_start} past its log end {log_end}")]
    StartPastEnd { log_start: i64, log_end: i64 },
}

/// The new offset `strategy` picks for a partition with `offsets`.
pub fn target(strategy: Strategy, offsets: &PartitionOffsets) -> Result<Target, TargetError> {
    if offsets.log_start > offsets.log_end {
        return Err(TargetError::StartPastEnd {
            log_start: offsets.log_start,
            log_end: offsets.log_end,
        });
    }
    let wanted = match strategy {
        Strategy::Earliest => offsets.log_start,
        Strategy::Latest => offsets.log_end,
        Strategy::Offset(offset) => offset,
        Strategy::Datetime(_) => offsets.at_time.unwrap_or(offsets.log_end),
        Strategy::ShiftBy(delta) => offsets
            .committed
            .ok_or(TargetError::NothingToShift)?
            .saturating_add(delta),
    };
    Ok(clamp(wanted, offsets.log_start, offsets.log_end))
}

/// `wanted` kept within `[log_start, log_end]`.
pub fn clamp(wanted: i64, log_start: i64, log_end: i64) -> Target {
    let (offset, clamp) = if wanted < log_start {
        (log_start, Clamp::ToLogStart)
    } else if wanted > log_end {
        (log_end, Clamp::ToLogEnd)
    } else {
        (wanted, Clamp::Within)
    };
    Target {
        offset,
        wanted,
        clamp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_specs_name_a_topic_and_maybe_partitions() {
        let spec = |topic: &str, partitions: Option<Vec<i32>>| TopicSpec {
            topic: topic.to_owned(),
            partitions,
        };
        for (text, expected) in [
            ("orders", Ok(spec("orders", None))),
            ("orders:0", Ok(spec("orders", Some(vec![0])))),
            ("orders:2,0,1,2", Ok(spec("orders", Some(vec![0, 1, 2])))),
            (" a.b-c_d:3 ", Ok(spec("a.b-c_d", Some(vec![3])))),
            ("orders:", Err("'orders:': '' is not a partition number")),
            ("orders:x", Err("'x' is not a partition number")),
            ("orders:-1", Err("'-1' is not a partition number")),
            ("orders:1,,2", Err("'' is not a partition number")),
            (":1", Err("the topic name is missing")),
            ("", Err("the topic name is missing")),
        ] {
            match (parse_topic_spec(text), expected) {
                (Ok(parsed), Ok(expected)) => assert_eq!(parsed, expected, "{text:?}"),
                (Err(error), Err(needle)) => assert!(error.contains(needle), "{text:?}: {error}"),
                (parsed, expected) => panic!("{text:?}: {parsed:?}, expected {expected:?}"),
            }
        }
    }

    /// A log holding offsets 10..100, committed at 50, a record at time T
    /// at offset 70.
    const LOG: PartitionOffsets = PartitionOffsets {
        log_start: 10,
        log_end: 100,
        committed: Some(50),
        at_time: Some(70),
    };

    #[test]
    fn strategies_pick_offsets_clamped_to_the_log() {
        use Clamp::*;
        let no_record_at_time = PartitionOffsets {
            at_time: None,
            ..LOG
        };
        let nothing_committed = PartitionOffsets {
            committed: None,
            ..LOG
        };
        for (strategy, offsets, expected) in [
            (Strategy::Earliest, LOG, (10, Within)),
            (Strategy::Latest, LOG, (100, Within)),
            (Strategy::Offset(42), LOG, (42, Within)),
            (Strategy::Offset(10), LOG, (10, Within)),
            (Strategy::Offset(100), LOG, (100, Within)),
            (Strategy::Offset(3), LOG, (10, ToLogStart)),
            (Strategy::Offset(1_000), LOG, (100, ToLogEnd)),
            (Strategy::Offset(-1), LOG, (10, ToLogStart)),
            (Strategy::Datetime(5), LOG, (70, Within)),
            (Strategy::Datetime(5), no_record_at_time, (100, Within)),
            (Strategy::ShiftBy(-2), LOG, (48, Within)),
            (Strategy::ShiftBy(30), LOG, (80, Within)),
            (Strategy::ShiftBy(-45), LOG, (10, ToLogStart)),
            (Strategy::ShiftBy(60), LOG, (100, ToLogEnd)),
            (Strategy::ShiftBy(i64::MAX), LOG, (100, ToLogEnd)),
            (Strategy::Earliest, nothing_committed, (10, Within)),
        ] {
            let picked = target(strategy, &offsets).unwrap();
            assert_eq!((picked.offset, picked.clamp), expected, "{strategy:?}");
        }
        assert_eq!(
            target(Strategy::ShiftBy(-2), &nothing_committed),
            Err(TargetError::NothingToShift)
        );
        let inverted = PartitionOffsets {
            log_start: 100,
            log_end: 10,
            ..LOG
        };
        assert!(matches!(
            target(Strategy::Earliest, &inverted),
            Err(TargetError::StartPastEnd { .. })
        ));
    }

    #[test]
    fn an_empty_log_has_one_offset_to_reset_to() {
        let empty = PartitionOffsets {
            log_start: 7,
            log_end: 7,
            committed: Some(7),
            at_time: None,
        };
        for strategy in [
            Strategy::Earliest,
            Strategy::Latest,
            Strategy::Offset(0),
            Strategy::Offset(9),
            Strategy::Datetime(0),
            Strategy::ShiftBy(-2),
        ] {
            assert_eq!(target(strategy, &empty).unwrap().offset, 7, "{strategy:?}");
        }
    }

    #[test]
    fn clamping_keeps_what_was_wanted() {
        assert_eq!(
            clamp(-5, 0, 6),
            Target {
                offset: 0,
                wanted: -5,
                clamp: Clamp::ToLogStart
            }
        );
        assert_eq!(clamp(9, 0, 6).wanted, 9);
    }
}
