//! Whole transaction lifecycles through the coordinator, with the runtime
//! played by a harness that keeps the partition's durable records as bytes:
//! commit and abort, fencing a zombie, timeouts, restarts in every phase,
//! KIP-890 verification. Error codes, retries, expiry and failed writes
//! are in `errors`.

use bytes::Bytes;

use super::coordinator::{
    AddOffsetsRequest, AddPartitionsRequest, BatchedAddPartitions, EndTxnRequest,
    InitProducerIdRequest, TransactionCoordinator,
};
use super::state::{TransactionMetadata, TransactionState};
use super::*;
use crate::txn::config::TransactionConfig;
use crate::txn::records::{TransactionLogValue, partition_for};

const ID: &str = "tx";
const TIMEOUT_MS: i32 = 60_000;
const COORDINATOR_EPOCH: i32 = 7;
const FIRST_PRODUCER_ID: i64 = 1000;

mod errors;

/// What one round of driving produced.
#[derive(Debug, Default)]
struct Outcome {
    responses: Vec<(Token, Response)>,
    markers: Vec<(WriteId, MarkerWrite)>,
}

impl Outcome {
    fn response(&self, token: Token) -> Response {
        let found = self.responses.iter().find(|(t, _)| *t == token);
        found
            .map(|(_, response)| response.clone())
            .expect("the request was answered")
    }
}

/// The runtime: persists every record at once (into `log`), hands out
/// producer ids, keeps marker writes for the test to complete.
struct Harness {
    coordinator: TransactionCoordinator,
    now_ms: i64,
    next_producer_id: i64,
    log: Vec<(Bytes, Option<Bytes>)>,
}

impl Harness {
    fn new() -> Harness {
        let mut coordinator = TransactionCoordinator::new(config(), partition(), COORDINATOR_EPOCH);
        assert!(coordinator.finish_loading(0).is_empty());
        Harness {
            coordinator,
            now_ms: 0,
            next_producer_id: FIRST_PRODUCER_ID,
            log: Vec::new(),
        }
    }

    fn metadata(&self) -> &TransactionMetadata {
        self.coordinator.transaction(ID).expect("the id is known")
    }

    fn state(&self) -> TransactionState {
        self.metadata().state
    }

    fn epoch(&self) -> ProducerEpoch {
        self.metadata().producer_epoch
    }

    fn init(&mut self, token: Token, expected: Option<(i64, i16)>) -> Outcome {
        let request = InitProducerIdRequest {
            transactional_id: ID.into(),
            transaction_timeout_ms: TIMEOUT_MS,
            expected: expected.map(|(id, epoch)| (ProducerId(id), ProducerEpoch(epoch))),
        };
        let next = &mut self.next_producer_id;
        let mut allocate = || {
            *next += 1;
            Ok(ProducerId(*next - 1))
        };
        let actions =
            self.coordinator
                .init_producer_id(self.now_ms, token, &request, &mut allocate);
        self.settle(actions)
    }

    fn add(&mut self, token: Token, epoch: i16, partitions: &[i32]) -> Outcome {
        let request = add_request(epoch, partitions);
        let actions = self
            .coordinator
            .add_partitions(self.now_ms, token, &request);
        self.settle(actions)
    }

    fn end(&mut self, token: Token, epoch: i16, result: TransactionResult) -> Outcome {
        let request = EndTxnRequest {
            transactional_id: ID.into(),
            producer_id: ProducerId(FIRST_PRODUCER_ID),
            producer_epoch: ProducerEpoch(epoch),
            result,
        };
        let actions = self.coordinator.end_txn(self.now_ms, token, &request);
        self.settle(actions)
    }

    /// Persists every record asked for, successfully, until nothing more is.
    fn settle(&mut self, actions: Vec<Action>) -> Outcome {
        let mut outcome = Outcome::default();
        let mut queue = actions;
        while !queue.is_empty() {
            let mut next = Vec::new();
            for action in queue {
                match action {
                    Action::Persist { write_id, record } => {
                        self.log.push(record.encode().expect("records encode"));
                        next.extend(self.coordinator.on_persisted(self.now_ms, write_id, Ok(())));
                    }
                    Action::WriteMarkers { write_id, markers } => {
                        outcome.markers.push((write_id, markers))
                    }
                    Action::Respond { token, response } => {
                        outcome.responses.push((token, response))
                    }
                }
            }
            queue = next;
        }
        outcome
    }

    fn complete_markers(&mut self, outcome: &Outcome) -> Outcome {
        let mut actions = Vec::new();
        for (write_id, _) in &outcome.markers {
            actions.extend(
                self.coordinator
                    .on_markers_written(*write_id, MarkerOutcome::Written),
            );
        }
        self.settle(actions)
    }

    /// A new coordinator (next leader epoch) loads the durable log.
    fn restart(&mut self) -> Outcome {
        let mut coordinator =
            TransactionCoordinator::new(config(), partition(), COORDINATOR_EPOCH + 1);
        for (key, value) in &self.log {
            coordinator
                .replay(key, value.as_deref())
                .expect("the log decodes");
        }
        let actions = coordinator.finish_loading(self.now_ms);
        self.coordinator = coordinator;
        self.settle(actions)
    }

    /// The states the log recorded for ID, in order.
    fn logged_states(&self) -> Vec<Option<TransactionState>> {
        self.log
            .iter()
            .map(|(_, value)| {
                value
                    .as_ref()
                    .map(|value| TransactionLogValue::decode(value).unwrap().0.state)
            })
            .collect()
    }
}

fn config() -> TransactionConfig {
    TransactionConfig::default()
}

fn partition() -> i32 {
    partition_for(ID, config().state_log_num_partitions)
}

fn add_request(epoch: i16, partitions: &[i32]) -> AddPartitionsRequest {
    AddPartitionsRequest {
        transactional_id: ID.into(),
        producer_id: ProducerId(FIRST_PRODUCER_ID),
        producer_epoch: ProducerEpoch(epoch),
        partitions: partitions
            .iter()
            .map(|id| TopicPartition::new("t", *id))
            .collect(),
    }
}

fn init_ok(producer_id: i64, epoch: i16) -> Response {
    Response::InitProducerId(InitProducerIdResult {
        error: ErrorCode::NONE,
        producer_id: ProducerId(producer_id),
        producer_epoch: ProducerEpoch(epoch),
    })
}

fn init_failed(error: ErrorCode) -> Response {
    Response::InitProducerId(InitProducerIdResult::failed(error))
}

fn topic_partitions(ids: &[i32]) -> Vec<TopicPartition> {
    ids.iter().map(|id| TopicPartition::new("t", *id)).collect()
}

/// A harness with an open transaction over t-0 and t-1 at epoch 0.
fn ongoing() -> Harness {
    let mut harness = Harness::new();
    assert_eq!(
        harness.init(1, None).response(1),
        init_ok(FIRST_PRODUCER_ID, 0)
    );
    harness.now_ms = 1_000;
    assert_eq!(
        harness.add(2, 0, &[0, 1]).response(2),
        Response::AddPartitions(ErrorCode::NONE)
    );
    harness
}

#[test]
fn a_commit_goes_through_prepare_markers_and_complete() {
    let mut harness = ongoing();
    assert_eq!(harness.state(), TransactionState::Ongoing);
    assert_eq!(harness.metadata().start_timestamp_ms, 1_000);
    let ended = harness.end(3, 0, TransactionResult::Commit);
    assert_eq!(ended.response(3), Response::EndTxn(ErrorCode::NONE));
    let expected = MarkerWrite {
        transactional_id: ID.into(),
        producer_id: ProducerId(FIRST_PRODUCER_ID),
        producer_epoch: ProducerEpoch(0),
        coordinator_epoch: COORDINATOR_EPOCH,
        result: TransactionResult::Commit,
        partitions: topic_partitions(&[0, 1]),
    };
    assert_eq!(ended.markers.len(), 1);
    assert_eq!(ended.markers[0].1, expected);
    // Between the phases the id is busy.
    assert_eq!(harness.state(), TransactionState::PrepareCommit);
    assert_eq!(
        harness.metadata().pending_state,
        Some(TransactionState::CompleteCommit)
    );
    assert_eq!(
        harness.add(4, 0, &[2]).response(4),
        Response::AddPartitions(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
    assert!(harness.complete_markers(&ended).responses.is_empty());
    assert_eq!(harness.state(), TransactionState::CompleteCommit);
    assert!(harness.metadata().partitions.is_empty());
    use TransactionState::*;
    assert_eq!(
        harness.logged_states(),
        [
            Some(Empty),
            Some(Ongoing),
            Some(PrepareCommit),
            Some(CompleteCommit)
        ]
    );
    // A retried EndTxn(commit) is answered at once.
    assert_eq!(
        harness.end(5, 0, TransactionResult::Commit).response(5),
        Response::EndTxn(ErrorCode::NONE)
    );
    // The next transaction starts from CompleteCommit.
    harness.now_ms = 5_000;
    assert_eq!(
        harness.add(6, 0, &[3]).response(6),
        Response::AddPartitions(ErrorCode::NONE)
    );
    assert_eq!(harness.metadata().start_timestamp_ms, 5_000);
}

#[test]
fn an_abort_with_offsets_writes_abort_markers_to_the_offsets_partition_too() {
    let mut harness = ongoing();
    let request = AddOffsetsRequest {
        transactional_id: ID.into(),
        producer_id: ProducerId(FIRST_PRODUCER_ID),
        producer_epoch: ProducerEpoch(0),
        offsets_partition: 12,
    };
    let actions = harness.coordinator.add_offsets(harness.now_ms, 3, &request);
    assert_eq!(
        harness.settle(actions).response(3),
        Response::AddOffsets(ErrorCode::NONE)
    );
    let ended = harness.end(4, 0, TransactionResult::Abort);
    assert_eq!(ended.response(4), Response::EndTxn(ErrorCode::NONE));
    let markers = &ended.markers[0].1;
    assert_eq!(markers.result, TransactionResult::Abort);
    let mut expected = topic_partitions(&[0, 1]);
    expected.insert(0, TopicPartition::new("__consumer_offsets", 12));
    assert_eq!(markers.partitions, expected);
    harness.complete_markers(&ended);
    assert_eq!(harness.state(), TransactionState::CompleteAbort);
    assert_eq!(
        harness.end(5, 0, TransactionResult::Commit).response(5),
        Response::EndTxn(ErrorCode::INVALID_TXN_STATE)
    );
}

#[test]
fn a_second_init_fences_the_zombie_and_aborts_its_transaction() {
    let mut harness = ongoing();
    let fenced = harness.init(10, None);
    // The new producer retries once the abort is through.
    assert_eq!(
        fenced.response(10),
        init_failed(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(fenced.markers.len(), 1);
    let markers = &fenced.markers[0].1;
    assert_eq!(
        (markers.result, markers.producer_epoch),
        (TransactionResult::Abort, ProducerEpoch(1))
    );
    assert_eq!(harness.state(), TransactionState::PrepareAbort);
    // The zombie (epoch 0) is refused everywhere.
    assert_eq!(
        harness.add(11, 0, &[5]).response(11),
        Response::AddPartitions(ErrorCode::PRODUCER_FENCED)
    );
    assert_eq!(
        harness.end(12, 0, TransactionResult::Commit).response(12),
        Response::EndTxn(ErrorCode::PRODUCER_FENCED)
    );
    // Until the markers are written, the new producer waits too.
    assert_eq!(
        harness.init(13, None).response(13),
        init_failed(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
    harness.complete_markers(&fenced);
    assert_eq!(harness.state(), TransactionState::CompleteAbort);
    assert_eq!(
        harness.init(14, None).response(14),
        init_ok(FIRST_PRODUCER_ID, 2)
    );
    assert_eq!(harness.metadata().last_producer_epoch, ProducerEpoch::NONE);
}

#[test]
fn a_timed_out_transaction_is_aborted_with_a_bumped_epoch() {
    let mut harness = ongoing();
    let interval = config().abort_timed_out_transaction_cleanup_interval_ms;
    // Not yet: started at 1000, times out after 61000.
    harness.now_ms = 60_000;
    let actions = harness.coordinator.tick(harness.now_ms);
    assert!(harness.settle(actions).markers.is_empty());
    harness.now_ms = 61_001 + interval;
    let actions = harness.coordinator.tick(harness.now_ms);
    let aborted = harness.settle(actions);
    assert!(aborted.responses.is_empty());
    assert_eq!(aborted.markers[0].1.producer_epoch, ProducerEpoch(1));
    assert_eq!(aborted.markers[0].1.result, TransactionResult::Abort);
    harness.complete_markers(&aborted);
    assert_eq!(
        (harness.state(), harness.epoch()),
        (TransactionState::CompleteAbort, ProducerEpoch(1))
    );
    let refused = harness.end(3, 0, TransactionResult::Commit).response(3);
    assert_eq!(refused, Response::EndTxn(ErrorCode::PRODUCER_FENCED));
    // An EndTxn v1 client is told INVALID_PRODUCER_EPOCH instead.
    assert_eq!(
        FencingApi::EndTxn.error_for_version(1, ErrorCode::PRODUCER_FENCED),
        ErrorCode::INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        harness.coordinator.next_deadline_ms(),
        Some(harness.now_ms + interval)
    );
}

#[test]
fn a_restart_in_prepare_commit_or_prepare_abort_writes_the_markers_again() {
    for result in [TransactionResult::Commit, TransactionResult::Abort] {
        let mut harness = ongoing();
        let ended = harness.end(3, 0, result);
        assert_eq!(ended.markers.len(), 1);
        // Crash before the markers are confirmed.
        let resumed = harness.restart();
        assert_eq!(resumed.markers.len(), 1, "{result:?}");
        let markers = &resumed.markers[0].1;
        assert_eq!(markers.result, result);
        assert_eq!(markers.partitions, topic_partitions(&[0, 1]));
        assert_eq!(markers.coordinator_epoch, COORDINATOR_EPOCH + 1);
        assert_eq!(markers.producer_epoch, ProducerEpoch(0));
        // A stale confirmation from the old coordinator finds nothing.
        assert!(
            harness
                .coordinator
                .on_markers_written(WriteId(999), MarkerOutcome::Written)
                .is_empty()
        );
        harness.complete_markers(&resumed);
        let complete = match result {
            TransactionResult::Commit => TransactionState::CompleteCommit,
            TransactionResult::Abort => TransactionState::CompleteAbort,
        };
        assert_eq!(harness.state(), complete);
    }
}

#[test]
fn a_restart_in_ongoing_keeps_the_transaction_open_until_it_times_out() {
    let mut harness = ongoing();
    let resumed = harness.restart();
    assert!(resumed.markers.is_empty());
    assert_eq!(harness.state(), TransactionState::Ongoing);
    assert_eq!(harness.metadata().partitions.len(), 2);
    assert_eq!(
        harness.add(3, 0, &[2]).response(3),
        Response::AddPartitions(ErrorCode::NONE)
    );
    harness.now_ms = 200_000;
    let actions = harness.coordinator.tick(harness.now_ms);
    let aborted = harness.settle(actions);
    assert_eq!(
        aborted.markers[0].1.partitions,
        topic_partitions(&[0, 1, 2])
    );
    assert_eq!(aborted.markers[0].1.producer_epoch, ProducerEpoch(1));
}

#[test]
fn a_restart_during_an_epoch_fence_replays_ongoing_and_the_fence_happens_again() {
    let mut harness = ongoing();
    let request = InitProducerIdRequest {
        transactional_id: ID.into(),
        transaction_timeout_ms: TIMEOUT_MS,
        expected: None,
    };
    let actions = harness
        .coordinator
        .init_producer_id(harness.now_ms, 10, &request, &mut || Ok(ProducerId(5)));
    // The fence's PrepareAbort is asked for but the broker dies first.
    assert!(matches!(&actions[..], [Action::Persist { .. }]));
    assert_eq!(harness.epoch(), ProducerEpoch(1));
    let resumed = harness.restart();
    assert!(resumed.markers.is_empty());
    assert_eq!(
        (harness.state(), harness.epoch()),
        (TransactionState::Ongoing, ProducerEpoch(0))
    );
    let fenced = harness.init(11, None);
    assert_eq!(
        fenced.response(11),
        init_failed(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(fenced.markers[0].1.result, TransactionResult::Abort);
    assert_eq!(fenced.markers[0].1.producer_epoch, ProducerEpoch(1));
    harness.complete_markers(&fenced);
    assert_eq!(
        harness.init(12, None).response(12),
        init_ok(FIRST_PRODUCER_ID, 2)
    );
}

#[test]
fn verify_only_reports_membership_without_changing_anything() {
    let mut harness = ongoing();
    let before = harness.metadata().clone();
    let verified = harness
        .coordinator
        .verify_partitions(&add_request(0, &[0, 5]));
    assert_eq!(
        verified,
        [
            (TopicPartition::new("t", 0), ErrorCode::NONE),
            (
                TopicPartition::new("t", 5),
                ErrorCode::TRANSACTION_ABORTABLE
            ),
        ]
    );
    let stale = harness.coordinator.verify_partitions(&add_request(3, &[0]));
    assert_eq!(
        stale,
        [(TopicPartition::new("t", 0), ErrorCode::PRODUCER_FENCED)]
    );
    let batch = [
        BatchedAddPartitions {
            token: 20,
            request: add_request(0, &[5]),
            verify_only: true,
        },
        BatchedAddPartitions {
            token: 21,
            request: add_request(0, &[5]),
            verify_only: false,
        },
    ];
    let actions = harness
        .coordinator
        .add_partitions_batch(harness.now_ms, &batch);
    assert_eq!(
        harness.metadata(),
        &TransactionMetadata {
            pending_state: Some(TransactionState::Ongoing),
            ..before
        }
    );
    let outcome = harness.settle(actions);
    assert_eq!(
        outcome.response(20),
        Response::Verified(vec![(
            TopicPartition::new("t", 5),
            ErrorCode::TRANSACTION_ABORTABLE
        )])
    );
    assert_eq!(
        outcome.response(21),
        Response::AddPartitions(ErrorCode::NONE)
    );
    let after = harness.coordinator.verify_partitions(&add_request(0, &[5]));
    assert_eq!(after, [(TopicPartition::new("t", 5), ErrorCode::NONE)]);
    harness.end(22, 0, TransactionResult::Commit);
    let preparing = harness.coordinator.verify_partitions(&add_request(0, &[5]));
    assert_eq!(
        preparing,
        [(
            TopicPartition::new("t", 5),
            ErrorCode::CONCURRENT_TRANSACTIONS
        )]
    );
}
