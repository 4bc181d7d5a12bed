//! Kafka's checkpoint text files: a version line (`0`), a count line, then one
//! line per entry with space-separated fields. Used for
//! `recovery-point-offset-checkpoint` / `log-start-offset-checkpoint`
//! (`topic partition offset`) and `leader-epoch-checkpoint` (`epoch offset`).

use std::str::FromStr;

use thiserror::Error;

use crate::types::{Offset, PartitionId, TopicPartition};

/// The only checkpoint format version Kafka has written.
pub const CHECKPOINT_VERSION: u32 = 0;
/// Entries a checkpoint may hold before we call it corrupt (bounds allocation).
pub const CHECKPOINT_ENTRIES_MAX: usize = 10_000_000;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("checkpoint line {line}: {reason}")]
    Malformed { line: usize, reason: &'static str },
    #[error("unsupported checkpoint version {0}")]
    UnsupportedVersion(String),
    #[error("checkpoint declares {declared} entries but holds {actual}")]
    CountMismatch { declared: usize, actual: usize },
}

/// Renders entry lines as a checkpoint file.
pub fn encode(lines: impl Iterator<Item = String>) -> String {
    let lines: Vec<String> = lines.collect();
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", lines.len());
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Splits a checkpoint file into entries of exactly `fields` fields, each with
/// its 1-based line number.
pub fn decode(text: &str, fields: usize) -> Result<Vec<(usize, Vec<&str>)>, CheckpointError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(number, line)| (number + 1, line));
    let (_, version) = lines.next().ok_or(CheckpointError::Malformed {
        line: 1,
        reason: "empty file",
    })?;
    if version.trim() != CHECKPOINT_VERSION.to_string() {
        return Err(CheckpointError::UnsupportedVersion(version.to_owned()));
    }
    let (_, count) = lines.next().ok_or(CheckpointError::Malformed {
        line: 2,
        reason: "missing count",
    })?;
    let declared: usize = parse_field(2, count.trim())?;
    if declared > CHECKPOINT_ENTRIES_MAX {
        return Err(CheckpointError::Malformed {
            line: 2,
            reason: "too many entries",
        });
    }
    // The count is read from the file: reserve no more than the lines that
    // follow it can hold, or a 12-byte file could reserve hundreds of MiB.
    let mut entries = Vec::with_capacity(declared.min(lines.clone().count()));
    for (number, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() != fields {
            return Err(CheckpointError::Malformed {
                line: number,
                reason: "wrong number of fields",
            });
        }
        entries.push((number, parts));
    }
    if entries.len() != declared {
        return Err(CheckpointError::CountMismatch {
            declared,
            actual: entries.len(),
        });
    }
    Ok(entries)
}

pub fn parse_field<T: FromStr>(line: usize, field: &str) -> Result<T, CheckpointError> {
    field.parse().map_err(|_| CheckpointError::Malformed {
        line,
        reason: "not a number",
    })
}

/// `topic partition offset` checkpoints.
pub fn encode_offsets<'a>(entries: impl Iterator<Item = (&'a TopicPartition, Offset)>) -> String {
    encode(entries.map(|(tp, offset)| format!("{} {} {}", tp.topic, tp.partition.0, offset.0)))
}

pub fn decode_offsets(text: &str) -> Result<Vec<(TopicPartition, Offset)>, CheckpointError> {
    decode(text, 3)?
        .into_iter()
        .map(|(line, fields)| {
            let partition = parse_field::<i32>(line, fields[1])?;
            let offset = parse_field::<i64>(line, fields[2])?;
            let tp = TopicPartition {
                topic: fields[0].to_owned(),
                partition: PartitionId(partition),
            };
            Ok((tp, Offset(offset)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_in_kafkas_format() {
        let a = TopicPartition::new("orders", 0);
        let b = TopicPartition::new("my-topic", 11);
        let text = encode_offsets([(&a, Offset(42)), (&b, Offset(7))].into_iter());
        assert_eq!(text, "0\n2\norders 0 42\nmy-topic 11 7\n");
        assert_eq!(
            decode_offsets(&text).unwrap(),
            vec![(a, Offset(42)), (b, Offset(7))]
        );
    }

    #[test]
    fn damaged_checkpoints_are_errors() {
        assert!(matches!(
            decode_offsets(""),
            Err(CheckpointError::Malformed { .. })
        ));
        assert!(matches!(
            decode_offsets("1\n0\n"),
            Err(CheckpointError::UnsupportedVersion(_))
        ));
        assert!(matches!(
            decode_offsets("0\n2\nt 0 1\n"),
            Err(CheckpointError::CountMismatch { .. })
        ));
        assert!(matches!(
            decode_offsets("0\n1\nt x 1\n"),
            Err(CheckpointError::Malformed { .. })
        ));
        assert!(matches!(
            decode_offsets("0\n1\nt 0\n"),
            Err(CheckpointError::Malformed { .. })
        ));
        assert!(matches!(
            decode_offsets("0\n99999999999\n"),
            Err(CheckpointError::Malformed { .. })
        ));
    }
}
