//! The coordinator's error codes (table-driven), KIP-360 retries, epoch
//! exhaustion, id expiry, failed writes, the admin views and the log version.

use super::*;

/// Puts ID into the log as `value` describes and restarts on it.
fn loaded(state: TransactionState, epoch: i16, partitions: &[i32]) -> Harness {
    let mut harness = Harness::new();
    let value = TransactionLogValue {
        producer_id: ProducerId(FIRST_PRODUCER_ID),
        previous_producer_id: ProducerId(-1),
        next_producer_id: ProducerId(-1),
        producer_epoch: ProducerEpoch(epoch),
        timeout_ms: TIMEOUT_MS,
        state,
        partitions: Some(vec![records::TopicPartitions {
            topic: "t".into(),
            partition_ids: partitions.to_vec(),
        }]),
        last_update_timestamp_ms: 0,
        start_timestamp_ms: 0,
        client_transaction_version: 0,
        unknown_tagged_fields: Vec::new(),
    };
    let record = records::TransactionRecord::Value {
        key: records::TransactionLogKey {
            transactional_id: ID.into(),
        },
        value,
        version: 1,
    };
    harness.log.push(record.encode().unwrap());
    harness.next_producer_id = 5000;
    harness.restart();
    harness
}

#[test]
fn request_errors_follow_kafka() {
    use TransactionResult::{Abort, Commit};
    type Case = (&'static str, fn() -> (Harness, Outcome, Token), Response);
    let cases: Vec<Case> = vec![
        (
            "add to an unknown id",
            || {
                let mut h = Harness::new();
                let o = h.add(1, 0, &[0]);
                (h, o, 1)
            },
            Response::AddPartitions(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
        ),
        (
            "add with an old epoch",
            || {
                let mut h = ongoing();
                let o = h.add(9, 5, &[0]);
                (h, o, 9)
            },
            Response::AddPartitions(ErrorCode::PRODUCER_FENCED),
        ),
        (
            "end in Empty",
            || {
                let mut h = Harness::new();
                h.init(1, None);
                let o = h.end(9, 0, Commit);
                (h, o, 9)
            },
            Response::EndTxn(ErrorCode::INVALID_TXN_STATE),
        ),
        (
            "end an unknown id",
            || {
                let mut h = Harness::new();
                let o = h.end(9, 0, Abort);
                (h, o, 9)
            },
            Response::EndTxn(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
        ),
        (
            "commit while committing",
            || {
                let mut h = ongoing();
                h.end(3, 0, Commit);
                let o = h.end(9, 0, Commit);
                (h, o, 9)
            },
            Response::EndTxn(ErrorCode::CONCURRENT_TRANSACTIONS),
        ),
        (
            "abort while the commit's markers are out",
            || {
                let mut h = ongoing();
                h.end(3, 0, Commit);
                let o = h.end(9, 0, Abort);
                (h, o, 9)
            },
            Response::EndTxn(ErrorCode::CONCURRENT_TRANSACTIONS),
        ),
        (
            "abort again while aborting",
            || {
                let mut h = ongoing();
                h.end(3, 0, Abort);
                let o = h.end(9, 0, Abort);
                (h, o, 9)
            },
            Response::EndTxn(ErrorCode::CONCURRENT_TRANSACTIONS),
        ),
        (
            "init while committing",
            || {
                let mut h = ongoing();
                h.end(3, 0, Commit);
                let o = h.init(9, None);
                (h, o, 9)
            },
            init_failed(ErrorCode::CONCURRENT_TRANSACTIONS),
        ),
        (
            "init expecting another producer id",
            || {
                let mut h = ongoing();
                let o = h.init(9, Some((77, 0)));
                (h, o, 9)
            },
            init_failed(ErrorCode::PRODUCER_FENCED),
        ),
        (
            "init expecting a fenced epoch",
            || {
                let mut h = Harness::new();
                h.init(1, None);
                h.init(2, None);
                h.init(3, None);
                let o = h.init(9, Some((FIRST_PRODUCER_ID, 0)));
                (h, o, 9)
            },
            init_failed(ErrorCode::PRODUCER_FENCED),
        ),
        (
            "end with a wrong producer id",
            || {
                let mut h = ongoing();
                let request = EndTxnRequest {
                    transactional_id: ID.into(),
                    producer_id: ProducerId(1),
                    producer_epoch: ProducerEpoch(0),
                    result: Commit,
                };
                let actions = h.coordinator.end_txn(0, 9, &request);
                let o = h.settle(actions);
                (h, o, 9)
            },
            Response::EndTxn(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
        ),
    ];
    for (name, run, expected) in cases {
        let (_, outcome, token) = run();
        assert_eq!(outcome.response(token), expected, "{name}");
    }
}

#[test]
fn init_errors_before_any_state_follow_kafka() {
    let mut harness = Harness::new();
    let other_id = (0..)
        .map(|n| format!("other-{n}"))
        .find(|id| partition_for(id, 50) != partition())
        .unwrap();
    let rows: [(&str, i32, ErrorCode); 5] = [
        ("", TIMEOUT_MS, ErrorCode::INVALID_REQUEST),
        (ID, 0, ErrorCode::INVALID_TRANSACTION_TIMEOUT),
        (ID, 900_001, ErrorCode::INVALID_TRANSACTION_TIMEOUT),
        (&other_id, TIMEOUT_MS, ErrorCode::NOT_COORDINATOR),
        (ID, 900_000, ErrorCode::NONE),
    ];
    for (id, timeout_ms, error) in rows {
        let request = InitProducerIdRequest {
            transactional_id: id.into(),
            transaction_timeout_ms: timeout_ms,
            expected: None,
        };
        let actions = harness
            .coordinator
            .init_producer_id(0, 1, &request, &mut || Ok(ProducerId(1)));
        let Response::InitProducerId(result) = harness.settle(actions).response(1) else {
            panic!("an InitProducerId answer")
        };
        assert_eq!(result.error, error, "{id:?} {timeout_ms}");
    }
    // The allocator's failure is the answer, and nothing is created.
    let request = InitProducerIdRequest {
        transactional_id: "fresh".into(),
        transaction_timeout_ms: TIMEOUT_MS,
        expected: None,
    };
    let mut loading = TransactionCoordinator::new(config(), partition_for("fresh", 50), 0);
    let actions = loading.init_producer_id(0, 1, &request, &mut || Ok(ProducerId(1)));
    assert_eq!(
        actions,
        [Action::Respond {
            token: 1,
            response: init_failed(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        }]
    );
    loading.finish_loading(0);
    let actions =
        loading.init_producer_id(0, 1, &request, &mut || Err(ErrorCode::UNKNOWN_SERVER_ERROR));
    assert_eq!(
        actions,
        [Action::Respond {
            token: 1,
            response: init_failed(ErrorCode::UNKNOWN_SERVER_ERROR)
        }]
    );
    assert!(loading.transaction("fresh").is_none());
}

#[test]
fn kip_360_retries_get_the_same_epoch_and_exhausted_epochs_rotate_the_producer_id() {
    let mut harness = Harness::new();
    harness.init(1, None);
    assert_eq!(
        harness.init(2, Some((FIRST_PRODUCER_ID, 0))).response(2),
        init_ok(FIRST_PRODUCER_ID, 1)
    );
    // The answer was lost: the same request gets the same epoch.
    assert_eq!(
        harness.init(3, Some((FIRST_PRODUCER_ID, 0))).response(3),
        init_ok(FIRST_PRODUCER_ID, 1)
    );

    let mut harness = loaded(TransactionState::CompleteCommit, i16::MAX - 1, &[]);
    let expected = Some((FIRST_PRODUCER_ID, i16::MAX - 1));
    assert_eq!(harness.init(4, expected).response(4), init_ok(5000, 0));
    assert_eq!(
        harness.metadata().previous_producer_id,
        ProducerId(FIRST_PRODUCER_ID)
    );
    // A retry with the old producer id and exhausted epoch is the same answer.
    assert_eq!(harness.init(5, expected).response(5), init_ok(5000, 0));
    assert_eq!(harness.next_producer_id, 5001, "no second producer id");

    let mut harness = loaded(TransactionState::Empty, i16::MAX - 1, &[]);
    assert_eq!(harness.init(6, None).response(6), init_ok(5000, 0));
}

#[test]
fn an_open_transaction_at_the_last_epoch_is_fenced_then_rotated() {
    let mut harness = loaded(TransactionState::Ongoing, i16::MAX - 2, &[0]);
    let fenced = harness.init(1, None);
    assert_eq!(
        fenced.response(1),
        init_failed(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(
        fenced.markers[0].1.producer_epoch,
        ProducerEpoch(i16::MAX - 1)
    );
    harness.complete_markers(&fenced);
    assert_eq!(harness.init(2, None).response(2), init_ok(5000, 0));
}

#[test]
fn idle_ids_expire_with_a_tombstone_and_open_ones_do_not() {
    let mut harness = Harness::new();
    harness.init(1, None);
    let expiration = config().transactional_id_expiration_ms;
    let interval = config().remove_expired_transaction_cleanup_interval_ms;
    harness.now_ms = expiration - 1;
    let actions = harness.coordinator.tick(harness.now_ms);
    assert!(
        actions
            .iter()
            .all(|action| !matches!(action, Action::Persist { .. }))
    );
    harness.now_ms = expiration + interval;
    let actions = harness.coordinator.tick(harness.now_ms);
    assert!(matches!(
        &actions[..],
        [Action::Persist {
            record: records::TransactionRecord::Tombstone(_),
            ..
        }]
    ));
    harness.settle(actions);
    assert!(harness.coordinator.transaction(ID).is_none());
    assert_eq!(
        harness.coordinator.describe(ID).error,
        ErrorCode::TRANSACTIONAL_ID_NOT_FOUND
    );
    assert_eq!(harness.logged_states().last(), Some(&None));
    // After a restart the tombstone keeps it gone.
    harness.restart();
    assert!(harness.coordinator.transaction(ID).is_none());

    let mut harness = ongoing();
    harness.metadata();
    let later = expiration * 2;
    harness
        .coordinator
        .transactions
        .get_mut(ID)
        .unwrap()
        .timeout_ms = i32::MAX;
    let actions = harness.coordinator.tick(later);
    assert!(actions.is_empty(), "an Ongoing transaction never expires");
}

#[test]
fn failed_writes_answer_kafkas_codes_and_free_the_id() {
    let mut harness = Harness::new();
    let request = InitProducerIdRequest {
        transactional_id: ID.into(),
        transaction_timeout_ms: TIMEOUT_MS,
        expected: None,
    };
    let rows = [
        (NOT_ENOUGH_REPLICAS, ErrorCode::COORDINATOR_NOT_AVAILABLE),
        (
            ErrorCode::REQUEST_TIMED_OUT,
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ),
        (
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::NOT_COORDINATOR,
        ),
        (
            ErrorCode::MESSAGE_TOO_LARGE,
            ErrorCode::UNKNOWN_SERVER_ERROR,
        ),
    ];
    for (append_error, answer) in rows {
        let actions = harness
            .coordinator
            .init_producer_id(0, 1, &request, &mut || Ok(ProducerId(1)));
        let [Action::Persist { write_id, .. }] = actions[..] else {
            panic!("one write, not {actions:?}")
        };
        let answered = harness
            .coordinator
            .on_persisted(0, write_id, Err(append_error));
        assert_eq!(
            answered,
            [Action::Respond {
                token: 1,
                response: init_failed(answer)
            }]
        );
        assert_eq!(harness.metadata().pending_state, None);
        assert_eq!(harness.epoch(), ProducerEpoch::NONE);
    }
    assert_eq!(harness.init(2, None).response(2), init_ok(1, 0));
}

#[test]
fn a_failed_fence_is_reused_and_a_failed_completion_is_retried() {
    let mut harness = ongoing();
    let request = InitProducerIdRequest {
        transactional_id: ID.into(),
        transaction_timeout_ms: TIMEOUT_MS,
        expected: None,
    };
    let actions = harness
        .coordinator
        .init_producer_id(0, 1, &request, &mut || Ok(ProducerId(9)));
    let [Action::Persist { write_id, .. }] = actions[..] else {
        panic!("the fence's abort is written")
    };
    let answered = harness
        .coordinator
        .on_persisted(0, write_id, Err(ErrorCode::REQUEST_TIMED_OUT));
    assert_eq!(
        answered,
        [Action::Respond {
            token: 1,
            response: init_failed(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }]
    );
    assert!(harness.metadata().has_failed_epoch_fence);
    assert_eq!(
        (harness.state(), harness.epoch()),
        (TransactionState::Ongoing, ProducerEpoch(1))
    );
    // The retry does not bump again: epoch 1 was never handed out.
    let fenced = harness.init(2, None);
    assert_eq!(fenced.markers[0].1.producer_epoch, ProducerEpoch(1));
    // The completion's write times out: it is written again.
    let actions = harness
        .coordinator
        .on_markers_written(fenced.markers[0].0, MarkerOutcome::Written);
    let [Action::Persist { write_id, .. }] = actions[..] else {
        panic!("the completion is written")
    };
    let retried = harness
        .coordinator
        .on_persisted(0, write_id, Err(ErrorCode::REQUEST_TIMED_OUT));
    assert!(matches!(&retried[..], [Action::Persist { .. }]));
    harness.settle(retried);
    assert_eq!(harness.state(), TransactionState::CompleteAbort);
}

#[test]
fn a_fenced_coordinator_stops_after_its_markers_are_refused() {
    let mut harness = ongoing();
    let ended = harness.end(3, 0, TransactionResult::Commit);
    let actions = harness
        .coordinator
        .on_markers_written(ended.markers[0].0, MarkerOutcome::CoordinatorFenced);
    assert!(actions.is_empty());
    assert_eq!(harness.state(), TransactionState::PrepareCommit);
}

#[test]
fn describe_and_list_show_the_transactions() {
    let mut harness = ongoing();
    let description = harness.coordinator.describe(ID);
    assert_eq!(
        (
            description.error,
            description.state,
            description.producer_epoch
        ),
        (ErrorCode::NONE, "Ongoing", ProducerEpoch(0))
    );
    assert_eq!(description.topics, [("t".to_owned(), vec![0, 1])]);
    assert_eq!(description.start_timestamp_ms, 1_000);
    assert_eq!(
        harness.coordinator.describe("").error,
        ErrorCode::INVALID_REQUEST
    );

    let list = |coordinator: &TransactionCoordinator, states: &[&str], producers: &[ProducerId]| {
        let filters = ListFilters {
            states: states.iter().map(|state| (*state).to_owned()).collect(),
            producer_ids: producers.to_vec(),
            duration_ms: -1,
            pattern: None,
        };
        coordinator.list(2_000, &filters)
    };
    let all = list(&harness.coordinator, &[], &[]);
    assert_eq!(all.transactions.len(), 1);
    let filtered = list(
        &harness.coordinator,
        &["Ongoing", "Bogus"],
        &[ProducerId(FIRST_PRODUCER_ID)],
    );
    assert_eq!(filtered.unknown_state_filters, ["Bogus"]);
    assert_eq!(filtered.transactions[0].state, TransactionState::Ongoing);
    assert!(
        list(&harness.coordinator, &["Empty"], &[])
            .transactions
            .is_empty()
    );
    assert!(
        list(&harness.coordinator, &[], &[ProducerId(1)])
            .transactions
            .is_empty()
    );
    // Running since 1000: at 2000 it has run 1000 ms, not more.
    let longer = |duration_ms| {
        let filters = ListFilters {
            duration_ms,
            ..ListFilters::default()
        };
        harness.coordinator.list(2_000, &filters).transactions.len()
    };
    assert_eq!((longer(999), longer(1_000), longer(-1)), (1, 0, 1));
    let matching = |pattern: &str| {
        let filters = ListFilters {
            duration_ms: -1,
            pattern: Some(TransactionalIdPattern::new(pattern).unwrap()),
            ..ListFilters::default()
        };
        harness.coordinator.list(2_000, &filters).transactions.len()
    };
    // Whole-id matches, as Java's Matcher.matches.
    assert_eq!(
        (matching(".*"), matching(&ID[..1]), matching(ID)),
        (1, 0, 1)
    );
    assert_eq!(
        TransactionalIdPattern::new("(").unwrap_err(),
        ErrorCode::INVALID_REGULAR_EXPRESSION
    );
    let loading = TransactionCoordinator::new(config(), 0, 0);
    assert_eq!(
        list(&loading, &[], &[]).error,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
    );
    harness.end(4, 0, TransactionResult::Commit);
    assert_eq!(harness.coordinator.describe(ID).state, "PrepareCommit");
}

#[test]
fn the_log_is_written_in_the_configured_value_version() {
    for (level, version) in [(0, 0i16), (1, 1), (2, 1)] {
        let mut coordinator = TransactionCoordinator::new(
            TransactionConfig {
                transaction_version_level: level,
                ..config()
            },
            partition(),
            0,
        );
        coordinator.finish_loading(0);
        let request = InitProducerIdRequest {
            transactional_id: ID.into(),
            transaction_timeout_ms: TIMEOUT_MS,
            expected: None,
        };
        let actions = coordinator.init_producer_id(0, 1, &request, &mut || Ok(ProducerId(1)));
        let [Action::Persist { ref record, .. }] = actions[..] else {
            panic!("one write")
        };
        let (key, value) = record.encode().unwrap();
        assert_eq!(key[..], [0, 0, 0, 2, b't', b'x']);
        let value = value.unwrap();
        assert_eq!(value[..2], version.to_be_bytes(), "level {level}");
        assert_eq!(
            TransactionLogValue::decode(&value).unwrap().0.state,
            TransactionState::Empty
        );
    }
}

#[test]
fn idempotent_producers_get_a_fresh_id_at_epoch_0() {
    let result = init_idempotent_producer(&mut || Ok(ProducerId(42)));
    assert_eq!(
        (result.error, result.producer_id, result.producer_epoch),
        (ErrorCode::NONE, ProducerId(42), ProducerEpoch(0))
    );
    let failed = init_idempotent_producer(&mut || Err(ErrorCode::COORDINATOR_NOT_AVAILABLE));
    assert_eq!(
        failed,
        InitProducerIdResult::failed(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    );
    let rows = [
        (
            FencingApi::InitProducerId,
            3,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        ),
        (FencingApi::InitProducerId, 4, ErrorCode::PRODUCER_FENCED),
        (
            FencingApi::AddPartitionsToTxn,
            1,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        ),
        (FencingApi::AddOffsetsToTxn, 2, ErrorCode::PRODUCER_FENCED),
        (
            FencingApi::TxnOffsetCommit,
            2,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        ),
        (FencingApi::TxnOffsetCommit, 3, ErrorCode::PRODUCER_FENCED),
    ];
    for (api, version, error) in rows {
        assert_eq!(
            api.error_for_version(version, ErrorCode::PRODUCER_FENCED),
            error,
            "{api:?} v{version}"
        );
    }
    assert_eq!(
        FencingApi::EndTxn.error_for_version(0, ErrorCode::NONE),
        ErrorCode::NONE
    );
}
