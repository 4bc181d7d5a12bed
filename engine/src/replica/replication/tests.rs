use super::*;

const LAG_MS: u64 = 30_000;
const A: BrokerId = BrokerId(1);
const B: BrokerId = BrokerId(2);
const C: BrokerId = BrokerId(3);

fn registration(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    leader: BrokerId,
    leader_epoch: i32,
    partition_epoch: i32,
) -> PartitionRegistration {
    PartitionRegistration {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: LeaderEpoch(leader_epoch),
        partition_epoch,
    }
}

fn settings(local: BrokerId, min_insync_replicas: u32) -> ReplicationSettings {
    ReplicationSettings {
        local,
        min_insync_replicas,
        replica_lag_time_max_ms: LAG_MS,
    }
}

/// A leads `replicas`, all in sync, on an empty log.
fn leader(replicas: &[BrokerId], min_insync_replicas: u32) -> PartitionReplication {
    PartitionReplication::new(
        settings(A, min_insync_replicas),
        registration(replicas, replicas, A, 0, 0),
        Offset(0),
        Offset(0),
        Offset(0),
        0,
    )
}

fn fetch(replica: BrokerId, offset: i64, now_ms: u64) -> FollowerFetch {
    FollowerFetch {
        replica,
        fetch_offset: Offset(offset),
        log_start_offset: Offset(0),
        eligible: true,
        now_ms,
    }
}

/// The leader appends up to `end` and has it durably.
fn append(replication: &mut PartitionReplication, end: i64, now_ms: u64) -> Vec<Action> {
    replication.appended(Offset(end));
    replication.counted(Offset(end), now_ms)
}

fn advanced(offset: i64) -> Vec<Action> {
    vec![Action::HighWatermarkAdvanced(Offset(offset))]
}

/// The seeds' walk-through (RF 2): the leader's HW moves only when the
/// follower's next fetch reports what it copied, and the follower's HW one
/// fetch answer later — Kafka's two rounds.
#[test]
fn the_high_watermark_follows_the_followers_fetch_offsets_as_in_the_seeds() {
    let mut a = leader(&[A, B], 1);
    let mut b = PartitionReplication::new(
        settings(B, 1),
        registration(&[A, B], &[A, B], A, 0, 0),
        Offset(0),
        Offset(0),
        Offset(0),
        0,
    );
    // Produce m0: leader LEO 1, remote LEO 0, HW 0.
    assert_eq!(append(&mut a, 1, 10), Vec::new());
    assert_eq!(a.high_watermark(), Offset(0));
    // B's first fetch (offset 0) copies m0: remote LEO still 0.
    assert_eq!(a.follower_fetched(fetch(B, 0, 11)), Ok(Vec::new()));
    b.appended(Offset(1));
    assert_eq!(b.counted(Offset(1), 11), Vec::new());
    assert_eq!(b.leader_high_watermark_is(a.high_watermark()), Vec::new());
    assert_eq!(b.high_watermark(), Offset(0), "min(leader HW 0, LEO 1)");
    // B's second fetch (offset 1): the leader's HW moves to 1 ...
    assert_eq!(a.follower_fetched(fetch(B, 1, 12)), Ok(advanced(1)));
    // ... and B learns it from that fetch's answer.
    assert_eq!(b.leader_high_watermark_is(a.high_watermark()), advanced(1));
    assert_eq!(b.high_watermark(), Offset(1));
}

#[test]
fn the_high_watermark_never_passes_what_the_leader_counts_nor_goes_back() {
    let mut a = leader(&[A, B, C], 2);
    a.appended(Offset(5));
    assert_eq!(a.counted(Offset(3), 1), Vec::new(), "followers hold it");
    a.follower_fetched(fetch(B, 5, 2)).unwrap();
    assert_eq!(a.follower_fetched(fetch(C, 5, 2)), Ok(advanced(3)));
    assert_eq!(a.counted(Offset(5), 3), advanced(5));
    // A follower reporting less (it truncated) never takes the HW back.
    assert_eq!(a.follower_fetched(fetch(B, 4, 4)), Ok(Vec::new()));
    assert_eq!(a.high_watermark(), Offset(5));
}

#[test]
fn a_follower_counts_only_what_it_holds_and_its_hw_never_goes_back() {
    let mut b = PartitionReplication::new(
        settings(B, 1),
        registration(&[A, B], &[A, B], A, 0, 0),
        Offset(0),
        Offset(0),
        Offset(0),
        0,
    );
    b.appended(Offset(8));
    assert_eq!(
        b.leader_high_watermark_is(Offset(6)),
        Vec::new(),
        "nothing durable"
    );
    assert_eq!(b.counted(Offset(4), 1), advanced(4));
    assert_eq!(b.counted(Offset(8), 2), advanced(6));
    // A new leader with a lower HW (it had not heard the old one's yet).
    assert_eq!(b.leader_high_watermark_is(Offset(2)), Vec::new());
    assert_eq!(b.high_watermark(), Offset(6));
}

#[test]
fn acks_all_needs_min_insync_replicas_before_and_after_the_append() {
    let mut a = leader(&[A, B, C], 2);
    assert_eq!(a.check_produce(true), Ok(()));
    append(&mut a, 4, 1);
    assert_eq!(a.ack_progress(Offset(4)), AckProgress::Waiting);
    a.follower_fetched(fetch(B, 4, 2)).unwrap();
    a.follower_fetched(fetch(C, 4, 2)).unwrap();
    assert_eq!(
        a.ack_progress(Offset(4)),
        AckProgress::Done(ErrorCode::NONE)
    );

    // The controller takes B and C out of the ISR: the HW stops (KIP-966)
    // even though the leader alone has more, acks=all is refused before
    // the append, and a produce already appended learns it at once.
    append(&mut a, 6, 3);
    let shrunk = registration(&[A, B, C], &[A], A, 0, 1);
    assert_eq!(a.apply_registration(shrunk, 4), Vec::new());
    assert_eq!(a.high_watermark(), Offset(4));
    assert_eq!(a.check_produce(true), Err(ErrorCode::NOT_ENOUGH_REPLICAS));
    assert_eq!(a.check_produce(false), Ok(()), "acks=1 still works");
    assert_eq!(
        a.ack_progress(Offset(6)),
        AckProgress::Done(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    );
    // With B back the HW may move again, but C, caught up within the lag,
    // holds it until it has the records too (Kafka waits for a replica
    // that may rejoin, so it can).
    let grown = registration(&[A, B, C], &[A, B], A, 0, 2);
    assert_eq!(a.apply_registration(grown, 5), Vec::new());
    assert_eq!(a.follower_fetched(fetch(B, 6, 6)), Ok(Vec::new()));
    let actions = a.follower_fetched(fetch(C, 6, 7)).unwrap();
    assert!(
        matches!(&actions[..], [Action::ProposeIsr(p), Action::HighWatermarkAdvanced(Offset(6))] if p.isr == vec![A, B, C]),
        "{actions:?}"
    );
}

#[test]
fn min_insync_replicas_is_capped_at_the_replica_count_as_in_kafka() {
    let mut alone = leader(&[A], 2);
    assert_eq!(alone.check_produce(true), Ok(()));
    assert_eq!(append(&mut alone, 3, 1), advanced(3));
}

#[test]
fn a_follower_that_stops_fetching_is_proposed_out_after_the_lag() {
    let mut a = leader(&[A, B, C], 2);
    append(&mut a, 2, 0);
    a.follower_fetched(fetch(B, 2, 100)).unwrap();
    // C never fetches. Within the lag nothing changes.
    assert_eq!(a.tick(LAG_MS), Vec::new());
    let proposal = IsrProposal {
        isr: vec![A, B],
        leader_epoch: LeaderEpoch(0),
        partition_epoch: 0,
    };
    // B fetched at 100 and was at the end then; C's grace from the
    // election (at 0) ran out.
    assert_eq!(
        a.tick(LAG_MS + 1),
        vec![Action::ProposeIsr(proposal.clone())]
    );
    assert_eq!(a.in_flight(), Some(&proposal));
    // One change at a time, and the HW waits for C until it is committed.
    assert_eq!(a.tick(LAG_MS + 200), Vec::new());
    assert_eq!(a.high_watermark(), Offset(0));
    let committed = registration(&[A, B, C], &[A, B], A, 0, 1);
    assert_eq!(a.apply_registration(committed, LAG_MS + 300), advanced(2));
    assert_eq!(a.in_flight(), None);
}

#[test]
fn a_follower_that_fetches_but_never_catches_up_is_proposed_out() {
    let mut a = leader(&[A, B], 1);
    // The leader keeps appending; B always fetches one batch behind.
    for step in 1..=40u64 {
        let now = step * 1_000;
        append(&mut a, step as i64 * 10, now);
        a.follower_fetched(fetch(B, step as i64 * 10 - 5, now))
            .unwrap();
    }
    // B reached where the leader ended at its previous fetch each time,
    // which counts as caught up then (Kafka's lastFetchLeaderLogEndOffset
    // rule): it stays.
    assert_eq!(a.tick(41_000), Vec::new());
    // Now it falls further behind and stops reaching even that.
    for step in 41..=75u64 {
        let now = step * 1_000;
        append(&mut a, step as i64 * 10, now);
        a.follower_fetched(fetch(B, 395, now)).unwrap();
    }
    let actions = a.tick(75_000);
    assert!(
        matches!(&actions[..], [Action::ProposeIsr(proposal)] if proposal.isr == vec![A]),
        "{actions:?}"
    );
}

/// A leads [A, B] at epochs 3 / 7 with only itself in the ISR, its log and
/// HW at 10.
fn a_alone_in_the_isr() -> PartitionReplication {
    PartitionReplication::new(
        settings(A, 1),
        registration(&[A, B], &[A], A, 3, 7),
        Offset(10),
        Offset(10),
        Offset(10),
        0,
    )
}

#[test]
fn a_caught_up_follower_is_proposed_in_and_counts_while_in_flight() {
    let mut a = a_alone_in_the_isr();
    append(&mut a, 12, 1);
    assert_eq!(a.high_watermark(), Offset(12), "A alone in the ISR");
    // B below the HW does not join.
    assert_eq!(a.follower_fetched(fetch(B, 11, 2)), Ok(Vec::new()));
    // At the HW (and past the epoch's start, 10) it does.
    let proposal = IsrProposal {
        isr: vec![A, B],
        leader_epoch: LeaderEpoch(3),
        partition_epoch: 7,
    };
    assert_eq!(
        a.follower_fetched(fetch(B, 12, 3)),
        Ok(vec![Action::ProposeIsr(proposal)])
    );
    // While in flight, B already holds the HW back (the maximal ISR).
    append(&mut a, 15, 4);
    assert_eq!(a.high_watermark(), Offset(12));
    assert_eq!(a.follower_fetched(fetch(B, 15, 5)), Ok(advanced(15)));
}

#[test]
fn a_broker_the_image_rules_out_does_not_join() {
    let mut a = PartitionReplication::new(
        settings(A, 1),
        registration(&[A, B], &[A], A, 0, 0),
        Offset(0),
        Offset(0),
        Offset(0),
        0,
    );
    append(&mut a, 3, 1);
    let fenced = FollowerFetch {
        eligible: false,
        ..fetch(B, 3, 2)
    };
    assert_eq!(a.follower_fetched(fenced), Ok(Vec::new()));
    assert_eq!(a.in_flight(), None);
}

/// The controller fences C (its session expired) and takes it out of the
/// ISR: C, caught up a moment ago, stops holding the HW back at once, not
/// after the lag; once it fetches again as an active broker it counts.
#[test]
fn a_fenced_follower_out_of_the_isr_does_not_hold_the_hw() {
    let mut a = leader(&[A, B, C], 2);
    append(&mut a, 2, 0);
    a.follower_fetched(fetch(B, 2, 10)).unwrap();
    assert_eq!(a.follower_fetched(fetch(C, 2, 10)), Ok(advanced(2)));
    append(&mut a, 5, 20);
    assert_eq!(a.follower_fetched(fetch(B, 5, 30)), Ok(Vec::new()));
    let fenced = registration(&[A, B, C], &[A, B], A, 0, 1);
    // Out of the ISR but caught up within the lag, C still holds it...
    assert_eq!(a.apply_registration(fenced, 40), Vec::new());
    // ...until the image says it is fenced.
    assert_eq!(a.rule_out_inactive(|broker| broker != C, 41), advanced(5));
    // An active C fetching again counts once more.
    append(&mut a, 7, 50);
    a.follower_fetched(fetch(C, 5, 60)).unwrap();
    assert_eq!(a.follower_fetched(fetch(B, 7, 61)), Ok(Vec::new()));
    assert_eq!(a.high_watermark(), Offset(5));
}

/// B's log directory failed after its last fetch, which found it caught
/// up: the controller took B out of the ISR; A asks to add it back and the
/// controller refuses (INELIGIBLE_REPLICA, KIP-858). B stops holding the
/// HW back at once, not after the lag; another refusal leaves it be.
#[test]
fn a_member_the_controller_refuses_as_ineligible_stops_holding_the_hw() {
    let mut a = a_alone_in_the_isr();
    let proposal = IsrProposal {
        isr: vec![A, B],
        leader_epoch: LeaderEpoch(3),
        partition_epoch: 7,
    };
    assert_eq!(
        a.follower_fetched(fetch(B, 10, 1)),
        Ok(vec![Action::ProposeIsr(proposal)])
    );
    append(&mut a, 15, 2);
    assert_eq!(a.high_watermark(), Offset(10), "B, in flight, holds it");
    // Lost or refused otherwise, B (caught up within the lag) still holds it.
    assert_eq!(a.proposal_failed(ErrorCode::NONE, 3), Vec::new());
    assert_eq!(a.tick(4), Vec::new());
    assert_eq!(a.high_watermark(), Offset(10));
    // Ineligible: B stops holding it.
    a.follower_fetched(fetch(B, 10, 5)).unwrap();
    assert_eq!(
        a.proposal_failed(ErrorCode::INELIGIBLE_REPLICA, 6),
        advanced(15)
    );
    assert_eq!(
        a.proposal_failed(ErrorCode::INELIGIBLE_REPLICA, 7),
        Vec::new()
    );
}

/// B follows A at epoch 0 (all three in sync) with 9 records, HW 5.
fn b_following_a() -> PartitionReplication {
    PartitionReplication::new(
        settings(B, 2),
        registration(&[A, B, C], &[A, B, C], A, 0, 0),
        Offset(9),
        Offset(9),
        Offset(5),
        0,
    )
}

#[test]
fn a_new_leader_waits_for_its_isr_to_fetch_before_moving_the_hw() {
    // B was a follower with 9 records, HW 5, and is elected at epoch 1.
    let mut b = b_following_a();
    assert_eq!(b.role(), Role::Follower);
    let elected = registration(&[A, B, C], &[B, C], B, 1, 1);
    assert_eq!(b.apply_registration(elected, 10), Vec::new());
    assert_eq!(b.role(), Role::Leader);
    assert_eq!(b.high_watermark(), Offset(5));
    // A is out of the ISR and silent: it does not hold the HW back.
    assert_eq!(b.follower_fetched(fetch(C, 9, 11)), Ok(advanced(9)));
    // A may join once it reaches the HW and the epoch's start (9).
    let actions = b.follower_fetched(fetch(A, 9, 12)).unwrap();
    assert!(matches!(&actions[..], [Action::ProposeIsr(p)] if p.isr == vec![B, C, A]));
}

#[test]
fn a_new_leader_refuses_the_latest_offset_until_its_hw_reaches_its_epoch_start() {
    // B follows with 9 records, HW 5: as a follower it answers its HW.
    let mut b = b_following_a();
    assert!(!b.high_watermark_behind_epoch_start());
    // Elected at epoch 1, its epoch starts at 9: records up to 9 may have
    // been acknowledged by A, and a HW of 5 would hide them (KIP-207).
    let elected = registration(&[A, B, C], &[B, C], B, 1, 1);
    b.apply_registration(elected, 10);
    assert!(b.high_watermark_behind_epoch_start());
    assert_eq!(b.follower_fetched(fetch(C, 8, 11)), Ok(advanced(8)));
    assert!(b.high_watermark_behind_epoch_start());
    assert_eq!(b.follower_fetched(fetch(C, 9, 12)), Ok(advanced(9)));
    assert!(!b.high_watermark_behind_epoch_start());
}

#[test]
fn fetches_and_registrations_the_replica_must_refuse() {
    let mut a = leader(&[A, B], 1);
    append(&mut a, 2, 0);
    assert_eq!(
        a.follower_fetched(fetch(C, 0, 1)),
        Err(ErrorCode::UNKNOWN_LEADER_EPOCH),
        "not a replica"
    );
    assert_eq!(
        a.follower_fetched(fetch(B, 3, 1)),
        Err(ErrorCode::OFFSET_OUT_OF_RANGE),
        "past the leader's end"
    );
    // An older registration changes nothing.
    let newer = registration(&[A, B], &[A], A, 0, 4);
    a.apply_registration(newer.clone(), 2);
    a.apply_registration(registration(&[A, B], &[A, B], A, 0, 3), 3);
    assert_eq!(a.registration(), &newer);
    // Led elsewhere now.
    a.apply_registration(registration(&[A, B], &[B], B, 1, 5), 4);
    assert_eq!(a.role(), Role::Follower);
    assert_eq!(
        a.follower_fetched(fetch(B, 0, 5)),
        Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    );
    assert_eq!(
        a.check_produce(false),
        Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    );
    assert_eq!(
        a.ack_progress(Offset(1)),
        AckProgress::Done(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    );
}

#[test]
fn a_refused_proposal_may_be_made_again() {
    let mut a = leader(&[A, B], 1);
    assert!(!a.tick(LAG_MS + 1).is_empty());
    assert_eq!(a.tick(LAG_MS + 2), Vec::new());
    assert_eq!(a.proposal_failed(ErrorCode::NONE, LAG_MS + 2), Vec::new());
    assert!(matches!(&a.tick(LAG_MS + 3)[..], [Action::ProposeIsr(_)]));
}

#[test]
fn a_follower_takes_only_answers_to_what_it_still_asks() {
    // B follows A at epoch 0 with 9 records, and asked A from 9.
    let mut b = b_following_a();
    let asked = FetchAsked {
        leader: A,
        leader_epoch: LeaderEpoch(0),
        fetch_offset: Offset(9),
    };
    assert!(b.takes_answer(&asked, Offset(9)));
    // The log moved while the fetch ran (another fetcher appended or cut).
    assert!(!b.takes_answer(&asked, Offset(12)));
    assert!(!b.takes_answer(&asked, Offset(7)));
    // A new epoch of the same leader, then another leader.
    b.apply_registration(registration(&[A, B, C], &[A, B, C], A, 1, 1), 1);
    assert!(!b.takes_answer(&asked, Offset(9)));
    b.apply_registration(registration(&[A, B, C], &[B, C], C, 2, 2), 2);
    let asked_c = FetchAsked {
        leader: C,
        leader_epoch: LeaderEpoch(2),
        ..asked
    };
    assert!(b.takes_answer(&asked_c, Offset(9)));
    assert!(!b.takes_answer(
        &FetchAsked {
            leader: A,
            ..asked_c
        },
        Offset(9)
    ));
    // Elected itself: it fetches from nobody.
    b.apply_registration(registration(&[A, B, C], &[B, C], B, 3, 3), 3);
    let asked_self = FetchAsked {
        leader: B,
        leader_epoch: LeaderEpoch(3),
        ..asked
    };
    assert!(!b.takes_answer(&asked_self, Offset(9)));
}

#[test]
fn a_followers_fetcher_lag_is_the_leaders_hw_past_its_log_end() {
    let mut b = b_following_a();
    let end = b.log_end_offset().0;
    b.leader_high_watermark_is(Offset(end + 5));
    assert_eq!(b.fetcher_lag(), Some(5));
    // Past the leader's HW (its log runs ahead of the HW): no lag.
    b.appended(Offset(end + 9));
    assert_eq!(b.fetcher_lag(), Some(0));
    assert_eq!(leader(&[A, B], 1).fetcher_lag(), None);
}

/// DeleteRecords' low watermark: the lowest log start of the leader and of
/// every follower that may lead; one that never said blocks it, a fenced
/// one does not.
#[test]
fn the_low_watermark_is_the_lowest_log_start_of_the_live_replicas() {
    let mut a = leader(&[A, B, C], 1);
    append(&mut a, 10, 1);
    assert_eq!(a.low_watermark(Offset(4)), Some(Offset(-1)), "none fetched");
    let from = |replica, log_start, eligible| FollowerFetch {
        log_start_offset: Offset(log_start),
        eligible,
        ..fetch(replica, 10, 2)
    };
    a.follower_fetched(from(B, 4, true)).unwrap();
    a.follower_fetched(from(C, 2, true)).unwrap();
    assert_eq!(a.low_watermark(Offset(4)), Some(Offset(2)));
    a.follower_fetched(from(C, 4, true)).unwrap();
    assert_eq!(a.low_watermark(Offset(4)), Some(Offset(4)));
    a.follower_fetched(from(C, 0, false)).unwrap();
    assert_eq!(a.low_watermark(Offset(6)), Some(Offset(4)), "C is fenced");
    let b = PartitionReplication::new(
        settings(B, 1),
        registration(&[A, B, C], &[A, B, C], A, 0, 0),
        Offset(0),
        Offset(0),
        Offset(0),
        0,
    );
    assert_eq!(b.low_watermark(Offset(0)), None, "a follower has none");
}

/// What a leader tells the replica selector of its followers: where each
/// last fetched from, its log start and when it last caught up; nothing
/// before a fetch, and nothing once it no longer leads.
#[test]
fn follower_positions_are_what_the_followers_last_reported() {
    let mut a = leader(&[A, B, C], 1);
    assert_eq!(append(&mut a, 10, 5), Vec::new());
    let unfetched: Vec<FollowerPosition> = a.follower_positions().collect();
    assert_eq!(unfetched.len(), 2);
    assert!(
        unfetched
            .iter()
            .all(|position| position.log_end_offset.is_none() && position.in_isr)
    );
    a.follower_fetched(fetch(B, 10, 20)).unwrap();
    a.follower_fetched(fetch(C, 4, 21)).unwrap();
    let positions: Vec<FollowerPosition> = a.follower_positions().collect();
    assert_eq!(
        positions,
        vec![
            FollowerPosition {
                broker: B,
                in_isr: true,
                log_end_offset: Some(Offset(10)),
                log_start_offset: Some(Offset(0)),
                last_caught_up_ms: 20,
            },
            FollowerPosition {
                broker: C,
                in_isr: true,
                log_end_offset: Some(Offset(4)),
                log_start_offset: Some(Offset(0)),
                // In the ISR from the start: caught up when A began leading.
                last_caught_up_ms: 0,
            },
        ]
    );
    a.apply_registration(registration(&[A, B, C], &[A, B, C], B, 1, 1), 30);
    assert_eq!(a.follower_positions().count(), 0, "a follower now");
}
