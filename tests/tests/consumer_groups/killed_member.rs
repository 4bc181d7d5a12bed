//! A member that dies without leaving (SIGKILL, no LeaveGroup, no last
//! commit): its partitions move once its session times out, and their new
//! owners start at its last commit. The member is this test binary run
//! again as [`killable_member_process`], a process the test can kill.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::Message;

use crate::{
    Commit, LINGER, POLL, assigned, balanced, consumer, create_topic, duplicates, poll_for,
    poll_until, produce, records_to, sharing_the_cores, start_broker,
};

/// The killed member's session timeout: short, so the test is too.
const KILLED_SESSION_TIMEOUT_MS: u64 = 2_000;
/// Marks the lines of [`killable_member_process`] among the test harness's.
const CHILD_MARK: &str = "group-member> ";
const CHILD_TEST: &str = "killed_member::killable_member_process";
const CHILD_ADDRESS: &str = "BROOK_GROUP_MEMBER_ADDRESS";
const CHILD_TOPIC: &str = "BROOK_GROUP_MEMBER_TOPIC";
const CHILD_GROUP: &str = "BROOK_GROUP_MEMBER_GROUP";
/// The child member gives up by itself after this, should nobody kill it.
const CHILD_LIFETIME: Duration = Duration::from_secs(90);

/// The killed member's output, as the parent reads it.
#[derive(Debug, Default)]
struct ChildReport {
    assignment: BTreeSet<i32>,
    /// The last offset whose commit returned, by partition.
    committed: BTreeMap<i32, i64>,
    consumed: Vec<(i32, i64)>,
}

/// [`killable_member_process`] running as a child process; killed when
/// dropped.
struct ChildMember {
    process: Child,
    lines: mpsc::Receiver<String>,
    report: ChildReport,
}

impl ChildMember {
    fn start(address: &str, topic: &str, group: &str) -> ChildMember {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([
                CHILD_TEST,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ADDRESS, address)
            .env(CHILD_TOPIC, topic)
            .env(CHILD_GROUP, group)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the member process");
        let stdout = process.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        ChildMember {
            process,
            lines,
            report: ChildReport::default(),
        }
    }

    /// Takes in what the child printed since the last call.
    fn drain(&mut self) -> &ChildReport {
        while let Ok(line) = self.lines.try_recv() {
            let Some(at) = line.find(CHILD_MARK) else {
                continue;
            };
            let words: Vec<&str> = line[at + CHILD_MARK.len()..].split_whitespace().collect();
            let number = |index: usize| words[index].parse::<i64>().unwrap();
            match words.as_slice() {
                ["assignment", list] => {
                    self.report.assignment = list
                        .split(',')
                        .filter(|item| !item.is_empty() && *item != "-")
                        .map(|item| item.parse().unwrap())
                        .collect();
                }
                ["consumed", _, _] => self.report.consumed.push((number(1) as i32, number(2))),
                ["committed", _, _] => {
                    self.report.committed.insert(number(1) as i32, number(2));
                }
                _ => panic!("the member process said: {line}"),
            }
        }
        &self.report
    }

    /// SIGKILL: no LeaveGroup, no last commit.
    fn kill(&mut self) {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
    }
}

impl Drop for ChildMember {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Not a test: the group member that
/// `a_killed_member_loses_its_partitions_after_its_session_times_out` starts
/// as a process and kills. It commits each record whose payload starts with
/// "commit" once processed, and reports on stdout.
#[test]
#[ignore = "a child process of another test, which sets its environment"]
fn killable_member_process() {
    let (Ok(address), Ok(topic), Ok(group)) = (
        std::env::var(CHILD_ADDRESS),
        std::env::var(CHILD_TOPIC),
        std::env::var(CHILD_GROUP),
    ) else {
        eprintln!("{CHILD_TEST} runs only as the child of another test");
        return;
    };
    let session_timeout = KILLED_SESSION_TIMEOUT_MS.to_string();
    let member = consumer(
        &address,
        &group,
        "killed",
        &[("session.timeout.ms", &session_timeout)],
    );
    member.subscribe(&[topic.as_str()]).unwrap();
    let mut reported = String::new();
    let end = Instant::now() + CHILD_LIFETIME;
    while Instant::now() < end {
        let polled = member.poll(POLL);
        let assignment: Vec<String> = assigned(&member).iter().map(i32::to_string).collect();
        let assignment = if assignment.is_empty() {
            "-".to_owned()
        } else {
            assignment.join(",")
        };
        if assignment != reported {
            println!("{CHILD_MARK}assignment {assignment}");
            reported = assignment;
        }
        let Some(polled) = polled else { continue };
        let message = polled.expect("a record");
        let (partition, offset) = (message.partition(), message.offset());
        println!("{CHILD_MARK}consumed {partition} {offset}");
        if message.payload().unwrap_or_default().starts_with(b"commit") {
            member
                .commit_message(&message, CommitMode::Sync)
                .expect("committing");
            println!("{CHILD_MARK}committed {partition} {}", offset + 1);
        }
    }
}

#[test]
fn a_killed_member_loses_its_partitions_after_its_session_times_out() {
    const TOPIC: &str = "abandoned";
    const GROUP: &str = "killing";
    const COMMITTED: usize = 100;
    const UNCOMMITTED: usize = 20;
    let _cores = sharing_the_cores();
    let partitions: Vec<i32> = (0..6).collect();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    let mut child = ChildMember::start(&broker.address, TOPIC, GROUP);
    let first = consumer(&broker.address, GROUP, "first", &[]);
    let second = consumer(&broker.address, GROUP, "second", &[]);
    first.subscribe(&[TOPIC]).unwrap();
    second.subscribe(&[TOPIC]).unwrap();
    let survivors = [&first, &second];
    let mut log = Vec::new();
    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "two partitions each",
        |_| {
            let child_has = child.drain().assignment.clone();
            let mut all: BTreeSet<i32> = child_has.clone();
            all.extend(assigned(&first));
            all.extend(assigned(&second));
            balanced(&survivors, 2) && child_has.len() == 2 && all.len() == 6
        },
    );
    let child_partitions = child.drain().assignment.clone();
    let survivor_partitions: BTreeSet<i32> = survivors.iter().flat_map(|m| assigned(m)).collect();
    eprintln!("the child has {child_partitions:?}");

    // Every member processes and commits these records.
    produce(
        &broker,
        TOPIC,
        &records_to(&partitions, COMMITTED, "commit"),
    );
    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "the committed records",
        |log| {
            let report = child.drain();
            log.len() >= COMMITTED * survivor_partitions.len()
                && child_partitions
                    .iter()
                    .all(|p| report.committed.get(p) == Some(&(COMMITTED as i64)))
        },
    );
    // The child processes these but dies before committing them.
    let child_list: Vec<i32> = child_partitions.iter().copied().collect();
    produce(
        &broker,
        TOPIC,
        &records_to(&child_list, UNCOMMITTED, "hold"),
    );
    let last = (COMMITTED + UNCOMMITTED - 1) as i64;
    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "the child's uncommitted records",
        |_| {
            let report = child.drain();
            child_partitions
                .iter()
                .all(|p| report.consumed.contains(&(*p, last)))
        },
    );
    let committed_by_child = child.drain().committed.clone();
    let before_kill = log.len();
    child.kill();
    let killed = Instant::now();

    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "the child's partitions moved",
        |log| {
            balanced(&survivors, 3)
                && child_partitions
                    .iter()
                    .all(|p| log.iter().any(|d| d.partition == *p && d.offset == last))
        },
    );
    eprintln!(
        "the killed member's partitions were consumed again {:?} after the kill \
         (session.timeout.ms {KILLED_SESSION_TIMEOUT_MS})",
        killed.elapsed()
    );
    poll_for(&survivors, Commit::EachRecord, &mut log, LINGER);

    // The new owners start exactly at the child's last commit: the
    // uncommitted batch comes again, nothing committed does.
    let after_kill = &log[before_kill..];
    for partition in &child_partitions {
        let offsets: Vec<i64> = after_kill
            .iter()
            .filter(|d| d.partition == *partition)
            .map(|d| d.offset)
            .collect();
        assert_eq!(
            offsets.first().copied(),
            committed_by_child.get(partition).copied(),
            "partition {partition}: the new owner's first offset is the last commit"
        );
        let expected: Vec<i64> = (COMMITTED as i64..=last).collect();
        assert_eq!(offsets, expected, "partition {partition} after the kill");
    }
    assert!(
        log[..before_kill]
            .iter()
            .all(|d| survivor_partitions.contains(&d.partition)),
        "before the kill the survivors only read their own partitions"
    );
    assert_eq!(duplicates(&log), [], "nothing twice among the survivors");
    let child_report = child.drain();
    for partition in &child_partitions {
        let consumed: Vec<i64> = child_report
            .consumed
            .iter()
            .filter(|(p, _)| p == partition)
            .map(|(_, offset)| *offset)
            .collect();
        assert_eq!(
            consumed,
            (0..=last).collect::<Vec<_>>(),
            "the child read {partition}"
        );
    }
}
