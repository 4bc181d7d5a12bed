//! Group administration at the protocol level, over raw TCP, answered as
//! Kafka's group coordinator answers it: DeleteGroups (refused for a group
//! with members or one never seen), ListGroups, DescribeGroups, LeaveGroup
//! and OffsetDelete. (Membership: [`super::group_protocol`].)

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use brook_tests::groups::{
    GroupVersions, Versions, assignment, describe_group, error, group_id, subscription, text,
    topic_name, wait_for_coordinator,
};
use brook_tests::raw::{connect, exchange};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Message;

use super::group_protocol::{
    TOPIC, TOPIC_PARTITIONS, commit_offsets, committed, create_topic, stable_group, start,
};

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
