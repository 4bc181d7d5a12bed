//! Kafka's sticky assignment when every member subscribes to the same topics
//! (`ConstrainedAssignmentBuilder`, without racks).
//!
//! With `P` partitions and `N` members every member ends with `floor(P/N)`
//! (`min`) or `ceil(P/N)` (`max`) partitions, and exactly `P % N` of them with
//! `max`. First each member keeps what it owned, up to its quota: all of it if
//! under `min`; `max` if it owned that many and fewer than `P % N` members have
//! been given `max` so far (first come in the leader's `HashMap` order); `min`
//! otherwise. Kept partitions are chosen lowest partition number first, then
//! topic. Then the unassigned partitions, in topic-partition order, are dealt
//! round-robin to the members under `min` (in member id order), and once those
//! are full, one each to members at `min` until `P % N` members have `max`.
//!
//! A partition a member had to give up (over its quota, or claimed twice) and
//! that another member now gets is "transferring ownership": the cooperative
//! assignor holds it back for one rebalance.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::input::{GroupInput, MemberIndex, PartitionId};
use super::sticky::{Claims, remove_first};

pub(crate) struct Outcome {
    pub(crate) assignment: Vec<Vec<PartitionId>>,
    /// Partitions given to a member other than the one that had to give them up.
    pub(crate) transferring: BTreeMap<PartitionId, MemberIndex>,
}

struct Builder<'a, 'input> {
    input: &'a GroupInput<'input>,
    multiply_claimed: &'a BTreeSet<PartitionId>,
    quota_min: usize,
    quota_max: usize,
    /// How many members end with `quota_max` (zero when the quotas are equal).
    members_over_min_expected: usize,
    members_over_min: usize,
    assignment: Vec<Vec<PartitionId>>,
    assigned: Vec<bool>,
    revoked: BTreeSet<PartitionId>,
    /// Members below `quota_min`, in member id order once sorted.
    under_min: Vec<MemberIndex>,
    /// Members at `quota_min` that may still take one more.
    at_min: VecDeque<MemberIndex>,
    transferring: BTreeMap<PartitionId, MemberIndex>,
}

pub(crate) fn assign(input: &GroupInput<'_>, claims: &Claims) -> Outcome {
    let members = input.member_count();
    let partitions = input.partition_count();
    assert!(members > 0, "a group being assigned has a member");
    let mut builder = Builder {
        input,
        multiply_claimed: &claims.multiply_claimed,
        quota_min: partitions / members,
        quota_max: partitions.div_ceil(members),
        members_over_min_expected: partitions % members,
        members_over_min: 0,
        assignment: vec![Vec::new(); members],
        assigned: vec![false; partitions],
        revoked: BTreeSet::new(),
        under_min: Vec::new(),
        at_min: VecDeque::new(),
        transferring: BTreeMap::new(),
    };
    for &member in &input.hash_order {
        builder.keep_owned(member, &claims.owned[member]);
    }
    let unassigned: Vec<PartitionId> = (0..partitions)
        .filter(|&partition| !builder.assigned[partition])
        .collect();
    builder.under_min.sort_unstable();
    builder.at_min.make_contiguous().sort_unstable();
    builder.deal_round_robin(&unassigned);
    builder.check_quotas();
    Outcome {
        assignment: builder.assignment,
        transferring: builder.transferring,
    }
}

impl Builder<'_, '_> {
    /// Kafka's `assignOwnedPartitions` for one member.
    fn keep_owned(&mut self, member: MemberIndex, owned: &[PartitionId]) {
        let input = self.input;
        let mut owned = owned.to_vec();
        // Partition number first, then topic; stable, as Java's `sorted`.
        owned.sort_by_key(|&partition| {
            (input.partition_number(partition), input.topic_of(partition))
        });
        for &partition in self.multiply_claimed {
            remove_first(&mut owned, partition);
        }
        let keep = if owned.len() < self.quota_min {
            self.under_min.push(member);
            owned.len()
        } else if owned.len() >= self.quota_max
            && self.members_over_min < self.members_over_min_expected
        {
            self.members_over_min += 1;
            if self.members_over_min == self.members_over_min_expected {
                self.at_min.clear();
            }
            self.quota_max
        } else {
            if self.members_over_min < self.members_over_min_expected {
                self.at_min.push_back(member);
            }
            self.quota_min
        };
        for &partition in &owned[..keep] {
            self.assigned[partition] = true;
        }
        self.assignment[member].extend_from_slice(&owned[..keep]);
        self.revoked.extend(&owned[keep..]);
    }

    /// Kafka's `assignRoundRobin`: a cursor over the members under `min` that
    /// drops a member when it reaches `min` and starts over at the end; once
    /// none is under `min`, members at `min` take one each.
    fn deal_round_robin(&mut self, unassigned: &[PartitionId]) {
        let mut cursor = 0;
        for &partition in unassigned {
            let (member, under_min) = if cursor < self.under_min.len() {
                cursor += 1;
                (self.under_min[cursor - 1], true)
            } else if !self.under_min.is_empty() {
                cursor = 1;
                (self.under_min[0], true)
            } else if let Some(member) = self.at_min.pop_front() {
                (member, false)
            } else {
                // Kafka throws here; the quotas leave room for every partition.
                debug_assert!(false, "no member can take {partition}");
                (self.fewest_partitions(), false)
            };
            let count = self.assign_new(partition, member);
            if count == self.quota_min && under_min {
                cursor -= 1;
                self.under_min.remove(cursor);
                self.at_min.push_back(member);
            } else if count == self.quota_max {
                self.members_over_min += 1;
            }
        }
    }

    fn fewest_partitions(&self) -> MemberIndex {
        (0..self.assignment.len())
            .min_by_key(|&member| self.assignment[member].len())
            .unwrap_or(0)
    }

    fn assign_new(&mut self, partition: PartitionId, member: MemberIndex) -> usize {
        self.assignment[member].push(partition);
        if self.revoked.contains(&partition) || self.multiply_claimed.contains(&partition) {
            self.transferring.insert(partition, member);
        }
        self.assignment[member].len()
    }

    /// Kafka's `verifyUnfilledMembers`: everyone ends between the quotas.
    fn check_quotas(&self) {
        for partitions in &self.assignment {
            debug_assert!(
                (self.quota_min..=self.quota_max).contains(&partitions.len()),
                "{} partitions, quotas {}..={}",
                partitions.len(),
                self.quota_min,
                self.quota_max
            );
        }
    }
}
