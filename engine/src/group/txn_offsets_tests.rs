//! Rules of transactional offset commits: Kafka's validation order, pending
//! offsets and their completion, which commit wins, tombstones, expiry,
//! replay and `require_stable`.

use bytes::Bytes;

use super::*;
use crate::group::state::{GroupSettings, Member, Protocol};

const GROUP: &str = "group";
const PRODUCER: ProducerId = ProducerId(7);
const OTHER_PRODUCER: ProducerId = ProducerId(8);

fn partition(index: i32) -> TopicPartition {
    TopicPartition::new("topic", index)
}

fn member(member_id: &str, instance: Option<&str>) -> Member {
    Member {
        member_id: member_id.into(),
        group_instance_id: instance.map(Into::into),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        rebalance_timeout_ms: 30_000,
        session_timeout_ms: 10_000,
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::new(),
        }],
        assignment: Bytes::new(),
        awaiting_join: None,
        awaiting_sync: None,
        session_deadline_ms: i64::MAX,
        joined_sequence: 0,
    }
}

/// A coordinator whose group is in `state`, generation 3, with member
/// "m-1" (static instance "i-1") and "m-2".
fn coordinator_with(state: GroupState) -> GroupCoordinator {
    let mut coordinator = GroupCoordinator::new(GroupSettings::default());
    let mut group = Group::new(GROUP, 0);
    group.state = state;
    group.generation = 3;
    group.protocol_type = Some("consumer".into());
    group.protocol_name = Some("range".into());
    if state != GroupState::Empty {
        group
            .members
            .insert("m-1".into(), member("m-1", Some("i-1")));
        group.members.insert("m-2".into(), member("m-2", None));
        group.static_members.insert("i-1".into(), "m-1".into());
    }
    coordinator.groups.insert(GROUP.into(), group);
    coordinator
}

fn request(member_id: &str, instance: Option<&str>, generation: i32) -> TxnCommitRequest {
    TxnCommitRequest {
        transactional_id: "txn".into(),
        group_id: GROUP.into(),
        producer_id: PRODUCER,
        producer_epoch: ProducerEpoch(0),
        generation,
        member_id: member_id.into(),
        group_instance_id: instance.map(Into::into),
        partitions: vec![commit_partition(0, 10)],
    }
}

fn commit_partition(index: i32, offset: i64) -> CommitPartition {
    CommitPartition {
        partition: partition(index),
        offset,
        leader_epoch: 2,
        metadata: Some("meta".into()),
    }
}

fn offset(value: i64) -> CommittedOffset {
    CommittedOffset {
        offset: value,
        leader_epoch: 2,
        metadata: "meta".into(),
        commit_timestamp_ms: 1,
        expire_timestamp_ms: None,
    }
}

fn committed(coordinator: &GroupCoordinator, index: i32) -> Option<i64> {
    let fetched = coordinator.fetch_offsets(GROUP, Some(&[partition(index)]));
    fetched[0].1.as_ref().map(|offset| offset.offset)
}

fn stable_fetch(coordinator: &GroupCoordinator, index: i32) -> Result<Option<i64>, ErrorCode> {
    let fetched =
        coordinator.fetch_offsets_with(GROUP, Some(&[partition(index)]), Stability::RequireStable);
    fetched[0]
        .1
        .clone()
        .map(|offset| offset.map(|offset| offset.offset))
}

/// Commits `value` for partition `index` transactionally and reports it
/// written at `record_offset`.
fn txn_commit(
    coordinator: &mut GroupCoordinator,
    producer_id: ProducerId,
    index: i32,
    value: i64,
    record_offset: i64,
) {
    let request = TxnCommitRequest {
        producer_id,
        partitions: vec![commit_partition(index, value)],
        ..request("", None, -1)
    };
    let plan = coordinator.commit_txn_offsets(1, &request).unwrap();
    let written = plan
        .offsets
        .into_iter()
        .map(|(partition, offset)| (partition, offset, record_offset))
        .collect();
    coordinator.txn_offsets_written(GROUP, producer_id, written);
}

fn plain_commit(coordinator: &mut GroupCoordinator, index: i32, value: i64, record_offset: i64) {
    coordinator.offsets_committed_at(
        1,
        GROUP,
        vec![(partition(index), offset(value), record_offset)],
    );
}

#[test]
fn validation_follows_kafkas_order() {
    use GroupState::*;
    // (state, member, instance, generation, expected)
    let rows: &[(GroupState, &str, Option<&str>, i32, ErrorCode)] = &[
        (Dead, "m-1", None, 3, ErrorCode::COORDINATOR_NOT_AVAILABLE),
        (Empty, "", None, -1, ErrorCode::NONE),
        (Empty, "someone", None, -1, ErrorCode::NONE),
        // v0-v2 carry no member: accepted in any state (unlike OffsetCommit).
        (Stable, "", None, -1, ErrorCode::NONE),
        (PreparingRebalance, "", None, -1, ErrorCode::NONE),
        // The instance is checked first, then the member, then the generation.
        (
            Stable,
            "m-1",
            Some("unknown"),
            9,
            ErrorCode::UNKNOWN_MEMBER_ID,
        ),
        (Stable, "m-2", Some("i-1"), 9, ErrorCode::FENCED_INSTANCE_ID),
        (Stable, "ghost", None, 9, ErrorCode::UNKNOWN_MEMBER_ID),
        (Stable, "m-1", None, 2, ErrorCode::ILLEGAL_GENERATION),
        (Stable, "m-1", Some("i-1"), 2, ErrorCode::ILLEGAL_GENERATION),
        (Stable, "m-1", Some("i-1"), 3, ErrorCode::NONE),
        (Stable, "m-2", None, -1, ErrorCode::ILLEGAL_GENERATION),
        (Empty, "m-1", None, 3, ErrorCode::UNKNOWN_MEMBER_ID),
        // No REBALANCE_IN_PROGRESS for transactional commits.
        (CompletingRebalance, "m-1", None, 3, ErrorCode::NONE),
        (PreparingRebalance, "m-2", None, 3, ErrorCode::NONE),
    ];
    for (row, (state, member_id, instance, generation, expected)) in rows.iter().enumerate() {
        let mut coordinator = coordinator_with(*state);
        let outcome =
            coordinator.commit_txn_offsets(1, &request(member_id, *instance, *generation));
        let error = outcome.err().unwrap_or(ErrorCode::NONE);
        assert_eq!(error, *expected, "row {row}");
    }
}

#[test]
fn request_level_errors_come_before_the_group() {
    let mut coordinator = GroupCoordinator::new(GroupSettings::default());
    let empty_group = TxnCommitRequest {
        group_id: String::new(),
        ..request("", None, -1)
    };
    assert_eq!(
        coordinator.commit_txn_offsets(1, &empty_group),
        Err(ErrorCode::INVALID_GROUP_ID)
    );
    let no_producer = TxnCommitRequest {
        producer_id: ProducerId(-1),
        ..request("", None, -1)
    };
    assert_eq!(
        coordinator.commit_txn_offsets(1, &no_producer),
        Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING)
    );
    // An unknown group: only a commit without generation creates it.
    assert_eq!(
        coordinator.commit_txn_offsets(1, &request("m-1", None, 3)),
        Err(ErrorCode::ILLEGAL_GENERATION)
    );
    assert!(coordinator.group(GROUP).is_none());
    assert!(
        coordinator
            .commit_txn_offsets(1, &request("", None, -1))
            .is_ok()
    );
    assert!(coordinator.group(GROUP).is_some());
}

#[test]
fn oversized_metadata_fails_only_its_partition() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    let mut large = commit_partition(1, 5);
    large.metadata = Some("x".repeat(GroupSettings::default().offset_metadata_bytes_max + 1));
    let mut commit = request("", None, -1);
    commit.partitions.push(large);
    let plan = coordinator.commit_txn_offsets(1, &commit).unwrap();
    assert_eq!(
        plan.errors,
        vec![ErrorCode::NONE, ErrorCode::OFFSET_METADATA_TOO_LARGE]
    );
    assert_eq!(plan.offsets.len(), 1);
    assert_eq!(plan.records(GROUP).len(), 1);
    assert_eq!(plan.producer.producer_id, PRODUCER);
    assert_eq!(plan.offsets[0].1.expire_timestamp_ms, None);
}

#[test]
fn pending_offsets_are_invisible_until_the_commit_marker() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    plain_commit(&mut coordinator, 0, 5, 100);
    let plan = coordinator
        .commit_txn_offsets(1, &request("", None, -1))
        .unwrap();
    // Being written: already unstable, never returned.
    assert_eq!(committed(&coordinator, 0), Some(5));
    assert_eq!(
        stable_fetch(&coordinator, 0),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    let written = vec![(partition(0), plan.offsets[0].1.clone(), 101)];
    coordinator.txn_offsets_written(GROUP, PRODUCER, written);
    assert_eq!(committed(&coordinator, 0), Some(5));
    assert_eq!(
        stable_fetch(&coordinator, 0),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    assert_eq!(stable_fetch(&coordinator, 1), Ok(None));
    assert_eq!(
        coordinator.complete_transaction(PRODUCER, MarkerKind::Commit),
        1
    );
    assert_eq!(committed(&coordinator, 0), Some(10));
    assert_eq!(stable_fetch(&coordinator, 0), Ok(Some(10)));
    // A second marker for the same producer finds nothing.
    assert_eq!(
        coordinator.complete_transaction(PRODUCER, MarkerKind::Commit),
        0
    );
}

#[test]
fn an_abort_marker_drops_pending_offsets() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    plain_commit(&mut coordinator, 0, 5, 100);
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 101);
    txn_commit(&mut coordinator, PRODUCER, 1, 20, 102);
    assert_eq!(
        coordinator.complete_transaction(PRODUCER, MarkerKind::Abort),
        0
    );
    assert_eq!(committed(&coordinator, 0), Some(5));
    assert_eq!(committed(&coordinator, 1), None);
    assert_eq!(stable_fetch(&coordinator, 0), Ok(Some(5)));
    assert!(coordinator.pending_txn_offsets(GROUP, PRODUCER).is_empty());
    assert!(coordinator.txn_producer_groups.is_empty());
}

#[test]
fn the_commit_later_in_the_log_wins() {
    // (plain commit's log offset, transactional record's log offset, winner)
    let rows = [(100, 101, 10), (102, 101, 5)];
    for (plain_at, txn_at, winner) in rows {
        let mut coordinator = coordinator_with(GroupState::Empty);
        txn_commit(&mut coordinator, PRODUCER, 0, 10, txn_at);
        plain_commit(&mut coordinator, 0, 5, plain_at);
        coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
        assert_eq!(
            committed(&coordinator, 0),
            Some(winner),
            "plain at {plain_at}"
        );
    }
    // A committed offset of unknown position (the legacy path) is replaced.
    let mut coordinator = coordinator_with(GroupState::Empty);
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 50);
    coordinator.offsets_committed(1, GROUP, vec![(partition(0), offset(5))]);
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), Some(10));
}

#[test]
fn producers_complete_independently() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 100);
    txn_commit(&mut coordinator, OTHER_PRODUCER, 0, 20, 101);
    coordinator.complete_transaction(OTHER_PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), Some(20));
    // The first producer's transaction is still open on the partition.
    assert_eq!(
        stable_fetch(&coordinator, 0),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    // It is older in the log: committing it changes nothing.
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(stable_fetch(&coordinator, 0), Ok(Some(20)));
}

#[test]
fn a_failed_write_removes_only_the_unwritten_offsets() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 100);
    let mut commit = request("", None, -1);
    commit.partitions = vec![commit_partition(1, 7)];
    let plan = coordinator.commit_txn_offsets(1, &commit).unwrap();
    coordinator.txn_offsets_failed(GROUP, PRODUCER, &plan.offsets);
    assert_eq!(stable_fetch(&coordinator, 1), Ok(None));
    assert_eq!(
        stable_fetch(&coordinator, 0),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    // A failure report for an offset already written leaves it pending.
    coordinator.txn_offsets_failed(GROUP, PRODUCER, &[(partition(0), offset(10))]);
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), Some(10));
}

#[test]
fn offsets_never_written_are_not_applied_and_late_writes_are_ignored() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    let plan = coordinator
        .commit_txn_offsets(1, &request("", None, -1))
        .unwrap();
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), None);
    let written = vec![(partition(0), plan.offsets[0].1.clone(), 100)];
    coordinator.txn_offsets_written(GROUP, PRODUCER, written);
    assert_eq!(stable_fetch(&coordinator, 0), Ok(None));
}

#[test]
fn tombstones_drop_pending_offsets() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    plain_commit(&mut coordinator, 0, 5, 100);
    txn_commit(&mut coordinator, PRODUCER, 1, 10, 101);
    let (errors, records) = coordinator
        .delete_offsets(GROUP, &[partition(1), partition(2)])
        .unwrap();
    assert_eq!(errors, vec![ErrorCode::NONE, ErrorCode::NONE]);
    let tombstone = Persist::OffsetDeleted {
        group_id: GROUP.into(),
        partition: partition(1),
    };
    assert_eq!(records, vec![tombstone]);
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 1), None);
}

#[test]
fn deleting_a_group_writes_tombstones_for_pending_only_partitions() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    plain_commit(&mut coordinator, 0, 5, 100);
    txn_commit(&mut coordinator, PRODUCER, 0, 6, 101);
    txn_commit(&mut coordinator, PRODUCER, 1, 10, 102);
    let records = coordinator.delete_group(GROUP).unwrap();
    let tombstone = |index| Persist::OffsetDeleted {
        group_id: GROUP.into(),
        partition: partition(index),
    };
    let group_tombstone = Persist::GroupDeleted {
        group_id: GROUP.into(),
    };
    assert_eq!(records, vec![tombstone(0), tombstone(1), group_tombstone]);
    assert!(coordinator.txn_producer_groups.is_empty());
    assert_eq!(
        coordinator.complete_transaction(PRODUCER, MarkerKind::Commit),
        0
    );
    assert!(coordinator.group(GROUP).is_none());
}

#[test]
fn expiry_waits_for_pending_transactions() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    let retention_ms = coordinator.settings.offsets_retention_ms;
    plain_commit(&mut coordinator, 0, 5, 100);
    plain_commit(&mut coordinator, 1, 5, 101);
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 102);
    // Simple group: offsets expire by commit time (1 ms here).
    coordinator.groups.get_mut(GROUP).unwrap().protocol_type = None;
    let now_ms = 1 + retention_ms;
    let records = coordinator.expire_offsets(now_ms);
    let tombstone = Persist::OffsetDeleted {
        group_id: GROUP.into(),
        partition: partition(1),
    };
    assert_eq!(records, vec![tombstone]);
    assert_eq!(committed(&coordinator, 0), Some(5));
    coordinator.complete_transaction(PRODUCER, MarkerKind::Abort);
    // Only now may the last offset and the group go.
    let records = coordinator.expire_offsets(now_ms);
    assert_eq!(records.len(), 2);
    assert!(coordinator.group(GROUP).is_none());
}

#[test]
fn a_group_with_only_pending_offsets_is_not_expired() {
    let mut coordinator = GroupCoordinator::new(GroupSettings::default());
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 100);
    assert!(coordinator.expire_offsets(i64::MAX).is_empty());
    assert!(coordinator.group(GROUP).is_some());
}

#[test]
fn deleted_topics_take_their_pending_offsets() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    txn_commit(&mut coordinator, PRODUCER, 0, 10, 100);
    let topics = BTreeSet::from(["topic".to_owned()]);
    let records = coordinator.forget_topics(&topics);
    assert_eq!(records.len(), 1);
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), None);
}

fn logged(offset: i64, producer: Option<ProducerId>) -> LoggedRecord {
    LoggedRecord {
        offset,
        transactional_producer: producer,
    }
}

fn offset_record(index: i32, value: i64) -> Persist {
    Persist::Offset {
        group_id: GROUP.into(),
        partition: partition(index),
        offset: offset(value),
    }
}

#[test]
fn replay_resolves_transactions_at_their_markers() {
    // Partition 0: commit marker; 1: abort marker; 2: no marker yet.
    let mut coordinator = GroupCoordinator::new(GroupSettings::default());
    coordinator.replay_logged(0, offset_record(0, 5), logged(0, None));
    coordinator.replay_logged(0, offset_record(0, 10), logged(1, Some(PRODUCER)));
    coordinator.replay_logged(0, offset_record(1, 20), logged(2, Some(OTHER_PRODUCER)));
    coordinator.replay_logged(0, offset_record(2, 30), logged(3, Some(ProducerId(9))));
    assert_eq!(committed(&coordinator, 0), Some(5));
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    coordinator.complete_transaction(OTHER_PRODUCER, MarkerKind::Abort);
    assert_eq!(committed(&coordinator, 0), Some(10));
    assert_eq!(committed(&coordinator, 1), None);
    assert_eq!(committed(&coordinator, 2), None);
    assert_eq!(
        stable_fetch(&coordinator, 2),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    assert_eq!(
        coordinator.pending_txn_offsets(GROUP, ProducerId(9))[0]
            .1
            .record_offset,
        Some(3)
    );
}

#[test]
fn replay_keeps_the_later_commit_and_honours_tombstones() {
    let mut coordinator = GroupCoordinator::new(GroupSettings::default());
    coordinator.replay_logged(0, offset_record(0, 10), logged(1, Some(PRODUCER)));
    coordinator.replay_logged(0, offset_record(0, 5), logged(2, None));
    coordinator.replay_logged(0, offset_record(1, 10), logged(3, Some(PRODUCER)));
    let tombstone = Persist::OffsetDeleted {
        group_id: GROUP.into(),
        partition: partition(1),
    };
    coordinator.replay_logged(0, tombstone, logged(4, None));
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), Some(5));
    assert_eq!(committed(&coordinator, 1), None);
}

#[test]
fn a_group_record_keeps_pending_offsets() {
    let mut coordinator = GroupCoordinator::new(GroupSettings::default());
    coordinator.replay_logged(0, offset_record(0, 10), logged(1, Some(PRODUCER)));
    let snapshot = crate::group::GroupSnapshot {
        group_id: GROUP.into(),
        protocol_type: "consumer".into(),
        generation: 1,
        protocol_name: None,
        leader: None,
        state_since_ms: 0,
        members: Vec::new(),
    };
    coordinator.replay_logged(0, Persist::Group(snapshot), logged(2, None));
    coordinator.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(committed(&coordinator, 0), Some(10));
}

#[test]
fn fetching_everything_marks_unstable_partitions() {
    let mut coordinator = coordinator_with(GroupState::Empty);
    plain_commit(&mut coordinator, 0, 5, 100);
    plain_commit(&mut coordinator, 1, 6, 101);
    txn_commit(&mut coordinator, PRODUCER, 1, 10, 102);
    let all = coordinator.fetch_offsets_with(GROUP, None, Stability::RequireStable);
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[0]
            .1
            .as_ref()
            .map(|offset| offset.as_ref().map(|o| o.offset)),
        Ok(Some(5))
    );
    assert_eq!(all[1].1, Err(ErrorCode::UNSTABLE_OFFSET_COMMIT));
    let latest = coordinator.fetch_offsets_with(GROUP, None, Stability::Latest);
    assert!(latest.iter().all(|(_, fetched)| fetched.is_ok()));
}
