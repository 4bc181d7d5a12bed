//! Kafka's `roundrobin` assignor: all subscribed partitions sorted (topic, then
//! partition) are dealt one by one around the members in `MemberInfo` order,
//! skipping a member that does not subscribe to the partition's topic.
//!
//! Only with identical subscriptions is the result balanced: a member that
//! subscribes to more topics can end up with many more partitions.

use super::input::{GroupInput, MemberIndex, PartitionId};

pub(crate) fn assign(input: &GroupInput<'_>) -> Vec<Vec<PartitionId>> {
    let mut assignment = vec![Vec::new(); input.member_count()];
    let mut circle: Vec<MemberIndex> = input.hash_order.clone();
    circle.sort_by(|&left, &right| input.compare_member_info(left, right));
    let mut position = 0;
    for partition in 0..input.partition_count() {
        let topic = input.topic_of(partition);
        // Every topic here has a subscriber, so this visits at most the whole
        // circle once.
        let mut skipped = 0;
        while !input.subscribes(circle[position], topic) {
            position = (position + 1) % circle.len();
            skipped += 1;
            assert!(
                skipped < circle.len(),
                "every assigned topic has a subscriber"
            );
        }
        assignment[circle[position]].push(partition);
        position = (position + 1) % circle.len();
    }
    assignment
}
