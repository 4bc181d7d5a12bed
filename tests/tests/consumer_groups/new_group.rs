//! How soon a new group's member gets its first record.

use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;

use crate::{
    SESSION_TIMEOUT_MS, TIMEOUT, alone_on_the_cores, consumer, create_topic, produce, records_to,
    start_broker,
};

/// A new group's member gets its first record without the broker waiting
/// out any timer: not the session timeout (10 s here), not the rebalance
/// timeout (librdkafka's max.poll.interval.ms, 300 s), and not an initial
/// rebalance delay (0 here; the coordinator's state-machine tests pin what
/// the delay does). How soon is a figure, printed, not asserted.
#[test]
fn a_new_group_gets_its_first_record_without_waiting_on_a_timer() {
    const TOPIC: &str = "waiting";
    let _cores = alone_on_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 3);
    produce(&broker, TOPIC, &records_to(&[0, 1, 2], 10, "ready"));
    // The first group on a fresh broker (whose FindCoordinator may create
    // __consumer_offsets), then a second new group: both are new groups,
    // and the two figures tell the broker's one-time start-up from a join.
    let shortest_timer = Duration::from_millis(SESSION_TIMEOUT_MS);
    for group in ["first-newcomer", "second-newcomer"] {
        let waited = first_record_wait(&broker, group, TOPIC);
        eprintln!(
            "group {group}: first record {waited:?} after subscribe() \
             (group.initial.rebalance.delay.ms=0)"
        );
        assert!(
            waited < shortest_timer / 2,
            "{group}: waited {waited:?}, as long as a timer (session timeout {shortest_timer:?})"
        );
    }
}

/// The time from `subscribe()` to the first record for a new one-member
/// `group` of `topic`, whose records are already there.
fn first_record_wait(broker: &Broker, group: &str, topic: &str) -> Duration {
    let member = consumer(&broker.address, group, group, &[]);
    let subscribed = Instant::now();
    member.subscribe(&[topic]).unwrap();
    let first = loop {
        if let Some(polled) = member.poll(Duration::from_millis(5)) {
            break polled.expect("a record");
        }
        assert!(
            subscribed.elapsed() < TIMEOUT,
            "{group}: no record within {TIMEOUT:?} of subscribing"
        );
    };
    let waited = subscribed.elapsed();
    assert_eq!(first.offset(), 0, "{group} starts from the earliest record");
    waited
}
