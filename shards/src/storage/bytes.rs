//! Shared, immutable views of log bytes in DMA memory: a piece of a written
//! tail chunk, or the result of an O_DIRECT read. Cheap to clone (reference
//! counted), never copied on the way to the reader.

use std::fmt;
use std::ops::Deref;
use std::rc::Rc;

use glommio::io::{DmaBuffer, ReadResult};

/// A contiguous run of log bytes. Lives on one shard (`Rc`).
#[derive(Clone)]
pub enum LogBytes {
    Buffer {
        buffer: Rc<DmaBuffer>,
        start: usize,
        len: usize,
    },
    Read(ReadResult),
    Empty,
}

impl LogBytes {
    /// The sub-range `start..start + len` of these bytes (same backing memory).
    pub fn slice(&self, start: usize, len: usize) -> LogBytes {
        assert!(start + len <= self.len(), "slice within bounds");
        match self {
            LogBytes::Buffer {
                buffer,
                start: base,
                ..
            } => LogBytes::Buffer {
                buffer: buffer.clone(),
                start: base + start,
                len,
            },
            LogBytes::Read(read) => {
                ReadResult::slice(read, start, len).map_or(LogBytes::Empty, LogBytes::Read)
            }
            LogBytes::Empty => LogBytes::Empty,
        }
    }
}

impl Deref for LogBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            LogBytes::Buffer { buffer, start, len } => &buffer.as_bytes()[*start..*start + *len],
            LogBytes::Read(read) => read,
            LogBytes::Empty => &[],
        }
    }
}

impl fmt::Debug for LogBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogBytes({} bytes)", self.len())
    }
}
