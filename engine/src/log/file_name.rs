//! File and directory names, exactly as Kafka lays them out: a partition lives
//! in `<topic>-<partition>`, and each segment's files are named by its base
//! offset as 20 zero-padded digits (`00000000000000368769.log`).

use crate::types::{Offset, PartitionId, TopicPartition};

/// The kinds of per-segment files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentFileKind {
    Log,
    Index,
    TimeIndex,
}

impl SegmentFileKind {
    pub const ALL: [SegmentFileKind; 3] = [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
    ];

    pub fn extension(self) -> &'static str {
        match self {
            SegmentFileKind::Log => "log",
            SegmentFileKind::Index => "index",
            SegmentFileKind::TimeIndex => "timeindex",
        }
    }
}

/// `<20-digit base offset>.<extension>`.
pub fn segment_file_name(base_offset: Offset, kind: SegmentFileKind) -> String {
    format!("{:020}.{}", base_offset.0, kind.extension())
}

/// The inverse of [`segment_file_name`]; `None` for any other file name.
pub fn parse_segment_file_name(name: &str) -> Option<(Offset, SegmentFileKind)> {
    let (stem, extension) = name.split_once('.')?;
    let kind = SegmentFileKind::ALL
        .into_iter()
        .find(|kind| kind.extension() == extension)?;
    if stem.len() != 20 || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let base_offset = stem.parse::<i64>().ok()?;
    Some((Offset(base_offset), kind))
}

/// `<topic>-<partition>`.
pub fn partition_dir_name(topic_partition: &TopicPartition) -> String {
    format!("{}-{}", topic_partition.topic, topic_partition.partition.0)
}

/// The inverse of [`partition_dir_name`]: the partition is after the *last*
/// dash, since topic names may contain dashes.
pub fn parse_partition_dir_name(name: &str) -> Option<TopicPartition> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let partition = partition.parse::<i32>().ok()?;
    Some(TopicPartition {
        topic: topic.to_owned(),
        partition: PartitionId(partition),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_kafka() {
        assert_eq!(
            segment_file_name(Offset(368769), SegmentFileKind::Log),
            "00000000000000368769.log"
        );
        assert_eq!(
            segment_file_name(Offset(0), SegmentFileKind::Index),
            "00000000000000000000.index"
        );
        assert_eq!(
            segment_file_name(Offset(i64::MAX), SegmentFileKind::TimeIndex),
            "09223372036854775807.timeindex"
        );
    }

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        for kind in SegmentFileKind::ALL {
            let name = segment_file_name(Offset(42), kind);
            assert_eq!(parse_segment_file_name(&name), Some((Offset(42), kind)));
        }
        for stranger in [
            "42.log",
            "00000000000000000042.snapshot",
            "x0000000000000000042.log",
            "leader-epoch-checkpoint",
        ] {
            assert_eq!(parse_segment_file_name(stranger), None, "{stranger}");
        }
    }

    #[test]
    fn partition_dirs_split_at_the_last_dash() {
        let tp = TopicPartition::new("my-topic", 12);
        assert_eq!(partition_dir_name(&tp), "my-topic-12");
        assert_eq!(parse_partition_dir_name("my-topic-12"), Some(tp));
        assert_eq!(parse_partition_dir_name("topic-"), None);
        assert_eq!(parse_partition_dir_name("-3"), None);
        assert_eq!(parse_partition_dir_name("nodash"), None);
    }
}
