//! Acceptance 4 of the replication issue: a network partition, not a
//! kill. Each node runs in its own network namespace
//! ([`brook_tests::netns`]); the leader of a partition is cut off from the
//! other two (and so from the controller, or the controller from the
//! quorum) while librdkafka keeps producing `acks=all` through every node.

use std::time::{Duration, Instant};

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::cluster::Cluster;
use brook_tests::netns::Network;

use crate::cluster_replication::{
    Load, QUICK_FENCING, check_exactly_once, consume_all, create_replicated,
    kill_and_compare_replicas, leaders, wait_for_full_isr,
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
#[test]
fn a_leader_cut_off_from_the_others_is_replaced_and_follows_once_healed() {
    let mut network = Network::create(0, 3);
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed_in(BROOK, root.path(), &network, 3, &QUICK_FENCING);
    create_replicated(&cluster, "cut", PARTITIONS);
    let load = Load::start(&cluster, "cut", PARTITIONS);
    std::thread::sleep(Duration::from_secs(2));
    for cut_controller in [false, true] {
        let controller = cluster.described_controller(0).expect("a controller") as usize;
        let led = leaders(&cluster, 0, "cut").unwrap();
        let (&partition, &cut) = led
            .iter()
            .find(|(_, leader)| (**leader as usize == controller) == cut_controller)
            .expect("every node leads a partition");
        let cut = cut as usize;
        cut_off(&mut network, &cluster, cut, partition);
        network.heal();
        let other = (cut + 1) % 3;
        wait_for_full_isr(&cluster, other, "cut", PARTITIONS);
        println!("node {cut} (the controller: {cut_controller}) healed and back in every ISR");
    }
    std::thread::sleep(Duration::from_secs(1));
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
    // acknowledge it to acks=all.
    let lone = encode_batch(
        &[NewRecord {
            key: Some("lone".into()),
            value: Some("lone".into()),
            timestamp: TimestampMs(1),
            headers: Vec::new(),
        }],
        &BatchOptions::default(),
    );
    let mut old_leader = brook_tests::raw::connect(&cluster.nodes[cut]);
    let answer = brook_tests::raw::produce_batch(&mut old_leader, "cut", partition, -1, lone);
    assert_ne!(
        answer.error_code, 0,
        "the cut-off leader acknowledged acks=all: {answer:?}"
    );
    println!(
        "the cut-off leader answered acks=all with error {}",
        answer.error_code
    );
    std::thread::sleep(CUT_FOR.saturating_sub(isolated.elapsed()));
}
