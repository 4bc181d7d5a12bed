//! The group as Kafka's leader sees it when it runs an assignor, normalised once
//! so the assignors can work on small integers.
//!
//! Members are numbered by their member id in Java's `String` order, topics by
//! name in Java's order, and partitions consecutively topic by topic: so
//! comparing two numbers compares the ids, names or `TopicPartition`s the way
//! Kafka's sorts do, and a `Vec` indexed by number replaces Kafka's maps.
//!
//! Kafka's leader builds `partitionsPerTopic` only for subscribed topics that
//! have partitions, and puts the subscriptions into a `HashMap` keyed by member
//! id; we do the same, and record the order that map iterates in
//! ([`GroupInput::hash_order`]).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::java::{compare_strings, hash_map_order, string_hash};
use super::{Assignment, Subscription, TopicPartition};

/// A member's number: the rank of its member id in Java's `String` order.
pub(crate) type MemberIndex = usize;
/// A topic's number: the rank of its name in Java's `String` order.
pub(crate) type TopicIndex = usize;
/// A partition's number: topics in name order, partitions ascending.
pub(crate) type PartitionId = usize;

pub(crate) struct Topic<'a> {
    pub(crate) name: &'a str,
    pub(crate) partition_count: usize,
    pub(crate) first_partition: PartitionId,
}

pub(crate) struct GroupInput<'a> {
    /// Subscriptions by member number; a member id given twice keeps the last.
    pub(crate) members: Vec<&'a Subscription>,
    /// Member numbers in the order Kafka's `HashMap<memberId, Subscription>`
    /// iterates them, given the order the subscriptions were passed in.
    pub(crate) hash_order: Vec<MemberIndex>,
    pub(crate) topics: Vec<Topic<'a>>,
    /// Each member's subscribed topics that have partitions, ascending.
    pub(crate) member_topics: Vec<Vec<TopicIndex>>,
    topic_by_name: HashMap<&'a str, TopicIndex>,
    partition_topic: Vec<TopicIndex>,
}

impl<'a> GroupInput<'a> {
    pub(crate) fn new(
        partitions_per_topic: &'a BTreeMap<String, i32>,
        subscriptions: &'a [Subscription],
    ) -> Self {
        let arrival = members_in_arrival_order(subscriptions);
        let mut members = arrival.clone();
        members.sort_by(|left, right| compare_strings(&left.member_id, &right.member_id));
        let rank_of: HashMap<&str, MemberIndex> = members
            .iter()
            .enumerate()
            .map(|(rank, member)| (member.member_id.as_str(), rank))
            .collect();
        let hashes: Vec<i32> = arrival
            .iter()
            .map(|member| string_hash(&member.member_id))
            .collect();
        let hash_order = hash_map_order(&hashes)
            .into_iter()
            .map(|arrival_index| rank_of[arrival[arrival_index].member_id.as_str()])
            .collect();
        let topics = subscribed_topics(partitions_per_topic, &members);
        let topic_by_name: HashMap<&str, TopicIndex> = topics
            .iter()
            .enumerate()
            .map(|(index, topic)| (topic.name, index))
            .collect();
        let member_topics = members
            .iter()
            .map(|member| {
                let subscribed: BTreeSet<TopicIndex> = member
                    .topics
                    .iter()
                    .filter_map(|topic| topic_by_name.get(topic.as_str()).copied())
                    .collect();
                subscribed.into_iter().collect()
            })
            .collect();
        let partition_topic = topics
            .iter()
            .enumerate()
            .flat_map(|(index, topic)| std::iter::repeat_n(index, topic.partition_count))
            .collect();
        GroupInput {
            members,
            hash_order,
            topics,
            member_topics,
            topic_by_name,
            partition_topic,
        }
    }

    pub(crate) fn member_count(&self) -> usize {
        self.members.len()
    }

    pub(crate) fn partition_count(&self) -> usize {
        self.partition_topic.len()
    }

    pub(crate) fn topic_of(&self, partition: PartitionId) -> TopicIndex {
        self.partition_topic[partition]
    }

    pub(crate) fn subscribes(&self, member: MemberIndex, topic: TopicIndex) -> bool {
        self.member_topics[member].binary_search(&topic).is_ok()
    }

    /// The partition's number, or `None` when its topic is not assigned here or
    /// the topic has no such partition.
    pub(crate) fn partition_id(&self, partition: &TopicPartition) -> Option<PartitionId> {
        let topic = &self.topics[*self.topic_by_name.get(partition.topic.as_str())?];
        let number = usize::try_from(partition.partition).ok()?;
        (number < topic.partition_count).then_some(topic.first_partition + number)
    }

    /// The partition's number within its topic.
    pub(crate) fn partition_number(&self, partition: PartitionId) -> i32 {
        let topic = &self.topics[self.topic_of(partition)];
        // Counts come from `i32`s, so a number below one fits.
        i32::try_from(partition - topic.first_partition).expect("partition numbers fit i32")
    }

    pub(crate) fn topic_partition(&self, partition: PartitionId) -> TopicPartition {
        let topic = &self.topics[self.topic_of(partition)];
        TopicPartition::new(topic.name, self.partition_number(partition))
    }

    /// Kafka's `MemberInfo` order, used by range and round robin: static members
    /// (with a `group.instance.id`) first, by instance id, then the others by
    /// member id.
    pub(crate) fn compare_member_info(&self, left: MemberIndex, right: MemberIndex) -> Ordering {
        let (left, right) = (self.members[left], self.members[right]);
        match (&left.group_instance_id, &right.group_instance_id) {
            (Some(left), Some(right)) => compare_strings(left, right),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => compare_strings(&left.member_id, &right.member_id),
        }
    }

    /// Converts per-member partition numbers into the assignment by member id.
    pub(crate) fn assignment(&self, per_member: &[Vec<PartitionId>]) -> Assignment {
        assert_eq!(per_member.len(), self.member_count(), "one list per member");
        let mut seen = vec![false; self.partition_count()];
        let mut assignment = Assignment::new();
        for (member, partitions) in per_member.iter().enumerate() {
            let mut list = Vec::with_capacity(partitions.len());
            for &partition in partitions {
                assert!(!seen[partition], "a partition is assigned at most once");
                seen[partition] = true;
                list.push(self.topic_partition(partition));
            }
            assignment.insert(self.members[member].member_id.clone(), list);
        }
        assignment
    }
}

/// Subscriptions in the order they were passed, a repeated member id taking the
/// place of its first appearance and the value of its last, as `HashMap.put`.
fn members_in_arrival_order(subscriptions: &[Subscription]) -> Vec<&Subscription> {
    let mut position: HashMap<&str, usize> = HashMap::new();
    let mut arrival: Vec<&Subscription> = Vec::new();
    for subscription in subscriptions {
        match position.get(subscription.member_id.as_str()) {
            Some(&index) => arrival[index] = subscription,
            None => {
                position.insert(&subscription.member_id, arrival.len());
                arrival.push(subscription);
            }
        }
    }
    arrival
}

/// Topics some member subscribes to and that have at least one partition, in
/// Java name order with their partition numbering.
fn subscribed_topics<'a>(
    partitions_per_topic: &'a BTreeMap<String, i32>,
    members: &[&Subscription],
) -> Vec<Topic<'a>> {
    let subscribed: BTreeSet<&str> = members
        .iter()
        .flat_map(|member| member.topics.iter().map(String::as_str))
        .collect();
    let mut named: Vec<(&'a str, usize)> = partitions_per_topic
        .iter()
        .filter(|(name, _)| subscribed.contains(name.as_str()))
        .filter_map(|(name, &count)| {
            let count = usize::try_from(count).ok().filter(|&count| count > 0)?;
            Some((name.as_str(), count))
        })
        .collect();
    named.sort_by(|left, right| compare_strings(left.0, right.0));
    let mut first_partition = 0;
    named
        .into_iter()
        .map(|(name, partition_count)| {
            let topic = Topic {
                name,
                partition_count,
                first_partition,
            };
            first_partition += partition_count;
            topic
        })
        .collect()
}
