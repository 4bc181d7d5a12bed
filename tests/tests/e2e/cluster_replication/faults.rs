//! Replication under faults as a client sees it: leaders killed in turn,
//! a rolling restart, a paused leader, a group coordinator's death, each
//! under a running `acks=all` load.

use super::*;

/// Acceptance 2, Kafka's hard bounce: while the load runs, the leader of
/// each partition in turn is killed with SIGKILL and started again once
/// another replica leads, five rounds; every acknowledged record is then
/// read exactly once in order, and the replicas' segments are identical.
#[test]
fn leaders_killed_in_turn_lose_no_acknowledged_record() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    const PARTITIONS: i32 = 3;
    create_replicated(&cluster, "bounced", PARTITIONS);
    let load = Load::start(&cluster, "bounced", PARTITIONS);
    wait_for_writes(&cluster, "bounced", PARTITIONS, WRITES_BETWEEN_FAULTS);
    bounce_leaders(&mut cluster, "bounced", PARTITIONS);
    let deliveries = load.finish();
    let read = consume_all(&cluster, "bounced", PARTITIONS);
    check_exactly_once(&deliveries, &read);
    let copies = tempfile::tempdir().unwrap();
    kill_and_compare_replicas(&mut cluster, "bounced", PARTITIONS, false, copies.path());
}

/// Five rounds: kill -9 the leader of each partition of `topic` in turn,
/// wait for another leader, restart the node and wait until it is back in
/// every ISR.
pub(crate) fn bounce_leaders(cluster: &mut Cluster, topic: &str, partitions: i32) {
    for round in 0..5 {
        let partition = round % partitions;
        let asked = (0..3)
            .find(|index| leaders(cluster, *index, topic).is_some())
            .unwrap();
        let leader = leaders(cluster, asked, topic).unwrap()[&partition] as usize;
        cluster.nodes[leader].kill();
        let other = (leader + 1) % 3;
        let deadline = Instant::now() + Duration::from_secs(30);
        while leaders(cluster, other, topic)
            .and_then(|leaders| leaders.get(&partition).copied())
            .is_none_or(|now| now == leader as i32)
        {
            assert!(
                Instant::now() < deadline,
                "round {round}: no new leader of {partition}\n{}",
                cluster.nodes[other].log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The new leader takes writes the dead one never saw, which it
        // must fetch (or truncate to) once back.
        wait_for_writes(cluster, topic, partitions, WRITES_BETWEEN_FAULTS);
        cluster.nodes[leader].restart();
        wait_for_full_isr(cluster, other, topic, partitions);
        println!("round {round}: node {leader} killed and back");
    }
    wait_for_writes(cluster, topic, partitions, WRITES_BETWEEN_FAULTS);
}

/// Acceptance 5: a clean rolling restart (SIGTERM, which is a controlled
/// shutdown: the controller moves the broker's leaderships before it
/// stops) of all three brokers under load surfaces no produce error to the
/// client, and loses nothing.
#[test]
fn a_rolling_restart_under_load_surfaces_no_error() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    const PARTITIONS: i32 = 3;
    create_replicated(&cluster, "rolled", PARTITIONS);
    let load = Load::start(&cluster, "rolled", PARTITIONS);
    wait_for_writes(&cluster, "rolled", PARTITIONS, WRITES_BETWEEN_FAULTS);
    roll(&mut cluster, "rolled", PARTITIONS);
    let deliveries = load.finish();
    assert_eq!(
        *deliveries.errors.lock().unwrap(),
        Vec::<String>::new(),
        "no produce error surfaces"
    );
    let read = consume_all(&cluster, "rolled", PARTITIONS);
    check_exactly_once(&deliveries, &read);
    let copies = tempfile::tempdir().unwrap();
    kill_and_compare_replicas(&mut cluster, "rolled", PARTITIONS, false, copies.path());
}

/// SIGTERM each node in turn, check it handed over its leaderships before
/// it stopped, restart it and wait until it is back in every ISR.
pub(crate) fn roll(cluster: &mut Cluster, topic: &str, partitions: i32) {
    for node in ALL {
        let started = Instant::now();
        assert!(
            cluster.nodes[node].stop(),
            "a clean stop:\n{}",
            cluster.nodes[node].log()
        );
        let stopped_in = started.elapsed();
        let log = cluster.nodes[node].log();
        assert!(
            log.contains("controlled shutdown: the controller moved every leadership it could"),
            "node {node} stopped without handing over its leaderships:\n{log}"
        );
        cluster.nodes[node].restart();
        let other = (node + 1) % 3;
        wait_for_full_isr(cluster, other, topic, partitions);
        println!("node {node}: stopped in {stopped_in:?}, back in the ISR");
    }
    wait_for_writes(cluster, topic, partitions, WRITES_BETWEEN_FAULTS);
}

/// Acceptance 3: the leader of a partition is paused (SIGSTOP) for 15 s
/// under load and resumed: the others elect a new leader meanwhile; the
/// paused broker, once back, truncates what it alone holds, follows and
/// rejoins the ISR; nothing acknowledged is lost or doubled.
#[test]
fn a_paused_leader_rejoins_without_losing_an_acknowledged_record() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    const PARTITIONS: i32 = 3;
    create_replicated(&cluster, "paused", PARTITIONS);
    let load = Load::start(&cluster, "paused", PARTITIONS);
    wait_for_writes(&cluster, "paused", PARTITIONS, WRITES_BETWEEN_FAULTS);
    let paused = leaders(&cluster, 0, "paused").unwrap()[&0] as usize;
    cluster.nodes[paused].signal(libc::SIGSTOP);
    let other = (paused + 1) % 3;
    let deadline = Instant::now() + Duration::from_secs(15);
    while leaders(&cluster, other, "paused")
        .and_then(|leaders| leaders.get(&0).copied())
        .is_none_or(|leader| leader == paused as i32)
    {
        assert!(
            Instant::now() < deadline,
            "no new leader while node {paused} is paused"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Not synchronisation: the pause lasts its whole 15 s (the scenario),
    // while the load writes what the paused leader will have to fetch.
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    cluster.nodes[paused].signal(libc::SIGCONT);
    wait_for_full_isr(&cluster, other, "paused", PARTITIONS);
    wait_for_writes(&cluster, "paused", PARTITIONS, WRITES_BETWEEN_FAULTS);
    let deliveries = load.finish();
    let read = consume_all(&cluster, "paused", PARTITIONS);
    check_exactly_once(&deliveries, &read);
    let copies = tempfile::tempdir().unwrap();
    kill_and_compare_replicas(&mut cluster, "paused", PARTITIONS, false, copies.path());
}

/// The broker coordinating `key` (`key_type` 0: a group, 1: a
/// transactional id), asked of node `index` until it names one.
pub(crate) fn coordinator_of(cluster: &Cluster, index: usize, key_type: i8, key: &str) -> usize {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut stream = brook_tests::raw::connect(&cluster.nodes[index]);
        let found: FindCoordinatorResponse = brook_tests::raw::exchange(
            &mut stream,
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(key.to_owned()))
                .with_key_type(key_type),
        );
        if found.error_code == 0 {
            return found.node_id.0 as usize;
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator for {key}: {found:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Acceptance 7, groups: a consumer group keeps working when its
/// coordinator's broker is killed: the group moves to the new leader of its
/// `__consumer_offsets` partition (three replicas by default), whose copy
/// holds the offsets committed before; the member keeps reading and
/// committing. (Transactions: `cluster_transactions.rs`.)
#[test]
fn a_group_survives_its_coordinators_death() {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::error::KafkaError;
    use std::collections::BTreeSet;
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    create_replicated(&cluster, "work", 3);
    let producer = acks_all_producer(&cluster);
    let produce = |prefix: &str| {
        for index in 0..10 {
            let value = format!("{prefix}-{index}");
            brook_tests::librdkafka::send_when_queued(
                &producer,
                BaseRecord::to("work").key(&value).payload(&value),
            );
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    };
    produce("a");
    let servers = bootstrap(&cluster);
    let member = || -> BaseConsumer {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", "survivors")
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .create()
            .unwrap();
        consumer.subscribe(&["work"]).unwrap();
        consumer
    };
    let poll_until = |consumer: &BaseConsumer, read: &mut Vec<String>, wanted: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while read.len() < wanted {
            assert!(Instant::now() < deadline, "read {read:?}");
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                read.push(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
            }
        }
    };
    let consumer = member();
    let mut read = Vec::new();
    poll_until(&consumer, &mut read, 10);
    consumer.commit_consumer_state(CommitMode::Sync).unwrap();

    let coordinator = coordinator_of(&cluster, 0, 0, "survivors");
    cluster.nodes[coordinator].kill();
    produce("b");
    poll_until(&consumer, &mut read, 20);
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(error) = consumer.commit_consumer_state(CommitMode::Sync) {
        assert!(
            Instant::now() < deadline,
            "no commit after the coordinator died: {error}"
        );
        consumer.poll(Duration::from_millis(100));
    }
    let survivor = (0..3).find(|index| *index != coordinator).unwrap();
    let moved = coordinator_of(&cluster, survivor, 0, "survivors");
    assert_ne!(moved, coordinator, "the group moved");
    drop(consumer);
    // A new member resumes from the offsets committed: nothing is read again.
    produce("c");
    // It reads until librdkafka reports the end of every partition
    // (enable.partition.eof): whatever it would read again comes before.
    let consumer = member();
    let mut resumed = Vec::new();
    let mut ended = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "read {resumed:?}, ends of {ended:?}"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                resumed.push(String::from_utf8(message.payload().unwrap().to_vec()).unwrap())
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                ended.insert(partition);
            }
            _ => {}
        }
    }
    resumed.sort();
    let expected: Vec<String> = (0..10).map(|index| format!("c-{index}")).collect();
    assert_eq!(resumed, expected);
    read.sort();
    read.dedup();
    assert_eq!(read.len(), 20, "{read:?}");
}
