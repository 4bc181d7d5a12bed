//! `brook log dump FILE…`: Kafka's `kafka-dump-log`, for Brook's (and
//! Kafka's: the formats are the same) segment files, read directly with no
//! broker running.
//!
//! - `.log`: one line per batch; `--records` adds its records, with keys and
//!   values as text when they are UTF-8 and hex otherwise, and control
//!   records as their marker. `--offsets-decoder` and
//!   `--transaction-decoder` read the records of `__consumer_offsets` and
//!   `__transaction_state` ([`decoders`]).
//! - `.index` / `.timeindex`: their entries; `--verify` checks them against
//!   the `.log` beside them ([`index`]).
//!
//! Output is text or one JSON object per line (`--format json`). A file that
//! cannot be read, or a batch cut short or corrupt, is one line on stderr
//! naming the file and position; that file stops, the others go on, and the
//! exit status is then non-zero — as it is when `--verify` finds a mismatch.
//! Everything here is decoding of untrusted bytes: it returns errors and
//! never panics on them.

pub mod decoders;
pub mod index;
pub mod reader;
pub mod record;
pub mod segment;

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use brook_engine::log::file_name::{SegmentFileKind, parse_segment_file_name};
use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};

pub use self::decoders::RecordDecoder;

/// How the dump is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// Human-readable lines, close to `kafka-dump-log`'s.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// What `brook log dump` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpOptions {
    /// Print each record of a `.log`'s batches.
    pub records: bool,
    /// Check indexes against their `.log` (and `.log` CRCs) instead of
    /// printing entries; any mismatch fails the run.
    pub verify: bool,
    pub decoder: RecordDecoder,
    pub format: OutputFormat,
}

impl DumpOptions {
    /// A decoder reads records, so it implies `--records` (as in Kafka).
    pub fn prints_records(&self) -> bool {
        self.records || self.decoder != RecordDecoder::Raw
    }
}

/// What one file's dump found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileReport {
    /// Batches or index entries read.
    pub entries: u64,
    /// Entries `--verify` found wrong.
    pub mismatches: u64,
}

/// Why a file's dump stopped.
#[derive(Debug)]
pub enum DumpError {
    Io {
        operation: &'static str,
        source: io::Error,
    },
    UnknownKind,
    /// An index whose name carries no base offset.
    UnnamedSegment,
    Truncated {
        position: u64,
        need: usize,
        have: usize,
    },
    Corrupt {
        position: u64,
        reason: String,
    },
    /// The `.log` an index was verified against could not be read.
    Log {
        path: PathBuf,
        source: Box<DumpError>,
    },
    /// Writing the output failed (a closed pipe, a full disk).
    Output(io::Error),
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::Io { operation, source } => write!(f, "cannot {operation}: {source}"),
            DumpError::UnknownKind => {
                write!(f, "unknown file kind (expected .log, .index or .timeindex)")
            }
            DumpError::UnnamedSegment => write!(
                f,
                "the file name is not a base offset (like 00000000000000000000.index)"
            ),
            DumpError::Truncated {
                position,
                need,
                have,
            } => write!(
                f,
                "truncated at position {position}: need {need} bytes, have {have}"
            ),
            DumpError::Corrupt { position, reason } => {
                write!(f, "corrupt at position {position}: {reason}")
            }
            DumpError::Log { path, source } => write!(f, "{}: {source}", path.display()),
            DumpError::Output(source) => write!(f, "cannot write the output: {source}"),
        }
    }
}

/// Writes one line of output.
pub fn write_line(out: &mut dyn Write, line: &str) -> Result<(), DumpError> {
    writeln!(out, "{line}").map_err(DumpError::Output)
}

/// Writes `value` as one line of JSON.
pub fn write_json_line(out: &mut dyn Write, value: &impl Serialize) -> Result<(), DumpError> {
    write_json(&mut *out, value).map_err(|error| DumpError::Output(io::Error::from(error)))?;
    write_line(out, "")
}

/// `value` as a JSON string literal; the text output quotes keys and values
/// this way too.
pub fn quote(value: &str) -> String {
    let mut quoted = Vec::with_capacity(value.len() + 2);
    // Writing a string into a `Vec` cannot fail, and JSON text is UTF-8.
    write_json(&mut quoted, value).expect("a string serialises into memory");
    String::from_utf8(quoted).expect("serde_json writes UTF-8")
}

/// `value` as JSON on `out`, as [`OneLineFormatter`] writes it.
fn write_json(out: impl Write, value: &(impl Serialize + ?Sized)) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(
        out,
        OneLineFormatter,
    ))
}

/// serde_json's compact output, but for what it leaves raw that some
/// readers take as a line break (U+2028 and U+2029 in JavaScript and
/// Python's `str.splitlines`) or cannot show (DEL), so every line of a dump
/// is one line to any reader; and `\b` and `\f` as `\u00XX`, as the dump
/// has always written them.
#[derive(Debug)]
struct OneLineFormatter;

impl Formatter for OneLineFormatter {
    fn write_string_fragment<W>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()>
    where
        W: ?Sized + Write,
    {
        let mut start = 0;
        for (at, character) in fragment.char_indices() {
            if matches!(character, '\u{7f}' | '\u{2028}' | '\u{2029}') {
                writer.write_all(&fragment.as_bytes()[start..at])?;
                write!(writer, "\\u{:04x}", u32::from(character))?;
                start = at + character.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W>(&mut self, writer: &mut W, escape: CharEscape) -> io::Result<()>
    where
        W: ?Sized + Write,
    {
        let escape = match escape {
            CharEscape::Backspace => CharEscape::AsciiControl(0x08),
            CharEscape::FormFeed => CharEscape::AsciiControl(0x0c),
            other => other,
        };
        CompactFormatter.write_char_escape(writer, escape)
    }
}

/// The line that starts each file's dump in JSON.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "file")]
struct FileLine {
    file: String,
}

/// Dumps each of `files` to `out`, reporting errors on `errors` as one line
/// each. Returns whether every file was read whole (and verified clean).
pub fn run(
    files: &[PathBuf],
    options: &DumpOptions,
    out: &mut dyn Write,
    errors: &mut dyn Write,
) -> bool {
    let mut clean = true;
    for path in files {
        let outcome = dump_file(path, options, out).and_then(|report| {
            out.flush().map_err(DumpError::Output)?;
            Ok(report)
        });
        match outcome {
            Ok(report) if report.mismatches > 0 => {
                clean = false;
                let _ = writeln!(
                    errors,
                    "brook log dump: {}: {} of {} entries do not match",
                    path.display(),
                    report.mismatches,
                    report.entries
                );
            }
            Ok(_) => {}
            // A reader that went away (`| head`) wants no more output.
            Err(DumpError::Output(error)) if error.kind() == io::ErrorKind::BrokenPipe => {
                return false;
            }
            Err(error) => {
                clean = false;
                let _ = out.flush();
                let _ = writeln!(errors, "brook log dump: {}: {error}", path.display());
            }
        }
    }
    clean
}

/// Dumps one file, by its extension.
fn dump_file(
    path: &Path,
    options: &DumpOptions,
    out: &mut dyn Write,
) -> Result<FileReport, DumpError> {
    let extension = path.extension().and_then(|extension| extension.to_str());
    let kind = SegmentFileKind::ALL
        .into_iter()
        .find(|kind| Some(kind.extension()) == extension)
        .ok_or(DumpError::UnknownKind)?;
    // Checked before the header line, so a missing file prints nothing.
    std::fs::metadata(path).map_err(|source| DumpError::Io {
        operation: "open",
        source,
    })?;
    match options.format {
        OutputFormat::Text => write_line(out, &format!("Dumping {}", path.display()))?,
        OutputFormat::Json => write_json_line(
            out,
            &FileLine {
                file: path.display().to_string(),
            },
        )?,
    }
    match kind {
        SegmentFileKind::Log => segment::dump_log(path, options, out),
        SegmentFileKind::Index | SegmentFileKind::TimeIndex => {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            let (base_offset, _) =
                parse_segment_file_name(name).ok_or(DumpError::UnnamedSegment)?;
            index::dump_index(path, kind, base_offset, options, out)
        }
    }
}

#[cfg(test)]
mod tests;
