//! Input: records read from stdin or `--file`, one per line, as
//! kafka-console-producer reads them: a line ends at `\n` (a `\r` before it
//! is dropped too), an empty line is a record with an empty value, and
//! with `--key-separator SEP` each line splits at its first SEP into key
//! and value — a line without SEP is an error naming the line (as
//! kafka-console-producer's "No key separator found on line number" and
//! kcat's `-K`). Lines are bytes, not necessarily UTF-8.
//!
//! Reading blocks, so it runs on its own thread and hands the producing
//! task chunks of records over a bounded channel: a chunk is sent when it
//! is big enough or when the reader has nothing more buffered (so lines
//! typed at a terminal go out at once, and a file's lines go in big
//! chunks).

use std::io::{BufRead, BufReader, Read};
use std::thread;

use futures::channel::mpsc;
use futures::executor::block_on;
use futures::sink::SinkExt;

use crate::cli::CliError;

/// The longest line accepted: Kafka's `max.request.size` default (1 MiB);
/// a longer record would not fit in a request anyway.
pub const LINE_BYTES_MAX: usize = 1 << 20;
/// A chunk is handed over once it holds this many bytes of records.
const CHUNK_BYTES_MAX: usize = 64 << 10;
/// Chunks waiting for the producing task, at most (bounds the memory held
/// between the reader and the producer).
const CHUNKS_QUEUED_MAX: usize = 16;
/// The reader's buffer.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// One record from one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputRecord {
    /// 1-based, for error messages.
    pub line: u64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
}

impl InputRecord {
    /// Key and value bytes.
    pub fn size_bytes(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.len()
    }
}

/// What the reader hands over.
#[derive(Debug)]
pub enum InputEvent {
    Records(Vec<InputRecord>),
    /// Reading stopped here; the records before it were handed over.
    Failed(CliError),
}

/// Where lines come from.
pub type Source = Box<dyn Read + Send>;

/// Splits one line (without its line end) into a record.
pub fn split_line(
    line: u64,
    bytes: Vec<u8>,
    separator: Option<&[u8]>,
) -> Result<InputRecord, CliError> {
    let Some(separator) = separator else {
        return Ok(InputRecord {
            line,
            key: None,
            value: bytes,
        });
    };
    debug_assert!(!separator.is_empty(), "checked with the arguments");
    let at = bytes
        .windows(separator.len())
        .position(|window| window == separator)
        .ok_or_else(|| {
            CliError::Usage(format!(
                "line {line} has no key separator '{}'",
                String::from_utf8_lossy(separator)
            ))
        })?;
    let value = bytes[at + separator.len()..].to_vec();
    let mut key = bytes;
    key.truncate(at);
    Ok(InputRecord {
        line,
        key: Some(key),
        value,
    })
}

/// Reads `reader` to its end, handing chunks of records to `deliver`
/// (which answers false when nobody listens any more, ending the read).
/// An unreadable input or a bad line ends the read with a `Failed` event
/// after the records before it.
pub fn read_records<R: Read>(
    reader: &mut BufReader<R>,
    separator: Option<&[u8]>,
    mut deliver: impl FnMut(InputEvent) -> bool,
) {
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0;
    let mut line_number = 0u64;
    loop {
        let line = match read_line(reader, line_number + 1) {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(error) => {
                if !chunk.is_empty() && !deliver(InputEvent::Records(std::mem::take(&mut chunk))) {
                    return;
                }
                deliver(InputEvent::Failed(error));
                return;
            }
        };
        line_number += 1;
        match split_line(line_number, line, separator) {
            Ok(record) => {
                chunk_bytes += record.size_bytes();
                chunk.push(record);
            }
            Err(error) => {
                if !chunk.is_empty() && !deliver(InputEvent::Records(std::mem::take(&mut chunk))) {
                    return;
                }
                deliver(InputEvent::Failed(error));
                return;
            }
        }
        // Nothing more buffered: the next read may wait, so hand over now.
        if chunk_bytes >= CHUNK_BYTES_MAX || reader.buffer().is_empty() {
            chunk_bytes = 0;
            if !deliver(InputEvent::Records(std::mem::take(&mut chunk))) {
                return;
            }
        }
    }
    if !chunk.is_empty() {
        deliver(InputEvent::Records(chunk));
    }
}

/// The next line without its line end, `None` at the end of the input.
fn read_line<R: Read>(reader: &mut BufReader<R>, number: u64) -> Result<Option<Vec<u8>>, CliError> {
    let mut line = Vec::new();
    // Room for the longest line and its "\r\n"; more means too long.
    let limit = (LINE_BYTES_MAX + 2) as u64;
    let read = reader
        .by_ref()
        .take(limit)
        .read_until(b'\n', &mut line)
        .map_err(|source| CliError::Io {
            operation: format!("reading line {number}"),
            source,
        })?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    if line.len() > LINE_BYTES_MAX {
        return Err(CliError::Usage(format!(
            "line {number} is longer than {LINE_BYTES_MAX} bytes"
        )));
    }
    Ok(Some(line))
}

/// Starts a thread reading `source`; its records arrive on the receiver,
/// which closes at the end of the input. The thread ends when the input
/// does or when the receiver is dropped.
pub fn spawn_reader(
    source: Source,
    separator: Option<Vec<u8>>,
) -> Result<mpsc::Receiver<InputEvent>, CliError> {
    let (mut sender, receiver) = mpsc::channel(CHUNKS_QUEUED_MAX);
    thread::Builder::new()
        .name("brook-produce-input".to_owned())
        .spawn(move || {
            let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, source);
            read_records(&mut reader, separator.as_deref(), |event| {
                block_on(sender.send(event)).is_ok()
            });
        })
        .map_err(|source| CliError::Io {
            operation: "starting the input thread".to_owned(),
            source,
        })?;
    Ok(receiver)
}

/// `--header KEY=VALUE`: split at the first `=` (the value may hold more).
pub fn parse_header(text: &str) -> Result<(String, String), CliError> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        Some(_) => Err(CliError::Usage(format!(
            "--header '{text}': the header key is empty (expected KEY=VALUE)"
        ))),
        None => Err(CliError::Usage(format!(
            "--header '{text}' has no '=' (expected KEY=VALUE)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: &[u8], separator: Option<&[u8]>) -> (Vec<InputRecord>, Option<String>) {
        let mut reader = BufReader::with_capacity(8, input);
        let mut records = Vec::new();
        let mut failure = None;
        read_records(&mut reader, separator, |event| {
            match event {
                InputEvent::Records(chunk) => records.extend(chunk),
                InputEvent::Failed(error) => failure = Some(error.to_string()),
            }
            true
        });
        (records, failure)
    }

    fn record(line: u64, key: Option<&str>, value: &str) -> InputRecord {
        InputRecord {
            line,
            key: key.map(|key| key.as_bytes().to_vec()),
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn lines_become_values_and_empty_lines_empty_values() {
        let (records, failure) = read_all(b"one\r\n\ntwo three\nlast", None);
        assert_eq!(failure, None);
        assert_eq!(
            records,
            [
                record(1, None, "one"),
                record(2, None, ""),
                record(3, None, "two three"),
                record(4, None, "last"),
            ]
        );
        assert_eq!(read_all(b"", None).0, []);
    }

    #[test]
    fn a_separator_splits_at_its_first_occurrence() {
        let (records, failure) = read_all(b"k1::v1\n::empty key\nk3::v::3\n", Some(b"::"));
        assert_eq!(failure, None);
        assert_eq!(
            records,
            [
                record(1, Some("k1"), "v1"),
                record(2, Some(""), "empty key"),
                record(3, Some("k3"), "v::3"),
            ]
        );
    }

    #[test]
    fn a_line_without_the_separator_stops_the_input_after_the_lines_before_it() {
        let (records, failure) = read_all(b"a:1\nb:2\nno separator\nc:3\n", Some(b":"));
        assert_eq!(
            records,
            [record(1, Some("a"), "1"), record(2, Some("b"), "2")]
        );
        assert_eq!(failure.as_deref(), Some("line 3 has no key separator ':'"));
    }

    #[test]
    fn a_line_over_the_limit_is_refused() {
        let mut input = vec![b'x'; LINE_BYTES_MAX];
        input.push(b'\n');
        input.extend(vec![b'y'; LINE_BYTES_MAX + 1]);
        let (records, failure) = read_all(&input, None);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].value.len(), LINE_BYTES_MAX);
        assert_eq!(
            failure,
            Some(format!("line 2 is longer than {LINE_BYTES_MAX} bytes"))
        );
    }

    #[test]
    fn a_closed_receiver_ends_the_read() {
        let mut reader = BufReader::with_capacity(4, &b"a\nb\nc\n"[..]);
        let mut events = 0;
        read_records(&mut reader, None, |_| {
            events += 1;
            false
        });
        assert_eq!(events, 1);
    }

    #[test]
    fn headers_are_key_equals_value() {
        assert_eq!(
            parse_header("trace=a=b").unwrap(),
            ("trace".to_owned(), "a=b".to_owned())
        );
        assert_eq!(
            parse_header("empty=").unwrap(),
            ("empty".to_owned(), String::new())
        );
        assert_eq!(
            parse_header("novalue").unwrap_err().to_string(),
            "--header 'novalue' has no '=' (expected KEY=VALUE)"
        );
        assert!(parse_header("=v").is_err());
    }
}
