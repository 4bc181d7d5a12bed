//! The classic group coordinator driven through whole rebalances with the
//! time as a value: joins, syncs, heartbeats, leaves, session expiry,
//! static membership, commits and loading, with Kafka's error codes.

use brook_engine::group::Persist;
use brook_engine::group::coordinator::{
    Action, GroupCoordinator, JoinRequest, JoinResponse, LeavingMember, SyncRequest, SyncResponse,
    WritePurpose,
};
use brook_engine::group::offsets::{CommitPartition, CommitRequest};
use brook_engine::group::state::{GroupSettings, GroupState, Protocol, Token};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::TopicPartition;
use bytes::Bytes;

const GROUP: &str = "group";
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn coordinator(initial_delay_ms: i64) -> GroupCoordinator {
    GroupCoordinator::new(GroupSettings {
        initial_rebalance_delay_ms: initial_delay_ms,
        ..GroupSettings::default()
    })
}

fn protocols(names: &[&str]) -> Vec<Protocol> {
    names
        .iter()
        .map(|name| Protocol {
            name: (*name).to_owned(),
            metadata: Bytes::from(format!("{name}-metadata")),
        })
        .collect()
}

fn join_request(member_id: &str, new_member_id: &str) -> JoinRequest {
    JoinRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".into(),
        protocols: protocols(&["range"]),
        require_known_member_id: true,
        supports_skip_assignment: true,
        new_member_id: new_member_id.into(),
    }
}

fn sync_request(member_id: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncRequest {
    SyncRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        generation,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: assignments
            .iter()
            .map(|(member, bytes)| ((*member).to_owned(), Bytes::from(bytes.to_string())))
            .collect(),
    }
}

/// The join answers in `actions`, by token.
fn joins(actions: &[Action]) -> Vec<(Token, JoinResponse)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::JoinDone { token, response } => Some((*token, response.clone())),
            _ => None,
        })
        .collect()
}

fn syncs(actions: &[Action]) -> Vec<(Token, SyncResponse)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::SyncDone { token, response } => Some((*token, response.clone())),
            _ => None,
        })
        .collect()
}

fn only_join(actions: &[Action]) -> JoinResponse {
    let answers = joins(actions);
    assert_eq!(answers.len(), 1, "{actions:?}");
    answers[0].1.clone()
}

/// KIP-394: a new member is first given an id, then joins with it.
fn join_with_id(
    coordinator: &mut GroupCoordinator,
    now_ms: i64,
    token: Token,
    member: &str,
) -> Vec<Action> {
    let first = only_join(&coordinator.join(now_ms, token, join_request("", member)));
    assert_eq!(first.error, ErrorCode::MEMBER_ID_REQUIRED);
    assert_eq!(first.member_id, member);
    coordinator.join(now_ms, token, join_request(member, "unused"))
}

/// Persists every assignment write in `actions` and returns what follows.
fn persist_assignments(
    coordinator: &mut GroupCoordinator,
    now_ms: i64,
    actions: &[Action],
) -> Vec<Action> {
    let mut after = Vec::new();
    for action in actions {
        if let Action::Write {
            purpose:
                WritePurpose::Assignment {
                    group_id,
                    generation,
                },
            ..
        } = action
        {
            after.extend(coordinator.assignment_persisted(now_ms, group_id, *generation, true));
        }
    }
    after
}

/// One member, no initial delay: generation 1, stable, its assignment back.
fn stable_single_member(coordinator: &mut GroupCoordinator) {
    let joined = only_join(&join_with_id(coordinator, 0, 1, "a"));
    assert_eq!(joined.error, ErrorCode::NONE);
    assert_eq!((joined.generation, joined.leader.as_str()), (1, "a"));
    assert_eq!(joined.members.len(), 1);
    let actions = coordinator.sync(0, 2, sync_request("a", 1, &[("a", "assignment-a")]));
    assert!(syncs(&actions).is_empty(), "waits for the write");
    let synced = syncs(&persist_assignments(coordinator, 0, &actions));
    assert_eq!(synced.len(), 1);
    assert_eq!(synced[0].1.assignment, Bytes::from("assignment-a"));
    assert_eq!(coordinator.group(GROUP).unwrap().state, GroupState::Stable);
}

#[test]
fn a_second_member_rebalances_the_group_and_both_get_their_assignment() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    // b joins: the group prepares a rebalance and waits for a to rejoin.
    let actions = join_with_id(&mut coordinator, 10, 3, "b");
    assert!(joins(&actions).is_empty());
    assert_eq!(
        coordinator.heartbeat(11, GROUP, "a", None, 1),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let actions = coordinator.join(12, 4, join_request("a", "unused"));
    let answers = joins(&actions);
    assert_eq!(answers.len(), 2);
    for (token, response) in &answers {
        assert_eq!(response.generation, 2);
        assert_eq!(response.leader, "a");
        let expected_members = if *token == 4 { 2 } else { 0 };
        assert_eq!(response.members.len(), expected_members, "{response:?}");
    }
    let follower = coordinator.sync(13, 5, sync_request("b", 2, &[]));
    assert!(syncs(&follower).is_empty());
    let leader = coordinator.sync(14, 6, sync_request("a", 2, &[("a", "to-a"), ("b", "to-b")]));
    let mut synced = syncs(&persist_assignments(&mut coordinator, 15, &leader));
    synced.sort_by_key(|(token, _)| *token);
    assert_eq!(synced[0], (5, sync_ok("to-b")));
    assert_eq!(synced[1], (6, sync_ok("to-a")));
}

fn sync_ok(assignment: &'static str) -> SyncResponse {
    SyncResponse {
        error: ErrorCode::NONE,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignment: Bytes::from(assignment),
    }
}

#[test]
fn the_initial_delay_gathers_members_before_the_first_generation() {
    let mut coordinator = coordinator(3_000);
    assert!(joins(&join_with_id(&mut coordinator, 0, 1, "a")).is_empty());
    assert!(joins(&join_with_id(&mut coordinator, 1_000, 2, "b")).is_empty());
    assert_eq!(coordinator.next_deadline_ms(), Some(3_000));
    // A member arrived during the delay: wait another delay.
    assert!(joins(&coordinator.tick(3_000)).is_empty());
    let answers = joins(&coordinator.tick(6_000));
    assert_eq!(answers.len(), 2);
    assert!(answers.iter().all(|(_, response)| response.generation == 1));
}

#[test]
fn a_member_that_stops_heartbeating_is_removed_after_its_session_timeout() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    join_with_id(&mut coordinator, 10, 3, "b");
    coordinator.join(10, 4, join_request("a", ""));
    let leader = coordinator.sync(10, 5, sync_request("a", 2, &[("a", "x"), ("b", "y")]));
    coordinator.sync(10, 6, sync_request("b", 2, &[]));
    persist_assignments(&mut coordinator, 10, &leader);
    // b keeps heartbeating, a goes silent.
    let later = 10 + i64::from(SESSION_MS) - 1;
    assert_eq!(
        coordinator.heartbeat(later, GROUP, "b", None, 2),
        ErrorCode::NONE
    );
    assert!(coordinator.tick(later).is_empty());
    coordinator.tick(10 + i64::from(SESSION_MS));
    let group = coordinator.group(GROUP).unwrap();
    assert!(!group.members.contains_key("a"));
    assert_eq!(group.state, GroupState::PreparingRebalance);
    assert_eq!(group.leader.as_deref(), Some("b"), "a new leader is chosen");
    // b rejoins alone and leads generation 3.
    let rejoined = only_join(&coordinator.join(20_011, 7, join_request("b", "")));
    assert_eq!((rejoined.generation, rejoined.leader.as_str()), (3, "b"));
}

#[test]
fn leaving_answers_per_member_and_rebalances_the_rest() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    let leaving = [
        LeavingMember {
            member_id: "a".into(),
            group_instance_id: None,
        },
        LeavingMember {
            member_id: "nobody".into(),
            group_instance_id: None,
        },
    ];
    let (errors, _) = coordinator.leave(5, GROUP, &leaving);
    assert_eq!(errors, vec![ErrorCode::NONE, ErrorCode::UNKNOWN_MEMBER_ID]);
    let group = coordinator.group(GROUP).unwrap();
    assert_eq!(group.state, GroupState::Empty, "the last member left");
    assert_eq!(group.generation, 2);
    let (errors, _) = coordinator.leave(5, "other", &leaving[..1]);
    assert_eq!(errors, vec![ErrorCode::UNKNOWN_MEMBER_ID]);
}

#[test]
fn wrong_generation_unknown_member_and_rebalance_errors_are_kafkas() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    let failed = |actions: Vec<Action>| syncs(&actions)[0].1.error;
    assert_eq!(
        failed(coordinator.sync(1, 9, sync_request("a", 7, &[]))),
        ErrorCode::ILLEGAL_GENERATION
    );
    assert_eq!(
        failed(coordinator.sync(1, 9, sync_request("zz", 1, &[]))),
        ErrorCode::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        coordinator.heartbeat(1, GROUP, "zz", None, 1),
        ErrorCode::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        coordinator.heartbeat(1, GROUP, "a", None, 0),
        ErrorCode::ILLEGAL_GENERATION
    );
    let unknown = only_join(&coordinator.join(1, 9, join_request("zz", "")));
    assert_eq!(unknown.error, ErrorCode::UNKNOWN_MEMBER_ID);
    let mut other_type = join_request("", "c");
    other_type.protocol_type = "connect".into();
    assert_eq!(
        only_join(&coordinator.join(1, 9, other_type)).error,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
    let mut short = join_request("", "c");
    short.session_timeout_ms = 10;
    assert_eq!(
        only_join(&coordinator.join(1, 9, short)).error,
        ErrorCode::INVALID_SESSION_TIMEOUT
    );
    // b joins: a's commits are refused once the join completes and the group
    // waits for the leader's assignment.
    join_with_id(&mut coordinator, 2, 10, "b");
    coordinator.join(2, 11, join_request("a", ""));
    let commit = commit_request("a", 2);
    assert_eq!(
        coordinator.commit_offsets(3, &commit),
        Err(ErrorCode::REBALANCE_IN_PROGRESS)
    );
    assert_eq!(
        failed(coordinator.sync(3, 12, sync_request("a", 1, &[]))),
        ErrorCode::ILLEGAL_GENERATION
    );
}

fn commit_request(member_id: &str, generation: i32) -> CommitRequest {
    CommitRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        generation,
        retention_ms: None,
        partitions: vec![CommitPartition {
            partition: TopicPartition::new("topic", 0),
            offset: 42,
            leader_epoch: -1,
            metadata: Some("m".into()),
        }],
    }
}

#[test]
fn commits_are_validated_applied_once_written_and_fetched() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    assert_eq!(
        coordinator.commit_offsets(1, &commit_request("a", 0)),
        Err(ErrorCode::ILLEGAL_GENERATION)
    );
    assert_eq!(
        coordinator.commit_offsets(1, &commit_request("zz", 1)),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    let plan = coordinator
        .commit_offsets(1, &commit_request("a", 1))
        .unwrap();
    assert_eq!(plan.errors, vec![ErrorCode::NONE]);
    let partition = TopicPartition::new("topic", 0);
    assert_eq!(
        coordinator.fetch_offsets(GROUP, Some(std::slice::from_ref(&partition)))[0].1,
        None,
        "not applied before it is written"
    );
    coordinator.offsets_committed(1, GROUP, plan.offsets);
    let fetched = coordinator.fetch_offsets(GROUP, None);
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0].1.as_ref().unwrap().offset, 42);
    // A group outside group management commits with generation -1.
    let mut simple = commit_request("", -1);
    simple.group_id = "standalone".into();
    assert!(coordinator.commit_offsets(1, &simple).is_ok());
    let mut huge = commit_request("a", 1);
    huge.partitions[0].metadata = Some("x".repeat(5_000));
    assert_eq!(
        coordinator.commit_offsets(1, &huge).unwrap().errors,
        vec![ErrorCode::OFFSET_METADATA_TOO_LARGE]
    );
}

#[test]
fn a_static_member_that_restarts_gets_its_assignment_without_a_rebalance() {
    let mut coordinator = coordinator(0);
    let static_join = |member_id: &str, new_member_id: &str| JoinRequest {
        group_instance_id: Some("instance-a".into()),
        ..join_request(member_id, new_member_id)
    };
    let joined = only_join(&coordinator.join(0, 1, static_join("", "a-1")));
    assert_eq!((joined.error, joined.generation), (ErrorCode::NONE, 1));
    let leader = coordinator.sync(0, 2, sync_request("a-1", 1, &[("a-1", "mine")]));
    persist_assignments(&mut coordinator, 0, &leader);
    // The process restarts: a new member id for the same instance.
    let actions = coordinator.join(5, 3, static_join("", "a-2"));
    let rejoined = only_join(&actions);
    assert_eq!(
        (
            rejoined.error,
            rejoined.generation,
            rejoined.member_id.as_str()
        ),
        (ErrorCode::NONE, 1, "a-2")
    );
    assert!(rejoined.skip_assignment, "the leader keeps the assignment");
    assert_eq!(
        (rejoined.leader.as_str(), rejoined.members.len()),
        ("a-2", 1)
    );
    let group = coordinator.group(GROUP).unwrap();
    assert_eq!(group.state, GroupState::Stable);
    let mut sync = sync_request("a-2", 1, &[]);
    sync.group_instance_id = Some("instance-a".into());
    assert_eq!(syncs(&coordinator.sync(6, 4, sync))[0].1, sync_ok("mine"));
    // The old incarnation is fenced.
    assert_eq!(
        coordinator.heartbeat(7, GROUP, "a-1", Some("instance-a"), 1),
        ErrorCode::FENCED_INSTANCE_ID
    );
}

#[test]
fn a_loaded_group_is_stable_with_its_members_and_offsets() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    let plan = coordinator
        .commit_offsets(1, &commit_request("a", 1))
        .unwrap();
    let mut records = vec![Persist::Group(coordinator.snapshot(GROUP).unwrap())];
    records.extend(plan.records(GROUP));
    let mut loaded = GroupCoordinator::new(GroupSettings::default());
    for record in records {
        loaded.replay(100, record);
    }
    let group = loaded.group(GROUP).unwrap();
    assert_eq!(group.state, GroupState::Stable);
    assert_eq!(group.generation, 1);
    assert_eq!(
        loaded.fetch_offsets(GROUP, None)[0]
            .1
            .as_ref()
            .unwrap()
            .offset,
        42
    );
    assert_eq!(loaded.heartbeat(101, GROUP, "a", None, 1), ErrorCode::NONE);
    // Members that do not come back expire like any other.
    loaded.tick(101 + i64::from(SESSION_MS));
    assert!(loaded.group(GROUP).unwrap().members.is_empty());
}

#[test]
fn only_empty_groups_are_deleted_and_expired_offsets_leave_tombstones() {
    let mut coordinator = coordinator(0);
    stable_single_member(&mut coordinator);
    assert_eq!(
        coordinator.delete_group(GROUP),
        Err(ErrorCode::NON_EMPTY_GROUP)
    );
    assert_eq!(
        coordinator.delete_group("none"),
        Err(ErrorCode::GROUP_ID_NOT_FOUND)
    );
    let plan = coordinator
        .commit_offsets(1, &commit_request("a", 1))
        .unwrap();
    coordinator.offsets_committed(1, GROUP, plan.offsets);
    let leaving = [LeavingMember {
        member_id: "a".into(),
        group_instance_id: None,
    }];
    coordinator.leave(1_000, GROUP, &leaving);
    let retention_ms = coordinator.settings.offsets_retention_ms;
    assert!(
        coordinator
            .expire_offsets(1_000 + retention_ms - 1)
            .is_empty()
    );
    let records = coordinator.expire_offsets(1_000 + retention_ms);
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(coordinator.group(GROUP).is_none());
}

#[test]
fn offsets_of_deleted_topics_are_forgotten_with_tombstones() {
    let mut coordinator = coordinator(0);
    let mut commit = commit_request("", -1);
    commit.partitions.push(CommitPartition {
        partition: TopicPartition::new("kept", 0),
        offset: 7,
        leader_epoch: -1,
        metadata: None,
    });
    let plan = coordinator.commit_offsets(1, &commit).unwrap();
    coordinator.offsets_committed(1, GROUP, plan.offsets);
    let deleted = std::collections::BTreeSet::from(["topic".to_owned()]);
    let records = coordinator.forget_topics(&deleted);
    assert_eq!(
        records,
        vec![Persist::OffsetDeleted {
            group_id: GROUP.into(),
            partition: TopicPartition::new("topic", 0),
        }]
    );
    let left = coordinator.fetch_offsets(GROUP, None);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, TopicPartition::new("kept", 0));
}

/// Before JoinGroup v9 there is no `skip_assignment`: a static leader that
/// rejoins a stable group is told the old leader id and no members (as
/// Kafka does), so it computes no assignment, and keeps its own on sync.
#[test]
fn a_static_leader_rejoining_before_v9_is_not_told_to_skip_assignment() {
    let mut coordinator = coordinator(0);
    let static_join = |member_id: &str, new_member_id: &str| JoinRequest {
        group_instance_id: Some("instance-a".into()),
        supports_skip_assignment: false,
        ..join_request(member_id, new_member_id)
    };
    only_join(&coordinator.join(0, 1, static_join("", "a-1")));
    let leader = coordinator.sync(0, 2, sync_request("a-1", 1, &[("a-1", "mine")]));
    persist_assignments(&mut coordinator, 0, &leader);
    let rejoined = only_join(&coordinator.join(5, 3, static_join("", "a-2")));
    assert_eq!(
        (
            rejoined.error,
            rejoined.generation,
            rejoined.member_id.as_str(),
            rejoined.leader.as_str(),
            rejoined.skip_assignment,
            rejoined.members.len()
        ),
        (ErrorCode::NONE, 1, "a-2", "a-1", false, 0)
    );
    assert_eq!(coordinator.group(GROUP).unwrap().state, GroupState::Stable);
    let mut sync = sync_request("a-2", 1, &[]);
    sync.group_instance_id = Some("instance-a".into());
    assert_eq!(syncs(&coordinator.sync(6, 4, sync))[0].1, sync_ok("mine"));
}
