//! The README quickstart, run with Debian's `kcat` (librdkafka 2.0.2):
//! produce three lines, consume them back, list metadata.

use std::io::Write;
use std::process::{Command, Stdio};

use brook_tests::broker::Broker;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

fn kcat(args: &[&str], input: Option<&str>) -> String {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat is installed (.ci/run installs Debian's kcat)");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "kcat {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn the_readme_quickstart_works_with_debian_kcat() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &["--advertised-host", "localhost"]);
    let address = broker.address.replace("127.0.0.1", "localhost");
    kcat(
        &["-b", &address, "-P", "-t", "quickstart", "-K:"],
        Some("one:hello\ntwo:brook\nthree:world\n"),
    );
    let consumed = kcat(
        &[
            "-b",
            &address,
            "-C",
            "-t",
            "quickstart",
            "-e",
            "-f",
            "%k=%s@%o\n",
        ],
        None,
    );
    assert_eq!(consumed, "one=hello@0\ntwo=brook@1\nthree=world@2\n");
    let metadata = kcat(&["-b", &address, "-L", "-t", "quickstart"], None);
    assert!(
        metadata.contains("topic \"quickstart\" with 1 partitions"),
        "{metadata}"
    );
    assert!(metadata.contains("broker 0 at localhost:"), "{metadata}");
}
