//! Issue 32 §2: connections between brokers have their own liveness bound.
//! A connection whose peer has gone silent (a partition that dropped its
//! packets both ways, a peer or middlebox that lost its state without a
//! reset) is given up within seconds and replaced, instead of waiting on
//! TCP's retransmission backoff: after a heal such connections kept nodes
//! out of the quorum, or a follower's fetch idle, for 10-37 s. On a busy
//! machine, as every fault test here.

use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use brook_tests::load::Busy;
use brook_tests::netns::Network;

use crate::cluster_partition::{produce_to_all, silenced_follower};
use crate::cluster_replication::QUICK_FENCING;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// The controller listener's port in every namespace.
const CONTROLLER_PORT: u16 = 9093;

/// Voter `voter`'s log end as the active controller reports it through
/// node `asked` (DescribeQuorum), with the metadata log's high watermark.
fn voter_progress(cluster: &Cluster, asked: usize, voter: usize) -> Option<(i64, i64)> {
    let response = cluster.described_quorum(asked, 1)?;
    let partition = response.topics.first()?.partitions.first()?;
    let end = partition
        .current_voters
        .iter()
        .find(|state| state.replica_id.0 == voter as i32)?
        .log_end_offset;
    Some((end, partition.high_watermark))
}

/// A voter's connections to the active controller's listener go silent
/// for good (its Raft messages to the controller and its broker session
/// vanish; new connections pass). Its liveness bound gives them up and it
/// connects again, so the controller hears it again: the voter's log end
/// reaches the metadata log's high watermark as the controller tells it.
/// Without the bound, its answers to the controller sat in a connection
/// retransmitting for a quarter of an hour, and the controller never saw it
/// catch up.
#[test]
fn a_voter_whose_connections_to_the_controller_went_silent_is_heard_again() {
    let _busy = Busy::start();
    let network = Network::create(3, 3);
    let root = tempfile::tempdir().unwrap();
    let (cluster, _) = Cluster::formed_in(BROOK, root.path(), &network, 3, &QUICK_FENCING);
    let controller = cluster.quorum_leader(0).expect("a controller");
    let voter = (controller + 1) % 3;
    let silenced = network.silence_connections(voter, controller, CONTROLLER_PORT);
    assert!(
        !silenced.is_empty(),
        "node {voter} has no connection to the controller"
    );
    let silenced_at = Instant::now();
    // Metadata records the silenced voter must take and answer for.
    let mut stream = brook_tests::raw::connect(&cluster.nodes[controller]);
    for index in 0..3 {
        brook_tests::raw::create_topic(&mut stream, &format!("after-silence-{index}"), 1);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let progress = voter_progress(&cluster, controller, voter);
        let renewed = network
            .established(voter, controller, CONTROLLER_PORT)
            .iter()
            .any(|port| !silenced.contains(port));
        if renewed && progress.is_some_and(|(end, high_watermark)| end >= high_watermark) {
            println!(
                "node {voter} heard again {:?} after its connections went silent: {progress:?}",
                silenced_at.elapsed()
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {voter}: new connection {renewed}, progress {progress:?}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A follower's fetch connection to its leader goes silent while a fetch
/// waits for its answer, and `replica.socket.timeout.ms` is ten minutes:
/// the connection's liveness bound (a few seconds of no acknowledgement,
/// probed while idle) gives it up and the follower fetches over a new one,
/// so an `acks=all` write that needs it is acknowledged within the
/// produce's 10 s. Without the bound the fetch waited for the socket
/// timeout.
#[test]
fn a_silent_fetch_connection_is_given_up_long_before_the_socket_timeout() {
    let _busy = Busy::start();
    let root = tempfile::tempdir().unwrap();
    let (_network, cluster, _) = silenced_follower(4, root.path(), 600_000, "idle");
    produce_to_all(&cluster, "idle", "after");
}

/// The threads of process `pid` whose name (`/proc/…/comm`) starts with
/// `prefix`.
fn threads_named(pid: u32, prefix: &str) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|comm| comm.starts_with(prefix))
                })
                .filter_map(|task| task.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Puts thread `tid` in scheduling `policy` (priority 0): `SCHED_IDLE`
/// runs it only when its core has nothing else to run.
fn set_policy(tid: i32, policy: libc::c_int) {
    let parameters = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param; an unknown tid only makes the call fail.
    let result = unsafe { libc::sched_setscheduler(tid, policy, &parameters) };
    assert_eq!(
        result,
        0,
        "sched_setscheduler({tid}): {}",
        std::io::Error::last_os_error()
    );
}

/// The active controller and its epoch (the metadata log leader's Raft
/// term) as DescribeQuorum through node `asked` says.
fn controller_and_epoch(cluster: &Cluster, asked: usize) -> Option<(i32, i32)> {
    let response = cluster.described_quorum(asked, 1)?;
    let partition = response.topics.first()?.partitions.first()?;
    (response.error_code == 0 && partition.error_code == 0)
        .then_some((partition.leader_id.0, partition.leader_epoch))
}

/// The active controller's node has its data path starved: its shard's
/// thread only runs when its core has nothing else to (SCHED_IDLE, beside
/// the busy machine's spinning threads), as a shard hogged by its data
/// path would leave anything sharing its thread waiting. The controller
/// voter runs on a thread of its own, so it keeps the quorum: no other
/// voter is elected and the epoch stays the same for the whole starvation.
/// With the voter on shard 0, its ticks and heartbeats to the other voters
/// stalled and they elected another controller within seconds.
#[test]
fn a_controller_whose_data_path_is_starved_keeps_its_quorum() {
    let _busy = Busy::start();
    let root = tempfile::tempdir().unwrap();
    let (cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    let controller = cluster.quorum_leader(0).expect("a controller");
    let asked = (controller + 1) % 3;
    let before = controller_and_epoch(&cluster, asked).expect("DescribeQuorum answered");
    // glommio names an executor's thread and its blocking pool's
    // "<name>-<executor id>".
    let shard = threads_named(cluster.nodes[controller].pid(), "brook-shard-0-");
    assert!(!shard.is_empty(), "node {controller} has no shard thread");
    shard
        .iter()
        .for_each(|thread| set_policy(*thread, libc::SCHED_IDLE));
    let length = Duration::from_secs(brook_tests::load::rounds(20, 120) as u64);
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < length {
        let now = controller_and_epoch(&cluster, asked);
        if seen.last().is_none_or(|(_, last)| *last != now) {
            seen.push((started.elapsed(), now));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    shard
        .iter()
        .for_each(|thread| set_policy(*thread, libc::SCHED_OTHER));
    println!(
        "node {controller}'s shard starved for {length:?}: controller and epoch through node {asked}: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, now)| *now == Some(before)),
        "the controller (node {controller}, epoch {}) changed while its shard was starved: {seen:?}\n{}",
        before.1,
        cluster.logs()
    );
}
