//! Static members (KIP-345) over raw TCP: a member that restarts and joins
//! again under its `group.instance.id`, at every JoinGroup version that has
//! static membership, is answered as Kafka's classic group coordinator
//! answers it (`GroupCoordinator.updateStaticMemberAndRebalance`). Brokers
//! and topics as in `group_protocol.rs`.

use brook_tests::groups::{
    Versions, assignment, error, join, join_request, sync_request, text, wait_for_coordinator,
};
use brook_tests::raw::{connect, exchange};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Message;

use super::group_protocol::{TOPIC, TOPIC_PARTITIONS, create_topic, start};

/// A static member that restarts (a new JoinGroup with its
/// `group.instance.id` and no member id) is answered at every version that
/// has static membership (v5+), without the connection closing: before v9
/// there is no `skip_assignment`, so a rejoining leader is told the old
/// leader id and no members (Kafka's answer); from v9 it is told it leads
/// and to skip the assignment. Its assignment is kept either way.
#[test]
fn a_static_leader_rejoins_a_stable_group_at_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]);
    let mut stream = connect(&broker);
    let advertised = Versions::of(&mut stream);
    create_topic(&mut stream, &advertised, TOPIC, TOPIC_PARTITIONS);
    let versions = advertised.common(ApiKey::JoinGroup, JoinGroupRequest::VERSIONS);
    assert!(*versions.end() >= 9, "JoinGroup v9 (KIP-814) is advertised");
    let sync_version = advertised.highest(ApiKey::SyncGroup, SyncGroupRequest::VERSIONS);
    for version in 5..=*versions.end() {
        let group = format!("static-v{version}");
        wait_for_coordinator(&mut stream, &advertised, &group);
        let request = join_request(&group, "", TOPIC, &["range"])
            .with_group_instance_id(Some(text("instance")));
        let first = join(&mut stream, version, &request);
        assert_eq!(error(first.error_code), None, "v{version}: {first:?}");
        let mine = assignment(TOPIC, &[0, 1, 2, 3]);
        let sync = sync_request(
            sync_version,
            &group,
            first.generation_id,
            &first.member_id,
            &[(first.member_id.as_str(), mine.clone())],
        )
        .with_group_instance_id(Some(text("instance")));
        let synced: SyncGroupResponse =
            exchange(&mut stream, ApiKey::SyncGroup, sync_version, &sync);
        assert_eq!(error(synced.error_code), None, "v{version}: {synced:?}");
        // The process restarts and joins again under the same instance id.
        let rejoined = join(&mut stream, version, &request);
        assert_eq!(error(rejoined.error_code), None, "v{version}: {rejoined:?}");
        assert_ne!(rejoined.member_id, first.member_id, "v{version}");
        assert_eq!(rejoined.generation_id, first.generation_id, "v{version}");
        if version >= 9 {
            assert!(rejoined.skip_assignment, "v{version}: {rejoined:?}");
            assert_eq!(rejoined.leader, rejoined.member_id, "v{version}");
            assert_eq!(rejoined.members.len(), 1, "v{version}");
        } else {
            assert_eq!(rejoined.leader, first.member_id, "v{version}");
            assert!(rejoined.members.is_empty(), "v{version}: {rejoined:?}");
        }
        let sync = sync_request(
            sync_version,
            &group,
            rejoined.generation_id,
            &rejoined.member_id,
            &[],
        )
        .with_group_instance_id(Some(text("instance")));
        let kept: SyncGroupResponse = exchange(&mut stream, ApiKey::SyncGroup, sync_version, &sync);
        assert_eq!(error(kept.error_code), None, "v{version}: {kept:?}");
        assert_eq!(kept.assignment, mine, "v{version}: the assignment is kept");
    }
}
