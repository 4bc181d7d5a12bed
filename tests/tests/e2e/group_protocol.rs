//! The consumer-group APIs at the protocol level, over raw TCP: the answers
//! Kafka's group coordinator gives to members that join, sync, heartbeat and
//! commit out of turn. The same over the other group APIs is in
//! [`super::group_offsets`] (coordinator and offset look-ups at every
//! version the broker advertises) and [`super::group_admin`] (listing,
//! describing, leaving and deleting groups); the broker and requests they
//! share are here.
//!
//! Each rule's expected error is the one Kafka's classic group coordinator
//! returns (`GroupMetadataManager`, `ClassicGroup`, `OffsetMetadataManager`
//! in `group-coordinator`). NOT_COORDINATOR is not provoked here: with one
//! broker every `__consumer_offsets` partition is led by this broker, so no
//! group has its coordinator elsewhere.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::groups::{
    GroupVersions, Versions, assignment, commit, describe_group, error, fetch_offsets, heartbeat,
    join, join_request, receive, send, subscription, sync_request, text, topic_name,
    wait_for_coordinator,
};
use brook_tests::raw::{connect, exchange};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Message;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// The topic the members subscribe to.
pub(super) const TOPIC: &str = "grouped";
pub(super) const TOPIC_PARTITIONS: i32 = 4;
const SESSION_TIMEOUT_MIN_MS: i32 = 6_000;
const SESSION_TIMEOUT_MAX_MS: i32 = 300_000;

/// A broker with group settings given by their Kafka names.
pub(super) fn start(dir: &std::path::Path, extra: &[&str]) -> Broker {
    let min = format!("group.min.session.timeout.ms={SESSION_TIMEOUT_MIN_MS}");
    let max = format!("group.max.session.timeout.ms={SESSION_TIMEOUT_MAX_MS}");
    let mut args = vec![
        "--set",
        "group.initial.rebalance.delay.ms=0",
        "--set",
        &min,
        "--set",
        &max,
    ];
    args.extend_from_slice(extra);
    Broker::start(BROOK, dir, 2, &args)
}

pub(super) fn create_topic(
    stream: &mut TcpStream,
    versions: &Versions,
    name: &str,
    partitions: i32,
) {
    let version = versions.highest(ApiKey::CreateTopics, CreateTopicsRequest::VERSIONS);
    let topic = create_topics_request::CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    let response: CreateTopicsResponse = exchange(
        stream,
        ApiKey::CreateTopics,
        version,
        &CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(10_000),
    );
    assert_eq!(error(response.topics[0].error_code), None, "{response:?}");
}

/// OffsetCommit of `offsets` (partition, offset) of [`TOPIC`].
pub(super) fn commit_offsets(
    stream: &mut TcpStream,
    version: i16,
    group: &str,
    generation: i32,
    member_id: &str,
    offsets: &[(i32, i64)],
) -> Vec<Option<ResponseError>> {
    commit(
        stream, version, group, generation, member_id, TOPIC, offsets,
    )
}

/// JoinGroup without a member id (MEMBER_ID_REQUIRED), then with the id it
/// handed out; returns that id and the second answer.
fn join_as_new_member(
    stream: &mut TcpStream,
    version: i16,
    group: &str,
) -> (String, JoinGroupResponse) {
    let first = join(stream, version, &join_request(group, "", TOPIC, &["range"]));
    assert_eq!(
        error(first.error_code),
        Some(ResponseError::MemberIdRequired),
        "{first:?}"
    );
    let member_id = first.member_id.to_string();
    assert!(!member_id.is_empty(), "MEMBER_ID_REQUIRED carries the id");
    let joined = join(
        stream,
        version,
        &join_request(group, &member_id, TOPIC, &["range"]),
    );
    (member_id, joined)
}

/// A one-member group in Stable state with every partition of [`TOPIC`];
/// returns the member id (generation 1).
pub(super) fn stable_group(
    stream: &mut TcpStream,
    versions: &GroupVersions,
    group: &str,
) -> String {
    let (member_id, joined) = join_as_new_member(stream, versions.join, group);
    assert_eq!(error(joined.error_code), None, "{joined:?}");
    assert_eq!(joined.generation_id, 1);
    let everything = assignment(TOPIC, &[0, 1, 2, 3]);
    let synced: SyncGroupResponse = exchange(
        stream,
        ApiKey::SyncGroup,
        versions.sync,
        &sync_request(
            versions.sync,
            group,
            1,
            &member_id,
            &[(&member_id, everything.clone())],
        ),
    );
    assert_eq!(error(synced.error_code), None, "{synced:?}");
    assert_eq!(synced.assignment, everything);
    member_id
}

/// The committed offset of each partition, which must all be answered
/// without error.
pub(super) fn committed(
    stream: &mut TcpStream,
    version: i16,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Vec<i64> {
    let (group_error, fetched) = fetch_offsets(stream, version, group, topic, partitions);
    assert_eq!(group_error, None, "{fetched:?}");
    assert_eq!(
        fetched
            .iter()
            .map(|entry| entry.partition)
            .collect::<Vec<_>>(),
        partitions,
        "{fetched:?}"
    );
    assert!(
        fetched.iter().all(|entry| entry.error.is_none()),
        "{fetched:?}"
    );
    fetched.iter().map(|entry| entry.offset).collect()
}

#[test]
fn join_sync_heartbeat_and_commit_answer_kafkas_errors_through_a_rebalance() {
    const GROUP: &str = "rebalanced";
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut leader = connect(&broker);
    let advertised = Versions::of(&mut leader);
    let versions = GroupVersions::of(&advertised);
    assert!(versions.join >= 4, "JoinGroup v4 (KIP-394) is advertised");
    create_topic(&mut leader, &advertised, TOPIC, TOPIC_PARTITIONS);
    wait_for_coordinator(&mut leader, &advertised, GROUP);

    // JoinGroup v4+ without a member id: MEMBER_ID_REQUIRED and the id; with
    // it, the only member leads generation 1 with the protocol it offered.
    let (leader_id, joined) = join_as_new_member(&mut leader, versions.join, GROUP);
    assert_eq!(error(joined.error_code), None, "{joined:?}");
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.member_id.as_str(), leader_id);
    assert_eq!(joined.leader.as_str(), leader_id);
    assert_eq!(
        joined.protocol_name.as_ref().map(|name| name.as_str()),
        Some("range")
    );
    assert_eq!(joined.members.len(), 1, "{joined:?}");
    assert_eq!(joined.members[0].member_id.as_str(), leader_id);
    assert_eq!(joined.members[0].metadata, subscription(&[TOPIC]));

    // SyncGroup for a generation the group is not in.
    let sync_v = versions.sync;
    let wrong: SyncGroupResponse = exchange(
        &mut leader,
        ApiKey::SyncGroup,
        sync_v,
        &sync_request(sync_v, GROUP, 2, &leader_id, &[]),
    );
    assert_eq!(
        error(wrong.error_code),
        Some(ResponseError::IllegalGeneration)
    );
    let everything = assignment(TOPIC, &[0, 1, 2, 3]);
    let synced: SyncGroupResponse = exchange(
        &mut leader,
        ApiKey::SyncGroup,
        sync_v,
        &sync_request(
            sync_v,
            GROUP,
            1,
            &leader_id,
            &[(&leader_id, everything.clone())],
        ),
    );
    assert_eq!(error(synced.error_code), None, "{synced:?}");
    assert_eq!(synced.assignment, everything, "the leader's own assignment");

    // Stable, generation 1.
    let beat = versions.heartbeat;
    assert_eq!(
        heartbeat(&mut leader, beat, GROUP, 1, "not-a-member"),
        Some(ResponseError::UnknownMemberId)
    );
    assert_eq!(heartbeat(&mut leader, beat, GROUP, 1, &leader_id), None);
    assert_eq!(
        heartbeat(&mut leader, beat, GROUP, 2, &leader_id),
        Some(ResponseError::IllegalGeneration)
    );
    let commit_v = versions.commit;
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 1, &leader_id, &[(0, 5)]),
        [None]
    );
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 3, &leader_id, &[(0, 6)]),
        [Some(ResponseError::IllegalGeneration)]
    );
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 1, "not-a-member", &[(0, 6)]),
        [Some(ResponseError::UnknownMemberId)]
    );

    // A second member's JoinGroup starts a rebalance (PreparingRebalance);
    // its answer waits until the leader joins again.
    let mut follower = connect(&broker);
    let first = join(
        &mut follower,
        versions.join,
        &join_request(GROUP, "", TOPIC, &["range"]),
    );
    assert_eq!(
        error(first.error_code),
        Some(ResponseError::MemberIdRequired)
    );
    let follower_id = first.member_id.to_string();
    send(
        &mut follower,
        ApiKey::JoinGroup,
        versions.join,
        &join_request(GROUP, &follower_id, TOPIC, &["range"]),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match heartbeat(&mut leader, beat, GROUP, 1, &leader_id) {
            Some(ResponseError::RebalanceInProgress) => break,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            other => panic!("the leader's heartbeat after a second JoinGroup: {other:?}"),
        }
    }
    assert_eq!(
        describe_group(&mut leader, &advertised, GROUP)
            .group_state
            .as_str(),
        "PreparingRebalance"
    );
    // Kafka takes commits from the current generation while a rebalance is
    // being prepared: eager consumers commit in their revocation callback.
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 1, &leader_id, &[(1, 7)]),
        [None],
        "a commit during PreparingRebalance"
    );

    // The leader joins again: everyone has, so generation 2 begins
    // (CompletingRebalance) and both JoinGroups are answered.
    let rejoined = join(
        &mut leader,
        versions.join,
        &join_request(GROUP, &leader_id, TOPIC, &["range"]),
    );
    assert_eq!(error(rejoined.error_code), None, "{rejoined:?}");
    assert_eq!(rejoined.generation_id, 2);
    assert_eq!(rejoined.leader.as_str(), leader_id);
    let mut listed: Vec<String> = rejoined
        .members
        .iter()
        .map(|member| member.member_id.to_string())
        .collect();
    listed.sort();
    let mut expected = vec![leader_id.clone(), follower_id.clone()];
    expected.sort();
    assert_eq!(listed, expected, "the leader learns every member");
    assert!(
        rejoined
            .members
            .iter()
            .all(|member| member.metadata == subscription(&[TOPIC]))
    );
    let follower_joined: JoinGroupResponse =
        receive(&mut follower, ApiKey::JoinGroup, versions.join);
    assert_eq!(
        error(follower_joined.error_code),
        None,
        "{follower_joined:?}"
    );
    assert_eq!(follower_joined.generation_id, 2);
    assert_eq!(follower_joined.member_id.as_str(), follower_id);
    assert_eq!(follower_joined.leader.as_str(), leader_id);
    assert!(
        follower_joined.members.is_empty(),
        "only the leader gets the members"
    );
    assert_eq!(
        describe_group(&mut leader, &advertised, GROUP)
            .group_state
            .as_str(),
        "CompletingRebalance"
    );

    // CompletingRebalance: commits wait for the assignment
    // (REBALANCE_IN_PROGRESS); the old generation is gone; heartbeats of the
    // new one are fine.
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 2, &leader_id, &[(0, 8)]),
        [Some(ResponseError::RebalanceInProgress)]
    );
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 1, &leader_id, &[(0, 8)]),
        [Some(ResponseError::IllegalGeneration)]
    );
    assert_eq!(heartbeat(&mut follower, beat, GROUP, 2, &follower_id), None);

    // The follower's SyncGroup waits for the leader's, which carries both
    // assignments.
    let (first_half, second_half) = (assignment(TOPIC, &[0, 1]), assignment(TOPIC, &[2, 3]));
    send(
        &mut follower,
        ApiKey::SyncGroup,
        sync_v,
        &sync_request(sync_v, GROUP, 2, &follower_id, &[]),
    );
    let assignments = [
        (leader_id.as_str(), first_half.clone()),
        (follower_id.as_str(), second_half.clone()),
    ];
    let synced: SyncGroupResponse = exchange(
        &mut leader,
        ApiKey::SyncGroup,
        sync_v,
        &sync_request(sync_v, GROUP, 2, &leader_id, &assignments),
    );
    assert_eq!(error(synced.error_code), None, "{synced:?}");
    assert_eq!(synced.assignment, first_half);
    let follower_synced: SyncGroupResponse = receive(&mut follower, ApiKey::SyncGroup, sync_v);
    assert_eq!(
        error(follower_synced.error_code),
        None,
        "{follower_synced:?}"
    );
    assert_eq!(follower_synced.assignment, second_half);

    // Stable, generation 2: commits are taken and read back.
    assert_eq!(
        commit_offsets(
            &mut follower,
            commit_v,
            GROUP,
            2,
            &follower_id,
            &[(2, 9), (3, 11)]
        ),
        [None, None]
    );
    assert_eq!(
        commit_offsets(&mut leader, commit_v, GROUP, 7, &leader_id, &[(0, 12)]),
        [Some(ResponseError::IllegalGeneration)]
    );
    assert_eq!(
        committed(&mut leader, versions.fetch, GROUP, TOPIC, &[0, 1, 2, 3]),
        [5, 7, 9, 11]
    );
}

#[test]
fn join_group_asks_new_dynamic_members_for_an_id_from_v4_only() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    let versions = advertised.common(ApiKey::JoinGroup, JoinGroupRequest::VERSIONS);
    assert!(*versions.end() >= 4, "JoinGroup v4 (KIP-394) is advertised");
    for version in versions {
        let group = format!("joined-v{version}");
        wait_for_coordinator(&mut stream, &advertised, &group);
        let answer = join(
            &mut stream,
            version,
            &join_request(&group, "", TOPIC, &["range"]),
        );
        assert!(!answer.member_id.is_empty(), "v{version}: {answer:?}");
        if version >= 4 {
            assert_eq!(
                error(answer.error_code),
                Some(ResponseError::MemberIdRequired),
                "v{version}: {answer:?}"
            );
        } else {
            // Before KIP-394 the member is admitted with a new id at once.
            assert_eq!(error(answer.error_code), None, "v{version}: {answer:?}");
            assert_eq!(answer.generation_id, 1, "v{version}");
            assert_eq!(answer.leader, answer.member_id, "v{version}");
        }
    }
    // A static member (group.instance.id, v5+) is admitted at once (KIP-345).
    let version = advertised.highest(ApiKey::JoinGroup, JoinGroupRequest::VERSIONS);
    assert!(
        version >= 5,
        "JoinGroup v5 (static membership) is advertised"
    );
    wait_for_coordinator(&mut stream, &advertised, "static");
    let request =
        join_request("static", "", TOPIC, &["range"]).with_group_instance_id(Some(text("one")));
    let answer = join(&mut stream, version, &request);
    assert_eq!(error(answer.error_code), None, "{answer:?}");
    assert!(!answer.member_id.is_empty());
    assert_eq!(answer.generation_id, 1);
    assert_eq!(answer.leader, answer.member_id);
}

#[test]
fn join_group_refuses_inconsistent_protocols_and_session_timeouts_out_of_range() {
    const GROUP: &str = "typed";
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    let versions = GroupVersions::of(&advertised);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    wait_for_coordinator(&mut stream, &advertised, GROUP);
    stable_group(&mut stream, &versions, GROUP);
    let join_v = versions.join;

    // A member of another protocol type, or with no protocol in common with
    // the members, cannot join ("consumer" with "range" here).
    let connect_type =
        join_request(GROUP, "", TOPIC, &["range"]).with_protocol_type(text("connect"));
    let answer = join(&mut stream, join_v, &connect_type);
    assert_eq!(
        error(answer.error_code),
        Some(ResponseError::InconsistentGroupProtocol),
        "another protocol type: {answer:?}"
    );
    let answer = join(
        &mut stream,
        join_v,
        &join_request(GROUP, "", TOPIC, &["roundrobin"]),
    );
    assert_eq!(
        error(answer.error_code),
        Some(ResponseError::InconsistentGroupProtocol),
        "no protocol in common: {answer:?}"
    );
    // An empty group takes any non-empty protocol type with at least one
    // protocol, and nothing less.
    wait_for_coordinator(&mut stream, &advertised, "untyped");
    let no_type = join_request("untyped", "", TOPIC, &["range"]).with_protocol_type(text(""));
    let answer = join(&mut stream, join_v, &no_type);
    assert_eq!(
        error(answer.error_code),
        Some(ResponseError::InconsistentGroupProtocol),
        "an empty protocol type: {answer:?}"
    );
    let answer = join(
        &mut stream,
        join_v,
        &join_request("untyped", "", TOPIC, &[]),
    );
    assert_eq!(
        error(answer.error_code),
        Some(ResponseError::InconsistentGroupProtocol),
        "no protocols: {answer:?}"
    );

    // group.min/max.session.timeout.ms bound the session timeout, both
    // inclusive; the bound is checked before anything else.
    for (session_timeout_ms, expected) in [
        (
            SESSION_TIMEOUT_MIN_MS - 1,
            Some(ResponseError::InvalidSessionTimeout),
        ),
        (
            SESSION_TIMEOUT_MAX_MS + 1,
            Some(ResponseError::InvalidSessionTimeout),
        ),
        (
            SESSION_TIMEOUT_MIN_MS,
            Some(ResponseError::MemberIdRequired),
        ),
        (
            SESSION_TIMEOUT_MAX_MS,
            Some(ResponseError::MemberIdRequired),
        ),
    ] {
        let request = join_request("timed", "", TOPIC, &["range"])
            .with_session_timeout_ms(session_timeout_ms);
        let answer = join(&mut stream, join_v, &request);
        assert_eq!(
            error(answer.error_code),
            expected,
            "session.timeout.ms {session_timeout_ms}: {answer:?}"
        );
    }
    let request = join_request(GROUP, "", TOPIC, &["range"]).with_session_timeout_ms(1_000);
    let answer = join(&mut stream, join_v, &request);
    assert_eq!(
        error(answer.error_code),
        Some(ResponseError::InvalidSessionTimeout),
        "out of range for an existing group too: {answer:?}"
    );
}
