//! Kafka's `PartitionMovements`: the moves the general sticky algorithm has made
//! so far in one rebalance, so that when it wants to move a partition of topic T
//! from member A to member B while another partition of T already moved from B
//! to A, it moves that one back instead. Without this, balancing can shuffle a
//! topic's partitions between two members for nothing.
//!
//! Which partition goes back is the first of the (B → A) set in Java `HashSet`
//! order, so the set is a [`JavaHashSet`].

use std::collections::BTreeMap;

use super::input::{GroupInput, MemberIndex, PartitionId, TopicIndex};
use super::java::{JavaHashSet, topic_partition_hash};

/// A move from the first member to the second.
type Pair = (MemberIndex, MemberIndex);

#[derive(Default)]
pub(crate) struct Movements {
    /// Each moved partition's net move: original owner → current owner.
    by_partition: BTreeMap<PartitionId, Pair>,
    /// The same, grouped by topic and pair.
    by_topic: BTreeMap<TopicIndex, BTreeMap<Pair, JavaHashSet<PartitionId>>>,
}

impl Movements {
    /// Kafka's `getTheActualPartitionToBeMoved`.
    pub(crate) fn partition_to_move(
        &self,
        input: &GroupInput<'_>,
        partition: PartitionId,
        old_owner: MemberIndex,
        new_owner: MemberIndex,
    ) -> PartitionId {
        let Some(pairs) = self.by_topic.get(&input.topic_of(partition)) else {
            return partition;
        };
        let original_owner = match self.by_partition.get(&partition) {
            Some(&(source, destination)) => {
                assert_eq!(
                    destination, old_owner,
                    "a moved partition is with its mover"
                );
                source
            }
            None => old_owner,
        };
        pairs
            .get(&(new_owner, original_owner))
            .and_then(JavaHashSet::first)
            .unwrap_or(partition)
    }

    /// Kafka's `movePartition`: records the move, folding it into an earlier
    /// move of the same partition (and forgetting it if it went back home).
    pub(crate) fn move_partition(
        &mut self,
        input: &GroupInput<'_>,
        partition: PartitionId,
        old_owner: MemberIndex,
        new_owner: MemberIndex,
    ) {
        match self.remove(input, partition) {
            Some((source, destination)) => {
                assert_eq!(
                    destination, old_owner,
                    "a moved partition is with its mover"
                );
                if source != new_owner {
                    self.add(input, partition, (source, new_owner));
                }
            }
            None => self.add(input, partition, (old_owner, new_owner)),
        }
    }

    fn remove(&mut self, input: &GroupInput<'_>, partition: PartitionId) -> Option<Pair> {
        let pair = self.by_partition.remove(&partition)?;
        let topic = input.topic_of(partition);
        if let Some(pairs) = self.by_topic.get_mut(&topic) {
            if let Some(set) = pairs.get_mut(&pair) {
                set.remove(&partition);
                if set.is_empty() {
                    pairs.remove(&pair);
                }
            }
            if pairs.is_empty() {
                self.by_topic.remove(&topic);
            }
        }
        Some(pair)
    }

    fn add(&mut self, input: &GroupInput<'_>, partition: PartitionId, pair: Pair) {
        self.by_partition.insert(partition, pair);
        let topic = input.topic_of(partition);
        let hash =
            topic_partition_hash(input.topics[topic].name, input.partition_number(partition));
        self.by_topic
            .entry(topic)
            .or_default()
            .entry(pair)
            .or_default()
            .insert(partition, hash);
    }
}
