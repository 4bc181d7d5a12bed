//! One consumer group as the classic protocol's coordinator sees it: its
//! state, generation, members and committed offsets, and the settings that
//! bound it. Changed only by [`crate::group::coordinator`].

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::types::{ProducerId, TopicPartition};

/// Kafka's group coordinator settings (broker configs), with Kafka's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSettings {
    /// `group.initial.rebalance.delay.ms` (3000): how long the first
    /// rebalance of an empty group waits for more members.
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms` (6000).
    pub session_timeout_min_ms: i32,
    /// `group.max.session.timeout.ms` (1800000).
    pub session_timeout_max_ms: i32,
    /// `group.max.size` (unbounded in Kafka; Brook bounds every collection).
    pub group_size_max: usize,
    /// `offsets.retention.minutes` (7 days) in milliseconds.
    pub offsets_retention_ms: i64,
    /// `offset.metadata.max.bytes` (4096).
    pub offset_metadata_bytes_max: usize,
}

impl Default for GroupSettings {
    fn default() -> GroupSettings {
        GroupSettings {
            initial_rebalance_delay_ms: 3_000,
            session_timeout_min_ms: 6_000,
            session_timeout_max_ms: 1_800_000,
            group_size_max: GROUP_SIZE_MAX,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1_000,
            offset_metadata_bytes_max: 4_096,
        }
    }
}

/// The most members (joined or pending) one group may have.
pub const GROUP_SIZE_MAX: usize = 10_000;

/// How long a member that was given an id (MEMBER_ID_REQUIRED) or that
/// joined for the first time has to come back (Kafka's 5 minutes).
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

/// The classic protocol's group states, named as Kafka names them on the wire
/// (DescribeGroups, ListGroups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A request the coordinator answers later (a JoinGroup or SyncGroup that
/// waits for the rebalance); the runtime maps it to its waiting caller.
pub type Token = u64;

/// One protocol a member supports: an assignor name and its metadata bytes
/// (for consumers, an encoded ConsumerProtocolSubscription).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

/// A joined member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocols: Vec<Protocol>,
    /// What SyncGroup gives this member in the current generation.
    pub assignment: Bytes,
    /// Its JoinGroup waiting for the rebalance to complete.
    pub awaiting_join: Option<Token>,
    /// Its SyncGroup waiting for the leader's assignment.
    pub awaiting_sync: Option<Token>,
    /// When the member is removed unless it heartbeats (or waits in a join
    /// or sync) before.
    pub session_deadline_ms: i64,
    /// Order of joining, for choosing a new leader deterministically.
    pub joined_sequence: u64,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|candidate| candidate.name == protocol)
            .map(|candidate| candidate.metadata.clone())
            .unwrap_or_default()
    }

    /// Same protocols, in the same order, with the same metadata.
    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    pub fn keeps_alive(&self, now_ms: i64) -> bool {
        self.awaiting_join.is_some()
            || self.awaiting_sync.is_some()
            || self.session_deadline_ms > now_ms
    }
}

/// An offset committed for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 when the client did not give one.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only from OffsetCommit v1 requests that asked for one.
    pub expire_timestamp_ms: Option<i64>,
}

/// A transactional offset commit waiting for its transaction's COMMIT or
/// ABORT marker (Kafka's `pendingTransactionalOffsetCommits`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTxnOffset {
    pub offset: CommittedOffset,
    /// Where its record is in `__consumer_offsets`; `None` while it is being
    /// written. A commit marker applies it only if it is newer there than
    /// the committed offset it would replace.
    pub record_offset: Option<i64>,
}

/// The rebalance timer of a group in PreparingRebalance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinTimer {
    /// The first rebalance of an empty group: wait `initial_rebalance_delay_ms`
    /// for more members, again while members keep arriving, up to the
    /// rebalance timeout (Kafka's InitialDelayedJoin).
    Initial {
        deadline_ms: i64,
        remaining_ms: i64,
        member_added: bool,
    },
    /// Complete when every member rejoined, or at the deadline without the
    /// ones that did not.
    Rebalance { deadline_ms: i64 },
}

/// One group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub state_since_ms: i64,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id → member id of static members.
    pub static_members: BTreeMap<String, String>,
    /// Member ids given out with MEMBER_ID_REQUIRED, and when they lapse.
    pub pending_members: BTreeMap<String, i64>,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// Where each committed offset's record is in `__consumer_offsets`, when
    /// known: decides whether a transactional commit supersedes it.
    pub offset_record_offsets: BTreeMap<TopicPartition, i64>,
    /// Transactional offsets by producer, visible once their transaction
    /// commits (see [`crate::group::txn_offsets`]).
    pub pending_txn_offsets: BTreeMap<ProducerId, BTreeMap<TopicPartition, PendingTxnOffset>>,
    pub join_timer: Option<JoinTimer>,
    /// In CompletingRebalance: when members that have not sent SyncGroup are
    /// removed (Kafka bounds the sync phase by the rebalance timeout).
    pub sync_deadline_ms: Option<i64>,
    /// The leader's assignment is being persisted (generation it belongs to).
    pub persisting_generation: Option<i32>,
    pub next_join_sequence: u64,
}

impl Group {
    pub fn new(group_id: &str, now_ms: i64) -> Group {
        Group {
            group_id: group_id.to_owned(),
            state: GroupState::Empty,
            state_since_ms: now_ms,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            offsets: BTreeMap::new(),
            offset_record_offsets: BTreeMap::new(),
            pending_txn_offsets: BTreeMap::new(),
            join_timer: None,
            sync_deadline_ms: None,
            persisting_generation: None,
            next_join_sequence: 0,
        }
    }

    pub fn set_state(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_since_ms = now_ms;
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn size(&self) -> usize {
        self.members.len() + self.pending_members.len()
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    /// Whether any producer has a transactional offset for `partition`
    /// that its transaction has not completed yet.
    pub fn has_pending_txn_offset(&self, partition: &TopicPartition) -> bool {
        self.pending_txn_offsets
            .values()
            .any(|pending| pending.contains_key(partition))
    }

    /// A static member whose instance id now belongs to another member id.
    pub fn is_fenced(&self, member_id: &str, group_instance_id: Option<&str>) -> bool {
        group_instance_id
            .and_then(|instance| self.static_members.get(instance))
            .is_some_and(|current| current != member_id)
    }

    /// Whether a member with these protocols may join: the first member
    /// defines the protocol type; later ones must share it and support at
    /// least one protocol every current member supports.
    pub fn supports(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|protocol| {
                self.members.values().all(|member| {
                    member
                        .protocols
                        .iter()
                        .any(|theirs| theirs.name == protocol.name)
                })
            })
    }

    /// Kafka's protocol choice: among the protocols every member supports,
    /// each member votes for the first one it lists; most votes wins (ties
    /// go to the candidate the longest-standing member prefers).
    pub fn select_protocol(&self) -> Option<String> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|member| member.joined_sequence);
        let first = members.first()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|protocol| protocol.name.as_str())
            .filter(|name| {
                members
                    .iter()
                    .all(|member| member.protocols.iter().any(|theirs| theirs.name == *name))
            })
            .collect();
        let mut votes: Vec<(&str, usize)> = candidates.iter().map(|name| (*name, 0)).collect();
        for member in &members {
            let vote = member
                .protocols
                .iter()
                .find(|protocol| candidates.contains(&protocol.name.as_str()));
            if let Some(vote) = vote {
                if let Some(count) = votes.iter_mut().find(|(name, _)| *name == vote.name) {
                    count.1 += 1;
                }
            }
        }
        let most = votes.iter().map(|(_, count)| *count).max()?;
        votes
            .into_iter()
            .find(|(_, count)| *count == most)
            .map(|(name, _)| name.to_owned())
    }

    /// The member that becomes leader when the leader is gone: the one that
    /// joined first.
    pub fn first_member(&self) -> Option<String> {
        self.members
            .values()
            .min_by_key(|member| member.joined_sequence)
            .map(|member| member.member_id.clone())
    }

    pub fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty()
            && self
                .members
                .values()
                .all(|member| member.awaiting_join.is_some())
    }

    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|member| i64::from(member.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, sequence: u64, protocols: &[&str]) -> Member {
        Member {
            member_id: id.to_owned(),
            group_instance_id: None,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 1_000,
            session_timeout_ms: 1_000,
            protocols: protocols
                .iter()
                .map(|name| Protocol {
                    name: (*name).to_owned(),
                    metadata: Bytes::from(name.to_string()),
                })
                .collect(),
            assignment: Bytes::new(),
            awaiting_join: None,
            awaiting_sync: None,
            session_deadline_ms: 0,
            joined_sequence: sequence,
        }
    }

    fn group_of(members: Vec<Member>) -> Group {
        let mut group = Group::new("g", 0);
        group.protocol_type = Some("consumer".into());
        for member in members {
            group.members.insert(member.member_id.clone(), member);
        }
        group
    }

    #[test]
    fn the_protocol_most_members_prefer_among_common_ones_wins() {
        let group = group_of(vec![
            member("a", 0, &["range", "roundrobin"]),
            member("b", 1, &["roundrobin", "range"]),
            member("c", 2, &["roundrobin", "sticky"]),
        ]);
        assert_eq!(group.select_protocol().as_deref(), Some("roundrobin"));
        let tie = group_of(vec![
            member("a", 0, &["range", "roundrobin"]),
            member("b", 1, &["roundrobin", "range"]),
        ]);
        assert_eq!(tie.select_protocol().as_deref(), Some("range"));
    }

    #[test]
    fn a_joiner_must_share_the_type_and_a_protocol_with_every_member() {
        let group = group_of(vec![
            member("a", 0, &["range", "roundrobin"]),
            member("b", 1, &["roundrobin"]),
        ]);
        let protocols = |names: &[&str]| member("x", 9, names).protocols;
        assert!(group.supports("consumer", &protocols(&["sticky", "roundrobin"])));
        assert!(!group.supports("consumer", &protocols(&["range"])));
        assert!(!group.supports("connect", &protocols(&["roundrobin"])));
        assert!(!group.supports("consumer", &[]));
        assert!(Group::new("g", 0).supports("anything", &protocols(&["x"])));
    }

    #[test]
    fn static_members_are_fenced_by_a_newer_member_id() {
        let mut group = group_of(vec![member("a", 0, &["range"])]);
        group.static_members.insert("instance-1".into(), "a".into());
        assert!(!group.is_fenced("a", Some("instance-1")));
        assert!(group.is_fenced("old", Some("instance-1")));
        assert!(!group.is_fenced("old", None));
        assert!(!group.is_fenced("old", Some("instance-2")));
    }
}
