//! `run` over real files in a temporary directory: a segment of three
//! batches (plain, zstd, a COMMIT marker) with the index the broker would
//! write, in text and JSON, then the ways a file can be wrong.

use std::path::{Path, PathBuf};

use brook_engine::log::batch::{BatchView, Compression, set_base_offset};
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::control::{EndTxnMarker, MarkerKind, encode_end_txn_marker_batch};
use brook_engine::types::{Offset, TimestampMs};
use bytes::Bytes;

use super::*;

const BASE: i64 = 100;

fn record(key: &str, value: &[u8], timestamp: i64) -> NewRecord {
    NewRecord {
        key: Some(Bytes::copy_from_slice(key.as_bytes())),
        value: Some(Bytes::copy_from_slice(value)),
        timestamp: TimestampMs(timestamp),
        headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
    }
}

/// Writes `<dir>/00000000000000000100.{log,index,timeindex}`; returns the
/// log's path and each batch's position.
fn write_segment(dir: &Path) -> (PathBuf, Vec<u32>) {
    let plain = encode_batch(
        &[
            record("k1", b"hello", 1_000),
            record("k2", &[0xff, 0xfe], 1_005),
        ],
        &BatchOptions::default(),
    );
    let zstd = encode_batch(
        &[record("k3", b"squeezed", 1_010)],
        &BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
    );
    let marker = EndTxnMarker {
        kind: MarkerKind::Commit,
        coordinator_epoch: 7,
    };
    let commit = encode_end_txn_marker_batch(5, 0, TimestampMs(1_020), marker);
    let mut log = Vec::new();
    let mut positions = Vec::new();
    let mut next_offset = BASE;
    for mut batch in [plain, zstd, commit] {
        set_base_offset(&mut batch, Offset(next_offset)).unwrap();
        next_offset = BatchView::parse_exact(&batch).unwrap().next_offset().0;
        positions.push(log.len() as u32);
        log.extend_from_slice(&batch);
    }
    let path = dir.join("00000000000000000100.log");
    std::fs::write(&path, &log).unwrap();
    // Entries as the indexer writes them: a batch's last offset → its position.
    let mut index = Vec::new();
    for (last_relative, position) in [(1u32, positions[0]), (2, positions[1])] {
        index.extend_from_slice(&last_relative.to_be_bytes());
        index.extend_from_slice(&position.to_be_bytes());
    }
    std::fs::write(path.with_extension("index"), index).unwrap();
    let mut time = 1_010i64.to_be_bytes().to_vec();
    time.extend_from_slice(&2u32.to_be_bytes());
    std::fs::write(path.with_extension("timeindex"), time).unwrap();
    (path, positions)
}

/// Runs the dump; returns (clean, stdout, stderr).
fn dump(files: &[&Path], options: DumpOptions) -> (bool, String, String) {
    let files: Vec<PathBuf> = files.iter().map(|file| file.to_path_buf()).collect();
    let (mut out, mut errors) = (Vec::new(), Vec::new());
    let clean = run(&files, &options, &mut out, &mut errors);
    (
        clean,
        String::from_utf8(out).unwrap(),
        String::from_utf8(errors).unwrap(),
    )
}

fn text() -> DumpOptions {
    DumpOptions::default()
}

fn json() -> DumpOptions {
    DumpOptions {
        format: OutputFormat::Json,
        ..DumpOptions::default()
    }
}

#[test]
fn a_log_prints_one_line_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (log, positions) = write_segment(dir.path());
    let (clean, out, errors) = dump(&[&log], text());
    assert!(clean, "{errors}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], format!("Dumping {}", log.display()));
    assert!(
        lines[1].starts_with("baseOffset: 100 lastOffset: 101 count: 2 "),
        "{out}"
    );
    assert!(
        lines[1].contains(" position: 0 firstTimestamp: 1000 maxTimestamp: 1005 "),
        "{out}"
    );
    assert!(lines[1].contains("compresscodec: none crc: 0x"), "{out}");
    assert!(lines[1].ends_with("isvalid: true"), "{out}");
    assert!(lines[2].contains("compresscodec: zstd"), "{out}");
    assert!(
        lines[2].contains(&format!("position: {}", positions[1])),
        "{out}"
    );
    assert!(
        lines[3].contains("isTransactional: true isControl: true"),
        "{out}"
    );
}

#[test]
fn records_are_printed_decompressed_with_markers() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = write_segment(dir.path());
    let options = DumpOptions {
        records: true,
        ..text()
    };
    let (clean, out, errors) = dump(&[&log], options);
    assert!(clean, "{errors}");
    let records: Vec<&str> = out.lines().filter(|line| line.starts_with("| ")).collect();
    assert_eq!(
        records[0],
        r#"| offset: 100 timestamp: 1000 sequence: -1 keySize: 2 valueSize: 5 key: "k1" value: "hello" headers: ["h": "v"]"#
    );
    assert!(records[1].contains(r#"key: "k2" value: 0xfffe"#), "{out}");
    assert!(records[2].contains(r#"offset: 102 "#), "{out}");
    assert!(records[2].contains(r#"value: "squeezed""#), "{out}");
    assert!(
        records[3].ends_with("endTxnMarker: COMMIT coordinatorEpoch: 7"),
        "{out}"
    );
}

#[test]
fn json_is_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = write_segment(dir.path());
    let options = DumpOptions {
        records: true,
        ..json()
    };
    let (clean, out, errors) = dump(&[&log], options);
    assert!(clean, "{errors}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with(r#"{"type":"file","file":"#), "{out}");
    assert!(
        lines[1].starts_with(r#"{"type":"batch","baseOffset":100,"lastOffset":101,"count":2,"#),
        "{out}"
    );
    assert!(lines[1].contains(r#""crcValid":true"#), "{out}");
    assert!(
        lines[1].contains(r#"{"offset":101,"timestamp":1005,"sequence":-1,"key":"k2","value":{"hex":"fffe"},"headers":[{"key":"h","value":"v"}]}"#),
        "{out}"
    );
    assert!(lines[2].contains(r#""compression":"zstd""#), "{out}");
    assert!(
        lines[3].contains(r#""endTxnMarker":"COMMIT","coordinatorEpoch":7"#),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .all(|line| line.starts_with('{') && line.ends_with('}'))
    );
}

#[test]
fn indexes_print_absolute_offsets_and_verify_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (log, positions) = write_segment(dir.path());
    let (index, time_index) = (log.with_extension("index"), log.with_extension("timeindex"));
    let (clean, out, errors) = dump(&[&index, &time_index], text());
    assert!(clean, "{errors}");
    assert!(
        out.contains("offset: 101 relativeOffset: 1 position: 0\n"),
        "{out}"
    );
    let second = format!("offset: 102 relativeOffset: 2 position: {}\n", positions[1]);
    assert!(out.contains(&second), "{out}");
    assert!(
        out.contains("timestamp: 1010 offset: 102 relativeOffset: 2\n"),
        "{out}"
    );
    let verify = DumpOptions {
        verify: true,
        ..text()
    };
    let (clean, out, errors) = dump(&[&index, &time_index, &log], verify);
    assert!(clean, "{out}{errors}");
    assert!(out.contains(": 0 mismatches"), "{out}");
}

#[test]
fn a_corrupted_index_entry_is_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = write_segment(dir.path());
    let index = log.with_extension("index");
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[12..16].copy_from_slice(&7u32.to_be_bytes()); // entry 1's position
    std::fs::write(&index, bytes).unwrap();
    let verify = DumpOptions {
        verify: true,
        ..json()
    };
    let (clean, out, errors) = dump(&[&index], verify);
    assert!(!clean);
    assert!(out.contains(r#"{"type":"mismatch","entry":1,"reason":"offset 102 maps to position 7, which is not a batch boundary"}"#), "{out}");
    assert!(
        errors.ends_with("1 of 2 entries do not match\n"),
        "{errors}"
    );
}

#[test]
fn a_truncated_log_reports_the_position_after_the_batches_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (log, positions) = write_segment(dir.path());
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..positions[2] as usize + 20]).unwrap();
    let (clean, out, errors) = dump(&[&log], text());
    assert!(!clean);
    assert_eq!(out.lines().count(), 3, "two batches still print: {out}");
    let expected = format!(
        "brook log dump: {}: truncated at position {}: need 78 bytes, have 20\n",
        log.display(),
        positions[2]
    );
    assert_eq!(errors, expected);
}

/// A live segment's `.log` ends in page padding and the space reserved
/// ahead of its appends: zeros after the last batch are its end, not damage;
/// anything else after zeros still is.
#[test]
fn zeros_after_the_last_batch_end_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (log, positions) = write_segment(dir.path());
    let bytes = std::fs::read(&log).unwrap();
    for zeros in [5, 4096, 3 << 20] {
        let mut reserved = bytes.clone();
        reserved.resize(bytes.len() + zeros, 0);
        std::fs::write(&log, &reserved).unwrap();
        let (clean, out, errors) = dump(&[&log], text());
        assert!(clean, "{zeros} zeros: {errors}");
        assert_eq!(
            out.lines().count(),
            positions.len() + 1,
            "{zeros} zeros: {out}"
        );
        let last = reserved.len() - 1;
        reserved[last] = 1;
        std::fs::write(&log, &reserved).unwrap();
        let (clean, _, errors) = dump(&[&log], text());
        assert!(
            !clean && errors.lines().count() == 1,
            "{zeros} zeros, then a 1: {errors}"
        );
    }
}

#[test]
fn corrupt_bytes_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let (log, positions) = write_segment(dir.path());
    let original = std::fs::read(&log).unwrap();
    // Flip each byte of the first two batches in turn: every outcome is a
    // clean line or a one-line error, never a panic.
    for at in 0..positions[2] as usize {
        let mut bytes = original.clone();
        bytes[at] ^= 0x5a;
        std::fs::write(&log, &bytes).unwrap();
        let options = DumpOptions {
            records: true,
            ..text()
        };
        let (_, _, errors) = dump(&[&log], options);
        assert!(errors.lines().count() <= 1, "byte {at}: {errors}");
    }
}

#[test]
fn a_crc_mismatch_prints_and_fails_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = write_segment(dir.path());
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[70] ^= 1; // inside the first batch's records
    std::fs::write(&log, &bytes).unwrap();
    let (_, out, _) = dump(&[&log], text());
    assert!(out.contains("isvalid: false"), "{out}");
    let verify = DumpOptions {
        verify: true,
        ..text()
    };
    let (clean, _, errors) = dump(&[&log], verify);
    assert!(!clean);
    assert!(errors.contains("1 of 3 entries do not match"), "{errors}");
}

#[test]
fn missing_files_and_unknown_kinds_are_one_line_each_and_the_rest_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = write_segment(dir.path());
    let missing = dir.path().join("00000000000000000000.log");
    let other = dir.path().join("leader-epoch-checkpoint");
    std::fs::write(&other, "0\n").unwrap();
    let (clean, out, errors) = dump(&[&missing, &other, &log], text());
    assert!(!clean);
    let lines: Vec<&str> = errors.lines().collect();
    assert_eq!(lines.len(), 2, "{errors}");
    assert!(lines[0].starts_with(&format!(
        "brook log dump: {}: cannot open: ",
        missing.display()
    )));
    assert!(lines[1].ends_with("unknown file kind (expected .log, .index or .timeindex)"));
    assert_eq!(out.lines().count(), 4, "the good file is dumped: {out}");
}

#[test]
fn strings_are_quoted_onto_one_line() {
    assert_eq!(quote("plain"), r#""plain""#);
    assert_eq!(quote("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
    assert_eq!(quote("\u{8}\u{c}\t\r\u{7f}"), r#""\u0008\u000c\t\r\u007f""#);
    assert_eq!(quote("µs ≤"), r#""µs ≤""#);
    assert_eq!(
        quote("x\u{2028}y\u{2029}z"),
        r#""x\u2028y\u2029z""#,
        "line and paragraph separators break JavaScript and str.splitlines"
    );
}

#[test]
fn json_lines_are_compact_and_end_in_a_newline() {
    let mut out = Vec::new();
    let line = FileLine {
        file: "a\u{2028}.log".to_owned(),
    };
    write_json_line(&mut out, &line).unwrap();
    assert_eq!(out, b"{\"type\":\"file\",\"file\":\"a\\u2028.log\"}\n");
}
