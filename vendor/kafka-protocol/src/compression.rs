//! Provides compression utilities for encoding records.
//!
//! This module has implementations of gzip, Snappy, as well as a noop compression format that
//! allows encoding and decoding records into a [`Record`](crate::records::Record).

use crate::protocol::buf::{ByteBuf, ByteBufMut};
use anyhow::Result;

#[cfg(feature = "gzip")]
mod gzip;
#[cfg(feature = "lz4")]
mod lz4;
mod none;
#[cfg(feature = "snappy")]
mod snappy;
#[cfg(feature = "zstd")]
mod zstd;

#[cfg(feature = "gzip")]
pub use gzip::Gzip;
#[cfg(feature = "lz4")]
pub use lz4::Lz4;
pub use none::None;
#[cfg(feature = "snappy")]
pub use snappy::Snappy;
#[cfg(feature = "zstd")]
pub use zstd::Zstd;

/// A trait for record compression algorithms.
pub trait Compressor<B: ByteBufMut> {
    /// Target buffer type for compression.
    type BufMut: ByteBufMut;
    /// Compresses into provided [`ByteBufMut`], with records encoded by `F` into `R`.
    fn compress<R, F>(buf: &mut B, f: F) -> Result<R>
    where
        F: FnOnce(&mut Self::BufMut) -> Result<R>;
}

/// A trait for record decompression algorithms.
pub trait Decompressor<B: ByteBuf> {
    /// Target buffer type for decompression.
    type Buf: ByteBuf;
    /// Decompress records from `B` mapped using `F` into `R`.
    fn decompress<R, F>(buf: &mut B, f: F) -> Result<R>
    where
        F: FnOnce(&mut Self::Buf) -> Result<R>;
}

/// Brook: decompresses the records section of a batch compressed with
/// `compression`, producing at most `max_bytes`; `Ok(None)` when the output
/// would be longer. For callers that decompress batches read from disk or
/// the network: a few KiB of zeros compressed can expand to gigabytes.
pub fn decompress_bounded(
    compression: crate::records::Compression,
    compressed: &[u8],
    max_bytes: usize,
) -> Result<Option<bytes::Bytes>> {
    use crate::records::Compression;
    match compression {
        Compression::None => {
            Ok((compressed.len() <= max_bytes).then(|| bytes::Bytes::copy_from_slice(compressed)))
        }
        #[cfg(feature = "gzip")]
        Compression::Gzip => gzip::decompress_bounded(compressed, max_bytes),
        #[cfg(feature = "snappy")]
        Compression::Snappy => snappy::decompress_bounded(compressed, max_bytes),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => lz4::decompress_bounded(compressed, max_bytes),
        #[cfg(feature = "zstd")]
        Compression::Zstd => zstd::decompress_bounded(compressed, max_bytes),
        #[allow(unreachable_patterns)]
        other => anyhow::bail!("Support for {other:?} is not enabled as a cargo feature"),
    }
}

/// Brook: reads `reader` to its end if that is at most `max_bytes`.
#[allow(dead_code)]
fn read_bounded(reader: impl std::io::Read, max_bytes: usize) -> Result<Option<bytes::Bytes>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    reader.take(limit).read_to_end(&mut out)?;
    Ok((out.len() <= max_bytes).then(|| out.into()))
}
