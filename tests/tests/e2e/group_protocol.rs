//! The consumer-group APIs at the protocol level, over raw TCP: the answers
//! Kafka's group coordinator gives to members that join, sync, heartbeat and
//! commit out of turn, to groups that cannot be deleted, and to coordinator
//! and offset look-ups at every version the broker advertises.
//!
//! Each rule's expected error is the one Kafka's classic group coordinator
//! returns (`GroupMetadataManager`, `ClassicGroup`, `OffsetMetadataManager`
//! in `group-coordinator`). NOT_COORDINATOR is not provoked here: with one
//! broker every `__consumer_offsets` partition is led by this broker, so no
//! group has its coordinator elsewhere.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::groups::{
    Coordinator, Fetched, GroupVersions, Versions, assignment, commit, describe_group, error,
    fetch_offsets, find_coordinator, group_id, heartbeat, join, join_request, receive, send,
    subscription, sync_request, text, topic_name, wait_for_coordinator,
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
fn commit_offsets(
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
fn stable_group(stream: &mut TcpStream, versions: &GroupVersions, group: &str) -> String {
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
fn committed(
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

#[test]
fn delete_groups_refuses_groups_with_members_and_unknown_groups() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    let versions = GroupVersions::of(&advertised);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    for group in ["busy", "offsets-only", "never-seen"] {
        wait_for_coordinator(&mut stream, &advertised, group);
    }
    stable_group(&mut stream, &versions, "busy");
    // A group that only stores offsets (generation -1, no member: the admin
    // client or a consumer that assigns its own partitions).
    assert_eq!(
        commit_offsets(
            &mut stream,
            versions.commit,
            "offsets-only",
            -1,
            "",
            &[(0, 3)]
        ),
        [None]
    );
    let version = advertised.highest(ApiKey::DeleteGroups, DeleteGroupsRequest::VERSIONS);
    let delete =
        |stream: &mut TcpStream, groups: &[&str]| -> HashMap<String, Option<ResponseError>> {
            let request = DeleteGroupsRequest::default()
                .with_groups_names(groups.iter().map(|group| group_id(group)).collect());
            let response: DeleteGroupsResponse =
                exchange(stream, ApiKey::DeleteGroups, version, &request);
            response
                .results
                .iter()
                .map(|result| (result.group_id.to_string(), error(result.error_code)))
                .collect()
        };
    let results = delete(&mut stream, &["busy", "offsets-only", "never-seen"]);
    assert_eq!(
        results,
        HashMap::from([
            ("busy".to_owned(), Some(ResponseError::NonEmptyGroup)),
            ("offsets-only".to_owned(), None),
            (
                "never-seen".to_owned(),
                Some(ResponseError::GroupIdNotFound)
            ),
        ])
    );
    // The deleted group's offsets went with it; deleting it again finds
    // nothing; the refused group still has its member.
    assert_eq!(
        committed(&mut stream, versions.fetch, "offsets-only", TOPIC, &[0]),
        [-1]
    );
    assert_eq!(
        delete(&mut stream, &["offsets-only"]),
        HashMap::from([(
            "offsets-only".to_owned(),
            Some(ResponseError::GroupIdNotFound)
        )])
    );
    let busy = describe_group(&mut stream, &advertised, "busy");
    assert_eq!(busy.group_state.as_str(), "Stable");
    assert_eq!(busy.members.len(), 1);
}

#[test]
fn find_coordinator_names_this_broker_at_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let port: i32 = broker.address.rsplit(':').next().unwrap().parse().unwrap();
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    let versions = advertised.common(ApiKey::FindCoordinator, FindCoordinatorRequest::VERSIONS);
    assert_eq!(versions, 0..=6, "FindCoordinator v0-v6 are advertised");
    wait_for_coordinator(&mut stream, &advertised, "alpha");
    for version in versions {
        let keys = ["alpha", "beta"];
        let found = find_coordinator(&mut stream, version, &keys);
        let expected: Vec<Coordinator> = keys
            .iter()
            .map(|key| Coordinator {
                key: (*key).to_owned(),
                node_id: 0,
                host: "127.0.0.1".to_owned(),
                port,
                error: None,
            })
            .collect();
        assert_eq!(found, expected, "FindCoordinator v{version}");
    }

    // The group coordinator's log: __consumer_offsets, internal, with
    // offsets.topic.num.partitions (50 by default) partitions.
    assert_eq!(offsets_topic_partitions(&mut stream, &advertised), 50);
    drop(stream);
    drop(broker);
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &["--set", "offsets.topic.num.partitions=3"]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    wait_for_coordinator(&mut stream, &advertised, "alpha");
    assert_eq!(offsets_topic_partitions(&mut stream, &advertised), 3);
}

/// The partition count of `__consumer_offsets`, which must exist and be
/// internal (asked without auto-creation, which would make a plain topic).
fn offsets_topic_partitions(stream: &mut TcpStream, versions: &Versions) -> usize {
    let version = versions.highest(ApiKey::Metadata, MetadataRequest::VERSIONS);
    assert!(version >= 4, "Metadata v4 (allow_auto_topic_creation)");
    let topic = metadata_request::MetadataRequestTopic::default()
        .with_name(Some(topic_name("__consumer_offsets")));
    let request = MetadataRequest::default()
        .with_topics(Some(vec![topic]))
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = exchange(stream, ApiKey::Metadata, version, &request);
    assert_eq!(response.topics.len(), 1, "{response:?}");
    let topic = &response.topics[0];
    assert_eq!(error(topic.error_code), None, "{topic:?}");
    assert!(topic.is_internal, "__consumer_offsets is internal");
    topic.partitions.len()
}

#[test]
fn offset_fetch_of_an_unknown_group_answers_minus_one_at_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    wait_for_coordinator(&mut stream, &advertised, "nobody");
    for version in advertised.common(ApiKey::OffsetFetch, OffsetFetchRequest::VERSIONS) {
        let (group_error, fetched) = fetch_offsets(&mut stream, version, "nobody", TOPIC, &[0, 3]);
        assert_eq!(group_error, None, "v{version}");
        let offsets: Vec<(i32, i64, Option<ResponseError>)> = fetched
            .iter()
            .map(|entry| (entry.partition, entry.offset, entry.error))
            .collect();
        assert_eq!(
            offsets,
            [(0, -1, None), (3, -1, None)],
            "v{version}: {fetched:?}"
        );
        if version >= 5 {
            assert!(
                fetched.iter().all(|entry| entry.leader_epoch == -1),
                "v{version}"
            );
        }
    }
}

#[test]
fn offset_commit_and_fetch_round_trip_at_every_advertised_version() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    // Kafka 4 serves OffsetCommit from v2 (and so does the codec here), so
    // v1 is not sent even where a broker still advertises it.
    let commit_versions = advertised.common(ApiKey::OffsetCommit, OffsetCommitRequest::VERSIONS);
    let fetch_versions = advertised.common(ApiKey::OffsetFetch, OffsetFetchRequest::VERSIONS);
    eprintln!("OffsetCommit v{commit_versions:?}, OffsetFetch v{fetch_versions:?}");
    for commit_version in commit_versions {
        let group = format!("round-trip-{commit_version}");
        wait_for_coordinator(&mut stream, &advertised, &group);
        let base = 100 * i64::from(commit_version);
        let metadata = format!("committed at v{commit_version}");
        let partitions = [(0, base + 1), (2, base + 2)]
            .iter()
            .map(|(partition, offset)| {
                offset_commit_request::OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(if commit_version >= 6 { 3 } else { -1 })
                    .with_committed_metadata(Some(text(&metadata)))
            })
            .collect();
        // Generation -1 and no member id: a group that only stores offsets.
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id(&group))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic_name(TOPIC))
                    .with_partitions(partitions),
            ]);
        let response: OffsetCommitResponse =
            exchange(&mut stream, ApiKey::OffsetCommit, commit_version, &request);
        let answers: Vec<(String, i32, Option<ResponseError>)> = response
            .topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().map(|partition| {
                    (
                        topic.name.to_string(),
                        partition.partition_index,
                        error(partition.error_code),
                    )
                })
            })
            .collect();
        assert_eq!(
            answers,
            [(TOPIC.to_owned(), 0, None), (TOPIC.to_owned(), 2, None)],
            "OffsetCommit v{commit_version}"
        );
        for fetch_version in fetch_versions.clone() {
            let (group_error, fetched) =
                fetch_offsets(&mut stream, fetch_version, &group, TOPIC, &[0, 1, 2]);
            assert_eq!(group_error, None, "OffsetFetch v{fetch_version}");
            // Partitions 0 and 2 as committed (the leader epoch from
            // OffsetCommit v6 and in OffsetFetch from v5); partition 1 has
            // no offset.
            let epoch = if fetch_version >= 5 && commit_version >= 6 {
                3
            } else {
                -1
            };
            let expected: Vec<Fetched> = [(0, base + 1), (2, base + 2)]
                .iter()
                .map(|(partition, offset)| Fetched {
                    topic: TOPIC.to_owned(),
                    partition: *partition,
                    offset: *offset,
                    leader_epoch: epoch,
                    metadata: Some(metadata.clone()),
                    error: None,
                })
                .collect();
            let context =
                format!("committed with v{commit_version}, fetched with v{fetch_version}");
            assert_eq!(fetched.len(), 3, "{context}: {fetched:?}");
            assert_eq!(
                [fetched[0].clone(), fetched[2].clone()],
                *expected,
                "{context}"
            );
            let absent = &fetched[1];
            assert_eq!(
                (
                    absent.partition,
                    absent.offset,
                    absent.leader_epoch,
                    absent.error
                ),
                (1, -1, -1, None),
                "{context}"
            );
        }
    }
}

#[test]
fn groups_are_listed_described_left_and_their_offsets_deleted() {
    const GROUP: &str = "described";
    const OTHER_TOPIC: &str = "unsubscribed";
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    let versions = GroupVersions::of(&advertised);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    create_topic(&mut stream, &advertised, OTHER_TOPIC, 1);
    wait_for_coordinator(&mut stream, &advertised, GROUP);
    let member_id = stable_group(&mut stream, &versions, GROUP);
    assert_eq!(
        commit_offsets(
            &mut stream,
            versions.commit,
            GROUP,
            1,
            &member_id,
            &[(0, 4)]
        ),
        [None]
    );
    let other_commit = OffsetCommitRequest::default()
        .with_group_id(group_id(GROUP))
        .with_generation_id_or_member_epoch(1)
        .with_member_id(text(&member_id))
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(topic_name(OTHER_TOPIC))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(2),
                ]),
        ]);
    let response: OffsetCommitResponse = exchange(
        &mut stream,
        ApiKey::OffsetCommit,
        versions.commit,
        &other_commit,
    );
    assert_eq!(error(response.topics[0].partitions[0].error_code), None);

    // ListGroups names it as a consumer group.
    let list_v = advertised.highest(ApiKey::ListGroups, ListGroupsRequest::VERSIONS);
    let listed: ListGroupsResponse = exchange(
        &mut stream,
        ApiKey::ListGroups,
        list_v,
        &ListGroupsRequest::default(),
    );
    assert_eq!(error(listed.error_code), None);
    let entry = listed
        .groups
        .iter()
        .find(|group| group.group_id.as_str() == GROUP)
        .unwrap_or_else(|| panic!("{GROUP} is listed: {listed:?}"));
    assert_eq!(entry.protocol_type.as_str(), "consumer");
    if list_v >= 4 {
        assert_eq!(entry.group_state.as_str(), "Stable");
    }

    // DescribeGroups shows the member as it joined and was assigned.
    let described = describe_group(&mut stream, &advertised, GROUP);
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.protocol_type.as_str(), "consumer");
    assert_eq!(described.protocol_data.as_str(), "range");
    assert_eq!(described.members.len(), 1, "{described:?}");
    let member = &described.members[0];
    assert_eq!(member.member_id.as_str(), member_id);
    assert_eq!(member.client_id.as_str(), "raw");
    assert_eq!(member.member_metadata, subscription(&[TOPIC]));
    assert_eq!(member.member_assignment, assignment(TOPIC, &[0, 1, 2, 3]));

    // OffsetDelete while the group is subscribed to the topic is refused per
    // partition; a topic it does not subscribe to loses its offsets.
    let delete_v = advertised.highest(ApiKey::OffsetDelete, OffsetDeleteRequest::VERSIONS);
    let offset_delete = |stream: &mut TcpStream, group: &str, topic: &str| {
        let request = OffsetDeleteRequest::default()
            .with_group_id(group_id(group))
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(0),
                    ]),
            ]);
        let response: OffsetDeleteResponse =
            exchange(stream, ApiKey::OffsetDelete, delete_v, &request);
        let partitions: Vec<Option<ResponseError>> = response
            .topics
            .iter()
            .flat_map(|topic| topic.partitions.iter())
            .map(|partition| error(partition.error_code))
            .collect();
        (error(response.error_code), partitions)
    };
    assert_eq!(
        offset_delete(&mut stream, GROUP, TOPIC),
        (None, vec![Some(ResponseError::GroupSubscribedToTopic)])
    );
    assert_eq!(
        offset_delete(&mut stream, GROUP, OTHER_TOPIC),
        (None, vec![None])
    );
    assert_eq!(
        committed(&mut stream, versions.fetch, GROUP, TOPIC, &[0]),
        [4]
    );
    assert_eq!(
        committed(&mut stream, versions.fetch, GROUP, OTHER_TOPIC, &[0]),
        [-1]
    );

    // LeaveGroup empties it; then its offsets can be deleted.
    let leave_v = advertised.highest(ApiKey::LeaveGroup, LeaveGroupRequest::VERSIONS);
    let leave = if leave_v >= 3 {
        LeaveGroupRequest::default()
            .with_group_id(group_id(GROUP))
            .with_members(vec![
                leave_group_request::MemberIdentity::default().with_member_id(text(&member_id)),
            ])
    } else {
        LeaveGroupRequest::default()
            .with_group_id(group_id(GROUP))
            .with_member_id(text(&member_id))
    };
    let left: LeaveGroupResponse = exchange(&mut stream, ApiKey::LeaveGroup, leave_v, &leave);
    assert_eq!(error(left.error_code), None, "{left:?}");
    if leave_v >= 3 {
        assert_eq!(left.members.len(), 1, "{left:?}");
        assert_eq!(left.members[0].member_id.as_str(), member_id);
        assert_eq!(error(left.members[0].error_code), None);
    }
    // The last member gone, the group ends its rebalance at once, Empty.
    let deadline = Instant::now() + Duration::from_secs(5);
    let described = loop {
        let described = describe_group(&mut stream, &advertised, GROUP);
        if described.group_state.as_str() == "Empty" || Instant::now() > deadline {
            break described;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(described.group_state.as_str(), "Empty", "{described:?}");
    assert!(described.members.is_empty(), "{described:?}");
    assert_eq!(offset_delete(&mut stream, GROUP, TOPIC), (None, vec![None]));
    assert_eq!(
        committed(&mut stream, versions.fetch, GROUP, TOPIC, &[0]),
        [-1]
    );
    wait_for_coordinator(&mut stream, &advertised, "never-seen");
    assert_eq!(
        offset_delete(&mut stream, "never-seen", TOPIC).0,
        Some(ResponseError::GroupIdNotFound)
    );
}

#[test]
fn committed_offsets_of_a_deleted_topic_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    wait_for_coordinator(&mut stream, &advertised, "deleting");
    let commit_v = advertised.highest(ApiKey::OffsetCommit, OffsetCommitRequest::VERSIONS);
    let fetch_v = advertised.highest(ApiKey::OffsetFetch, OffsetFetchRequest::VERSIONS);
    let committed_now = commit_offsets(&mut stream, commit_v, "deleting", -1, "", &[(1, 5)]);
    assert_eq!(committed_now, [None]);
    assert_eq!(
        committed(&mut stream, fetch_v, "deleting", TOPIC, &[1]),
        [5]
    );
    let delete_v = advertised.highest(ApiKey::DeleteTopics, DeleteTopicsRequest::VERSIONS);
    let deleted: DeleteTopicsResponse = exchange(
        &mut stream,
        ApiKey::DeleteTopics,
        delete_v,
        &DeleteTopicsRequest::default()
            .with_topic_names(vec![topic_name(TOPIC)])
            .with_topics(vec![
                delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(topic_name(TOPIC))),
            ])
            .with_timeout_ms(10_000),
    );
    assert_eq!(error(deleted.responses[0].error_code), None, "{deleted:?}");
    // A topic created again under the name starts without the old commits.
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    assert_eq!(
        committed(&mut stream, fetch_v, "deleting", TOPIC, &[1]),
        [-1]
    );
}

/// Before any FindCoordinator created `__consumer_offsets`, no group has a
/// coordinator here: group requests answer NOT_COORDINATOR (the client then
/// looks the coordinator up, which creates the topic), never a panic or a
/// silently dropped commit.
#[test]
fn group_requests_before_the_offsets_topic_exists_answer_not_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    let request = join_request("early", "", TOPIC, &["range"]);
    let joined: JoinGroupResponse = exchange(&mut stream, ApiKey::JoinGroup, 9, &request);
    assert_eq!(
        error(joined.error_code),
        Some(ResponseError::NotCoordinator),
        "{joined:?}"
    );
    let commit_v = advertised.highest(ApiKey::OffsetCommit, OffsetCommitRequest::VERSIONS);
    assert_eq!(
        commit_offsets(&mut stream, commit_v, "early", -1, "", &[(0, 3)]),
        [Some(ResponseError::NotCoordinator)]
    );
    // Looking the coordinator up creates it; the same join is then served.
    wait_for_coordinator(&mut stream, &advertised, "early");
    let joined: JoinGroupResponse = exchange(&mut stream, ApiKey::JoinGroup, 9, &request);
    assert_eq!(
        error(joined.error_code),
        Some(ResponseError::MemberIdRequired),
        "{joined:?}"
    );
}
