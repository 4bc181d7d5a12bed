//! Transactional offset commits through the group coordinator's public API,
//! with a harness that plays the runtime: it keeps `__consumer_offsets` as
//! record bytes with each batch's producer and the transaction markers, and
//! reloads a fresh coordinator from them, so the live state and the
//! replayed state can be compared at every step.

use brook_engine::group::Persist;
use brook_engine::group::coordinator::{Action, GroupCoordinator, JoinRequest, SyncRequest};
use brook_engine::group::offsets::{CommitPartition, CommitRequest};
use brook_engine::group::records::GroupRecord;
use brook_engine::group::state::{GroupSettings, Protocol};
use brook_engine::group::txn_offsets::{LoggedRecord, Stability, TxnCommitRequest};
use brook_engine::log::control::MarkerKind;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::producer_state::ProducerEpoch;
use brook_engine::types::{ProducerId, TopicPartition};
use bytes::Bytes;

const GROUP: &str = "group";
const PRODUCER: ProducerId = ProducerId(1_000);

/// One entry of the simulated `__consumer_offsets` partition.
enum Entry {
    Record {
        key: Bytes,
        value: Option<Bytes>,
        producer: Option<ProducerId>,
    },
    Marker {
        producer: ProducerId,
        kind: MarkerKind,
    },
}

struct Harness {
    coordinator: GroupCoordinator,
    log: Vec<Entry>,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            coordinator: GroupCoordinator::new(GroupSettings {
                initial_rebalance_delay_ms: 0,
                ..GroupSettings::default()
            }),
            log: Vec::new(),
        }
    }

    /// Appends records; returns each one's offset.
    fn append(&mut self, records: &[Persist], producer: Option<ProducerId>) -> Vec<i64> {
        records
            .iter()
            .map(|record| {
                let (key, value) = record.to_record().encode();
                self.log.push(Entry::Record {
                    key,
                    value,
                    producer,
                });
                self.log.len() as i64 - 1
            })
            .collect()
    }

    /// Performs the coordinator's writes (group metadata).
    fn perform(&mut self, actions: Vec<Action>) -> Vec<Action> {
        let mut after = Vec::new();
        for action in actions {
            if let Action::Write { records, purpose } = action {
                self.append(&records, None);
                if let brook_engine::group::coordinator::WritePurpose::Assignment {
                    group_id,
                    generation,
                } = purpose
                {
                    after.extend(
                        self.coordinator
                            .assignment_persisted(0, &group_id, generation, true),
                    );
                }
            } else {
                after.push(action);
            }
        }
        after
    }

    /// An OffsetCommit outside group management.
    fn plain_commit(&mut self, index: i32, offset: i64) {
        self.member_commit("", -1, index, offset);
    }

    /// An OffsetCommit by a member of the managed group.
    fn member_commit(&mut self, member_id: &str, generation: i32, index: i32, offset: i64) {
        let request = CommitRequest {
            group_id: GROUP.into(),
            member_id: member_id.into(),
            group_instance_id: None,
            generation,
            retention_ms: None,
            partitions: vec![commit_partition(index, offset)],
        };
        let plan = self.coordinator.commit_offsets(1, &request).unwrap();
        let positions = self.append(&plan.records(GROUP), None);
        let placed = plan
            .offsets
            .into_iter()
            .zip(positions)
            .map(|((partition, offset), position)| (partition, offset, position))
            .collect();
        self.coordinator.offsets_committed_at(1, GROUP, placed);
    }

    fn txn_commit(&mut self, request: &TxnCommitRequest) -> Result<Vec<ErrorCode>, ErrorCode> {
        let plan = self.coordinator.commit_txn_offsets(1, request)?;
        let producer_id = plan.producer.producer_id;
        let positions = self.append(&plan.records(GROUP), Some(producer_id));
        let written = plan
            .offsets
            .iter()
            .cloned()
            .zip(positions)
            .map(|((partition, offset), position)| (partition, offset, position))
            .collect();
        self.coordinator
            .txn_offsets_written(GROUP, producer_id, written);
        Ok(plan.errors)
    }

    fn marker(&mut self, producer: ProducerId, kind: MarkerKind) {
        self.log.push(Entry::Marker { producer, kind });
        self.coordinator.complete_transaction(producer, kind);
    }

    /// A fresh coordinator loaded from the log.
    fn reload(&self) -> GroupCoordinator {
        let mut loaded = GroupCoordinator::new(GroupSettings::default());
        for (offset, entry) in self.log.iter().enumerate() {
            match entry {
                Entry::Record {
                    key,
                    value,
                    producer,
                } => {
                    let record = GroupRecord::decode(key, value.as_deref()).unwrap();
                    let persisted = Persist::from_record(record).unwrap();
                    let logged = LoggedRecord {
                        offset: offset as i64,
                        transactional_producer: *producer,
                    };
                    loaded.replay_logged(5, persisted, logged);
                }
                Entry::Marker { producer, kind } => {
                    loaded.complete_transaction(*producer, *kind);
                }
            }
        }
        loaded
    }

    /// What OffsetFetch answers for partition `index`, live and reloaded.
    fn fetched(&self, index: i32, stability: Stability) -> Result<Option<i64>, ErrorCode> {
        let live = fetch(&self.coordinator, index, stability);
        assert_eq!(
            fetch(&self.reload(), index, stability),
            live,
            "reload differs"
        );
        live
    }
}

fn fetch(
    coordinator: &GroupCoordinator,
    index: i32,
    stability: Stability,
) -> Result<Option<i64>, ErrorCode> {
    let partitions = [TopicPartition::new("topic", index)];
    let fetched = coordinator.fetch_offsets_with(GROUP, Some(&partitions), stability);
    fetched[0]
        .1
        .clone()
        .map(|offset| offset.map(|offset| offset.offset))
}

fn commit_partition(index: i32, offset: i64) -> CommitPartition {
    CommitPartition {
        partition: TopicPartition::new("topic", index),
        offset,
        leader_epoch: 0,
        metadata: None,
    }
}

fn txn_request(member_id: &str, generation: i32, index: i32, offset: i64) -> TxnCommitRequest {
    TxnCommitRequest {
        transactional_id: "app-txn".into(),
        group_id: GROUP.into(),
        producer_id: PRODUCER,
        producer_epoch: ProducerEpoch(0),
        generation,
        member_id: member_id.into(),
        group_instance_id: None,
        partitions: vec![commit_partition(index, offset)],
    }
}

fn join_request(member_id: &str) -> JoinRequest {
    JoinRequest {
        group_id: GROUP.into(),
        member_id: String::new(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"subscription"),
        }],
        require_known_member_id: false,
        supports_skip_assignment: true,
        new_member_id: member_id.into(),
    }
}

fn sync_request(member_id: &str, generation: i32) -> SyncRequest {
    SyncRequest {
        group_id: GROUP.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        generation,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![(member_id.into(), Bytes::from_static(b"assignment"))],
    }
}

/// Member "a" alone in generation 1, stable.
fn stable_group(harness: &mut Harness) {
    let actions = harness.coordinator.join(0, 1, join_request("a"));
    let actions = harness.perform(actions);
    assert!(
        matches!(&actions[..], [Action::JoinDone { response, .. }] if response.generation == 1)
    );
    let actions = harness.coordinator.sync(0, 2, sync_request("a", 1));
    harness.perform(actions);
}

#[test]
fn a_transactions_offsets_appear_at_its_commit_marker_live_and_reloaded() {
    let mut harness = Harness::new();
    stable_group(&mut harness);
    harness.member_commit("a", 1, 0, 5);
    assert_eq!(
        harness.txn_commit(&txn_request("a", 1, 0, 10)),
        Ok(vec![ErrorCode::NONE])
    );
    // Open transaction: the committed offset, or UNSTABLE for KIP-447 consumers.
    assert_eq!(harness.fetched(0, Stability::Latest), Ok(Some(5)));
    assert_eq!(
        harness.fetched(0, Stability::RequireStable),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    harness.marker(PRODUCER, MarkerKind::Commit);
    assert_eq!(harness.fetched(0, Stability::RequireStable), Ok(Some(10)));
}

#[test]
fn an_aborted_transaction_leaves_nothing_and_an_unfinished_one_stays_pending() {
    let mut harness = Harness::new();
    harness.plain_commit(0, 5);
    harness.txn_commit(&txn_request("", -1, 0, 10)).unwrap();
    harness.txn_commit(&txn_request("", -1, 1, 20)).unwrap();
    harness.marker(PRODUCER, MarkerKind::Abort);
    assert_eq!(harness.fetched(0, Stability::RequireStable), Ok(Some(5)));
    assert_eq!(harness.fetched(1, Stability::RequireStable), Ok(None));
    // The producer's next transaction has no marker yet.
    harness.txn_commit(&txn_request("", -1, 1, 30)).unwrap();
    assert_eq!(
        harness.fetched(1, Stability::RequireStable),
        Err(ErrorCode::UNSTABLE_OFFSET_COMMIT)
    );
    let mut reloaded = harness.reload();
    reloaded.complete_transaction(PRODUCER, MarkerKind::Commit);
    assert_eq!(fetch(&reloaded, 1, Stability::RequireStable), Ok(Some(30)));
}

#[test]
fn a_plain_commit_written_after_the_transactional_one_wins() {
    let mut harness = Harness::new();
    harness.txn_commit(&txn_request("", -1, 0, 10)).unwrap();
    harness.plain_commit(0, 7);
    harness.marker(PRODUCER, MarkerKind::Commit);
    assert_eq!(harness.fetched(0, Stability::RequireStable), Ok(Some(7)));
}

#[test]
fn a_producer_of_an_earlier_generation_is_fenced() {
    let mut harness = Harness::new();
    stable_group(&mut harness);
    // A second member starts a rebalance: generation 2 once both rejoin.
    let actions = harness.coordinator.join(10, 3, join_request("b"));
    harness.perform(actions);
    let actions = harness.coordinator.join(
        10,
        4,
        JoinRequest {
            member_id: "a".into(),
            ..join_request("a")
        },
    );
    harness.perform(actions);
    let generation = harness.coordinator.group(GROUP).unwrap().generation;
    assert_eq!(generation, 2);
    let zombie = harness.txn_commit(&txn_request("a", 1, 0, 10));
    assert_eq!(zombie, Err(ErrorCode::ILLEGAL_GENERATION));
    let stranger = harness.txn_commit(&txn_request("c", 2, 0, 10));
    assert_eq!(stranger, Err(ErrorCode::UNKNOWN_MEMBER_ID));
    // Completing the rebalance does not block transactional commits.
    assert_eq!(
        harness.txn_commit(&txn_request("b", 2, 0, 10)),
        Ok(vec![ErrorCode::NONE])
    );
    harness.marker(PRODUCER, MarkerKind::Commit);
    assert_eq!(harness.fetched(0, Stability::RequireStable), Ok(Some(10)));
}

#[test]
fn deleting_the_group_drops_its_pending_offsets_for_good() {
    let mut harness = Harness::new();
    harness.txn_commit(&txn_request("", -1, 3, 10)).unwrap();
    let records = harness.coordinator.delete_group(GROUP).unwrap();
    harness.append(&records, None);
    harness.marker(PRODUCER, MarkerKind::Commit);
    assert_eq!(harness.fetched(3, Stability::RequireStable), Ok(None));
    assert!(harness.reload().group(GROUP).is_none());
}
