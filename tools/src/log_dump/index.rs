//! `.index` and `.timeindex` files: their entries with absolute offsets, and
//! `--verify`, which checks them against the `.log` beside them as Kafka's
//! `kafka-dump-log --verify-index-only` does:
//!
//! - an offset entry must point at a batch boundary, and the batch there
//!   must end at the entry's offset (entries map a batch's *last* offset to
//!   its position, see `brook_engine::log::indexer`);
//! - a time entry's offset must lie in a batch whose maximum timestamp is
//!   the entry's timestamp;
//! - entries strictly increase (time entries' offsets never decrease).

use std::io::Write;
use std::path::{Path, PathBuf};

use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::index::{IndexEntry, OffsetIndexEntry, TimeIndexEntry, entries_from_bytes};
use brook_engine::types::Offset;
use serde::Serialize;

use crate::log_dump::reader::BatchReader;
use crate::log_dump::{
    DumpError, DumpOptions, FileReport, OutputFormat, write_json_line, write_line,
};

/// The largest index file read (Kafka's `segment.index.bytes` is 10 MiB).
pub const INDEX_BYTES_MAX: u64 = 1 << 30;

/// Where a batch of the `.log` lies and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSpan {
    pub position: u64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// An index entry that does not fit the log; in JSON, a line of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename = "mismatch")]
pub struct Mismatch {
    pub entry: usize,
    pub reason: String,
}

/// The other lines of an index's dump in JSON.
#[derive(Debug, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
enum IndexLine {
    IndexEntry {
        entry: usize,
        offset: i64,
        relative_offset: u32,
        position: u32,
    },
    TimeIndexEntry {
        entry: usize,
        timestamp: i64,
        offset: i64,
        relative_offset: u32,
    },
    Verified {
        log: String,
        entries: usize,
        mismatches: usize,
    },
}

/// Prints (or with `--verify`, checks) the index at `path`, of a segment
/// starting at `base_offset`.
pub fn dump_index(
    path: &Path,
    kind: SegmentFileKind,
    base_offset: Offset,
    options: &DumpOptions,
    out: &mut dyn Write,
) -> Result<FileReport, DumpError> {
    let bytes = read_index(path)?;
    match kind {
        SegmentFileKind::TimeIndex => {
            dump_entries::<TimeIndexEntry>(path, &bytes, base_offset, options, out)
        }
        _ => dump_entries::<OffsetIndexEntry>(path, &bytes, base_offset, options, out),
    }
}

/// What the dump needs of either kind of entry.
trait DumpedEntry: IndexEntry {
    fn text(&self, base_offset: Offset) -> String;
    fn json(&self, slot: usize, base_offset: Offset) -> IndexLine;
    fn verify(entries: &[Self], base_offset: Offset, batches: &[BatchSpan]) -> Vec<Mismatch>;
}

fn dump_entries<E: DumpedEntry>(
    path: &Path,
    bytes: &[u8],
    base_offset: Offset,
    options: &DumpOptions,
    out: &mut dyn Write,
) -> Result<FileReport, DumpError> {
    let whole = bytes.len() - bytes.len() % E::BYTES;
    let entries = entries_from_bytes::<E>(&bytes[..whole]).map_err(|error| DumpError::Corrupt {
        position: 0,
        reason: error.to_string(),
    })?;
    let entries = &entries[..used_entries(&bytes[..whole], E::BYTES)];
    let mut report = FileReport {
        entries: entries.len() as u64,
        mismatches: 0,
    };
    if options.verify {
        let log_path = path.with_extension("log");
        let batches = batch_spans(&log_path)?;
        let mismatches = E::verify(entries, base_offset, &batches);
        report.mismatches = mismatches.len() as u64;
        write_mismatches(&mismatches, &log_path, entries.len(), options.format, out)?;
    } else {
        for (slot, entry) in entries.iter().enumerate() {
            match options.format {
                OutputFormat::Text => write_line(out, &entry.text(base_offset))?,
                OutputFormat::Json => write_json_line(out, &entry.json(slot, base_offset))?,
            }
        }
    }
    if whole != bytes.len() {
        return Err(DumpError::Truncated {
            position: whole as u64,
            need: E::BYTES,
            have: bytes.len() - whole,
        });
    }
    Ok(report)
}

/// How many entries are in use: index files are preallocated with zeros
/// and trimmed when the segment is closed, so an index that was not
/// trimmed (a crash) ends in all-zero entries. Only the first entry may
/// legitimately be all zeros (offset 0 at position 0, or timestamp 0).
fn used_entries(bytes: &[u8], entry_bytes: usize) -> usize {
    let mut count = bytes.len() / entry_bytes;
    while count > 1
        && bytes[(count - 1) * entry_bytes..count * entry_bytes]
            .iter()
            .all(|byte| *byte == 0)
    {
        count -= 1;
    }
    count
}

fn read_index(path: &Path) -> Result<Vec<u8>, DumpError> {
    let io = |operation| move |source| DumpError::Io { operation, source };
    let bytes = std::fs::metadata(path).map_err(io("open"))?.len();
    if bytes > INDEX_BYTES_MAX {
        return Err(DumpError::Corrupt {
            position: 0,
            reason: format!("index file of {bytes} bytes is over {INDEX_BYTES_MAX}"),
        });
    }
    std::fs::read(path).map_err(io("read"))
}

/// Every batch of the `.log` at `log_path`, as spans.
fn batch_spans(log_path: &Path) -> Result<Vec<BatchSpan>, DumpError> {
    let in_log = |error: DumpError| DumpError::Log {
        path: PathBuf::from(log_path),
        source: Box::new(error),
    };
    let mut reader = BatchReader::open(log_path).map_err(in_log)?;
    let mut spans = Vec::new();
    while let Some((position, batch)) = reader.next_batch().map_err(in_log)? {
        spans.push(BatchSpan {
            position,
            base_offset: batch.base_offset().0,
            last_offset: batch.last_offset().0,
            max_timestamp: batch.max_timestamp().0,
        });
    }
    Ok(spans)
}

fn write_mismatches(
    mismatches: &[Mismatch],
    log_path: &Path,
    entries: usize,
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<(), DumpError> {
    for mismatch in mismatches {
        match format {
            OutputFormat::Text => write_line(
                out,
                &format!("mismatch: entry {}: {}", mismatch.entry, mismatch.reason),
            )?,
            OutputFormat::Json => write_json_line(out, mismatch)?,
        }
    }
    match format {
        OutputFormat::Text => write_line(
            out,
            &format!(
                "verified {entries} entries against {}: {} mismatch{}",
                log_path.display(),
                mismatches.len(),
                if mismatches.len() == 1 { "" } else { "es" }
            ),
        ),
        OutputFormat::Json => write_json_line(
            out,
            &IndexLine::Verified {
                log: log_path.display().to_string(),
                entries,
                mismatches: mismatches.len(),
            },
        ),
    }
}

impl DumpedEntry for OffsetIndexEntry {
    fn text(&self, base_offset: Offset) -> String {
        format!(
            "offset: {} relativeOffset: {} position: {}",
            self.offset(base_offset).0,
            self.relative_offset.get(),
            self.position.get()
        )
    }

    fn json(&self, slot: usize, base_offset: Offset) -> IndexLine {
        IndexLine::IndexEntry {
            entry: slot,
            offset: self.offset(base_offset).0,
            relative_offset: self.relative_offset.get(),
            position: self.position.get(),
        }
    }

    fn verify(entries: &[Self], base_offset: Offset, batches: &[BatchSpan]) -> Vec<Mismatch> {
        let mut mismatches = Vec::new();
        for (slot, entry) in entries.iter().enumerate() {
            let (offset, position) = (entry.offset(base_offset).0, u64::from(entry.position.get()));
            let mut reason = None;
            if let Some(previous) = slot.checked_sub(1).map(|previous| entries[previous]) {
                if entry.relative_offset.get() <= previous.relative_offset.get()
                    || entry.position.get() <= previous.position.get()
                {
                    reason = Some(format!(
                        "offset {offset} at position {position} is not after the previous entry"
                    ));
                }
            }
            let found = batches.binary_search_by_key(&position, |span| span.position);
            reason = reason.or(match found {
                Err(_) => Some(format!(
                    "offset {offset} maps to position {position}, which is not a batch boundary"
                )),
                Ok(index) if batches[index].last_offset != offset => Some(format!(
                    "offset {offset} maps to position {position}, where the batch holds offsets {}..={}",
                    batches[index].base_offset, batches[index].last_offset
                )),
                Ok(_) => None,
            });
            if let Some(reason) = reason {
                mismatches.push(Mismatch {
                    entry: slot,
                    reason,
                });
            }
        }
        mismatches
    }
}

impl DumpedEntry for TimeIndexEntry {
    fn text(&self, base_offset: Offset) -> String {
        format!(
            "timestamp: {} offset: {} relativeOffset: {}",
            self.timestamp().0,
            self.offset(base_offset).0,
            self.relative_offset.get()
        )
    }

    fn json(&self, slot: usize, base_offset: Offset) -> IndexLine {
        IndexLine::TimeIndexEntry {
            entry: slot,
            timestamp: self.timestamp().0,
            offset: self.offset(base_offset).0,
            relative_offset: self.relative_offset.get(),
        }
    }

    fn verify(entries: &[Self], base_offset: Offset, batches: &[BatchSpan]) -> Vec<Mismatch> {
        let mut mismatches = Vec::new();
        for (slot, entry) in entries.iter().enumerate() {
            let (timestamp, offset) = (entry.timestamp().0, entry.offset(base_offset).0);
            let mut reason = None;
            if let Some(previous) = slot.checked_sub(1).map(|previous| entries[previous]) {
                if entry.timestamp.get() <= previous.timestamp.get()
                    || entry.relative_offset.get() < previous.relative_offset.get()
                {
                    reason = Some(format!(
                        "timestamp {timestamp} at offset {offset} is not after the previous entry"
                    ));
                }
            }
            // The first batch ending at or after the offset holds it, if any does.
            let holder = batches
                .get(batches.partition_point(|span| span.last_offset < offset))
                .filter(|span| span.base_offset <= offset);
            reason = reason.or(match holder {
                None => Some(format!("offset {offset} is in no batch of the log")),
                Some(span) if span.max_timestamp != timestamp => Some(format!(
                    "timestamp {timestamp} for offset {offset}, whose batch's maximum timestamp is {}",
                    span.max_timestamp
                )),
                Some(_) => None,
            });
            if let Some(reason) = reason {
                mismatches.push(Mismatch {
                    entry: slot,
                    reason,
                });
            }
        }
        mismatches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_engine::types::TimestampMs;

    fn spans() -> Vec<BatchSpan> {
        vec![
            BatchSpan {
                position: 0,
                base_offset: 100,
                last_offset: 104,
                max_timestamp: 10,
            },
            BatchSpan {
                position: 300,
                base_offset: 105,
                last_offset: 105,
                max_timestamp: 20,
            },
            BatchSpan {
                position: 380,
                base_offset: 106,
                last_offset: 110,
                max_timestamp: 15,
            },
        ]
    }

    #[test]
    fn a_good_offset_index_has_no_mismatches() {
        let entries = [OffsetIndexEntry::new(4, 0), OffsetIndexEntry::new(10, 380)];
        assert_eq!(
            OffsetIndexEntry::verify(&entries, Offset(100), &spans()),
            []
        );
    }

    #[test]
    fn offset_entries_off_a_boundary_or_offset_or_order_are_mismatches() {
        let entries = [
            OffsetIndexEntry::new(4, 0),
            OffsetIndexEntry::new(5, 301), // not a boundary
            OffsetIndexEntry::new(6, 380), // the batch there ends at 110
            OffsetIndexEntry::new(5, 300), // before the previous entry
        ];
        let mismatches = OffsetIndexEntry::verify(&entries, Offset(100), &spans());
        let slots: Vec<usize> = mismatches.iter().map(|mismatch| mismatch.entry).collect();
        assert_eq!(slots, [1, 2, 3]);
        assert!(
            mismatches[0].reason.contains("not a batch boundary"),
            "{mismatches:?}"
        );
        assert!(mismatches[1].reason.contains("106..=110"), "{mismatches:?}");
        assert!(mismatches[2].reason.contains("not after"), "{mismatches:?}");
    }

    #[test]
    fn time_entries_are_checked_against_their_batches_maximum() {
        let good = [
            TimeIndexEntry::new(TimestampMs(10), 4),
            TimeIndexEntry::new(TimestampMs(20), 5),
        ];
        assert_eq!(TimeIndexEntry::verify(&good, Offset(100), &spans()), []);
        let bad = [
            TimeIndexEntry::new(TimestampMs(11), 4), // the batch's maximum is 10
            TimeIndexEntry::new(TimestampMs(30), 20), // offset 120 is past the log
            TimeIndexEntry::new(TimestampMs(25), 10), // timestamp goes back
        ];
        let slots: Vec<usize> = TimeIndexEntry::verify(&bad, Offset(100), &spans())
            .iter()
            .map(|mismatch| mismatch.entry)
            .collect();
        assert_eq!(slots, [0, 1, 2]);
    }

    #[test]
    fn trailing_zero_entries_are_unused_but_a_first_zero_entry_counts() {
        let mut bytes = vec![0; 8];
        bytes.extend_from_slice(&[0, 0, 0, 5, 0, 0, 1, 0]);
        bytes.extend_from_slice(&[0; 16]);
        assert_eq!(used_entries(&bytes, 8), 2);
        assert_eq!(used_entries(&[0; 24], 8), 1);
        assert_eq!(used_entries(&[], 8), 0);
    }
}
