//! Kafka's `range` assignor: topic by topic, the topic's subscribers in
//! `MemberInfo` order (static members by `group.instance.id` first, then member
//! id) each take a consecutive range of partitions; when the count does not
//! divide, the first `count % subscribers` take one more.
//!
//! Kafka's code fills each member up to its quota from the lowest unassigned
//! partition, which gives exactly these ranges when no racks are involved.

use super::input::{GroupInput, MemberIndex, PartitionId};

pub(crate) fn assign(input: &GroupInput<'_>) -> Vec<Vec<PartitionId>> {
    let mut assignment = vec![Vec::new(); input.member_count()];
    for (topic_index, topic) in input.topics.iter().enumerate() {
        // Kafka collects a topic's subscribers from its `HashMap` and sorts them
        // stably, so equal instance ids keep the map's order.
        let mut subscribers: Vec<MemberIndex> = input
            .hash_order
            .iter()
            .copied()
            .filter(|&member| input.subscribes(member, topic_index))
            .collect();
        subscribers.sort_by(|&left, &right| input.compare_member_info(left, right));
        if subscribers.is_empty() {
            continue;
        }
        let quota = topic.partition_count / subscribers.len();
        let with_extra = topic.partition_count % subscribers.len();
        let mut next = topic.first_partition;
        for (position, &member) in subscribers.iter().enumerate() {
            let length = quota + usize::from(position < with_extra);
            assignment[member].extend(next..next + length);
            next += length;
        }
        assert_eq!(
            next,
            topic.first_partition + topic.partition_count,
            "every partition of the topic is assigned"
        );
    }
    assignment
}
