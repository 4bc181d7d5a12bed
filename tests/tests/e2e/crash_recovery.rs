//! Acceptance 4 of the storage engine: a child process appends with fsync and
//! prints each acknowledged batch; it is SIGKILLed at random moments (≥ 20
//! times); after each kill the log is reopened and every acknowledged batch
//! must be intact, with no gap anywhere before the log end.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use brook_engine::log::batch::{BatchView, Batches};
use brook_engine::log::config::LogConfig;
use brook_engine::log::records::record_stamps;
use brook_engine::types::{Offset, TopicPartition};
use brook_shards::runtime::block_on;
use brook_shards::storage::{LogData, ReadOptions, Store, StoreOptions};
use brook_tests::crash::{PARTITION, TOPIC, record_value};

const KILLS: usize = 24;
const ACKS_BEFORE_KILL_MIN: usize = 5;

/// An acknowledged batch: its last offset and id.
type Acks = BTreeMap<i64, (i64, String)>;

/// A small deterministic generator, seeded from the clock (the seed is printed).
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs the appender until it has acknowledged a few batches, lets it run a
/// random while longer, kills it, and returns what it acknowledged.
fn run_and_kill(root: &Path, run: usize, random: &mut Xorshift) -> Vec<(i64, i64, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash_appender"))
        .arg(root)
        .arg(run.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the appender");
    let stdout = child.stdout.take().expect("piped stdout");
    let (sender, receiver) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut acks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acks.len() < ACKS_BEFORE_KILL_MIN && Instant::now() < deadline {
        if let Ok(line) = receiver.recv_timeout(Duration::from_millis(100)) {
            acks.push(line);
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the appender died on its own (run {run})"
        );
    }
    assert!(
        acks.len() >= ACKS_BEFORE_KILL_MIN,
        "the appender acknowledged nothing in 60 s (run {run})"
    );
    std::thread::sleep(Duration::from_millis(random.next() % 250));
    child.kill().expect("SIGKILL");
    child.wait().expect("reaping the appender");
    reader.join().expect("the reader thread");
    acks.extend(receiver.try_iter());
    acks.iter()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            (fields.next() == Some("ack")).then_some(())?;
            let base = fields.next()?.parse().ok()?;
            let last = fields.next()?.parse().ok()?;
            Some((base, last, fields.next()?.to_owned()))
        })
        .collect()
}

/// Reopens the log as the broker would after a crash and reads all of it.
fn reopen_and_read(root: PathBuf) -> (Offset, Vec<u8>) {
    block_on(async move {
        let store = Store::open(StoreOptions::in_dir(root, 0).unwrap())
            .await
            .unwrap();
        assert!(
            !store.was_clean(),
            "a killed process leaves no clean-shutdown marker"
        );
        let config = LogConfig {
            segment_bytes: 256 << 10,
            ..LogConfig::default()
        };
        let log = store
            .open_partition(&TopicPartition::new(TOPIC, PARTITION), config, 0)
            .await
            .unwrap();
        let mut bytes = Vec::new();
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let options = ReadOptions {
                max_bytes: 1 << 20,
                max_offset: Offset(i64::MAX),
                allow_file_range: false,
            };
            let outcome = log.read(offset, options).await.unwrap();
            match outcome.data {
                LogData::Memory(pieces) => pieces
                    .iter()
                    .for_each(|piece| bytes.extend_from_slice(piece)),
                other => panic!("expected bytes, got {other:?}"),
            }
            offset = outcome.next_offset;
        }
        let end = log.log_end_offset();
        log.close().await.unwrap();
        (end, bytes)
    })
}

/// Every batch is valid and starts where the previous one ended; every
/// acknowledged batch is there with its own records.
fn check(acks: &Acks, end: Offset, bytes: &[u8], run: usize) {
    let mut next = 0i64;
    let mut found = BTreeMap::new();
    for batch in Batches::new(bytes) {
        let (_, batch): (usize, BatchView<'_>) =
            batch.unwrap_or_else(|error| panic!("run {run}: unreadable batch: {error}"));
        batch
            .verify_crc()
            .unwrap_or_else(|error| panic!("run {run}: batch at {}: {error}", batch.base_offset()));
        assert_eq!(
            batch.base_offset().0,
            next,
            "run {run}: a gap or overlap before offset {next}"
        );
        next = batch.last_offset().0 + 1;
        found.insert(batch.base_offset().0, batch);
    }
    assert_eq!(
        Offset(next),
        end,
        "run {run}: the batches end at the log end"
    );
    for (base, (last, id)) in acks {
        let batch = found
            .get(base)
            .unwrap_or_else(|| panic!("run {run}: acknowledged batch {id} at {base} is gone"));
        assert_eq!(batch.last_offset().0, *last, "run {run}: batch {id}");
        let stamps = record_stamps(batch).unwrap();
        assert_eq!(stamps.len() as i64, last - base + 1);
        let sequence: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
        let payload = &batch.records_bytes();
        for index in 0..stamps.len() {
            let expected = record_value(id, index, sequence);
            assert!(
                payload
                    .windows(expected.len())
                    .any(|window| window == expected),
                "run {run}: record {index} of {id} differs"
            );
        }
    }
}

#[test]
fn acknowledged_batches_survive_repeated_kill_9() {
    let root = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test seed {seed}");
    let mut random = Xorshift(seed);
    let mut acks = Acks::new();
    for run in 0..KILLS {
        for (base, last, id) in run_and_kill(root.path(), run, &mut random) {
            acks.insert(base, (last, id));
        }
        let (end, bytes) = reopen_and_read(root.path().to_owned());
        check(&acks, end, &bytes, run);
        let acked_end = acks.values().map(|(last, _)| last + 1).max().unwrap_or(0);
        assert!(
            end.0 >= acked_end,
            "run {run}: log end {end} is before acknowledged offset {acked_end}"
        );
    }
    assert!(
        acks.len() > KILLS * ACKS_BEFORE_KILL_MIN,
        "{} acknowledged batches",
        acks.len()
    );
}
