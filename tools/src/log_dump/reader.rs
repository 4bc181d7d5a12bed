//! Reads a `.log` batch by batch from a file, holding one batch in memory at
//! a time (segments are up to `segment.bytes`, 1 GiB by default), and shows
//! progress on a terminal.

use std::fs::File;
use std::io::{BufReader, IsTerminal, Read};
use std::path::Path;

use brook_engine::log::batch::{BATCH_LENGTH_MIN, BatchView, LOG_OVERHEAD_BYTES};
use brook_engine::log::recovery::is_unwritten_tail;

use crate::cli::progress::Progress;
use crate::log_dump::DumpError;

/// The largest batch read: a corrupt length must not make the tool allocate
/// gigabytes. Kafka's `message.max.bytes` defaults to 1 MiB; this leaves room
/// for brokers configured far above it.
pub const BATCH_BYTES_MAX: usize = 256 << 20;
/// Files smaller than this are read without a progress line.
pub const PROGRESS_FILE_BYTES_MIN: u64 = 64 << 20;
/// The read buffer in front of the file.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// The batches of one `.log` file, in order.
#[derive(Debug)]
pub struct BatchReader {
    input: BufReader<File>,
    file_bytes: u64,
    /// Where the next batch starts.
    position: u64,
    buffer: Vec<u8>,
    progress: Progress,
}

impl BatchReader {
    pub fn open(path: &Path) -> Result<BatchReader, DumpError> {
        let file = File::open(path).map_err(|source| DumpError::Io {
            operation: "open",
            source,
        })?;
        let file_bytes = file
            .metadata()
            .map_err(|source| DumpError::Io {
                operation: "stat",
                source,
            })?
            .len();
        Ok(BatchReader {
            input: BufReader::with_capacity(READ_BUFFER_BYTES, file),
            file_bytes,
            position: 0,
            buffer: Vec::new(),
            progress: progress(path, file_bytes),
        })
    }

    /// The next batch and its position; `None` at the end of the file. A
    /// batch cut short or corrupt is an error that names its position.
    pub fn next_batch(&mut self) -> Result<Option<(u64, BatchView<'_>)>, DumpError> {
        let position = self.position;
        if position >= self.file_bytes {
            self.progress.finish();
            return Ok(None);
        }
        self.progress.update_bytes(position, self.file_bytes);
        let truncated = |have: u64, need: usize| DumpError::Truncated {
            position,
            need,
            have: have as usize,
        };
        let left = self.file_bytes - position;
        self.buffer.resize(LOG_OVERHEAD_BYTES.min(left as usize), 0);
        self.read_exact(0)?;
        if is_unwritten_tail(&self.buffer) && self.rest_is_unwritten()? {
            // A live or crashed segment's page padding or reserved space.
            self.position = self.file_bytes;
            self.progress.finish();
            return Ok(None);
        }
        if left < LOG_OVERHEAD_BYTES as u64 {
            return Err(truncated(left, LOG_OVERHEAD_BYTES));
        }
        let declared = i32::from_be_bytes([
            self.buffer[8],
            self.buffer[9],
            self.buffer[10],
            self.buffer[11],
        ]);
        let size = LOG_OVERHEAD_BYTES + usize::try_from(declared).unwrap_or(0);
        if declared < BATCH_LENGTH_MIN || size > BATCH_BYTES_MAX {
            return Err(DumpError::Corrupt {
                position,
                reason: format!(
                    "batch length {declared} is out of bounds ({BATCH_LENGTH_MIN}..={})",
                    BATCH_BYTES_MAX - LOG_OVERHEAD_BYTES
                ),
            });
        }
        if (size as u64) > left {
            return Err(truncated(left, size));
        }
        self.buffer.resize(size, 0);
        self.read_exact(LOG_OVERHEAD_BYTES)?;
        self.position += size as u64;
        let batch = BatchView::parse_exact(&self.buffer).map_err(|error| DumpError::Corrupt {
            position,
            reason: error.to_string(),
        })?;
        Ok(Some((position, batch)))
    }

    /// Whether everything after the bytes in the buffer is zeros (read a
    /// piece at a time; the reader is left wherever that was decided).
    fn rest_is_unwritten(&mut self) -> Result<bool, DumpError> {
        let mut piece = vec![0u8; READ_BUFFER_BYTES];
        loop {
            let count = self
                .input
                .read(&mut piece)
                .map_err(|source| DumpError::Io {
                    operation: "read",
                    source,
                })?;
            if count == 0 {
                return Ok(true);
            }
            if !is_unwritten_tail(&piece[..count]) {
                return Ok(false);
            }
        }
    }

    /// Fills the buffer from `from` on.
    fn read_exact(&mut self, from: usize) -> Result<(), DumpError> {
        self.input
            .read_exact(&mut self.buffer[from..])
            .map_err(|source| DumpError::Io {
                operation: "read",
                source,
            })
    }
}

/// A progress line on stderr only when stderr is a terminal and the file
/// is large: piped output stays clean. When stdout is the same terminal the
/// dump itself shows the progress, and a progress line would only
/// interleave with it, so then there is none either.
fn progress(path: &Path, file_bytes: u64) -> Progress {
    let shown = file_bytes >= PROGRESS_FILE_BYTES_MIN
        && std::io::stderr().is_terminal()
        && !std::io::stdout().is_terminal();
    Progress::with_terminal(&path.display().to_string(), shown)
}
