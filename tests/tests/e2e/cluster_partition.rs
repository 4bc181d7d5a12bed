//! Acceptance 4 of the replication issue: a network partition, not a
//! kill. Each node runs in its own network namespace
//! ([`brook_tests::netns`]); the leader of a partition is cut off from the
//! other two (and so from the controller, or the controller from the
//! quorum) while librdkafka keeps producing `acks=all` through every node.
//! Beside it, a follower's connections to its leader silenced for good
//! (packets lost without a reset): its fetcher must not wait on them.

use std::time::{Duration, Instant};

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::cluster::Cluster;
use brook_tests::load::{Busy, rounds};
use brook_tests::netns::Network;

use crate::cluster_replication::{
    Load, QUICK_FENCING, WRITES_BETWEEN_FAULTS, check_exactly_once, consume_all, create_placed,
    create_replicated, kill_and_compare_replicas, leaders, one_record, placements,
    preferred_leaders, wait_for_full_isr, wait_for_placement, wait_for_writes,
};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const PARTITIONS: i32 = 3;
/// `broker.session.timeout.ms` in [`QUICK_FENCING`].
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the partition lasts.
const CUT_FOR: Duration = Duration::from_secs(12);

/// Two rounds: first the leader of a partition that is not the active
/// controller is cut off (from the controller too), then the active
/// controller, which leads another partition. Each time the cut-off leader
/// keeps serving what reaches it, but cannot acknowledge an `acks=all`
/// write (its ISR cannot shrink without the controller); the majority
/// elects another leader within the session timeout (plus the
/// controller's own failover, when the controller was cut off); healed,
/// the old leader truncates what only it holds, follows and rejoins the
/// ISR. Every acknowledged record is then read exactly once, the lone
/// writes are gone, and the replicas are identical.
///
/// On a busy machine; `BROOK_E2E_LONG=1` runs ten rounds of the two cuts
/// (leaderships go back to preferred replicas between them, within
/// `leader.imbalance.check.interval.seconds=1`).
#[test]
fn a_leader_cut_off_from_the_others_is_replaced_and_follows_once_healed() {
    let _busy = Busy::start();
    let mut network = Network::create(0, 3);
    let root = tempfile::tempdir().unwrap();
    let mut settings = QUICK_FENCING.to_vec();
    settings.extend(["--set", "leader.imbalance.check.interval.seconds=1"]);
    let (mut cluster, _) = Cluster::formed_in(BROOK, root.path(), &network, 3, &settings);
    create_replicated(&cluster, "cut", PARTITIONS);
    let load = Load::start(&cluster, "cut", PARTITIONS);
    wait_for_writes(&cluster, "cut", PARTITIONS, WRITES_BETWEEN_FAULTS);
    for round in 0..rounds(1, 10) {
        for cut_controller in [false, true] {
            let (partition, cut) = led_by(&cluster, cut_controller);
            cut_off(&mut network, &cluster, cut, partition);
            network.heal();
            let healed = Instant::now();
            let other = (cut + 1) % 3;
            wait_for_full_isr(&cluster, other, "cut", PARTITIONS);
            println!(
                "round {round}: node {cut} (the controller: {cut_controller}) healed and back in every ISR after {:?}",
                healed.elapsed()
            );
        }
    }
    // The checks below cover records written after the last heal. A
    // leader balancing elects right after it answers `consume_all` no end
    // until its HW reaches its epoch's start (KIP-207), so no acknowledged
    // record lies past the ends it reads to.
    wait_for_writes(&cluster, "cut", PARTITIONS, WRITES_BETWEEN_FAULTS);
    let deliveries = load.finish();
    let read = consume_all(&cluster, "cut", PARTITIONS);
    assert!(
        read.values().flatten().all(|(_, key)| key != "lone"),
        "a write only a cut-off leader held survived"
    );
    check_exactly_once(&deliveries, &read);
    let copies = tempfile::tempdir().unwrap();
    kill_and_compare_replicas(&mut cluster, "cut", PARTITIONS, false, copies.path());
}

/// A partition of "cut" and its leader: one the active controller leads
/// (`by_controller`), or one another node leads; waits for one. Only a
/// partition its preferred replica leads: after a cut, leaderships go back
/// to preferred replicas within a second, and one moved that way just
/// before the next cut left the cut node knowing it no longer led (CI,
/// 2026-12-06: NOT_LEADER_OR_FOLLOWER where the test expected a leader
/// that still believes it leads).
fn led_by(cluster: &Cluster, by_controller: bool) -> (i32, usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let controller = cluster.quorum_leader(0);
        let found = controller
            .zip(preferred_leaders(cluster, 0, "cut"))
            .and_then(|(controller, led)| {
                led.into_iter()
                    .find(|(_, leader)| (*leader as usize == controller) == by_controller)
            });
        if let Some((partition, leader)) = found {
            return (partition, leader as usize);
        }
        assert!(
            Instant::now() < deadline,
            "no partition led by {} the controller\n{}",
            if by_controller { "" } else { "other than" },
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One record keyed "lone" (which no read may find after the heal) with
/// `value`.
fn lone(value: &str) -> Vec<u8> {
    encode_batch(
        &[NewRecord {
            key: Some("lone".into()),
            value: Some(value.to_owned().into()),
            timestamp: TimestampMs(1),
            headers: Vec::new(),
        }],
        &BatchOptions::default(),
    )
}

/// Cuts node `cut`, the leader of `partition`, off for [`CUT_FOR`]: the
/// others elect another leader, and `cut` cannot acknowledge `acks=all`.
fn cut_off(network: &mut Network, cluster: &Cluster, cut: usize, partition: i32) {
    network.isolate(cut);
    let isolated = Instant::now();
    let other = (cut + 1) % 3;
    while leaders(cluster, other, "cut")
        .and_then(|leaders| leaders.get(&partition).copied())
        .is_none_or(|leader| leader == cut as i32)
    {
        assert!(
            isolated.elapsed() < SESSION_TIMEOUT + Duration::from_secs(7),
            "no new leader of partition {partition} while node {cut} is cut off\n{}",
            cluster.nodes[other].log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "node {cut} cut off: partition {partition} led elsewhere after {:?}",
        isolated.elapsed()
    );
    // The old leader takes a write (it still believes it leads) but cannot
    // acknowledge it to acks=all: it answers an error, REQUEST_TIMED_OUT at
    // the request's timeout at the latest, which `produce_batch` waits past.
    let mut old_leader = brook_tests::raw::connect(&cluster.nodes[cut]);
    let asked = Instant::now();
    let answer =
        brook_tests::raw::produce_batch(&mut old_leader, "cut", partition, -1, lone("acks=all"));
    assert_ne!(
        answer.error_code, 0,
        "the cut-off leader acknowledged acks=all: {answer:?}"
    );
    println!(
        "the cut-off leader answered acks=all with error {} after {:?}",
        answer.error_code,
        asked.elapsed()
    );
    // acks=1 is Kafka's leader-local acknowledgement: the old leader, which
    // still believes it leads, acknowledges it alone. It is the one write
    // acks=1 may lose: the new leader never had it, and the old one drops it
    // when it follows again (the caller checks no "lone" record survives).
    let answer =
        brook_tests::raw::produce_batch(&mut old_leader, "cut", partition, 1, lone("acks=1"));
    assert_eq!(
        answer.error_code, 0,
        "the cut-off leader refused acks=1: {answer:?}"
    );
    std::thread::sleep(CUT_FOR.saturating_sub(isolated.elapsed()));
}

/// Starts three nodes in namespaces with [`QUICK_FENCING`] and
/// `replica.socket.timeout.ms`, places `topic`'s one partition on nodes 0
/// (its leader), 1 and 2, and once node 1 has fetched from node 0 (an
/// `acks=all` record is acknowledged), silences node 1's connections to
/// node 0 mid-fetch, for good: no reset, no close, and a new connection
/// works ([`Network::silence_connections`]); their local ports.
pub(crate) fn silenced_follower(
    tag: u8,
    root: &std::path::Path,
    socket_timeout_ms: u64,
    topic: &str,
) -> (Network, Cluster, Vec<u16>) {
    let network = Network::create(tag, 3);
    let timeout = format!("replica.socket.timeout.ms={socket_timeout_ms}");
    let mut settings = QUICK_FENCING.to_vec();
    settings.extend(["--set", &timeout]);
    let (cluster, _) = Cluster::formed_in(BROOK, root, &network, 3, &settings);
    create_placed(&cluster, topic, 1, &[&[0, 1, 2]]);
    wait_for_placement(&cluster, 1, topic, (0, vec![0, 1, 2]));
    produce_to_all(&cluster, topic, "first");
    let silenced = network.silence_connections(1, 0, 9092);
    assert!(!silenced.is_empty(), "node 1 has no connection to node 0");
    (network, cluster, silenced)
}

/// One `acks=all` record to node 0, which leads `topic`: it is acknowledged
/// only once every ISR member (all three, for `replica.lag.time.max.ms`,
/// 30 s) fetched it, within the produce's 10 s.
pub(crate) fn produce_to_all(cluster: &Cluster, topic: &str, value: &str) {
    let mut leader = brook_tests::raw::connect(&cluster.nodes[0]);
    let answer = brook_tests::raw::produce_batch(&mut leader, topic, 0, -1, one_record(value));
    assert_eq!(
        answer.error_code,
        0,
        "acks=all to {topic}: {answer:?}\nnode 1:\n{}",
        cluster.nodes[1].log()
    );
}

/// A follower's fetch connection to its leader goes silent mid-fetch: the
/// fetcher gives it up after `replica.socket.timeout.ms` and fetches over a
/// new one, so an `acks=all` write that needs the follower is acknowledged.
/// Without the timeout the fetch waits for TCP to give up, a quarter of an
/// hour.
#[test]
fn a_fetch_connection_gone_silent_is_replaced_after_the_socket_timeout() {
    let root = tempfile::tempdir().unwrap();
    let (_network, cluster, _) = silenced_follower(1, root.path(), 2_000, "silent");
    produce_to_all(&cluster, "silent", "after");
}

/// A fetcher left with nothing to follow from its leader stops at once,
/// even in the middle of a fetch that will never be answered (its
/// connection went silent, and `replica.socket.timeout.ms` is ten
/// minutes): a partition later led by that leader gets a new fetcher,
/// over a new connection, rather than queueing behind the old one. (A
/// leader cut off by a network partition and healed left such a fetcher
/// behind on the broker that took its partitions over. Peer connections
/// now also have a liveness bound of a few seconds, which frees a silent
/// connection either way; the stop frees it at once.)
#[test]
fn a_fetcher_with_nothing_left_to_follow_stops_mid_fetch() {
    let root = tempfile::tempdir().unwrap();
    let (network, cluster, silenced) = silenced_follower(2, root.path(), 600_000, "before");
    brook_tests::raw::delete_topic(&mut brook_tests::raw::connect(&cluster.nodes[0]), "before");
    // Node 1 follows nothing from node 0 once it has applied the deletion,
    // and its fetcher closes the silenced connection then.
    let deadline = Instant::now() + Duration::from_secs(20);
    while placements(&cluster, 1, "before").is_some()
        || network
            .established(1, 0, 9092)
            .iter()
            .any(|port| silenced.contains(port))
    {
        assert!(
            Instant::now() < deadline,
            "node 1 still serves before, or its fetcher still holds its connection\n{}",
            cluster.nodes[1].log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    create_placed(&cluster, "after", 1, &[&[0, 1, 2]]);
    wait_for_placement(&cluster, 1, "after", (0, vec![0, 1, 2]));
    produce_to_all(&cluster, "after", "after");
}
