//! The `brook` tools against a three-node cluster: from any bootstrap
//! broker they create, describe, produce, consume and read offsets the
//! same, each request reaching the partition's leader; a bootstrap list
//! whose first broker does not answer still works. (A dead broker's
//! partitions stay unreachable until leaders move, with replication.)

use brook_tests::cluster::Cluster;

use super::common::{BROOK, Run, brook, brook_alone, brook_with_input};

const ALL: [usize; 3] = [0, 1, 2];

#[test]
fn the_tools_work_against_a_cluster_from_any_broker() {
    let root = tempfile::tempdir().unwrap();
    let (cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    let node = |index: usize| &cluster.nodes[index];
    brook(
        node(0),
        &[
            "topic",
            "create",
            "spread",
            "--partitions",
            "6",
            "--replication-factor",
            "3",
        ],
    )
    .ok();
    // Keyed records land on several partitions, so on several leaders.
    let input: String = (0..60).map(|n| format!("key-{n}:value-{n}\n")).collect();
    brook_with_input(
        node(1),
        &["produce", "spread", "--key-separator", ":"],
        input.as_bytes(),
    )
    .ok();
    let offsets: Vec<Run> = ALL
        .iter()
        .map(|index| brook(node(*index), &["offsets", "spread"]).ok())
        .collect();
    let total: i64 = offsets[0]
        .lines()
        .iter()
        .map(|line| line.rsplit(':').next().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, 60, "{:?}", offsets[0]);
    let leaders_used = offsets[0]
        .lines()
        .iter()
        .filter(|line| !line.ends_with(":0"))
        .count();
    assert!(leaders_used >= 3, "{:?}", offsets[0]);
    assert!(offsets.iter().all(|run| run.stdout == offsets[0].stdout));
    let described: Vec<String> = ALL
        .iter()
        .map(|index| {
            brook(node(*index), &["topic", "describe", "spread"])
                .ok()
                .stdout
        })
        .collect();
    assert!(
        described[0].contains("ReplicationFactor: 3"),
        "{}",
        described[0]
    );
    assert!(
        described.iter().all(|text| *text == described[0]),
        "{described:#?}"
    );
    let consumed = brook(
        node(2),
        &[
            "consume",
            "spread",
            "--from-beginning",
            "-n",
            "60",
            "--print-key",
        ],
    )
    .ok();
    let mut values: Vec<&str> = consumed.lines();
    values.sort();
    let mut expected: Vec<String> = (0..60).map(|n| format!("key-{n}\tvalue-{n}")).collect();
    expected.sort();
    assert_eq!(values.len(), 60, "{consumed:?}");

    assert_eq!(values, expected);

    // A bootstrap list whose first broker does not answer: the next does.
    let bootstrap = format!(
        "127.0.0.1:{},{}",
        brook_tests::cluster::free_port(),
        node(1).address
    );
    let run = brook_alone(&["offsets", "spread", "--brokers", &bootstrap], None);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(run.stdout, offsets[0].stdout);
}
