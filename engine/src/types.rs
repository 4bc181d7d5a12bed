//! Vocabulary types shared by every module: identifiers and positions as
//! newtypes, so an offset can never be passed where an epoch is expected.

use std::fmt;

/// A record's position in its partition. Offsets start at 0 and only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub i64);

impl Offset {
    /// The offset `delta` records after this one, or `None` on overflow.
    pub fn checked_add(self, delta: i64) -> Option<Offset> {
        self.0.checked_add(delta).map(Offset)
    }

    /// The offset right after this one.
    ///
    /// Panics on overflow, which cannot happen for offsets that passed
    /// [`crate::log::batch::BatchView::validate_for_append`] (they are bounded
    /// well below `i64::MAX`).
    pub fn next(self) -> Offset {
        Offset(self.0 + 1)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The epoch of the leader that appended a batch (Kafka's partition leader epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// Kafka's "no epoch" marker, carried by batches written by old clients.
    pub const NONE: LeaderEpoch = LeaderEpoch(-1);
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Milliseconds since the Unix epoch, as Kafka timestamps are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimestampMs(pub i64);

impl TimestampMs {
    /// Kafka's `RecordBatch.NO_TIMESTAMP`.
    pub const NONE: TimestampMs = TimestampMs(-1);
}

impl fmt::Display for TimestampMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A producer id handed out by InitProducerId (-1 when the producer has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerId(pub i64);

/// A partition number within a topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub i32);

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A topic name and partition number: the unit of storage and ownership.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: PartitionId,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition: PartitionId(partition),
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A broker's `node.id`: the same number names a broker, a controller voter
/// and a replica. Kafka's ids are non-negative; -1 means "none" on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerId(pub i32);

impl BrokerId {
    /// Kafka's "no broker" (a partition with no leader, an unknown coordinator).
    pub const NONE: BrokerId = BrokerId(-1);
}

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
