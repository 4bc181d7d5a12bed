//! The assignors against worked examples (the seeds' §3.2.4 and Kafka's own
//! docs) and against properties over random groups.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::input::GroupInput;
use super::*;

/// Parses "t0p1" as topic "t0", partition 1.
fn partition(name: &str) -> TopicPartition {
    let split = name.rfind('p').expect("names look like t0p1");
    TopicPartition::new(&name[..split], name[split + 1..].parse().expect("a number"))
}

fn partitions(names: &[&str]) -> Vec<TopicPartition> {
    names.iter().map(|name| partition(name)).collect()
}

fn topics(counts: &[(&str, i32)]) -> BTreeMap<String, i32> {
    counts
        .iter()
        .map(|&(topic, count)| (topic.to_owned(), count))
        .collect()
}

/// A member of an eager sticky group that had `previous` in `generation`.
fn sticky_member(id: &str, topics: &[&str], previous: &[&str], generation: i32) -> Subscription {
    let user_data = encode_sticky_user_data(&StickyUserData {
        partitions: partitions(previous),
        generation: Some(generation),
    })
    .unwrap();
    Subscription::new(id, topics.iter().copied()).with_user_data(user_data)
}

/// A member of a cooperative group that owns `owned` in `generation`.
fn cooperative_member(id: &str, topics: &[&str], owned: &[&str], generation: i32) -> Subscription {
    Subscription::new(id, topics.iter().copied())
        .with_owned_partitions(partitions(owned))
        .with_generation(generation)
}

fn expected(rows: &[(&str, &[&str])]) -> Assignment {
    rows.iter()
        .map(|&(member, names)| (member.to_owned(), partitions(names)))
        .collect()
}

fn as_sets(assignment: &Assignment) -> BTreeMap<String, BTreeSet<TopicPartition>> {
    assignment
        .iter()
        .map(|(member, list)| (member.clone(), list.iter().cloned().collect()))
        .collect()
}

struct Case {
    name: &'static str,
    assignor: Assignor,
    topics: &'static [(&'static str, i32)],
    members: Vec<Subscription>,
    expected: Assignment,
}

fn check(cases: Vec<Case>, compare_as_sets: bool) {
    for case in cases {
        let actual = case.assignor.assign(&topics(case.topics), &case.members);
        if compare_as_sets {
            assert_eq!(as_sets(&actual), as_sets(&case.expected), "{}", case.name);
        } else {
            assert_eq!(actual, case.expected, "{}", case.name);
        }
    }
}

const TWO_TOPICS_OF_FOUR: &[(&str, i32)] = &[("t0", 4), ("t1", 4)];
const TWO_TOPICS_OF_THREE: &[(&str, i32)] = &[("t0", 3), ("t1", 3)];
const FOUR_TOPICS_OF_TWO: &[(&str, i32)] = &[("t0", 2), ("t1", 2), ("t2", 2), ("t3", 2)];
const ONE_TWO_THREE: &[(&str, i32)] = &[("t0", 1), ("t1", 2), ("t2", 3)];
const ALL_FOUR: &[&str] = &["t0", "t1", "t2", "t3"];

fn plain(id: &str, topics: &[&str]) -> Subscription {
    Subscription::new(id, topics.iter().copied())
}

/// The seeds' §3.2.4 and the Kafka docs' examples for range and round robin,
/// with results in Kafka's list order.
#[test]
fn range_and_round_robin_worked_examples() {
    let cases = vec![
        Case {
            name: "range: C0, C1 on two topics of 4",
            assignor: Assignor::Range,
            topics: TWO_TOPICS_OF_FOUR,
            members: vec![plain("C0", &["t0", "t1"]), plain("C1", &["t0", "t1"])],
            expected: expected(&[
                ("C0", &["t0p0", "t0p1", "t1p0", "t1p1"]),
                ("C1", &["t0p2", "t0p3", "t1p2", "t1p3"]),
            ]),
        },
        Case {
            name: "range: C0, C1 on two topics of 3 (C0 gets the extra of each)",
            assignor: Assignor::Range,
            topics: TWO_TOPICS_OF_THREE,
            members: vec![plain("C0", &["t0", "t1"]), plain("C1", &["t0", "t1"])],
            expected: expected(&[
                ("C0", &["t0p0", "t0p1", "t1p0", "t1p1"]),
                ("C1", &["t0p2", "t1p2"]),
            ]),
        },
        Case {
            name: "range: static members order by group.instance.id, not member id",
            assignor: Assignor::Range,
            topics: TWO_TOPICS_OF_THREE,
            members: vec![
                plain("C3", &["t0", "t1"]).with_group_instance_id("I0"),
                plain("C2", &["t0", "t1"]).with_group_instance_id("I1"),
            ],
            expected: expected(&[
                ("C3", &["t0p0", "t0p1", "t1p0", "t1p1"]),
                ("C2", &["t0p2", "t1p2"]),
            ]),
        },
        Case {
            name: "roundrobin: C0, C1 on two topics of 3",
            assignor: Assignor::RoundRobin,
            topics: TWO_TOPICS_OF_THREE,
            members: vec![plain("C0", &["t0", "t1"]), plain("C1", &["t0", "t1"])],
            expected: expected(&[
                ("C0", &["t0p0", "t0p2", "t1p1"]),
                ("C1", &["t0p1", "t1p0", "t1p2"]),
            ]),
        },
        Case {
            name: "roundrobin: unequal subscriptions skip members",
            assignor: Assignor::RoundRobin,
            topics: ONE_TWO_THREE,
            members: vec![
                plain("C0", &["t0"]),
                plain("C1", &["t0", "t1"]),
                plain("C2", &["t0", "t1", "t2"]),
            ],
            expected: expected(&[
                ("C0", &["t0p0"]),
                ("C1", &["t1p0"]),
                ("C2", &["t1p1", "t2p0", "t2p1", "t2p2"]),
            ]),
        },
        Case {
            name: "roundrobin: unequal subscriptions, C0 left",
            assignor: Assignor::RoundRobin,
            topics: ONE_TWO_THREE,
            members: vec![plain("C1", &["t0", "t1"]), plain("C2", &["t0", "t1", "t2"])],
            expected: expected(&[
                ("C1", &["t0p0", "t1p1"]),
                ("C2", &["t1p0", "t2p0", "t2p1", "t2p2"]),
            ]),
        },
        Case {
            name: "roundrobin: three members on four topics of 2",
            assignor: Assignor::RoundRobin,
            topics: FOUR_TOPICS_OF_TWO,
            members: vec![
                plain("C0", ALL_FOUR),
                plain("C1", ALL_FOUR),
                plain("C2", ALL_FOUR),
            ],
            expected: expected(&[
                ("C0", &["t0p0", "t1p1", "t3p0"]),
                ("C1", &["t0p1", "t2p0", "t3p1"]),
                ("C2", &["t1p0", "t2p1"]),
            ]),
        },
        Case {
            name: "roundrobin: C1 left, everything is dealt again",
            assignor: Assignor::RoundRobin,
            topics: FOUR_TOPICS_OF_TWO,
            members: vec![plain("C0", ALL_FOUR), plain("C2", ALL_FOUR)],
            expected: expected(&[
                ("C0", &["t0p0", "t1p0", "t2p0", "t3p0"]),
                ("C2", &["t0p1", "t1p1", "t2p1", "t3p1"]),
            ]),
        },
    ];
    check(cases, false);
}

/// The seeds' §3.2.4 sticky examples, for both sticky assignors (eager members
/// carry their previous assignment in user data, cooperative ones as owned
/// partitions).
#[test]
fn sticky_worked_examples() {
    type Member = fn(&str, &[&str], &[&str], i32) -> Subscription;
    let kinds: [(Assignor, Member); 2] = [
        (Assignor::Sticky, sticky_member),
        (Assignor::CooperativeSticky, cooperative_member),
    ];
    for (assignor, member) in kinds {
        let cases = vec![
            Case {
                name: "sticky: three members on four topics of 2, fresh",
                assignor,
                topics: FOUR_TOPICS_OF_TWO,
                members: vec![
                    plain("C0", ALL_FOUR),
                    plain("C1", ALL_FOUR),
                    plain("C2", ALL_FOUR),
                ],
                expected: expected(&[
                    ("C0", &["t0p0", "t1p1", "t3p0"]),
                    ("C1", &["t0p1", "t2p0", "t3p1"]),
                    ("C2", &["t1p0", "t2p1"]),
                ]),
            },
            Case {
                // The seeds (and Kafka's StickyAssignor javadoc) give C0 t2p0
                // and C2 t0p1, t3p1: that is the general algorithm's answer
                // (see `seed_result_is_the_general_algorithm`). Current Kafka
                // runs the quota algorithm for equal subscriptions, which deals
                // C1's partitions round-robin, C0 first. Both keep everything
                // C0 and C2 had and end 4/4.
                name: "sticky: C1 left",
                assignor,
                topics: FOUR_TOPICS_OF_TWO,
                members: vec![
                    member("C0", ALL_FOUR, &["t0p0", "t1p1", "t3p0"], 1),
                    member("C2", ALL_FOUR, &["t1p0", "t2p1"], 1),
                ],
                expected: expected(&[
                    ("C0", &["t0p0", "t1p1", "t3p0", "t0p1"]),
                    ("C2", &["t1p0", "t2p1", "t2p0", "t3p1"]),
                ]),
            },
            Case {
                name: "sticky: unequal subscriptions, fresh",
                assignor,
                topics: ONE_TWO_THREE,
                members: vec![
                    plain("C0", &["t0"]),
                    plain("C1", &["t0", "t1"]),
                    plain("C2", &["t0", "t1", "t2"]),
                ],
                expected: expected(&[
                    ("C0", &["t0p0"]),
                    ("C1", &["t1p0", "t1p1"]),
                    ("C2", &["t2p0", "t2p1", "t2p2"]),
                ]),
            },
            Case {
                name: "sticky: unequal subscriptions, C0 left",
                assignor,
                topics: ONE_TWO_THREE,
                members: vec![
                    member("C1", &["t0", "t1"], &["t1p0", "t1p1"], 1),
                    member("C2", &["t0", "t1", "t2"], &["t2p0", "t2p1", "t2p2"], 1),
                ],
                expected: expected(&[
                    ("C1", &["t1p0", "t1p1", "t0p0"]),
                    ("C2", &["t2p0", "t2p1", "t2p2"]),
                ]),
            },
        ];
        check(cases, true);
    }
}

#[test]
fn seed_result_is_the_general_algorithm() {
    let counts = topics(FOUR_TOPICS_OF_TWO);
    let members = vec![
        sticky_member("C0", ALL_FOUR, &["t0p0", "t1p1", "t3p0"], 1),
        sticky_member("C2", ALL_FOUR, &["t1p0", "t2p1"], 1),
    ];
    let input = GroupInput::new(&counts, &members);
    let per_member = sticky::assign_general(&input, sticky::Protocol::Eager);
    assert_eq!(
        input.assignment(&per_member),
        expected(&[
            ("C0", &["t0p0", "t1p1", "t3p0", "t2p0"]),
            ("C2", &["t1p0", "t2p1", "t0p1", "t3p1"]),
        ])
    );
}

#[test]
fn more_members_than_partitions_leaves_members_empty() {
    let members: Vec<Subscription> = ["C0", "C1", "C2", "C3"]
        .iter()
        .map(|id| plain(id, &["t0"]))
        .collect();
    let want = expected(&[
        ("C0", &["t0p0"]),
        ("C1", &["t0p1"]),
        ("C2", &[]),
        ("C3", &[]),
    ]);
    for assignor in Assignor::ALL {
        let actual = assignor.assign(&topics(&[("t0", 2)]), &members);
        assert_eq!(actual, want, "{}", assignor.name());
    }
}

#[test]
fn unknown_topics_empty_topics_and_no_members() {
    let members = vec![
        plain("C0", &["t0", "missing", "empty"]),
        plain("C1", &["t0"]),
    ];
    let counts = topics(&[("t0", 2), ("empty", 0), ("unsubscribed", 5)]);
    for assignor in Assignor::ALL {
        let actual = assignor.assign(&counts, &members);
        let assigned: BTreeSet<TopicPartition> = actual.values().flatten().cloned().collect();
        assert_eq!(
            assigned,
            partitions(&["t0p0", "t0p1"]).into_iter().collect()
        );
        assert!(assignor.assign(&counts, &[]).is_empty());
    }
}

/// A partition leaving its owner reaches its new owner only in the next
/// rebalance; eager sticky moves it at once.
#[test]
fn cooperative_sticky_holds_back_moving_partitions() {
    let counts = topics(&[("t0", 4)]);
    let joined = vec![
        cooperative_member("C0", &["t0"], &["t0p0", "t0p1", "t0p2", "t0p3"], 1),
        cooperative_member("C1", &["t0"], &[], 1),
    ];
    let first = Assignor::CooperativeSticky.assign(&counts, &joined);
    assert_eq!(first, expected(&[("C0", &["t0p0", "t0p1"]), ("C1", &[])]));
    let settled = vec![
        cooperative_member("C0", &["t0"], &["t0p0", "t0p1"], 2),
        cooperative_member("C1", &["t0"], &[], 2),
    ];
    let second = Assignor::CooperativeSticky.assign(&counts, &settled);
    assert_eq!(
        second,
        expected(&[("C0", &["t0p0", "t0p1"]), ("C1", &["t0p2", "t0p3"])])
    );
    let eager = vec![
        sticky_member("C0", &["t0"], &["t0p0", "t0p1", "t0p2", "t0p3"], 1),
        plain("C1", &["t0"]),
    ];
    let at_once = Assignor::Sticky.assign(&counts, &eager);
    assert_eq!(
        at_once,
        expected(&[("C0", &["t0p0", "t0p1"]), ("C1", &["t0p2", "t0p3"])])
    );
}

/// The same rule on the general path (unequal subscriptions), where Kafka
/// compares the result with what members said they own.
#[test]
fn cooperative_sticky_holds_back_on_the_general_path() {
    let counts = topics(&[("t0", 2), ("t1", 2)]);
    let owned = ["t0p0", "t0p1", "t1p0", "t1p1"];
    let cooperative = vec![
        cooperative_member("C0", &["t0", "t1"], &owned, 1),
        cooperative_member("C1", &["t0"], &[], 1),
    ];
    let held = Assignor::CooperativeSticky.assign(&counts, &cooperative);
    assert_eq!(held, expected(&[("C0", &["t1p0", "t1p1"]), ("C1", &[])]));
    let eager = vec![
        sticky_member("C0", &["t0", "t1"], &owned, 1),
        plain("C1", &["t0"]),
    ];
    let moved = Assignor::Sticky.assign(&counts, &eager);
    assert_eq!(
        moved,
        expected(&[("C0", &["t1p0", "t1p1"]), ("C1", &["t0p0", "t0p1"])])
    );
}

#[test]
fn claims_settle_by_generation() {
    let counts = topics(&[("t0", 2)]);
    // Same generation: neither claim counts, and the partition changes hands
    // (so cooperative holds it back).
    let doubly = vec![
        cooperative_member("C0", &["t0"], &["t0p0", "t0p1"], 3),
        cooperative_member("C1", &["t0"], &["t0p0"], 3),
    ];
    let held = Assignor::CooperativeSticky.assign(&counts, &doubly);
    assert_eq!(held, expected(&[("C0", &["t0p1"]), ("C1", &[])]));
    // A newer generation wins the claim.
    let newer = vec![
        cooperative_member("C0", &["t0"], &["t0p0", "t0p1"], 2),
        cooperative_member("C1", &["t0"], &["t0p0"], 3),
    ];
    let kept = Assignor::CooperativeSticky.assign(&counts, &newer);
    assert_eq!(kept, expected(&[("C0", &["t0p1"]), ("C1", &["t0p0"])]));
}

/// Which member keeps `max` owned partitions is the first the leader's
/// `HashMap` yields: "a" (bucket 1) before "B" (bucket 2), though "B" sorts
/// first.
#[test]
fn quota_ties_follow_java_hash_map_order() {
    let counts = topics(&[("t0", 7)]);
    let members = vec![
        cooperative_member("B", &["t0"], &["t0p0", "t0p1", "t0p2"], 1),
        cooperative_member("a", &["t0"], &["t0p3", "t0p4", "t0p5"], 1),
        cooperative_member("c", &["t0"], &[], 1),
    ];
    let eager_like = Assignor::Sticky.assign(
        &counts,
        &[
            sticky_member("B", &["t0"], &["t0p0", "t0p1", "t0p2"], 1),
            sticky_member("a", &["t0"], &["t0p3", "t0p4", "t0p5"], 1),
            plain("c", &["t0"]),
        ],
    );
    assert_eq!(
        eager_like,
        expected(&[
            ("B", &["t0p0", "t0p1"]),
            ("a", &["t0p3", "t0p4", "t0p5"]),
            ("c", &["t0p2", "t0p6"]),
        ])
    );
    let cooperative = Assignor::CooperativeSticky.assign(&counts, &members);
    assert_eq!(
        cooperative,
        expected(&[
            ("B", &["t0p0", "t0p1"]),
            ("a", &["t0p3", "t0p4", "t0p5"]),
            ("c", &["t0p6"])
        ])
    );
}

/// Deliberate departures from Kafka, where Kafka's result is invalid.
#[test]
fn departures_from_kafka_keep_assignments_valid() {
    // An owned partition the topic no longer has is ignored (Kafka would keep
    // t0p5 for C0 and give C1 both real partitions).
    let counts = topics(&[("t0", 2)]);
    let stale = vec![
        cooperative_member("C0", &["t0"], &["t0p5"], 1),
        cooperative_member("C1", &["t0"], &[], 1),
    ];
    let actual = Assignor::CooperativeSticky.assign(&counts, &stale);
    assert_eq!(actual, expected(&[("C0", &["t0p0"]), ("C1", &["t0p1"])]));
    // A member with no topics is never "equal" to the others, so it gets
    // nothing ("A" is the first the HashMap yields).
    let counts = topics(&[("t0", 4)]);
    let members = vec![plain("A", &[]), plain("B", &["t0"]), plain("C", &["t0"])];
    let actual = Assignor::Sticky.assign(&counts, &members);
    assert_eq!(
        actual,
        expected(&[
            ("A", &[]),
            ("B", &["t0p0", "t0p2"]),
            ("C", &["t0p1", "t0p3"])
        ])
    );
}

#[test]
fn names_and_protocols() {
    let names: Vec<&str> = Assignor::ALL
        .iter()
        .map(|assignor| assignor.name())
        .collect();
    assert_eq!(
        names,
        ["range", "roundrobin", "sticky", "cooperative-sticky"]
    );
    for assignor in Assignor::ALL {
        assert_eq!(Assignor::from_name(assignor.name()), Some(assignor));
    }
    assert_eq!(Assignor::from_name("uniform"), None);
    assert_eq!(
        Assignor::CooperativeSticky.supported_protocols(),
        [RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    );
    assert_eq!(
        Assignor::Range.supported_protocols(),
        [RebalanceProtocol::Eager]
    );
}

#[test]
fn subscription_metadata_round_trips_through_the_protocol() {
    let member = plain("C0", &["t1", "t0"])
        .with_owned_partitions(partitions(&["t0p1"]))
        .with_generation(4)
        .with_rack("r1")
        .with_group_instance_id("I0");
    let bytes = encode_subscription(&member.metadata(), CONSUMER_PROTOCOL_VERSION_MAX).unwrap();
    let decoded = decode_subscription(&bytes).unwrap();
    let rebuilt = Subscription::from_metadata("C0", Some("I0".into()), decoded);
    assert_eq!(rebuilt.topics, ["t0", "t1"]);
    assert_eq!(rebuilt.owned_partitions, member.owned_partitions);
    assert_eq!(
        (rebuilt.generation, rebuilt.rack),
        (Some(4), Some("r1".into()))
    );
}

#[test]
fn topic_partitions_sort_like_kafka() {
    let mut list = partitions(&["t1p0", "t0p10", "t0p2"]);
    list.sort();
    assert_eq!(list, partitions(&["t0p2", "t0p10", "t1p0"]));
    assert_eq!(partition("t0p3").to_string(), "t0-3");
}

/// A random group: up to four topics (one of them with no metadata), members
/// with random (non-empty) subscriptions, owned partitions (some stale or
/// claimed twice), generations and instance ids, in random order.
#[derive(Debug, Clone)]
struct RandomGroup {
    counts: BTreeMap<String, i32>,
    members: Vec<Subscription>,
}

const TOPIC_NAMES: [&str; 4] = ["a", "b", "c", "ghost"];

fn random_member() -> impl Strategy<Value = Subscription> {
    (
        0..8u8,
        1..16u8,
        proptest::collection::vec((0..4usize, 0..7i32), 0..6),
        proptest::option::of(0..4i32),
        proptest::option::of(0..3u8),
    )
        .prop_map(|(id, topic_mask, owned, generation, instance)| {
            let topics: Vec<&str> = (0..4)
                .filter(|bit| topic_mask & (1 << bit) != 0)
                .map(|bit| TOPIC_NAMES[bit])
                .collect();
            let owned: Vec<TopicPartition> = owned
                .into_iter()
                .map(|(topic, number)| TopicPartition::new(TOPIC_NAMES[topic], number))
                .collect();
            let user_data = encode_sticky_user_data(&StickyUserData {
                partitions: owned.clone(),
                generation,
            })
            .unwrap();
            let mut member = Subscription::new(format!("member-{id}"), topics)
                .with_owned_partitions(owned)
                .with_user_data(user_data);
            member.generation = generation;
            member.group_instance_id = instance.map(|instance| format!("instance-{instance}"));
            member
        })
}

fn random_group() -> impl Strategy<Value = RandomGroup> {
    (
        proptest::collection::vec(0..6i32, 3),
        proptest::collection::vec(random_member(), 1..7),
    )
        .prop_map(|(counts, members)| RandomGroup {
            counts: TOPIC_NAMES[..3]
                .iter()
                .zip(counts)
                .map(|(name, count)| ((*name).to_owned(), count))
                .collect(),
            members,
        })
}

/// The subscription each member id ends up with (the last one given).
fn final_members(group: &RandomGroup) -> BTreeMap<String, &Subscription> {
    group
        .members
        .iter()
        .map(|member| (member.member_id.clone(), member))
        .collect()
}

fn check_valid(
    group: &RandomGroup,
    assignor: Assignor,
    assignment: &Assignment,
) -> Result<(), TestCaseError> {
    let members = final_members(group);
    let ids: BTreeSet<&String> = members.keys().collect();
    prop_assert_eq!(assignment.keys().collect::<BTreeSet<_>>(), ids);
    let mut seen = BTreeSet::new();
    for (member, list) in assignment {
        for partition in list {
            prop_assert!(
                seen.insert(partition.clone()),
                "{} assigned twice",
                partition
            );
            prop_assert!(
                members[member].topics.contains(&partition.topic),
                "{} to a non-subscriber",
                partition
            );
            let count = group.counts.get(&partition.topic).copied().unwrap_or(0);
            prop_assert!(
                (0..count).contains(&partition.partition),
                "{} does not exist",
                partition
            );
        }
    }
    if assignor != Assignor::CooperativeSticky {
        let subscribed: BTreeSet<&String> =
            members.values().flat_map(|member| &member.topics).collect();
        let expected: usize = group
            .counts
            .iter()
            .filter(|(topic, _)| subscribed.contains(topic))
            .map(|(_, &count)| usize::try_from(count).unwrap())
            .sum();
        prop_assert_eq!(seen.len(), expected, "every subscribed partition assigned");
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_assignor_assigns_each_partition_once_to_a_subscriber(group in random_group()) {
        for assignor in Assignor::ALL {
            let assignment = assignor.assign(&group.counts, &group.members);
            check_valid(&group, assignor, &assignment)?;
        }
    }

    #[test]
    fn sticky_is_balanced_when_subscriptions_are_equal(mut group in random_group(), mask in 1..8u8) {
        let topics: Vec<String> = (0..3)
            .filter(|bit| mask & (1 << bit) != 0)
            .map(|bit| TOPIC_NAMES[bit].to_owned())
            .collect();
        for member in &mut group.members {
            member.topics = topics.clone();
        }
        let assignment = Assignor::Sticky.assign(&group.counts, &group.members);
        let sizes: Vec<usize> = assignment.values().map(Vec::len).collect();
        let (smallest, largest) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        prop_assert!(largest - smallest <= 1, "sizes {:?}", sizes);
    }

    /// No partition goes to a member that did not claim it while another member
    /// claims it: the old owner must revoke it first.
    #[test]
    fn cooperative_sticky_never_hands_over_a_claimed_partition(group in random_group()) {
        let assignment = Assignor::CooperativeSticky.assign(&group.counts, &group.members);
        let members = final_members(&group);
        for (member, list) in &assignment {
            for partition in list {
                if members[member].owned_partitions.contains(partition) {
                    continue;
                }
                let claimed_elsewhere = members
                    .values()
                    .any(|other| other.owned_partitions.contains(partition));
                prop_assert!(!claimed_elsewhere, "{} handed to {} while owned", partition, member);
            }
        }
    }

    /// Rebalancing a stable cooperative group converges: after two rounds
    /// everything is assigned.
    #[test]
    fn cooperative_sticky_converges(group in random_group()) {
        let mut members: Vec<Subscription> = final_members(&group).into_values().cloned().collect();
        for generation in 10..12 {
            let assignment = Assignor::CooperativeSticky.assign(&group.counts, &members);
            for member in &mut members {
                member.owned_partitions = assignment[&member.member_id].clone();
                member.generation = Some(generation);
            }
        }
        let assignment = Assignor::CooperativeSticky.assign(&group.counts, &members);
        let assigned: usize = assignment.values().map(Vec::len).sum();
        let full = Assignor::Sticky.assign(&group.counts, &members);
        prop_assert_eq!(assigned, full.values().map(Vec::len).sum::<usize>());
    }
}
