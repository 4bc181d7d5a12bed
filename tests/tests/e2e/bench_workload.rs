//! The load generator against a real broker: a short workload in which
//! every acknowledged record must come back to the consumers exactly once
//! (the ledgers compare sequence numbers and value checksums), so the tool
//! itself can neither lose nor invent records without failing here.
//! Three shapes: unthrottled acks=1; paced acks=all, zstd, keyed; and an
//! fsync per append.

use std::time::Duration;

use brook_bench::workload::options::WorkloadOptions;
use brook_bench::workload::run;
use brook_engine::log::batch::Compression;
use brook_tests::broker::Broker;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

fn short_workload(broker: &Broker) -> WorkloadOptions {
    WorkloadOptions {
        brokers: Some(broker.address.clone()),
        topic: "bench-e2e".into(),
        partitions: 4,
        record_bytes: 200,
        producers: 2,
        consumers: 2,
        batch_bytes: 16 << 10,
        warmup: Duration::from_millis(300),
        duration: Duration::from_secs(2),
        drain_timeout: Duration::from_secs(20),
        ..WorkloadOptions::default()
    }
}

#[test]
fn every_acknowledged_record_is_consumed_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    // Unthrottled, acks=1, uncompressed; then paced, acks=all, zstd, keyed.
    let unthrottled = short_workload(&broker);
    let paced = WorkloadOptions {
        topic: "bench-e2e-paced".into(),
        rate: 20_000,
        acks: -1,
        compression: Compression::Zstd,
        keys: 100,
        linger: Duration::from_millis(2),
        ..short_workload(&broker)
    };
    // An fsync per append (the latency workload's setting): fetches at the
    // tail must stop before a batch whose write is still in flight.
    let synced = WorkloadOptions {
        topic: "bench-e2e-synced".into(),
        rate: 20_000,
        acks: -1,
        linger: Duration::ZERO,
        topic_configs: vec![("flush.messages".into(), "1".into())],
        ..short_workload(&broker)
    };
    for options in [unthrottled, paced, synced] {
        let report = run(options, |line| println!("{line}")).expect("the workload runs");
        println!("{}", report.to_text());
        let verification = report.verification.expect("producers and consumers ran");
        assert!(verification.acknowledged > 1000, "{verification:?}");
        assert!(verification.exactly_once(), "{verification:?}");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert!(report.ack().samples > 0);
        assert!(report.end_to_end().samples > 0);
    }
}
