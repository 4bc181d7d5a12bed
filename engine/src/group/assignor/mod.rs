//! Kafka's client-side consumer partition assignors — `range`, `roundrobin`,
//! `sticky` and `cooperative-sticky` — and the consumer protocol bytes that
//! carry their inputs (JoinGroup metadata) and outputs (SyncGroup assignments).
//!
//! In the classic rebalance protocol the broker never assigns partitions: the
//! group leader, a client, runs one of these and the coordinator relays the
//! result. Brook carries them anyway so that its tests, simulator and load
//! generator can predict exactly what a group of Java consumers will decide,
//! and so a Brook-side client can take part in a group with them.
//!
//! The rules are Kafka's (`RangeAssignor`, `RoundRobinAssignor`,
//! `AbstractStickyAssignor`, `StickyAssignor`, `CooperativeStickyAssignor`),
//! including the orders their results depend on: Java's UTF-16 string order,
//! and the iteration order of the leader's `HashMap` of subscriptions, which
//! decides a few ties (see `java`). For that, pass the subscriptions in the
//! order the JoinGroup response lists the members.
//!
//! Where we depart from Kafka, on inputs where Kafka's own result is wrong:
//! - An owned partition that its topic does not have (a topic recreated with
//!   fewer partitions) is ignored. Kafka keeps it in the owner's assignment and
//!   can then assign another partition twice.
//! - The sticky assignors treat subscriptions as equal only if every member's
//!   topic set is the same. Kafka lets a member with no topics, when its
//!   `HashMap` yields it first, count as equal to the others, and then assigns
//!   it partitions of topics it did not subscribe to.
//! - When the general sticky algorithm moves a partition back to its owner in an
//!   older generation, that member must still subscribe to the topic (Kafka
//!   does not check).
//! - A subscription's topic list is a set (Java clients never repeat a topic).
//! - Rack-aware assignment needs the replicas' racks, which a partition count
//!   does not carry: like Kafka's `assign(Map<String, Integer>, ...)`, we assign
//!   without racks (members' racks are still carried in the protocol).
//!
//! Within a member's list, range and round robin give partitions sorted; the
//! sticky assignors keep Kafka's order (kept partitions first). Kafka's clients
//! treat the list as a set.

mod constrained;
mod general;
mod input;
mod java;
mod movements;
mod protocol;
mod range;
mod round_robin;
mod sticky;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

pub use protocol::{
    AssignmentMetadata, CONSUMER_PROTOCOL_VERSION_MAX, CONSUMER_PROTOCOL_VERSION_MIN,
    ProtocolError, StickyUserData, SubscriptionMetadata, decode_assignment,
    decode_cooperative_user_data, decode_sticky_user_data, decode_subscription, encode_assignment,
    encode_cooperative_user_data, encode_sticky_user_data, encode_subscription,
};

use input::GroupInput;

/// A topic's partition, ordered as Kafka sorts them: by topic (Java's `String`
/// order), then partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl Ord for TopicPartition {
    fn cmp(&self, other: &Self) -> Ordering {
        java::compare_strings(&self.topic, &other.topic).then(self.partition.cmp(&other.partition))
    }
}

impl PartialOrd for TopicPartition {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}-{}", self.topic, self.partition)
    }
}

/// One member's subscription as the leader sees it: the JoinGroup member's ids
/// and its decoded protocol metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: Vec<String>,
    /// Partitions the member owns now (consumer protocol v1+); the cooperative
    /// assignor keeps them where it can.
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation the owned partitions belong to (consumer protocol v2+).
    pub generation: Option<i32>,
    pub rack: Option<String>,
    /// Assignor-specific bytes; the eager sticky assignor keeps the previous
    /// assignment here ([`StickyUserData`]).
    pub user_data: Option<Bytes>,
}

impl Subscription {
    pub fn new<Topic: Into<String>>(
        member_id: impl Into<String>,
        topics: impl IntoIterator<Item = Topic>,
    ) -> Self {
        Subscription {
            member_id: member_id.into(),
            topics: topics.into_iter().map(Into::into).collect(),
            ..Subscription::default()
        }
    }

    /// A JoinGroup member: its ids and its decoded protocol metadata.
    pub fn from_metadata(
        member_id: impl Into<String>,
        group_instance_id: Option<String>,
        metadata: SubscriptionMetadata,
    ) -> Self {
        Subscription {
            member_id: member_id.into(),
            group_instance_id,
            topics: metadata.topics,
            owned_partitions: metadata.owned_partitions,
            generation: metadata.generation,
            rack: metadata.rack,
            user_data: metadata.user_data,
        }
    }

    /// The protocol metadata this member would send.
    pub fn metadata(&self) -> SubscriptionMetadata {
        SubscriptionMetadata {
            topics: self.topics.clone(),
            user_data: self.user_data.clone(),
            owned_partitions: self.owned_partitions.clone(),
            generation: self.generation,
            rack: self.rack.clone(),
        }
    }

    pub fn with_owned_partitions(mut self, owned_partitions: Vec<TopicPartition>) -> Self {
        self.owned_partitions = owned_partitions;
        self
    }

    pub fn with_generation(mut self, generation: i32) -> Self {
        self.generation = Some(generation);
        self
    }

    pub fn with_group_instance_id(mut self, group_instance_id: impl Into<String>) -> Self {
        self.group_instance_id = Some(group_instance_id.into());
        self
    }

    pub fn with_rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = Some(rack.into());
        self
    }

    pub fn with_user_data(mut self, user_data: Bytes) -> Self {
        self.user_data = Some(user_data);
        self
    }
}

/// Each member's partitions, by member id. Every member of the group has an
/// entry, empty if it got nothing.
pub type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// How members give up partitions in a rebalance: all of them before rejoining
/// (eager), or only those the leader moves (cooperative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RebalanceProtocol {
    Eager,
    Cooperative,
}

/// Kafka's built-in consumer assignors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assignor {
    Range,
    RoundRobin,
    Sticky,
    CooperativeSticky,
}

impl Assignor {
    pub const ALL: [Assignor; 4] = [
        Assignor::Range,
        Assignor::RoundRobin,
        Assignor::Sticky,
        Assignor::CooperativeSticky,
    ];

    /// The protocol name members list in JoinGroup.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::Sticky => "sticky",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    pub fn from_name(name: &str) -> Option<Assignor> {
        Assignor::ALL
            .into_iter()
            .find(|assignor| assignor.name() == name)
    }

    /// The rebalance protocols the assignor supports, preferred first.
    pub fn supported_protocols(self) -> &'static [RebalanceProtocol] {
        match self {
            Assignor::CooperativeSticky => {
                &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
            }
            Assignor::Range | Assignor::RoundRobin | Assignor::Sticky => {
                &[RebalanceProtocol::Eager]
            }
        }
    }

    /// Assigns the partitions of the subscribed topics to the members.
    ///
    /// `partitions_per_topic` gives each topic's partition count; topics no
    /// member subscribes to and topics without partitions are ignored, as
    /// Kafka's leader only looks up subscribed topics that exist.
    /// `subscriptions` should be in the order the JoinGroup response lists the
    /// members (it decides a few ties, as in Kafka); a member id given twice
    /// keeps its last subscription.
    pub fn assign(
        self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &[Subscription],
    ) -> Assignment {
        let input = GroupInput::new(partitions_per_topic, subscriptions);
        if input.member_count() == 0 {
            return Assignment::new();
        }
        let per_member = match self {
            Assignor::Range => range::assign(&input),
            Assignor::RoundRobin => round_robin::assign(&input),
            Assignor::Sticky => sticky::assign(&input, sticky::Protocol::Eager),
            Assignor::CooperativeSticky => sticky::assign(&input, sticky::Protocol::Cooperative),
        };
        input.assignment(&per_member)
    }
}

#[cfg(test)]
mod tests;
