//! `brook bench run all` end to end, shrunk to seconds: every named workload
//! starts its own broker (this build's `brook`), runs, and reports its
//! figures without failing, so the commands bench/RESULTS.md quotes keep
//! working. The figures themselves are not judged here (no timed asserts).

use std::process::Command;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

#[test]
fn every_named_workload_runs_against_its_own_broker() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BROOK)
        .args(["bench", "run", "all", "--no-ceiling", "--no-drop-caches"])
        .arg("--dir")
        .arg(dir.path())
        .args(["--duration", "1s", "--warmup", "0s", "--rate", "2000"])
        .args(["--catchup-bytes", "16MiB", "--recovery-bytes", "32MiB"])
        .args(["--partitions", "40"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    let progress = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nreport:\n{report}\nprogress:\n{progress}",
        output.status
    );
    for section in [
        "== throughput (",
        "== latency (",
        "== catchup (",
        "== many-partitions (",
        "== recovery (",
        "== scaling (",
    ] {
        assert!(report.contains(section), "{section} missing:\n{report}");
    }
    assert!(!report.contains("FAILED"), "{report}");
    assert!(report.contains("produce throughput"), "{report}");
    assert!(
        report.contains("restart → Metadata + latest offsets"),
        "{report}"
    );
    // Every acknowledged record came back exactly once where consumers ran.
    assert!(!report.contains("exactly once: NO"), "{report}");
    assert!(report.contains("exactly once: yes"), "{report}");
    // Each workload's broker data was deleted; its log was kept.
    for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("broker-") {
            let left: Vec<_> = std::fs::read_dir(entry.path())
                .unwrap()
                .flatten()
                .map(|entry| entry.file_name())
                .collect();
            assert_eq!(
                left,
                vec![std::ffi::OsString::from("broker.log")],
                "{entry:?}"
            );
        }
    }
}
