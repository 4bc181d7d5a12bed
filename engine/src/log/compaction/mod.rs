//! Log compaction (S7, `cleanup.policy=compact`): Kafka's log cleaner, its
//! decisions without the IO.
//!
//! A compacted log keeps, for every key, at least the record with the key's
//! latest offset. The cleaner works as Kafka's `LogCleaner` does:
//!
//! 1. [`plan`] picks a log and its range: everything from the first segment to
//!    the first *uncleanable* offset (the active segment, the high watermark,
//!    `min.compaction.lag.ms`), worth cleaning once the bytes written since the
//!    last cleaning (the *dirty* part, after the cleaner checkpoint) exceed
//!    `min.cleanable.dirty.ratio` of the cleanable bytes, or once
//!    `max.compaction.lag.ms` forces it.
//! 2. [`offset_map`] maps each key of the dirty part to its latest offset,
//!    within a memory budget (Kafka's `log.cleaner.dedupe.buffer.size`); a
//!    full map ends the pass early, and the next pass goes on from there.
//! 3. [`rewrite`] decides each batch's fate in the cleaned range: a record
//!    survives when its offset is its key's latest (or lies past the map's
//!    reach); a tombstone (null value) also needs its batch's delete horizon
//!    not to have passed. Survivors keep their offsets, so a compacted log has
//!    gaps. A batch that loses records is rebuilt with the same base and last
//!    offsets; one that loses them all disappears, unless it is the last
//!    batch of its producer or of the cleaning round (kept as an empty header).
//! 4. [`plan::group_segments`] merges small cleaned segments into one, as
//!    Kafka's `groupSegmentsBySize` does.
//!
//! The runtime (`brook-shards`) reads the segments, writes the cleaned ones
//! and swaps them in crash-safely.

pub mod offset_map;
pub mod plan;
pub mod record_parts;
pub mod rewrite;

/// Kafka's `log.cleaner.backoff.ms` default: how long the cleaner sleeps when
/// no log needs cleaning.
pub const CLEANER_BACKOFF_MS_DEFAULT: u64 = 15_000;
/// Kafka's `log.cleaner.dedupe.buffer.size` default (128 MiB), the memory of
/// every offset map of a broker together.
pub const DEDUPE_BUFFER_BYTES_DEFAULT: u64 = 128 << 20;

/// The broker's cleaner settings (Kafka's `log.cleaner.*` broker names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanerSettings {
    /// `log.cleaner.enable` (true).
    pub enabled: bool,
    /// `log.cleaner.backoff.ms` (15 s).
    pub backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size` (128 MiB): shared by the shards, as
    /// Kafka shares it among its cleaner threads.
    pub dedupe_buffer_bytes: u64,
}

impl Default for CleanerSettings {
    fn default() -> CleanerSettings {
        CleanerSettings {
            enabled: true,
            backoff_ms: CLEANER_BACKOFF_MS_DEFAULT,
            dedupe_buffer_bytes: DEDUPE_BUFFER_BYTES_DEFAULT,
        }
    }
}
