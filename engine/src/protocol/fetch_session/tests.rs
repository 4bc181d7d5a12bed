use super::*;

fn key(topic: &str, partition: i32) -> SessionPartition {
    SessionPartition {
        topic: TopicKey::Name(topic.into()),
        partition,
    }
}

fn at(fetch_offset: i64) -> PartitionFetch {
    PartitionFetch {
        fetch_offset,
        partition_max_bytes: 1 << 20,
        current_leader_epoch: -1,
        last_fetched_epoch: -1,
        log_start_offset: -1,
    }
}

fn answer(high_watermark: i64, has_records: bool) -> PartitionAnswer {
    PartitionAnswer {
        error: ErrorCode::NONE,
        high_watermark,
        log_start_offset: 0,
        has_records,
        must_send: false,
    }
}

fn request(session_id: i32, epoch: i32) -> SessionRequest {
    SessionRequest {
        session_id,
        epoch,
        uses_topic_ids: false,
    }
}

/// A cache with one session over `partitions` of topic "t", all answered
/// with high watermark 10 and no records.
fn cache_with_session(partitions: i32) -> (FetchSessionCache, i32) {
    let mut cache = FetchSessionCache::new(10, 1, 2);
    let requested: Vec<_> = (0..partitions).map(|p| (key("t", p), at(0))).collect();
    assert_eq!(
        cache.context(0, request(0, INITIAL_EPOCH), requested.clone(), &[]),
        FetchContext::Full {
            partitions: requested.clone()
        }
    );
    let answered = requested
        .into_iter()
        .map(|(key, fetch)| (key, fetch, answer(10, false)))
        .collect();
    let id = cache.open(0, 12345, false, answered);
    (cache, id)
}

fn listed(context: &FetchContext) -> Vec<(SessionPartition, PartitionFetch)> {
    match context {
        FetchContext::Incremental { partitions, .. } => partitions.clone(),
        other => panic!("expected an incremental fetch, got {other:?}"),
    }
}

#[test]
fn a_full_fetch_opens_a_session_whose_id_names_the_shard() {
    let (cache, id) = cache_with_session(3);
    assert!(id > 0);
    assert_eq!(id % 2, 1, "shard 1 of 2");
    assert_eq!(cache.len(), 1);
}

#[test]
fn an_incremental_fetch_reads_the_whole_session_with_its_updates() {
    let (mut cache, id) = cache_with_session(3);
    let context = cache.context(
        5,
        request(id, 1),
        vec![(key("t", 1), at(7)), (key("u", 0), at(3))],
        &[key("t", 0)],
    );
    assert_eq!(
        listed(&context),
        vec![
            (key("t", 1), at(7)),
            (key("t", 2), at(0)),
            (key("u", 0), at(3))
        ]
    );
    // The epoch moved on: the same epoch again is refused, the next is served.
    assert_eq!(
        cache.context(6, request(id, 1), vec![], &[]),
        FetchContext::Error(ErrorCode::INVALID_FETCH_SESSION_EPOCH)
    );
    assert_eq!(
        listed(&cache.context(6, request(id, 2), vec![], &[])).len(),
        3
    );
}

#[test]
fn incremental_fetches_of_unknown_or_mismatched_sessions_are_refused() {
    let (mut cache, id) = cache_with_session(1);
    assert_eq!(
        cache.context(0, request(id + 2, 1), vec![], &[]),
        FetchContext::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
    );
    // Epoch 1 with no session id is incremental too, and finds nothing.
    assert_eq!(
        cache.context(0, request(0, 1), vec![], &[]),
        FetchContext::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
    );
    let by_id = SessionRequest {
        uses_topic_ids: true,
        ..request(id, 1)
    };
    assert_eq!(
        cache.context(0, by_id, vec![], &[]),
        FetchContext::Error(ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR)
    );
}

#[test]
fn only_partitions_with_news_are_answered() {
    let (mut cache, id) = cache_with_session(4);
    let context = cache.context(0, request(id, 1), vec![], &[]);
    let partitions = listed(&context);
    let errored = PartitionAnswer {
        error: ErrorCode::NOT_LEADER_OR_FOLLOWER,
        ..answer(10, false)
    };
    let moved_start = PartitionAnswer {
        log_start_offset: 4,
        ..answer(10, false)
    };
    let answers = [answer(10, false), answer(11, false), errored, moved_start];
    assert_eq!(
        cache.answered(id, &partitions, &answers),
        vec![false, true, true, true]
    );
    // Unchanged now, except the partition that erred: its watermark was
    // forgotten so that it is sent again once the error is gone.
    let context = cache.context(0, request(id, 2), vec![], &[]);
    let answers = [
        answer(10, false),
        answer(11, false),
        answer(10, false),
        moved_start,
    ];
    assert_eq!(
        cache.answered(id, &listed(&context), &answers),
        vec![false, false, true, false]
    );
}

/// A preferred read replica (KIP-392) or a diverging epoch is sent even
/// when nothing else changed, and does not move the partition to the end
/// (only records do).
#[test]
fn a_preferred_replica_or_a_diverging_epoch_is_always_answered() {
    let (mut cache, id) = cache_with_session(3);
    let context = cache.context(0, request(id, 1), vec![], &[]);
    let elsewhere = PartitionAnswer {
        must_send: true,
        ..answer(10, false)
    };
    let answers = [elsewhere, answer(10, false), answer(10, false)];
    assert_eq!(
        cache.answered(id, &listed(&context), &answers),
        vec![true, false, false]
    );
    let context = cache.context(0, request(id, 2), vec![], &[]);
    assert_eq!(listed(&context)[0].0, key("t", 0), "not moved");
    assert_eq!(
        cache.answered(id, &listed(&context), &answers),
        vec![true, false, false],
        "sent again, unchanged"
    );
}

#[test]
fn partitions_that_returned_records_move_to_the_end() {
    let (mut cache, id) = cache_with_session(3);
    let context = cache.context(0, request(id, 1), vec![], &[]);
    let answers = [answer(12, true), answer(10, false), answer(10, false)];
    assert_eq!(
        cache.answered(id, &listed(&context), &answers),
        vec![true, false, false]
    );
    let context = cache.context(0, request(id, 2), vec![(key("t", 0), at(12))], &[]);
    assert_eq!(
        listed(&context),
        vec![
            (key("t", 1), at(0)),
            (key("t", 2), at(0)),
            (key("t", 0), at(12))
        ]
    );
}

#[test]
fn answers_for_a_session_changed_meanwhile_are_all_sent() {
    let (mut cache, id) = cache_with_session(2);
    let first = listed(&cache.context(0, request(id, 1), vec![], &[]));
    // A second fetch before the first was answered swaps a partition.
    cache.context(
        0,
        request(id, 2),
        vec![(key("t", 9), at(0))],
        &[key("t", 0)],
    );
    let answers = [answer(10, false), answer(10, false)];
    assert_eq!(cache.answered(id, &first, &answers), vec![true, true]);
}

#[test]
fn forgetting_every_partition_closes_the_session() {
    let (mut cache, id) = cache_with_session(2);
    assert_eq!(
        cache.context(0, request(id, 1), vec![], &[key("t", 0), key("t", 1)]),
        FetchContext::Sessionless { partitions: vec![] }
    );
    assert!(cache.is_empty());
}

#[test]
fn full_fetches_close_the_session_they_name() {
    let (mut cache, id) = cache_with_session(2);
    assert_eq!(
        cache.context(0, request(id, FINAL_EPOCH), vec![(key("t", 0), at(0))], &[]),
        FetchContext::Sessionless {
            partitions: vec![(key("t", 0), at(0))]
        }
    );
    assert!(cache.is_empty());
    let (mut cache, id) = cache_with_session(2);
    assert_eq!(
        cache.context(
            0,
            request(id, INITIAL_EPOCH),
            vec![(key("t", 0), at(0))],
            &[]
        ),
        FetchContext::Full {
            partitions: vec![(key("t", 0), at(0))]
        }
    );
    assert!(cache.is_empty(), "the new session opens only once answered");
}

#[test]
fn a_cache_of_no_slots_serves_every_fetch_sessionless() {
    let mut cache = FetchSessionCache::new(0, 0, 1);
    assert_eq!(
        cache.context(
            0,
            request(0, INITIAL_EPOCH),
            vec![(key("t", 0), at(0))],
            &[]
        ),
        FetchContext::Sessionless {
            partitions: vec![(key("t", 0), at(0))]
        }
    );
}

#[test]
fn no_session_is_opened_for_an_empty_fetch() {
    let mut cache = FetchSessionCache::new(1, 0, 1);
    assert_eq!(cache.open(0, 1, false, vec![]), INVALID_SESSION_ID);
}

fn open_sized(cache: &mut FetchSessionCache, now_ms: u64, random: u64, size: i32) -> i32 {
    let answered = (0..size)
        .map(|p| (key("t", p), at(0), answer(0, false)))
        .collect();
    cache.open(now_ms, random, false, answered)
}

#[test]
fn a_full_cache_evicts_a_stale_session_first_then_a_smaller_one() {
    // Table: (sizes of the two cached sessions, when the first was last used,
    // size of the new one) → which cached session goes (None: the new one
    // gets no session).
    type Row = ((i32, i32), u64, i32, Option<usize>);
    let rows: [Row; 4] = [
        ((5, 5), 0, 1, Some(0)),   // the first is stale
        ((5, 2), 100, 3, Some(1)), // none stale: the smaller, if smaller than the new one
        ((5, 3), 100, 3, None),    // none stale, none smaller
        ((2, 2), 100, 3, Some(0)), // equal sizes: the least recently used
    ];
    for (row, ((first, second), first_used_ms, size, evicted)) in rows.into_iter().enumerate() {
        let mut cache = FetchSessionCache::new(2, 0, 1);
        // Stale: used at 0; not stale: used at 100 or 150.
        let now_ms = SESSION_EVICTION_MS + 50;
        let ids = [
            open_sized(&mut cache, first_used_ms, 1, first),
            open_sized(&mut cache, 150, 2, second),
        ];
        let new = open_sized(&mut cache, now_ms, 3, size);
        match evicted {
            Some(gone) => {
                assert_ne!(new, INVALID_SESSION_ID, "row {row}");
                assert!(!cache.sessions.contains_key(&ids[gone]), "row {row}");
                assert!(cache.sessions.contains_key(&ids[1 - gone]), "row {row}");
            }
            None => {
                assert_eq!(new, INVALID_SESSION_ID, "row {row}");
                assert_eq!(cache.len(), 2, "row {row}");
            }
        }
    }
}

#[test]
fn session_ids_are_unique_and_keep_their_shard() {
    let mut cache = FetchSessionCache::new(1_000, 2, 3);
    let mut ids = std::collections::BTreeSet::new();
    for random in 0..500 {
        // The same random value each time: the cache must still find a new id.
        let id = open_sized(&mut cache, 0, if random % 2 == 0 { 7 } else { random }, 1);
        assert!(id > 0 && id % 3 == 2, "{id}");
        assert!(ids.insert(id), "{id} handed out twice");
    }
}

#[test]
fn epochs_wrap_to_one() {
    assert_eq!(next_epoch(INITIAL_EPOCH), 1);
    assert_eq!(next_epoch(41), 42);
    assert_eq!(next_epoch(i32::MAX), 1);
    assert_eq!(next_epoch(FINAL_EPOCH), FINAL_EPOCH);
}

#[test]
fn sessions_are_bounded_in_partitions_each_and_together() {
    let (mut cache, id) = cache_with_session(3);
    cache.session_partitions_max = 4;
    cache.cache_partitions_max = 6;
    // Growing past the per-session bound closes the session, as an eviction.
    assert_eq!(
        cache.context(
            0,
            request(id, 1),
            vec![(key("t", 3), at(0)), (key("t", 4), at(0))],
            &[]
        ),
        FetchContext::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
    );
    assert!(cache.is_empty());
    // A full fetch of more than a session may hold opens none.
    assert_eq!(open_sized(&mut cache, 0, 1, 5), INVALID_SESSION_ID);
    let first = open_sized(&mut cache, 0, 1, 4);
    assert_ne!(first, INVALID_SESSION_ID);
    // Together: 4 + 3 > 6.
    assert_eq!(open_sized(&mut cache, 0, 2, 3), INVALID_SESSION_ID);
    let second = open_sized(&mut cache, 0, 2, 2);
    assert_ne!(second, INVALID_SESSION_ID);
    assert_eq!(
        cache.context(0, request(second, 1), vec![(key("t", 9), at(0))], &[]),
        FetchContext::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND),
        "growing past the cache's bound"
    );
    assert_eq!(cache.len(), 1);
}
