//! Coordinator and offset look-ups at the protocol level, over raw TCP, at
//! every version the broker advertises: FindCoordinator and the
//! `__consumer_offsets` topic it creates, OffsetCommit and OffsetFetch
//! round trips, offsets of a deleted topic, and group requests made before
//! any coordinator exists. (Membership: [`super::group_protocol`].)

use std::net::TcpStream;

use brook_tests::groups::{
    Coordinator, Fetched, Versions, error, fetch_offsets, find_coordinator, group_id, join_request,
    text, topic_name, wait_for_coordinator,
};
use brook_tests::raw::{connect, exchange};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Message;

use super::group_protocol::{
    TOPIC, TOPIC_PARTITIONS, commit_offsets, committed, create_topic, start,
};

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
