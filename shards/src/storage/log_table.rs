//! A shard's partition logs, by topic and then by partition number. Kafka
//! numbers a topic's partitions densely from 0, so a partition is an index:
//! a fetch of thousands of partitions looks each one up per pass, and a
//! hashed or ordered map of `TopicPartition` compared topic names (and
//! missed the cache) on every lookup.

use std::collections::HashMap;

use brook_engine::types::{PartitionId, TopicPartition};

use crate::storage::partition_log::PartitionLog;

/// Lives on its shard, inside the [`Store`](crate::storage::Store); `L` is a
/// [`PartitionLog`] but for tests.
#[derive(Debug)]
pub(crate) struct LogTable<L = PartitionLog> {
    /// Slot `p` holds partition `p` if this shard has it.
    topics: HashMap<String, Vec<Option<L>>>,
    len: usize,
}

impl<L> Default for LogTable<L> {
    fn default() -> LogTable<L> {
        LogTable {
            topics: HashMap::new(),
            len: 0,
        }
    }
}

fn slot(topic_partition: &TopicPartition) -> Option<usize> {
    usize::try_from(topic_partition.partition.0).ok()
}

impl<L: Clone> LogTable<L> {
    pub fn get(&self, topic_partition: &TopicPartition) -> Option<&L> {
        self.get_at(&topic_partition.topic, topic_partition.partition)
    }

    pub fn get_at(&self, topic: &str, partition: PartitionId) -> Option<&L> {
        let logs = self.topics.get(topic)?;
        logs.get(usize::try_from(partition.0).ok()?)?.as_ref()
    }

    /// Adds a log, returning the one it replaces. A negative partition
    /// number (which the metadata never holds) is not kept.
    pub fn insert(&mut self, topic_partition: TopicPartition, log: L) -> Option<L> {
        let slot = slot(&topic_partition)?;
        let logs = self.topics.entry(topic_partition.topic).or_default();
        if logs.len() <= slot {
            logs.resize(slot + 1, None);
        }
        let replaced = logs[slot].replace(log);
        if replaced.is_none() {
            self.len += 1;
        }
        replaced
    }

    pub fn remove(&mut self, topic_partition: &TopicPartition) -> Option<L> {
        let slot = slot(topic_partition)?;
        let logs = self.topics.get_mut(&topic_partition.topic)?;
        let removed = logs.get_mut(slot)?.take()?;
        self.len -= 1;
        if logs.iter().all(Option::is_none) {
            self.topics.remove(&topic_partition.topic);
        }
        Some(removed)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Every log, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (TopicPartition, &L)> {
        self.topics.iter().flat_map(|(topic, logs)| {
            logs.iter().enumerate().filter_map(move |(partition, log)| {
                let topic_partition = TopicPartition {
                    topic: topic.clone(),
                    partition: PartitionId(partition as i32),
                };
                Some((topic_partition, log.as_ref()?))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.to_owned(),
            partition: PartitionId(partition),
        }
    }

    #[test]
    fn logs_are_found_by_topic_and_partition_and_forgotten() {
        let mut table = LogTable::<u32>::default();
        assert_eq!(table.insert(at("a", 3), 30), None);
        assert_eq!(table.insert(at("a", 0), 0), None);
        assert_eq!(table.insert(at("b", 1), 11), None);
        assert_eq!(table.insert(at("a", 3), 33), Some(30), "replaced");
        assert_eq!(table.len(), 3);
        assert_eq!(table.get(&at("a", 3)), Some(&33));
        for absent in [at("a", 1), at("a", 4), at("a", -1), at("c", 0)] {
            assert_eq!(table.get(&absent), None, "{absent}");
        }
        assert_eq!(table.insert(at("a", -1), 1), None);
        assert_eq!(table.len(), 3, "a negative partition is not kept");
        let mut all: Vec<_> = table.iter().map(|(at, log)| (at, *log)).collect();
        all.sort();
        assert_eq!(
            all,
            vec![(at("a", 0), 0), (at("a", 3), 33), (at("b", 1), 11)]
        );
        assert_eq!(table.remove(&at("b", 1)), Some(11));
        assert_eq!(table.remove(&at("b", 1)), None);
        assert!(!table.topics.contains_key("b"), "an emptied topic goes");
        assert_eq!(table.len(), 2);
    }
}
