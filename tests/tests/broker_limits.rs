//! The broker raises its open-file limit at start: every partition holds
//! three files open, so the common default (a few thousand, or 20,000 here)
//! would stop a broker long before the 10,000 partitions users expect.
//!
//! Its own test binary, not a module of `e2e`: it lowers the test process's
//! own limit for a moment, and tests running beside it in one process hold
//! more than 1,024 descriptors at times (3,539 seen in `e2e`).

use brook_tests::broker::Broker;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

/// (soft, hard) "Max open files" of `pid`.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut numbers = line
        .split_whitespace()
        .filter_map(|field| field.parse::<u64>().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn the_open_file_limit_is_raised_as_far_as_allowed() {
    // Start the broker with a small soft limit (as a default shell gives,
    // often 1024), which it inherits.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid rlimit pointers; lowering the soft limit is always allowed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let lowered = libc::rlimit {
            rlim_cur: 1024.min(limit.rlim_max),
            rlim_max: limit.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lowered), 0);
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 1, &[]);
    // SAFETY: restores the limit read above.
    unsafe {
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    let (broker_soft, _) = open_file_limits(broker.pid());
    assert!(
        broker_soft >= limit.rlim_max,
        "broker soft limit {broker_soft}, expected at least the hard limit {}",
        limit.rlim_max
    );
}
