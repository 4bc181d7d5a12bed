//! Producer ids in a cluster come in blocks from the active controller
//! (KIP-730's AllocateProducerIds, recorded in the metadata log), so no two
//! brokers hand out one id, across a change of controller and a broker's
//! restart included.

use std::collections::BTreeSet;
use std::time::Duration;

use brook_tests::cluster::Cluster;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const ALL: [usize; 3] = [0, 1, 2];

/// An idempotent producer's InitProducerId through node `index`, retried
/// while the broker has no block yet (COORDINATOR_LOAD_IN_PROGRESS).
fn producer_id(cluster: &Cluster, index: usize) -> i64 {
    for _ in 0..100 {
        let mut stream = brook_tests::raw::connect(&cluster.nodes[index]);
        let response: InitProducerIdResponse = brook_tests::raw::exchange(
            &mut stream,
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
        );
        match response.error_code {
            0 => return response.producer_id.0,
            14 => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("InitProducerId through node {index}: error {other}"),
        }
    }
    panic!("node {index} never had a producer id");
}

#[test]
fn no_two_brokers_hand_out_one_producer_id() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, seen) = Cluster::formed(BROOK, root.path(), 3, &[]);
    let mut handed = BTreeSet::new();
    let mut take = |cluster: &Cluster, index: usize| {
        let id = producer_id(cluster, index);
        assert!(handed.insert(id), "producer id {id} handed out twice");
        id
    };
    let firsts: Vec<i64> = ALL
        .iter()
        .map(|index| {
            let first = take(&cluster, *index);
            assert_eq!(take(&cluster, *index), first + 1, "one block per broker");
            first
        })
        .collect();
    // Three blocks of the controller's, 1000 ids each.
    let blocks: BTreeSet<i64> = firsts.iter().map(|first| first / 1000).collect();
    assert_eq!(blocks.len(), 3, "{firsts:?}");

    // The controller dies; a broker restarts (its block's unused ids are
    // skipped); every id is still new.
    let controller = seen[0].controller as usize;
    cluster.nodes[controller].kill();
    let survivor = (controller + 1) % 3;
    cluster.wait_until(
        &[survivor],
        Duration::from_secs(30),
        "a new controller",
        |seen| seen.controller >= 0 && seen.controller != controller as i32,
    );
    cluster.nodes[controller].restart();
    cluster.wait_until(&ALL, Duration::from_secs(40), "the cluster back", |seen| {
        seen.brokers == [0, 1, 2] && seen.controller >= 0
    });
    for index in ALL {
        take(&cluster, index);
    }
    let restarted = take(&cluster, controller);
    assert!(
        restarted / 1000 > *blocks.last().unwrap(),
        "the restarted broker's {restarted} is from a new block"
    );
}
