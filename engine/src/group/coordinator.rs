//! The classic group protocol's coordinator for the groups of one
//! `__consumer_offsets` partition: JoinGroup, SyncGroup, Heartbeat and
//! LeaveGroup as Kafka's `GroupCoordinator` answers them.
//!
//! Shaped like the other engine state machines: requests and the time come
//! in as values, and [`Action`]s go out: answer a waiting JoinGroup or
//! SyncGroup (identified by the runtime's [`Token`]), or persist records to
//! the partition. Requests that can answer at once return their response.
//! [`GroupCoordinator::tick`] runs the timers (sessions, rebalance and
//! initial delays); [`GroupCoordinator::next_deadline_ms`] says when next.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::group::state::{
    Group, GroupSettings, GroupState, JoinTimer, Member, NEW_MEMBER_JOIN_TIMEOUT_MS, Protocol,
    Token,
};
use crate::group::{GroupSnapshot, Persist};
use crate::protocol::errors::ErrorCode;
use crate::types::ProducerId;

/// A JoinGroup, any version, as domain values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    pub group_id: String,
    /// Empty for a member that has not been given an id yet.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// v4+: a new member is first given an id and must join again with it
    /// (KIP-394).
    pub require_known_member_id: bool,
    /// v9+: the answer may tell a rejoining static leader to keep the
    /// group's assignment (`skip_assignment`, KIP-814).
    pub supports_skip_assignment: bool,
    /// The id to give a new member (`client.id-UUID`, made by the caller:
    /// the engine has no randomness).
    pub new_member_id: String,
}

/// One member as the leader's JoinGroup response lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JoinResponse {
    pub error: ErrorCode,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    /// v9+: the leader must not compute a new assignment (a static leader
    /// rejoined a stable group, KIP-814).
    pub skip_assignment: bool,
    pub member_id: String,
    /// Every member with its metadata, for the leader only.
    pub members: Vec<JoinedMember>,
}

impl JoinResponse {
    fn failed(error: ErrorCode, member_id: &str) -> JoinResponse {
        JoinResponse {
            error,
            generation: -1,
            member_id: member_id.to_owned(),
            ..JoinResponse::default()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation: i32,
    /// v5+: checked against the group's when given.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// From the leader: member id → assignment bytes.
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncResponse {
    pub error: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    fn failed(error: ErrorCode) -> SyncResponse {
        SyncResponse {
            error,
            ..SyncResponse::default()
        }
    }
}

/// One member leaving (LeaveGroup v3+ carries several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// Why the runtime writes records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WritePurpose {
    /// The leader's assignment for `generation`: report the outcome with
    /// [`GroupCoordinator::assignment_persisted`].
    Assignment { group_id: String, generation: i32 },
    /// Nothing waits for it (a group emptied, a static member replaced,
    /// expired or deleted offsets).
    Background,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    JoinDone {
        token: Token,
        response: JoinResponse,
    },
    SyncDone {
        token: Token,
        response: SyncResponse,
    },
    Write {
        records: Vec<Persist>,
        purpose: WritePurpose,
    },
}

/// The groups of one `__consumer_offsets` partition.
#[derive(Clone, Debug, Default)]
pub struct GroupCoordinator {
    pub settings: GroupSettings,
    pub groups: BTreeMap<String, Group>,
    /// The groups each producer has transactional offsets pending in, so a
    /// transaction marker finds them (Kafka's `openGroupsForProducer`).
    pub txn_producer_groups: BTreeMap<ProducerId, BTreeSet<String>>,
}

impl GroupCoordinator {
    pub fn new(settings: GroupSettings) -> GroupCoordinator {
        GroupCoordinator {
            settings,
            groups: BTreeMap::new(),
            txn_producer_groups: BTreeMap::new(),
        }
    }

    pub fn group(&self, group_id: &str) -> Option<&Group> {
        self.groups.get(group_id)
    }

    /// Handles a JoinGroup. It may be answered at once (an error, a member
    /// id to join with, or a rejoin that changes nothing) or later through
    /// an [`Action::JoinDone`] for `token`.
    pub fn join(&mut self, now_ms: i64, token: Token, request: JoinRequest) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Some(response) = self.join_checks(&request) {
            return vec![Action::JoinDone { token, response }];
        }
        let group = self
            .groups
            .entry(request.group_id.clone())
            .or_insert_with(|| Group::new(&request.group_id, now_ms));
        let known = group.members.contains_key(&request.member_id)
            || group.pending_members.contains_key(&request.member_id);
        if !known && group.size() >= self.settings.group_size_max {
            let response = JoinResponse::failed(ErrorCode::GROUP_MAX_SIZE_REACHED, "");
            actions.push(Action::JoinDone { token, response });
            return actions;
        }
        if !group.supports(&request.protocol_type, &request.protocols) {
            let response =
                JoinResponse::failed(ErrorCode::INCONSISTENT_GROUP_PROTOCOL, &request.member_id);
            actions.push(Action::JoinDone { token, response });
            return actions;
        }
        let mut change = Change {
            group,
            settings: &self.settings,
            now_ms,
            actions: &mut actions,
        };
        if request.member_id.is_empty() {
            change.join_new_member(token, request);
        } else {
            change.join_current_member(token, request);
        }
        actions
    }

    /// Errors that need no group state (Kafka checks these first).
    fn join_checks(&self, request: &JoinRequest) -> Option<JoinResponse> {
        let fail = |error| Some(JoinResponse::failed(error, &request.member_id));
        if request.group_id.is_empty() {
            return fail(ErrorCode::INVALID_GROUP_ID);
        }
        let session = request.session_timeout_ms;
        if session < self.settings.session_timeout_min_ms
            || session > self.settings.session_timeout_max_ms
        {
            return fail(ErrorCode::INVALID_SESSION_TIMEOUT);
        }
        let group = self.groups.get(&request.group_id);
        if group.is_none_or(|group| group.is(GroupState::Dead)) && !request.member_id.is_empty() {
            return fail(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        None
    }
}

/// One change to one group: the group, the settings and the time, and the
/// actions the change produces.
struct Change<'a> {
    group: &'a mut Group,
    settings: &'a GroupSettings,
    now_ms: i64,
    actions: &'a mut Vec<Action>,
}

impl Change<'_> {
    fn answer_join(&mut self, token: Token, response: JoinResponse) {
        self.actions.push(Action::JoinDone { token, response });
    }

    fn answer_sync(&mut self, token: Token, response: SyncResponse) {
        self.actions.push(Action::SyncDone { token, response });
    }

    fn persist_group(&mut self) {
        let records = vec![Persist::Group(snapshot(self.group))];
        self.actions.push(Action::Write {
            records,
            purpose: WritePurpose::Background,
        });
    }

    fn join_new_member(&mut self, token: Token, request: JoinRequest) {
        let member_id = request.new_member_id.clone();
        if let Some(instance) = request.group_instance_id.clone() {
            let previous = self.group.static_members.get(&instance).cloned();
            match previous.filter(|old| self.group.members.contains_key(old)) {
                Some(old_member_id) => self.replace_static_member(token, request, &old_member_id),
                None => {
                    self.group
                        .static_members
                        .insert(instance, member_id.clone());
                    self.add_member_and_rebalance(token, request, member_id);
                }
            }
            return;
        }
        if request.require_known_member_id {
            let lapses_ms = self.now_ms + i64::from(request.session_timeout_ms);
            self.group
                .pending_members
                .insert(member_id.clone(), lapses_ms);
            let response = JoinResponse::failed(ErrorCode::MEMBER_ID_REQUIRED, &member_id);
            self.answer_join(token, response);
            return;
        }
        self.add_member_and_rebalance(token, request, member_id);
    }

    fn join_current_member(&mut self, token: Token, request: JoinRequest) {
        let member_id = request.member_id.clone();
        if self.group.pending_members.remove(&member_id).is_some() {
            self.add_member_and_rebalance(token, request, member_id);
            return;
        }
        if self
            .group
            .is_fenced(&member_id, request.group_instance_id.as_deref())
        {
            let response = JoinResponse::failed(ErrorCode::FENCED_INSTANCE_ID, &member_id);
            return self.answer_join(token, response);
        }
        let Some(member) = self.group.members.get(&member_id) else {
            let response = JoinResponse::failed(ErrorCode::UNKNOWN_MEMBER_ID, &member_id);
            return self.answer_join(token, response);
        };
        let unchanged = member.matches(&request.protocols);
        let is_leader = self.group.is_leader(&member_id);
        match self.group.state {
            // A rejoin whose response was lost, or a follower rejoining a
            // stable group with nothing changed: the same answer again.
            GroupState::CompletingRebalance if unchanged => {
                let response = join_response(self.group, &member_id, false);
                self.answer_join(token, response);
            }
            GroupState::Stable if unchanged && !is_leader => {
                let response = join_response(self.group, &member_id, false);
                self.answer_join(token, response);
            }
            GroupState::PreparingRebalance
            | GroupState::CompletingRebalance
            | GroupState::Stable => self.update_member_and_rebalance(token, request),
            GroupState::Empty | GroupState::Dead => {
                let response = JoinResponse::failed(ErrorCode::UNKNOWN_MEMBER_ID, &member_id);
                self.answer_join(token, response);
            }
        }
    }

    /// A static member came back with a new member id (it restarted): it
    /// takes the old member's place. A stable group keeps its generation and
    /// assignment (no rebalance, KIP-345); otherwise it joins the rebalance.
    fn replace_static_member(&mut self, token: Token, request: JoinRequest, old_member_id: &str) {
        let Some(mut member) = self.group.members.remove(old_member_id) else {
            return;
        };
        // The old incarnation's waiting requests are fenced.
        if let Some(waiting) = member.awaiting_join.take() {
            let response = JoinResponse::failed(ErrorCode::FENCED_INSTANCE_ID, old_member_id);
            self.answer_join(waiting, response);
        }
        if let Some(waiting) = member.awaiting_sync.take() {
            self.answer_sync(waiting, SyncResponse::failed(ErrorCode::FENCED_INSTANCE_ID));
        }
        let new_member_id = request.new_member_id.clone();
        let protocols_unchanged = member.matches(&request.protocols);
        member.member_id = new_member_id.clone();
        member.session_deadline_ms = self.now_ms + i64::from(request.session_timeout_ms);
        self.group.members.insert(new_member_id.clone(), member);
        if let Some(instance) = &request.group_instance_id {
            let instance = instance.clone();
            self.group
                .static_members
                .insert(instance, new_member_id.clone());
        }
        let leader_before = self.group.leader.clone();
        if self.group.is_leader(old_member_id) {
            self.group.leader = Some(new_member_id.clone());
        }
        if self.group.is(GroupState::Stable) && protocols_unchanged {
            let response = if request.supports_skip_assignment {
                let skip_assignment = self.group.is_leader(&new_member_id);
                join_response(self.group, &new_member_id, skip_assignment)
            } else {
                // Before v9 a rejoining static leader is told the old
                // leader id and no members, as Kafka does: it then does not
                // see itself as leader and computes no assignment that the
                // stable group would ignore.
                JoinResponse {
                    leader: leader_before.unwrap_or_default(),
                    members: Vec::new(),
                    ..join_response(self.group, &new_member_id, false)
                }
            };
            self.answer_join(token, response);
            self.persist_group();
            return;
        }
        let request = JoinRequest {
            member_id: new_member_id,
            ..request
        };
        self.update_member_and_rebalance(token, request);
    }

    fn add_member_and_rebalance(&mut self, token: Token, request: JoinRequest, member_id: String) {
        if self.group.members.is_empty() {
            self.group.protocol_type = Some(request.protocol_type.clone());
        }
        let member = Member {
            member_id: member_id.clone(),
            group_instance_id: request.group_instance_id,
            client_id: request.client_id,
            client_host: request.client_host,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            session_timeout_ms: request.session_timeout_ms,
            protocols: request.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(token),
            awaiting_sync: None,
            session_deadline_ms: self.now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
            joined_sequence: self.group.next_join_sequence,
        };
        self.group.next_join_sequence += 1;
        self.group.members.insert(member_id.clone(), member);
        if self.group.leader.is_none() {
            self.group.leader = Some(member_id);
        }
        if let Some(JoinTimer::Initial { member_added, .. }) = &mut self.group.join_timer {
            *member_added = true;
        }
        self.maybe_prepare_rebalance();
        self.try_complete_join();
    }

    fn update_member_and_rebalance(&mut self, token: Token, request: JoinRequest) {
        let mut replaced = None;
        if let Some(member) = self.group.members.get_mut(&request.member_id) {
            replaced = member.awaiting_join.replace(token);
            member.protocols = request.protocols;
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
            member.session_timeout_ms = request.session_timeout_ms;
            member.client_id = request.client_id;
            member.client_host = request.client_host;
        }
        if let Some(previous) = replaced {
            // A second JoinGroup replaces the first; the client gave up on it.
            let response = JoinResponse::failed(ErrorCode::UNKNOWN_MEMBER_ID, &request.member_id);
            self.answer_join(previous, response);
        }
        self.maybe_prepare_rebalance();
        self.try_complete_join();
    }

    fn maybe_prepare_rebalance(&mut self) {
        match self.group.state {
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty => {
                self.prepare_rebalance()
            }
            GroupState::PreparingRebalance | GroupState::Dead => {}
        }
    }

    fn prepare_rebalance(&mut self) {
        if self.group.is(GroupState::CompletingRebalance) {
            self.reset_and_fail_syncs(ErrorCode::REBALANCE_IN_PROGRESS);
        }
        let rebalance_timeout_ms = self.group.rebalance_timeout_ms();
        self.group.join_timer = Some(if self.group.is(GroupState::Empty) {
            let delay_ms = self
                .settings
                .initial_rebalance_delay_ms
                .min(rebalance_timeout_ms);
            JoinTimer::Initial {
                deadline_ms: self.now_ms + delay_ms,
                remaining_ms: (rebalance_timeout_ms - delay_ms).max(0),
                member_added: false,
            }
        } else {
            JoinTimer::Rebalance {
                deadline_ms: self.now_ms + rebalance_timeout_ms,
            }
        });
        self.group.sync_deadline_ms = None;
        self.group
            .set_state(GroupState::PreparingRebalance, self.now_ms);
    }

    /// Clears the assignment and answers every waiting SyncGroup with `error`.
    fn reset_and_fail_syncs(&mut self, error: ErrorCode) {
        let mut waiting = Vec::new();
        for member in self.group.members.values_mut() {
            member.assignment = Bytes::new();
            waiting.extend(member.awaiting_sync.take());
        }
        for token in waiting {
            self.answer_sync(token, SyncResponse::failed(error));
        }
        self.group.persisting_generation = None;
    }

    /// Completes the join phase if its timer allows: at once when every
    /// member has joined (after an initial delay, at its deadline).
    fn try_complete_join(&mut self) {
        if !self.group.is(GroupState::PreparingRebalance) {
            return;
        }
        let complete = match self.group.join_timer {
            Some(JoinTimer::Initial {
                deadline_ms,
                remaining_ms,
                member_added,
            }) => {
                if deadline_ms > self.now_ms {
                    false
                } else if member_added && remaining_ms > 0 {
                    let delay_ms = self.settings.initial_rebalance_delay_ms.min(remaining_ms);
                    self.group.join_timer = Some(JoinTimer::Initial {
                        deadline_ms: self.now_ms + delay_ms.max(1),
                        remaining_ms: remaining_ms - delay_ms,
                        member_added: false,
                    });
                    delay_ms == 0
                } else {
                    true
                }
            }
            Some(JoinTimer::Rebalance { deadline_ms }) => {
                self.group.all_members_joined() || deadline_ms <= self.now_ms
            }
            None => true,
        };
        if complete {
            self.complete_join();
        }
    }

    /// The join phase ends: members that did not rejoin are removed, the
    /// generation advances, and every waiting JoinGroup is answered (the
    /// leader's with every member's metadata).
    fn complete_join(&mut self) {
        let gone: Vec<String> = self
            .group
            .members
            .values()
            .filter(|member| member.awaiting_join.is_none())
            .map(|member| member.member_id.clone())
            .collect();
        for member_id in gone {
            self.remove_member(&member_id);
        }
        self.group.pending_members.clear();
        self.group.join_timer = None;
        self.group.generation += 1;
        if self.group.members.is_empty() {
            self.group.protocol_name = None;
            self.group.leader = None;
            self.group.set_state(GroupState::Empty, self.now_ms);
            self.persist_group();
            return;
        }
        self.group.protocol_name = self.group.select_protocol();
        if !self
            .group
            .leader
            .as_ref()
            .is_some_and(|leader| self.group.members.contains_key(leader))
        {
            self.group.leader = self.group.first_member();
        }
        self.group
            .set_state(GroupState::CompletingRebalance, self.now_ms);
        self.group.sync_deadline_ms = Some(self.now_ms + self.group.rebalance_timeout_ms());
        let mut answers = Vec::new();
        for member in self.group.members.values_mut() {
            member.session_deadline_ms = self.now_ms + i64::from(member.session_timeout_ms);
            answers.extend(
                member
                    .awaiting_join
                    .take()
                    .map(|token| (token, member.member_id.clone())),
            );
        }
        for (token, member_id) in answers {
            let response = join_response(self.group, &member_id, false);
            self.answer_join(token, response);
        }
    }

    /// Removes a member (left, expired or not rejoined); a new leader is
    /// chosen if it led. Answers its waiting requests as Kafka does.
    fn remove_member(&mut self, member_id: &str) {
        let Some(mut member) = self.group.members.remove(member_id) else {
            return;
        };
        if let Some(instance) = &member.group_instance_id {
            if self.group.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.group.static_members.remove(instance);
            }
        }
        if let Some(token) = member.awaiting_join.take() {
            self.answer_join(
                token,
                JoinResponse::failed(ErrorCode::UNKNOWN_MEMBER_ID, member_id),
            );
        }
        if let Some(token) = member.awaiting_sync.take() {
            self.answer_sync(token, SyncResponse::failed(ErrorCode::UNKNOWN_MEMBER_ID));
        }
        if self.group.is_leader(member_id) {
            self.group.leader = self.group.first_member();
        }
    }

    /// A member is gone: the rest rebalance (or the join completes without it).
    fn remove_member_and_rebalance(&mut self, member_id: &str) {
        self.remove_member(member_id);
        match self.group.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance();
                self.try_complete_join();
            }
            GroupState::PreparingRebalance => self.try_complete_join(),
            GroupState::Empty | GroupState::Dead => {}
        }
    }
}

/// The JoinGroup answer for `member_id` in the current generation.
fn join_response(group: &Group, member_id: &str, skip_assignment: bool) -> JoinResponse {
    let protocol = group.protocol_name.clone().unwrap_or_default();
    let members = if group.is_leader(member_id) {
        group
            .members
            .values()
            .map(|member| JoinedMember {
                member_id: member.member_id.clone(),
                group_instance_id: member.group_instance_id.clone(),
                metadata: member.metadata_for(&protocol),
            })
            .collect()
    } else {
        Vec::new()
    };
    JoinResponse {
        error: ErrorCode::NONE,
        generation: group.generation,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        leader: group.leader.clone().unwrap_or_default(),
        skip_assignment,
        member_id: member_id.to_owned(),
        members,
    }
}

/// The group's metadata record as Kafka persists it.
pub(crate) fn snapshot(group: &Group) -> GroupSnapshot {
    let protocol = group.protocol_name.clone().unwrap_or_default();
    GroupSnapshot {
        group_id: group.group_id.clone(),
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        generation: group.generation,
        protocol_name: group.protocol_name.clone(),
        leader: group.leader.clone(),
        state_since_ms: group.state_since_ms,
        members: group
            .members
            .values()
            .map(|member| crate::group::records::MemberMetadata {
                member_id: member.member_id.clone(),
                group_instance_id: member.group_instance_id.clone(),
                client_id: member.client_id.clone(),
                client_host: member.client_host.clone(),
                rebalance_timeout_ms: member.rebalance_timeout_ms,
                session_timeout_ms: member.session_timeout_ms,
                subscription: member.metadata_for(&protocol),
                assignment: member.assignment.clone(),
            })
            .collect(),
    }
}

impl GroupCoordinator {
    fn change<'a>(
        &'a mut self,
        group_id: &str,
        now_ms: i64,
        actions: &'a mut Vec<Action>,
    ) -> Option<Change<'a>> {
        let group = self.groups.get_mut(group_id)?;
        Some(Change {
            group,
            settings: &self.settings,
            now_ms,
            actions,
        })
    }

    /// Handles a SyncGroup: answered at once, or (while the leader's
    /// assignment is awaited or being persisted) later for `token`.
    pub fn sync(&mut self, now_ms: i64, token: Token, request: SyncRequest) -> Vec<Action> {
        let mut actions = Vec::new();
        let fail = |error| {
            vec![Action::SyncDone {
                token,
                response: SyncResponse::failed(error),
            }]
        };
        let Some(mut change) = self.change(&request.group_id, now_ms, &mut actions) else {
            return fail(ErrorCode::UNKNOWN_MEMBER_ID);
        };
        let group = &mut *change.group;
        if group.is(GroupState::Dead) {
            return fail(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        if group.is_fenced(&request.member_id, request.group_instance_id.as_deref()) {
            return fail(ErrorCode::FENCED_INSTANCE_ID);
        }
        if !group.members.contains_key(&request.member_id) {
            return fail(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if request.generation != group.generation {
            return fail(ErrorCode::ILLEGAL_GENERATION);
        }
        let type_differs = request
            .protocol_type
            .as_ref()
            .is_some_and(|given| group.protocol_type.as_ref() != Some(given));
        let name_differs = request
            .protocol_name
            .as_ref()
            .is_some_and(|given| group.protocol_name.as_ref() != Some(given));
        if type_differs || name_differs {
            return fail(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        match group.state {
            GroupState::Empty => fail(ErrorCode::UNKNOWN_MEMBER_ID),
            GroupState::Dead => fail(ErrorCode::COORDINATOR_NOT_AVAILABLE),
            GroupState::PreparingRebalance => fail(ErrorCode::REBALANCE_IN_PROGRESS),
            GroupState::Stable => {
                let response = sync_response(group, &request.member_id);
                vec![Action::SyncDone { token, response }]
            }
            GroupState::CompletingRebalance => {
                change.await_assignment(token, request);
                actions
            }
        }
    }

    /// The outcome of persisting the leader's assignment for `generation`:
    /// the group becomes stable and every waiting SyncGroup gets its
    /// assignment, or (the write failed) the group rebalances.
    pub fn assignment_persisted(
        &mut self,
        now_ms: i64,
        group_id: &str,
        generation: i32,
        persisted: bool,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(mut change) = self.change(group_id, now_ms, &mut actions) else {
            return actions;
        };
        let group = &mut *change.group;
        let current = group.is(GroupState::CompletingRebalance)
            && group.generation == generation
            && group.persisting_generation == Some(generation);
        if !current {
            return actions;
        }
        group.persisting_generation = None;
        if !persisted {
            change.reset_and_fail_syncs(ErrorCode::COORDINATOR_NOT_AVAILABLE);
            change.prepare_rebalance();
            return actions;
        }
        group.sync_deadline_ms = None;
        group.set_state(GroupState::Stable, now_ms);
        let waiting: Vec<(Token, String)> = group
            .members
            .values_mut()
            .filter_map(|member| {
                let token = member.awaiting_sync.take()?;
                Some((token, member.member_id.clone()))
            })
            .collect();
        for (token, member_id) in waiting {
            let response = sync_response(change.group, &member_id);
            change.answer_sync(token, response);
        }
        actions
    }

    /// Handles a Heartbeat: the error code to answer with.
    pub fn heartbeat(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
    ) -> ErrorCode {
        let Some(group) = self.groups.get_mut(group_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        if group.is(GroupState::Dead) {
            return ErrorCode::COORDINATOR_NOT_AVAILABLE;
        }
        if group.is_fenced(member_id, group_instance_id) {
            return ErrorCode::FENCED_INSTANCE_ID;
        }
        let state = group.state;
        let current_generation = group.generation;
        let Some(member) = group.members.get_mut(member_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        if generation != current_generation {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        member.session_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
        match state {
            GroupState::Empty => ErrorCode::UNKNOWN_MEMBER_ID,
            GroupState::Dead => ErrorCode::COORDINATOR_NOT_AVAILABLE,
            GroupState::PreparingRebalance => ErrorCode::REBALANCE_IN_PROGRESS,
            GroupState::CompletingRebalance | GroupState::Stable => ErrorCode::NONE,
        }
    }

    /// Handles a LeaveGroup: one error per leaving member (in order), and
    /// the actions of the rebalance it starts. An unknown group answers
    /// UNKNOWN_MEMBER_ID for each.
    pub fn leave(
        &mut self,
        now_ms: i64,
        group_id: &str,
        leaving: &[LeavingMember],
    ) -> (Vec<ErrorCode>, Vec<Action>) {
        let mut actions = Vec::new();
        let Some(mut change) = self.change(group_id, now_ms, &mut actions) else {
            return (vec![ErrorCode::UNKNOWN_MEMBER_ID; leaving.len()], actions);
        };
        let errors = leaving.iter().map(|member| change.leave(member)).collect();
        (errors, actions)
    }

    /// Runs every timer due at `now_ms`: members whose session lapsed are
    /// removed, joins and initial delays complete, syncs that never came
    /// are given up on.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Action> {
        let mut actions = Vec::new();
        let group_ids: Vec<String> = self
            .groups
            .values()
            .filter(|group| group_deadline_ms(group).is_some_and(|deadline| deadline <= now_ms))
            .map(|group| group.group_id.clone())
            .collect();
        for group_id in group_ids {
            if let Some(mut change) = self.change(&group_id, now_ms, &mut actions) {
                change.run_timers();
            }
        }
        actions
    }

    /// The earliest time [`GroupCoordinator::tick`] has something to do.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.groups.values().filter_map(group_deadline_ms).min()
    }
}

/// The earliest timer of one group.
fn group_deadline_ms(group: &Group) -> Option<i64> {
    let sessions = group
        .members
        .values()
        .filter(|member| member.awaiting_join.is_none() && member.awaiting_sync.is_none())
        .map(|member| member.session_deadline_ms);
    let pending = group.pending_members.values().copied();
    let join = group.join_timer.map(|timer| match timer {
        JoinTimer::Initial { deadline_ms, .. } | JoinTimer::Rebalance { deadline_ms } => {
            deadline_ms
        }
    });
    sessions
        .chain(pending)
        .chain(join)
        .chain(group.sync_deadline_ms)
        .min()
}

fn sync_response(group: &Group, member_id: &str) -> SyncResponse {
    SyncResponse {
        error: ErrorCode::NONE,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        assignment: group
            .members
            .get(member_id)
            .map(|member| member.assignment.clone())
            .unwrap_or_default(),
    }
}

impl Change<'_> {
    /// A SyncGroup in CompletingRebalance waits; the leader's carries the
    /// assignment, which is persisted before anyone gets it.
    fn await_assignment(&mut self, token: Token, request: SyncRequest) {
        let now_ms = self.now_ms;
        let Some(member) = self.group.members.get_mut(&request.member_id) else {
            return;
        };
        if let Some(previous) = member.awaiting_sync.replace(token) {
            self.answer_sync(previous, SyncResponse::failed(ErrorCode::UNKNOWN_MEMBER_ID));
        }
        let Some(member) = self.group.members.get_mut(&request.member_id) else {
            return;
        };
        member.session_deadline_ms = now_ms + i64::from(member.session_timeout_ms);
        if !self.group.is_leader(&request.member_id) || self.group.persisting_generation.is_some() {
            return;
        }
        let mut assignments: BTreeMap<String, Bytes> = request.assignments.into_iter().collect();
        for member in self.group.members.values_mut() {
            member.assignment = assignments.remove(&member.member_id).unwrap_or_default();
        }
        let generation = self.group.generation;
        self.group.persisting_generation = Some(generation);
        self.actions.push(Action::Write {
            records: vec![Persist::Group(snapshot(self.group))],
            purpose: WritePurpose::Assignment {
                group_id: self.group.group_id.clone(),
                generation,
            },
        });
    }

    fn leave(&mut self, leaving: &LeavingMember) -> ErrorCode {
        let instance = leaving.group_instance_id.as_deref();
        let member_id = match (leaving.member_id.as_str(), instance) {
            ("", Some(instance)) => match self.group.static_members.get(instance) {
                Some(member_id) => member_id.clone(),
                None => return ErrorCode::UNKNOWN_MEMBER_ID,
            },
            (member_id, _) => member_id.to_owned(),
        };
        if self.group.is_fenced(&member_id, instance) {
            return ErrorCode::FENCED_INSTANCE_ID;
        }
        if self.group.pending_members.remove(&member_id).is_some() {
            self.try_complete_join();
            return ErrorCode::NONE;
        }
        if !self.group.members.contains_key(&member_id) {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        }
        self.remove_member_and_rebalance(&member_id);
        ErrorCode::NONE
    }

    fn run_timers(&mut self) {
        let now_ms = self.now_ms;
        self.group
            .pending_members
            .retain(|_, lapses_ms| *lapses_ms > now_ms);
        let expired: Vec<String> = self
            .group
            .members
            .values()
            .filter(|member| !member.keeps_alive(now_ms))
            .map(|member| member.member_id.clone())
            .collect();
        for member_id in expired {
            self.remove_member_and_rebalance(&member_id);
        }
        if self.group.is(GroupState::PreparingRebalance) {
            self.try_complete_join();
        }
        let sync_lapsed = self
            .group
            .sync_deadline_ms
            .is_some_and(|deadline| deadline <= now_ms);
        if self.group.is(GroupState::CompletingRebalance)
            && sync_lapsed
            && self.group.persisting_generation.is_none()
        {
            // Members that never sent SyncGroup are dropped (Kafka's
            // pending-sync timeout) and the rest rebalance.
            let silent: Vec<String> = self
                .group
                .members
                .values()
                .filter(|member| member.awaiting_sync.is_none())
                .map(|member| member.member_id.clone())
                .collect();
            self.group.sync_deadline_ms = None;
            for member_id in silent {
                self.remove_member(&member_id);
            }
            self.prepare_rebalance();
            self.try_complete_join();
        }
    }
}
