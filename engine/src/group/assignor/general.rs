//! Kafka's sticky assignment when members subscribe to different topics
//! (`GeneralAssignmentBuilder`, without racks).
//!
//! 1. Every member keeps the owned partitions of topics it still subscribes to.
//! 2. Each unassigned partition — topics with the fewest potential consumers
//!    first, then by name and partition — goes to the subscribed member with the
//!    fewest partitions (ties: lowest member id).
//! 3. While the assignment is not balanced, partitions are moved, one at a time,
//!    from a member to one with at least two fewer: to the partition's owner in
//!    an older generation when that helps, otherwise to the subscribed member
//!    with the fewest. Moves that would undo an earlier move of the same topic
//!    move the earlier partition back instead ([`Movements`]).
//! 4. If the moves did not lower the imbalance score (the sum of size
//!    differences over all pairs of members), they are all undone, because a
//!    move that does not improve balance only costs stickiness.
//!
//! "Balanced" is Kafka's: sizes differ by at most one, or no member could take a
//! partition from another that has two or more than it.

use std::collections::{BTreeMap, BTreeSet};

use super::input::{GroupInput, MemberIndex, PartitionId, TopicIndex};
use super::movements::Movements;
use super::sticky::{Claims, GENERATION_NONE, MemberData, remove_first};

struct Builder<'a, 'input> {
    input: &'a GroupInput<'input>,
    /// Members that can take each topic's partitions.
    topic_consumers: Vec<Vec<MemberIndex>>,
    /// Each member's partitions (Kafka's `currentAssignment`).
    current: Vec<Vec<PartitionId>>,
    /// False while a member sits out balancing (it can neither give nor take).
    active: Vec<bool>,
    owner: Vec<Option<MemberIndex>>,
    /// Active members by (partition count, member id): Kafka's
    /// `sortedCurrentSubscriptions`.
    by_size: BTreeSet<(usize, MemberIndex)>,
    /// Most recent previous owner (older generations only) and its generation.
    previous: BTreeMap<PartitionId, (MemberIndex, i32)>,
    movements: Movements,
    revocation_required: bool,
}

pub(crate) fn assign(
    input: &GroupInput<'_>,
    claims: Claims,
    data: &[MemberData],
) -> Vec<Vec<PartitionId>> {
    let mut builder = Builder::new(input, claims.owned);
    builder.previous = previous_owners(input, data, claims.generation_max);
    let assigned = builder.keep_subscribed();
    let unassigned: Vec<PartitionId> = builder
        .sorted_all_partitions()
        .into_iter()
        .filter(|partition| !assigned.contains(partition))
        .collect();
    builder.balance(unassigned);
    builder.current
}

/// Kafka's `prepopulateCurrentAssignments`: for each partition, the member that
/// had it in the newest generation older than the current one. A member without
/// a generation counts as generation -1 once some member has one.
fn previous_owners(
    input: &GroupInput<'_>,
    data: &[MemberData],
    generation_max: i32,
) -> BTreeMap<PartitionId, (MemberIndex, i32)> {
    let mut previous: BTreeMap<PartitionId, (MemberIndex, i32)> = BTreeMap::new();
    for &member in &input.hash_order {
        let generation = match data[member].generation {
            Some(generation) if generation < generation_max => generation,
            None if generation_max > GENERATION_NONE => GENERATION_NONE,
            _ => continue,
        };
        for partition in &data[member].partitions {
            let Some(partition) = input.partition_id(partition) else {
                continue;
            };
            let newer = previous
                .get(&partition)
                .is_none_or(|&(_, recorded)| generation > recorded);
            if newer {
                previous.insert(partition, (member, generation));
            }
        }
    }
    previous
}

impl<'a, 'input> Builder<'a, 'input> {
    fn new(input: &'a GroupInput<'input>, owned: Vec<Vec<PartitionId>>) -> Self {
        let mut topic_consumers = vec![Vec::new(); input.topics.len()];
        for &member in &input.hash_order {
            for &topic in &input.member_topics[member] {
                topic_consumers[topic].push(member);
            }
        }
        let mut owner = vec![None; input.partition_count()];
        for (member, partitions) in owned.iter().enumerate() {
            for &partition in partitions {
                owner[partition] = Some(member);
            }
        }
        Builder {
            input,
            topic_consumers,
            current: owned,
            active: vec![true; input.member_count()],
            owner,
            by_size: BTreeSet::new(),
            previous: BTreeMap::new(),
            movements: Movements::default(),
            revocation_required: false,
        }
    }

    /// All partitions, topics with fewer potential consumers first (Kafka's
    /// `TopicComparator`), then topic name, then partition.
    fn sorted_all_partitions(&self) -> Vec<PartitionId> {
        let mut topics: Vec<TopicIndex> = (0..self.input.topics.len()).collect();
        topics.sort_by_key(|&topic| (self.topic_consumers[topic].len(), topic));
        topics
            .into_iter()
            .flat_map(|topic| {
                let topic = &self.input.topics[topic];
                topic.first_partition..topic.first_partition + topic.partition_count
            })
            .collect()
    }

    /// Kafka's `assignOwnedPartitions`: drops owned partitions of topics the
    /// owner no longer subscribes to and returns the partitions kept.
    fn keep_subscribed(&mut self) -> BTreeSet<PartitionId> {
        let mut kept = BTreeSet::new();
        for member in 0..self.current.len() {
            let input = self.input;
            let before = self.current[member].len();
            self.current[member]
                .retain(|&partition| input.subscribes(member, input.topic_of(partition)));
            if self.current[member].len() != before {
                self.revocation_required = true;
            }
            kept.extend(self.current[member].iter().copied());
        }
        for partition in 0..self.owner.len() {
            self.owner[partition] =
                self.owner[partition].filter(|&member| self.current[member].contains(&partition));
        }
        kept
    }

    fn size(&self, member: MemberIndex) -> usize {
        self.current[member].len()
    }

    /// All partitions of the member's topics: more than this it cannot hold.
    fn size_max(&self, member: MemberIndex) -> usize {
        self.input.member_topics[member]
            .iter()
            .map(|&topic| self.input.topics[topic].partition_count)
            .sum()
    }

    fn give(&mut self, partition: PartitionId, member: MemberIndex) {
        self.by_size.remove(&(self.size(member), member));
        self.current[member].push(partition);
        self.owner[partition] = Some(member);
        self.by_size.insert((self.size(member), member));
    }

    /// The active member with the fewest partitions (then lowest id) that
    /// subscribes to the topic.
    fn least_loaded_subscriber(&self, topic: TopicIndex) -> Option<MemberIndex> {
        self.by_size
            .iter()
            .map(|&(_, member)| member)
            .find(|&member| self.input.subscribes(member, topic))
    }

    fn balance(&mut self, mut unassigned: Vec<PartitionId>) {
        self.by_size = (0..self.current.len())
            .map(|member| (self.size(member), member))
            .collect();
        let initializing = self.by_size.last().is_none_or(|&(size, _)| size == 0);
        for &partition in &unassigned {
            if let Some(member) = self.least_loaded_subscriber(self.input.topic_of(partition)) {
                self.give(partition, member);
            }
        }
        // Topics with one potential consumer, and members that can neither
        // give nor take, sit out the balancing.
        let movable = |partition: &PartitionId| {
            self.topic_consumers[self.input.topic_of(*partition)].len() >= 2
        };
        let mut reassignable: Vec<PartitionId> = self.sorted_all_partitions();
        reassignable.retain(movable);
        unassigned.retain(movable);
        let fixed: Vec<MemberIndex> = (0..self.current.len())
            .filter(|&member| !self.can_take_part(member))
            .collect();
        for &member in &fixed {
            self.by_size.remove(&(self.size(member), member));
            self.active[member] = false;
        }
        let before = (self.current.clone(), self.owner.clone());
        if !self.revocation_required {
            self.reassign_until_balanced(&unassigned);
        }
        let moved = self.reassign_until_balanced(&reassignable);
        if !initializing && moved && self.imbalance() >= imbalance(&before.0, &self.active) {
            (self.current, self.owner) = before;
        }
        for member in fixed {
            self.active[member] = true;
        }
    }

    /// Kafka's `canConsumerParticipateInReassignment`.
    fn can_take_part(&self, member: MemberIndex) -> bool {
        self.size(member) < self.size_max(member)
            || self.current[member]
                .iter()
                .any(|&partition| self.topic_consumers[self.input.topic_of(partition)].len() >= 2)
    }

    fn imbalance(&self) -> usize {
        imbalance(&self.current, &self.active)
    }

    /// Kafka's `performReassignments`: passes over the partitions, moving what
    /// helps balance, until a pass moves nothing. Returns whether anything moved.
    fn reassign_until_balanced(&mut self, partitions: &[PartitionId]) -> bool {
        let mut moved_any = false;
        // Each pass that moves something lowers the spread of sizes, so Kafka
        // does not bound the passes; we do, in case a quirk of `Movements`
        // (which can move a partition from a third member) ever cycles.
        let passes_max = (partitions.len() + 1) * (self.current.len() + 1);
        for _ in 0..passes_max {
            let mut moved = false;
            for &partition in partitions {
                if self.is_balanced() {
                    break;
                }
                moved |= self.reassign_if_better(partition);
            }
            moved_any |= moved;
            if !moved {
                return moved_any;
            }
        }
        debug_assert!(false, "balancing did not settle in {passes_max} passes");
        moved_any
    }

    fn reassign_if_better(&mut self, partition: PartitionId) -> bool {
        let Some(owner) = self.owner[partition] else {
            return false;
        };
        let owner_size = self.size(owner);
        let topic = self.input.topic_of(partition);
        if let Some(&(previous, _)) = self.previous.get(&partition) {
            // Kafka does not check that the previous owner still subscribes.
            let eligible = self.active[previous] && self.input.subscribes(previous, topic);
            if eligible && owner_size > self.size(previous) + 1 {
                self.reassign(partition, previous);
                return true;
            }
        }
        let better_exists = self.topic_consumers[topic]
            .iter()
            .any(|&other| self.active[other] && owner_size > self.size(other) + 1);
        if !better_exists {
            return false;
        }
        if let Some(member) = self.least_loaded_subscriber(topic) {
            self.reassign(partition, member);
        }
        true
    }

    /// Kafka's `reassignPartition`: moves the partition, or the one whose
    /// earlier move this one would undo.
    fn reassign(&mut self, partition: PartitionId, new_owner: MemberIndex) {
        let Some(old_owner) = self.owner[partition] else {
            return;
        };
        let partition = self
            .movements
            .partition_to_move(self.input, partition, old_owner, new_owner);
        let Some(old_owner) = self.owner[partition] else {
            return;
        };
        self.by_size.remove(&(self.size(old_owner), old_owner));
        self.by_size.remove(&(self.size(new_owner), new_owner));
        self.movements
            .move_partition(self.input, partition, old_owner, new_owner);
        remove_first(&mut self.current[old_owner], partition);
        self.current[new_owner].push(partition);
        self.owner[partition] = Some(new_owner);
        self.by_size.insert((self.size(new_owner), new_owner));
        self.by_size.insert((self.size(old_owner), old_owner));
    }

    /// Kafka's `isBalanced`.
    fn is_balanced(&self) -> bool {
        let (Some(&(smallest, _)), Some(&(largest, _))) =
            (self.by_size.first(), self.by_size.last())
        else {
            return true;
        };
        if smallest + 1 >= largest {
            return true;
        }
        for &(size, member) in &self.by_size {
            if size == self.size_max(member) {
                continue;
            }
            for &topic in &self.input.member_topics[member] {
                let topic = &self.input.topics[topic];
                for partition in
                    topic.first_partition..topic.first_partition + topic.partition_count
                {
                    let Some(other) = self.owner[partition].filter(|&other| other != member) else {
                        continue;
                    };
                    if self.active[other] && size + 1 < self.size(other) {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// Kafka's `getBalanceScore` over the active members: the sum, over all pairs,
/// of the difference in partition counts.
fn imbalance(assignment: &[Vec<PartitionId>], active: &[bool]) -> usize {
    let sizes: Vec<usize> = assignment
        .iter()
        .zip(active)
        .filter(|(_, active)| **active)
        .map(|(partitions, _)| partitions.len())
        .collect();
    let mut score = 0;
    for (index, &size) in sizes.iter().enumerate() {
        for &other in &sizes[index + 1..] {
            score += size.abs_diff(other);
        }
    }
    score
}
