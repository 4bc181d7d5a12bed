//! Partitions shared out among members and moved between them: three
//! members sharing six partitions, a member leaving (one rebalance hands
//! its partitions over), and a static member back within its session
//! timeout (no rebalance at all).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use brook_tests::groups::generation_of;
use brook_tests::raw;
use rdkafka::consumer::Consumer;

use crate::{
    Commit, GroupConsumer, LINGER, Rebalanced, Record, SESSION_TIMEOUT_MS, TIMEOUT, assigned,
    balanced, consumer, create_topic, duplicates, poll_for, poll_until, produce, records_to,
    sharing_the_cores, start_broker,
};

#[test]
fn three_members_share_six_partitions_and_get_every_record_once() {
    const TOPIC: &str = "shared";
    const RECORDS: usize = 3_000;
    let _cores = sharing_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    let members: Vec<GroupConsumer> = (0..3)
        .map(|index| {
            consumer(
                &broker.address,
                "sharing",
                &format!("member-{index}"),
                &[("enable.auto.commit", "true")],
            )
        })
        .collect();
    for member in &members {
        member.subscribe(&[TOPIC]).unwrap();
    }
    let members: Vec<&GroupConsumer> = members.iter().collect();
    let mut log = Vec::new();
    poll_until(
        &members,
        Commit::Never,
        &mut log,
        "two partitions each",
        |_| balanced(&members, 2),
    );
    let assignments: Vec<BTreeSet<i32>> = members.iter().map(|m| assigned(m)).collect();
    eprintln!("assignments {assignments:?}");

    let records: Vec<Record> = (0..RECORDS)
        .map(|index| Record {
            partition: None,
            key: format!("id-{index}"),
            payload: format!("record {index}"),
        })
        .collect();
    let delivered = produce(&broker, TOPIC, &records);
    let used: BTreeSet<i32> = delivered
        .values()
        .map(|(partition, _)| *partition)
        .collect();
    assert_eq!(used.len(), 6, "the keys spread over every partition");
    poll_until(&members, Commit::Never, &mut log, "every record", |log| {
        log.iter().map(|d| &d.key).collect::<BTreeSet<_>>().len() == RECORDS
    });
    poll_for(&members, Commit::Never, &mut log, LINGER);

    assert_eq!(duplicates(&log), [], "no record twice");
    assert_eq!(log.len(), RECORDS);
    for delivery in &log {
        assert_eq!(
            delivered[&delivery.key],
            (delivery.partition, delivery.offset),
            "{delivery:?} is where it was acknowledged"
        );
        assert!(
            assignments[delivery.member].contains(&delivery.partition),
            "{delivery:?} came to the member that owns its partition"
        );
    }
    let now: Vec<BTreeSet<i32>> = members.iter().map(|m| assigned(m)).collect();
    assert_eq!(now, assignments, "no rebalance while consuming");
}

#[test]
fn a_member_that_leaves_hands_its_partitions_over_in_one_rebalance() {
    const TOPIC: &str = "handed-over";
    const EACH: usize = 50;
    let _cores = sharing_the_cores();
    let partitions: Vec<i32> = (0..6).collect();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    let make = |name: &str| consumer(&broker.address, "leaving", name, &[]);
    let (first, second, leaving) = (make("first"), make("second"), make("leaving"));
    for member in [&first, &second, &leaving] {
        member.subscribe(&[TOPIC]).unwrap();
    }
    let mut log = Vec::new();
    let leaving_partitions = {
        let all = [&first, &second, &leaving];
        poll_until(
            &all,
            Commit::EachRecord,
            &mut log,
            "two partitions each",
            |_| balanced(&all, 2),
        );
        produce(&broker, TOPIC, &records_to(&partitions, EACH, "before"));
        poll_until(
            &all,
            Commit::EachRecord,
            &mut log,
            "the first records",
            |log| log.len() >= EACH * partitions.len(),
        );
        assigned(&leaving)
    };
    let seen_before = [first.context().seen().len(), second.context().seen().len()];

    // Unsubscribe and close: librdkafka sends LeaveGroup.
    leaving.unsubscribe();
    drop(leaving);
    let left = Instant::now();
    let remaining = [&first, &second];
    poll_until(
        &remaining,
        Commit::EachRecord,
        &mut log,
        "three partitions each",
        |_| balanced(&remaining, 3),
    );
    eprintln!(
        "the two took over all six partitions {:?} after the leave",
        left.elapsed()
    );
    poll_for(&remaining, Commit::EachRecord, &mut log, LINGER);
    for (index, member) in remaining.iter().enumerate() {
        let events = member.context().seen()[seen_before[index]..].to_vec();
        assert!(
            matches!(
                events.as_slice(),
                [Rebalanced::Revoked(old), Rebalanced::Assigned(new)]
                    if old.len() == 2 && *new == assigned(member)
            ),
            "member {index}: one rebalance (revoke two, assign three), saw {events:?}"
        );
    }

    // The leaver's partitions resume after its last commit: nothing twice.
    produce(&broker, TOPIC, &records_to(&partitions, EACH, "after"));
    poll_until(
        &remaining,
        Commit::EachRecord,
        &mut log,
        "the later records",
        |log| {
            log.iter()
                .filter(|d| d.payload.starts_with("after"))
                .count()
                >= EACH * partitions.len()
        },
    );
    poll_for(&remaining, Commit::EachRecord, &mut log, LINGER);
    assert_eq!(duplicates(&log), [], "no record twice");
    assert_eq!(log.len(), 2 * EACH * partitions.len());
    for partition in leaving_partitions {
        let first_after = log
            .iter()
            .find(|d| d.partition == partition && d.payload.starts_with("after"))
            .unwrap();
        assert_eq!(first_after.offset, EACH as i64, "{first_after:?}");
    }
}

/// client id → (member id, assignment) as DescribeGroups shows them, and
/// the group's state.
fn describe(member: &GroupConsumer, group: &str) -> (String, BTreeMap<String, (String, Vec<u8>)>) {
    let list = member
        .fetch_group_list(Some(group), TIMEOUT)
        .expect("DescribeGroups");
    assert_eq!(list.groups().len(), 1);
    let described = &list.groups()[0];
    let members = described
        .members()
        .iter()
        .map(|member| {
            (
                member.client_id().to_owned(),
                (
                    member.id().to_owned(),
                    member.assignment().unwrap_or_default().to_vec(),
                ),
            )
        })
        .collect();
    (described.state().to_owned(), members)
}

#[test]
fn a_static_member_back_within_its_session_timeout_keeps_its_partitions_without_a_rebalance() {
    const TOPIC: &str = "static";
    const GROUP: &str = "static-members";
    let _cores = sharing_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    // The other member joins first, so it leads and the static one follows.
    let other = consumer(&broker.address, GROUP, "other", &[]);
    other.subscribe(&[TOPIC]).unwrap();
    let mut log = Vec::new();
    poll_until(
        &[&other],
        Commit::Never,
        &mut log,
        "the first member has all six",
        |_| assigned(&other).len() == 6,
    );
    let static_settings = [("group.instance.id", "static-1")];
    let before = consumer(&broker.address, GROUP, "static", &static_settings);
    before.subscribe(&[TOPIC]).unwrap();
    poll_until(
        &[&other, &before],
        Commit::Never,
        &mut log,
        "three partitions each",
        |_| balanced(&[&other, &before], 3),
    );
    let (other_partitions, static_partitions) = (assigned(&other), assigned(&before));
    let (state, members_before) = describe(&other, GROUP);
    assert_eq!(state, "Stable");
    let other_member_id = members_before["other"].0.clone();
    let generation_before = generation_of(&mut raw::connect(&broker), GROUP, &other_member_id);
    let seen_before = other.context().seen().len();

    // A static member's close sends no LeaveGroup (KIP-345), so the group
    // keeps its place until session.timeout.ms.
    let closed = Instant::now();
    drop(before);
    let after = consumer(&broker.address, GROUP, "static", &static_settings);
    after.subscribe(&[TOPIC]).unwrap();
    poll_until(
        &[&other, &after],
        Commit::Never,
        &mut log,
        "the static member back",
        |_| !assigned(&after).is_empty(),
    );
    let back_after = closed.elapsed();
    // Back within session.timeout.ms is shown by what did not happen (no
    // timed assertion): the group kept its generation and the other member
    // saw no rebalance, which the member's expiry would have caused.
    eprintln!(
        "the static member had its partitions again {back_after:?} after closing \
         (session.timeout.ms {SESSION_TIMEOUT_MS})"
    );
    poll_for(&[&other, &after], Commit::Never, &mut log, LINGER);

    assert_eq!(
        assigned(&after),
        static_partitions,
        "the same partitions back"
    );
    assert_eq!(assigned(&other), other_partitions);
    assert_eq!(
        other.context().seen()[seen_before..],
        [],
        "no rebalance for the other member"
    );
    assert_eq!(
        generation_of(&mut raw::connect(&broker), GROUP, &other_member_id),
        generation_before,
        "the same generation"
    );
    let (state, members_after) = describe(&other, GROUP);
    assert_eq!(state, "Stable");
    assert_eq!(
        members_after.keys().collect::<Vec<_>>(),
        ["other", "static"],
        "{members_after:?}"
    );
    assert_eq!(members_after["other"], members_before["other"]);
    assert_eq!(
        members_after["static"].1, members_before["static"].1,
        "the static member's stored assignment"
    );
}
