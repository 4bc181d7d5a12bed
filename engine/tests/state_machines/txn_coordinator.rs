//! The transaction coordinator driven from outside the crate, as the runtime
//! drives it: requests in, actions out, records persisted as bytes and
//! replayed by the next coordinator, with Kafka's error codes.

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::producer_state::ProducerEpoch;
use brook_engine::txn::config::TransactionConfig;
use brook_engine::txn::coordinator::{
    AddPartitionsRequest, EndTxnRequest, InitProducerIdRequest, TransactionCoordinator,
};
use brook_engine::txn::records::{TransactionRecord, partition_for};
use brook_engine::txn::state::TransactionState;
use brook_engine::txn::{
    Action, FencingApi, InitProducerIdResult, MarkerOutcome, MarkerWrite, Response, Token,
    TransactionResult, WriteId,
};
use brook_engine::types::{ProducerId, TopicPartition};
use bytes::Bytes;

const ID: &str = "payments-writer";

/// A broker: one coordinator, its partition's durable records, a producer
/// id block, and the marker writes it was asked for.
struct Broker {
    coordinator: TransactionCoordinator,
    log: Vec<(Bytes, Option<Bytes>)>,
    next_producer_id: i64,
    responses: Vec<(Token, Response)>,
    markers: Vec<(WriteId, MarkerWrite)>,
}

impl Broker {
    fn start(log: Vec<(Bytes, Option<Bytes>)>, coordinator_epoch: i32) -> Broker {
        let partition = partition_for(ID, 50);
        let mut coordinator =
            TransactionCoordinator::new(TransactionConfig::default(), partition, coordinator_epoch);
        for (key, value) in &log {
            coordinator.replay(key, value.as_deref()).unwrap();
        }
        let actions = coordinator.finish_loading(0);
        let mut broker = Broker {
            coordinator,
            log,
            next_producer_id: 4000,
            responses: Vec::new(),
            markers: Vec::new(),
        };
        broker.perform(actions);
        broker
    }

    /// Performs actions: every record is durable at once; markers wait.
    fn perform(&mut self, mut actions: Vec<Action>) {
        while !actions.is_empty() {
            let mut next = Vec::new();
            for action in actions {
                match action {
                    Action::Persist { write_id, record } => {
                        self.log.push(record.encode().unwrap());
                        next.extend(self.coordinator.on_persisted(0, write_id, Ok(())));
                    }
                    Action::WriteMarkers { write_id, markers } => {
                        self.markers.push((write_id, markers))
                    }
                    Action::Respond { token, response } => self.responses.push((token, response)),
                }
            }
            actions = next;
        }
    }

    fn answer(&mut self, token: Token) -> Response {
        let index = self.responses.iter().position(|(t, _)| *t == token);
        self.responses.remove(index.expect("answered")).1
    }

    fn init(&mut self, token: Token) -> Response {
        let request = InitProducerIdRequest {
            transactional_id: ID.into(),
            transaction_timeout_ms: 60_000,
            expected: None,
        };
        let next = &mut self.next_producer_id;
        let mut allocate = || {
            *next += 1;
            Ok(ProducerId(*next))
        };
        let actions = self
            .coordinator
            .init_producer_id(0, token, &request, &mut allocate);
        self.perform(actions);
        self.answer(token)
    }

    fn add(&mut self, token: Token, producer: (i64, i16), topics: &[(&str, i32)]) -> Response {
        let request = add_request(producer, topics);
        let actions = self.coordinator.add_partitions(0, token, &request);
        self.perform(actions);
        self.answer(token)
    }

    fn end(&mut self, token: Token, producer: (i64, i16), result: TransactionResult) -> Response {
        let request = EndTxnRequest {
            transactional_id: ID.into(),
            producer_id: ProducerId(producer.0),
            producer_epoch: ProducerEpoch(producer.1),
            result,
        };
        let actions = self.coordinator.end_txn(0, token, &request);
        self.perform(actions);
        self.answer(token)
    }

    fn finish_markers(&mut self) -> Vec<MarkerWrite> {
        let markers = std::mem::take(&mut self.markers);
        for (write_id, _) in &markers {
            let actions = self
                .coordinator
                .on_markers_written(*write_id, MarkerOutcome::Written);
            self.perform(actions);
        }
        markers.into_iter().map(|(_, markers)| markers).collect()
    }

    fn state(&self) -> TransactionState {
        self.coordinator.transaction(ID).unwrap().state
    }
}

fn add_request(producer: (i64, i16), topics: &[(&str, i32)]) -> AddPartitionsRequest {
    AddPartitionsRequest {
        transactional_id: ID.into(),
        producer_id: ProducerId(producer.0),
        producer_epoch: ProducerEpoch(producer.1),
        partitions: topics
            .iter()
            .map(|(topic, partition)| TopicPartition::new(*topic, *partition))
            .collect(),
    }
}

fn produced(producer_id: i64, epoch: i16) -> Response {
    Response::InitProducerId(InitProducerIdResult {
        error: ErrorCode::NONE,
        producer_id: ProducerId(producer_id),
        producer_epoch: ProducerEpoch(epoch),
    })
}

#[test]
fn a_commit_interrupted_by_a_crash_is_finished_by_the_next_coordinator() {
    let mut broker = Broker::start(Vec::new(), 1);
    assert_eq!(broker.init(1), produced(4001, 0));
    let added = broker.add(2, (4001, 0), &[("orders", 0), ("audit", 3)]);
    assert_eq!(added, Response::AddPartitions(ErrorCode::NONE));
    assert_eq!(
        broker.end(3, (4001, 0), TransactionResult::Commit),
        Response::EndTxn(ErrorCode::NONE)
    );
    assert_eq!(broker.markers.len(), 1);
    // The broker dies before the markers are confirmed.
    let mut next = Broker::start(broker.log.clone(), 2);
    assert_eq!(next.state(), TransactionState::PrepareCommit);
    let markers = next.finish_markers();
    assert_eq!(markers.len(), 1);
    assert_eq!(markers[0].result, TransactionResult::Commit);
    assert_eq!(markers[0].coordinator_epoch, 2);
    assert_eq!(
        (markers[0].producer_id, markers[0].producer_epoch),
        (ProducerId(4001), ProducerEpoch(0))
    );
    assert_eq!(
        markers[0].partitions,
        [
            TopicPartition::new("audit", 3),
            TopicPartition::new("orders", 0)
        ]
    );
    assert_eq!(next.state(), TransactionState::CompleteCommit);
    // Every record is one Kafka's tools would read.
    let states: Vec<_> = next
        .log
        .iter()
        .map(
            |(key, value)| match TransactionRecord::decode(key, value.as_deref()).unwrap() {
                TransactionRecord::Value { value, version, .. } => {
                    assert_eq!(version, 1);
                    value.state
                }
                other => panic!("unexpected {other:?}"),
            },
        )
        .collect();
    use TransactionState::*;
    assert_eq!(states, [Empty, Ongoing, PrepareCommit, CompleteCommit]);
}

#[test]
fn a_restarted_producer_fences_its_zombie_and_the_zombie_is_told_so() {
    let mut broker = Broker::start(Vec::new(), 1);
    broker.init(1);
    broker.add(2, (4001, 0), &[("orders", 0)]);
    // The same transactional id starts again elsewhere.
    let first_try = broker.init(3);
    assert_eq!(
        first_try,
        Response::InitProducerId(InitProducerIdResult::failed(
            ErrorCode::CONCURRENT_TRANSACTIONS
        ))
    );
    let aborted = broker.finish_markers();
    assert_eq!(
        (aborted[0].result, aborted[0].producer_epoch),
        (TransactionResult::Abort, ProducerEpoch(1))
    );
    assert_eq!(broker.init(4), produced(4001, 2));
    // The zombie's next moves are refused; an old client sees its old code.
    let refused = broker.add(5, (4001, 0), &[("orders", 1)]);
    assert_eq!(refused, Response::AddPartitions(ErrorCode::PRODUCER_FENCED));
    assert_eq!(
        FencingApi::AddPartitionsToTxn.error_for_version(1, ErrorCode::PRODUCER_FENCED),
        ErrorCode::INVALID_PRODUCER_EPOCH
    );
    let refused = broker.end(6, (4001, 0), TransactionResult::Commit);
    assert_eq!(refused, Response::EndTxn(ErrorCode::PRODUCER_FENCED));
}

#[test]
fn partition_leaders_verify_membership_before_accepting_transactional_records() {
    let mut broker = Broker::start(Vec::new(), 1);
    broker.init(1);
    broker.add(2, (4001, 0), &[("orders", 0)]);
    let results = broker
        .coordinator
        .verify_partitions(&add_request((4001, 0), &[("orders", 0), ("orders", 1)]));
    assert_eq!(
        results,
        [
            (TopicPartition::new("orders", 0), ErrorCode::NONE),
            (
                TopicPartition::new("orders", 1),
                ErrorCode::TRANSACTION_ABORTABLE
            ),
        ]
    );
    let unknown = add_request((9, 0), &[("orders", 0)]);
    let results = broker.coordinator.verify_partitions(&unknown);
    assert_eq!(
        results,
        [(
            TopicPartition::new("orders", 0),
            ErrorCode::INVALID_PRODUCER_ID_MAPPING
        )]
    );
}

#[test]
fn a_loading_coordinator_and_a_foreign_id_are_refused() {
    let partition = partition_for(ID, 50);
    let mut loading = TransactionCoordinator::new(TransactionConfig::default(), partition, 1);
    let actions = loading.add_partitions(0, 1, &add_request((1, 0), &[("t", 0)]));
    assert_eq!(
        actions,
        [Action::Respond {
            token: 1,
            response: Response::AddPartitions(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        }]
    );
    loading.finish_loading(0);
    let foreign = (0..)
        .map(|n| format!("id-{n}"))
        .find(|id| partition_for(id, 50) != partition)
        .unwrap();
    let request = AddPartitionsRequest {
        transactional_id: foreign,
        ..add_request((1, 0), &[("t", 0)])
    };
    let actions = loading.add_partitions(0, 2, &request);
    assert_eq!(
        actions,
        [Action::Respond {
            token: 2,
            response: Response::AddPartitions(ErrorCode::NOT_COORDINATOR)
        }]
    );
    let unknown_here = (0..)
        .map(|n| format!("id-{n}"))
        .find(|id| partition_for(id, 50) == partition && id != ID)
        .unwrap();
    assert_eq!(
        loading.describe(&unknown_here).error,
        ErrorCode::TRANSACTIONAL_ID_NOT_FOUND
    );
}
