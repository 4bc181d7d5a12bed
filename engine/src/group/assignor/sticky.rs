//! What Kafka's `sticky` and `cooperative-sticky` assignors share
//! (`AbstractStickyAssignor`): finding who owns what, choosing the algorithm,
//! and — for the cooperative one — holding back partitions that change owner.
//!
//! The two differ only in where ownership comes from. The eager `sticky`
//! assignor's members have revoked everything before they rejoin, so they carry
//! their previous assignment and its generation in user data
//! ([`super::StickyUserData`]). `cooperative-sticky` members still own their
//! partitions and send them as owned partitions, with the generation in the
//! subscription (or, before consumer protocol v2, in their user data).
//!
//! When every member subscribes to the same topics Kafka uses a quota-based
//! algorithm (`constrained`), otherwise a general one that moves partitions one
//! at a time towards balance (`general`). The cooperative rule on top of both:
//! a partition that leaves one member must not reach another in the same
//! rebalance, because the old owner may still be consuming it; it is left
//! unassigned and the next rebalance, once the old owner has revoked it,
//! assigns it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::input::{GroupInput, MemberIndex, PartitionId};
use super::protocol::{decode_cooperative_user_data, decode_sticky_user_data};
use super::{Subscription, TopicPartition, constrained, general};

/// Kafka's generation for "none known".
pub(crate) const GENERATION_NONE: i32 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Eager,
    Cooperative,
}

/// A member's previous partitions and their generation, as the assignor reads
/// them (Kafka's `MemberData`).
pub(crate) struct MemberData {
    pub(crate) partitions: Vec<TopicPartition>,
    pub(crate) generation: Option<i32>,
}

/// Kafka's `StickyAssignor.memberData`: the previous assignment from user data;
/// unreadable user data counts as "nothing, generation -1".
fn eager_member_data(subscription: &Subscription) -> MemberData {
    let Some(user_data) = subscription
        .user_data
        .as_ref()
        .filter(|data| !data.is_empty())
    else {
        return MemberData {
            partitions: Vec::new(),
            generation: None,
        };
    };
    match decode_sticky_user_data(user_data) {
        Ok(data) => MemberData {
            partitions: data.partitions,
            generation: data.generation,
        },
        Err(_) => MemberData {
            partitions: Vec::new(),
            generation: Some(GENERATION_NONE),
        },
    }
}

/// The subscription's generation as Kafka's `Subscription.generationId()` has
/// it: a negative one is none.
fn subscription_generation(subscription: &Subscription) -> Option<i32> {
    subscription
        .generation
        .filter(|&generation| generation >= 0)
}

/// Kafka's `CooperativeStickyAssignor.memberData`: owned partitions, with the
/// subscription's generation or else the one in user data.
fn cooperative_member_data(subscription: &Subscription) -> MemberData {
    let generation = match (
        subscription_generation(subscription),
        &subscription.user_data,
    ) {
        (Some(generation), _) => Some(generation),
        (None, None) => None,
        (None, Some(user_data)) => {
            Some(decode_cooperative_user_data(user_data).unwrap_or(GENERATION_NONE))
        }
    };
    MemberData {
        partitions: subscription.owned_partitions.clone(),
        generation,
    }
}

/// Who keeps which previously owned partition once conflicting claims are
/// settled (the ownership half of Kafka's `allSubscriptionsEqual`).
pub(crate) struct Claims {
    pub(crate) owned: Vec<Vec<PartitionId>>,
    /// Partitions claimed by two members of the same generation: neither keeps
    /// them.
    pub(crate) multiply_claimed: BTreeSet<PartitionId>,
    pub(crate) generation_max: i32,
}

/// Settles claims member by member in the leader's `HashMap` order: the higher
/// generation wins, an equal one voids both claims. The other member's
/// generation is the one in its subscription, not its member data, as in Kafka.
fn settle_claims(input: &GroupInput<'_>, data: &[MemberData]) -> Claims {
    let mut claims = Claims {
        owned: vec![Vec::new(); input.member_count()],
        multiply_claimed: BTreeSet::new(),
        generation_max: GENERATION_NONE,
    };
    let mut owner: BTreeMap<PartitionId, MemberIndex> = BTreeMap::new();
    for &member in &input.hash_order {
        let generation = data[member].generation.unwrap_or(GENERATION_NONE);
        claims.generation_max = claims.generation_max.max(generation);
        for partition in &data[member].partitions {
            let Some(partition) = input.partition_id(partition) else {
                continue;
            };
            let Some(&other) = owner.get(&partition) else {
                claims.owned[member].push(partition);
                owner.insert(partition, member);
                continue;
            };
            let other_generation =
                subscription_generation(input.members[other]).unwrap_or(GENERATION_NONE);
            if generation < other_generation {
                continue;
            }
            if generation == other_generation {
                claims.multiply_claimed.insert(partition);
            } else {
                claims.owned[member].push(partition);
            }
            remove_first(&mut claims.owned[other], partition);
            owner.insert(partition, member);
        }
    }
    claims
}

/// Removes the first occurrence, as Java's `List.remove(Object)`.
pub(crate) fn remove_first(list: &mut Vec<PartitionId>, partition: PartitionId) {
    if let Some(position) = list.iter().position(|&entry| entry == partition) {
        list.remove(position);
    }
}

/// Whether every member subscribes to the same set of topics (named topics,
/// whether or not they exist).
fn subscriptions_equal(input: &GroupInput<'_>) -> bool {
    let topic_set = |member: MemberIndex| -> BTreeSet<&str> {
        input.members[member]
            .topics
            .iter()
            .map(String::as_str)
            .collect()
    };
    let mut members = input.hash_order.iter().map(|&member| topic_set(member));
    let Some(first) = members.next() else {
        return true;
    };
    members.all(|topics| topics == first)
}

fn member_data(input: &GroupInput<'_>, protocol: Protocol) -> Vec<MemberData> {
    input
        .members
        .iter()
        .map(|subscription| match protocol {
            Protocol::Eager => eager_member_data(subscription),
            Protocol::Cooperative => cooperative_member_data(subscription),
        })
        .collect()
}

pub(crate) fn assign(input: &GroupInput<'_>, protocol: Protocol) -> Vec<Vec<PartitionId>> {
    let data = member_data(input, protocol);
    let claims = settle_claims(input, &data);
    if subscriptions_equal(input) {
        let outcome = constrained::assign(input, &claims);
        let mut assignment = outcome.assignment;
        if protocol == Protocol::Cooperative {
            hold_back(&mut assignment, &outcome.transferring);
        }
        assignment
    } else {
        let mut assignment = general::assign(input, claims, &data);
        if protocol == Protocol::Cooperative {
            let transferring = transferring_ownership(input, &assignment);
            hold_back(&mut assignment, &transferring);
        }
        assignment
    }
}

/// The general algorithm whatever the subscriptions, which is what Kafka ran
/// for every group before it added the quota-based one for equal subscriptions
/// (the worked examples in Kafka's `StickyAssignor` docs still show its results).
#[cfg(test)]
pub(crate) fn assign_general(input: &GroupInput<'_>, protocol: Protocol) -> Vec<Vec<PartitionId>> {
    let data = member_data(input, protocol);
    let claims = settle_claims(input, &data);
    general::assign(input, claims, &data)
}

/// Kafka's `computePartitionsTransferringOwnership`: partitions assigned to a
/// member that did not own them while some member owned them and loses them.
/// Ownership here is the subscriptions' owned partitions as sent.
fn transferring_ownership(
    input: &GroupInput<'_>,
    assignment: &[Vec<PartitionId>],
) -> BTreeMap<PartitionId, MemberIndex> {
    let owned: Vec<HashSet<PartitionId>> = input
        .members
        .iter()
        .map(|member| {
            member
                .owned_partitions
                .iter()
                .filter_map(|partition| input.partition_id(partition))
                .collect()
        })
        .collect();
    let mut revoked: HashSet<PartitionId> = HashSet::new();
    let mut added: BTreeMap<PartitionId, MemberIndex> = BTreeMap::new();
    for (member, partitions) in assignment.iter().enumerate() {
        let assigned: HashSet<PartitionId> = partitions.iter().copied().collect();
        revoked.extend(owned[member].difference(&assigned));
        for &partition in partitions {
            if !owned[member].contains(&partition) {
                added.insert(partition, member);
            }
        }
    }
    added.retain(|partition, _| revoked.contains(partition));
    added
}

/// Kafka's `adjustAssignment`: leaves partitions that change owner unassigned
/// for this rebalance.
fn hold_back(
    assignment: &mut [Vec<PartitionId>],
    transferring: &BTreeMap<PartitionId, MemberIndex>,
) {
    for (&partition, &member) in transferring {
        remove_first(&mut assignment[member], partition);
    }
}
