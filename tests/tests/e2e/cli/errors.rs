//! The CLI's failures (acceptance check 6): an unknown topic, a broker
//! that refuses or never answers, a bad `--time` — each exits non-zero
//! with one clear line on stderr, within the timeout, and no panic.

use std::net::TcpListener;

use super::common::{Run, brook, brook_alone, start_broker};

/// One line on stderr, starting `brook <subcommand>:` and containing `needle`.
fn one_line_error(run: &Run, subcommand: &str, needle: &str) {
    assert!(!run.status.success(), "should fail: {run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {run:?}");
    assert!(
        lines[0].starts_with(&format!("brook {subcommand}: ")) && lines[0].contains(needle),
        "{needle:?} in {:?}",
        lines[0]
    );
    assert!(!run.stderr.contains("panicked"), "{run:?}");
}

#[test]
fn unknown_topic_is_named_with_kafkas_error() {
    let (_dir, broker) = start_broker();
    let run = brook(&broker, &["offsets", "no-such-topic"]);
    one_line_error(&run, "offsets", "UNKNOWN_TOPIC_OR_PARTITION (3)");
    assert!(run.stderr.contains("no-such-topic"), "{run:?}");
    // What to do about it, on the same line.
    assert!(
        run.stderr
            .contains("the topic does not exist: `brook topic create <topic>` creates it"),
        "{run:?}"
    );
}

#[test]
fn invalid_time_is_refused_before_connecting() {
    let run = brook_alone(
        &[
            "offsets",
            "t",
            "--time",
            "yesterday",
            "--brokers",
            "127.0.0.1:1",
        ],
        None,
    );
    assert_eq!(run.status.code(), Some(2), "a usage error: {run:?}");
    assert!(
        run.stderr.contains("'yesterday' is not -1 (latest)"),
        "{run:?}"
    );
    assert!(!run.stderr.contains("panicked"), "{run:?}");
}

#[test]
fn a_refused_connection_fails_at_once_with_one_line() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    let run = brook_alone(&["offsets", "t", "--brokers", &address], None);
    one_line_error(&run, "offsets", &address);
    // Which address, from where, and what would make it answer.
    let hint = format!("is a broker running at {address} (--brokers)? `brook serve` starts one");
    assert!(run.stderr.contains(&hint), "{run:?}");
    let from_env = run_with_brokers_env(&address);
    one_line_error(&from_env, "offsets", &format!("{address} (BROOK_BROKERS)"));
}

/// `brook offsets t` with `BROOK_BROKERS=address`.
fn run_with_brokers_env(address: &str) -> Run {
    let mut command = std::process::Command::new(super::common::BROOK);
    command.args(["offsets", "t"]).env("BROOK_BROKERS", address);
    super::common::run(&mut command, b"")
}

#[test]
fn a_silent_broker_fails_within_the_timeout() {
    // The kernel completes the handshake into the backlog; nobody answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    // The same command with a long timeout, started first: the short one
    // must be done while it still waits (an order, not a timed bound).
    let mut patient = std::process::Command::new(super::common::BROOK)
        .args(["offsets", "t", "--brokers", &address, "--timeout", "60s"])
        .env_remove("BROOK_BROKERS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run = brook_alone(
        &["offsets", "t", "--brokers", &address, "--timeout", "1s"],
        None,
    );
    one_line_error(&run, "offsets", "within 1s");
    let still_waiting = patient.try_wait().unwrap().is_none();
    let _ = patient.kill();
    let _ = patient.wait();
    assert!(still_waiting, "the 60s run ended before the 1s one");
    drop(listener);
}

/// `brook --help` says how the client commands find a broker (the flag is
/// on each of them, not on `brook` itself).
#[test]
fn top_level_help_says_how_client_commands_find_brokers() {
    let run = brook_alone(&["--help"], None).ok();
    assert!(
        run.stdout.contains("--brokers HOST:PORT") && run.stdout.contains("BROOK_BROKERS"),
        "{run:?}"
    );
}
