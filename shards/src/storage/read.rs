//! Reading a partition log: whole batches from an offset (S3), and the first
//! record at or after a timestamp (S8).
//!
//! A read finds the segment, asks its sparse index where to start (memory for
//! the active segment, one index block for a sealed one), then walks batch
//! headers to the target. Bytes come from the active segment's tail cache
//! when it still holds them, otherwise from an O_DIRECT read; when the caller
//! allows it, a read instead hands back a file range for a zero-copy send
//! (the kernel reads the page cache or the disk and sends): of a sealed
//! segment, or of the active one behind its tail cache, ending at an indexed
//! batch below the high watermark (bytes no later write changes).

use std::ops::Range;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use brook_engine::log::batch::{BATCH_HEADER_BYTES, BatchHeader, BatchView};
use brook_engine::log::index::{OffsetIndexEntry, position_key, stable_range_end};
use brook_engine::log::records::{RecordStamp, first_at_or_after};
use brook_engine::log::segments::{first_segment_reaching, segment_for_offset};
use brook_engine::replica::producer_state::{ProducerBatch, ProducerOfBatch, TxnMarker};
use brook_engine::types::{Offset, TimestampMs};
use glommio::io::DmaFile;

use crate::storage::bytes::LogBytes;
use crate::storage::error::StorageError;
use crate::storage::files::read_exact;
use crate::storage::partition_log::{LogInner, PartitionLog};
use crate::storage::segment::{BatchAt, BlockRead, IndexLookup, Segment, SegmentState};
use crate::storage::state::LogState;

/// Smallest read issued while walking batches (amortises small batches).
const WINDOW_BYTES_MIN: usize = 64 << 10;
/// Largest single read issued.
const WINDOW_BYTES_MAX: usize = 8 << 20;
/// Header-walk reads when only a file range is wanted.
const PROBE_BYTES: usize = 8 << 10;

/// How much to read, and what may be returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Stop adding batches past this many bytes; the first batch is returned
    /// whole even if larger (as Kafka does, so a consumer always progresses).
    pub max_bytes: usize,
    /// Return no batch at or beyond this offset (e.g. the high watermark).
    pub max_offset: Offset,
    /// The answer may be a [`FileRange`] instead of bytes: from a sealed
    /// segment, or from the active one below the high watermark when its
    /// tail cache no longer holds the bytes.
    pub allow_file_range: bool,
}

/// A byte range of a segment's `.log`, for sendfile/splice: bytes that
/// never change (a sealed segment's, or an active one's below the high
/// watermark).
#[derive(Clone, Debug)]
pub struct FileRange {
    pub file: Arc<std::fs::File>,
    pub position: u64,
    pub len: u64,
    /// What the sender asks the kernel to read into the page cache once the
    /// response carrying the range is sent: see [`read_ahead_span`].
    pub read_ahead: Range<u64>,
    /// The offset after the range's last record: where a reader goes on.
    pub next_offset: Offset,
}

/// How many ranges of a file range's length are read ahead after it. A
/// kcat read of 2 GB from 8 partitions out of a cold cache (1 MiB per
/// partition per fetch, on this 2-core VM's virtio disk): 2.5-3.3 s with
/// one range, 2.2-2.5 s with three (hot: 1.8-2.0 s), 2.5-2.8 s with seven.
pub const READ_AHEAD_RANGES: u64 = 3;

/// The bytes to read ahead for the range `position..position + len` of a
/// segment whose earlier ranges were read ahead up to `read_ahead_to`: the
/// range and [`READ_AHEAD_RANGES`] more of its length, less what the last
/// advice already covered when this range continues it. So a consumer
/// reading on asks for each byte once; asking again for cached pages is not
/// free (a page-cache walk: a fifth of the broker's CPU in a hot kcat read
/// when each range asked for its whole span). A range that does not continue
/// the last advice (another consumer, a read from the start again, whose
/// pages may be gone) asks for its whole span.
pub fn read_ahead_span(position: u64, len: u64, read_ahead_to: u64) -> Range<u64> {
    let end = position.saturating_add(len.saturating_mul(1 + READ_AHEAD_RANGES));
    match (position..=end).contains(&read_ahead_to) {
        true => read_ahead_to..end,
        false => position..end,
    }
}

#[derive(Clone, Debug)]
pub enum LogData {
    Empty,
    Memory(Vec<LogBytes>),
    File(FileRange),
}

impl LogData {
    pub fn len(&self) -> u64 {
        match self {
            LogData::Empty => 0,
            LogData::Memory(pieces) => pieces.iter().map(|piece| piece.len() as u64).sum(),
            LogData::File(range) => range.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The result of a read: whole batches and the offsets around them.
#[derive(Clone, Debug)]
pub struct ReadOutcome {
    pub data: LogData,
    /// The offset right after the last batch returned (the requested offset
    /// when nothing was returned).
    pub next_offset: Offset,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

/// Where a log cut at some offset ends: the segment kept last, the byte
/// position its `.log` is cut at, and the log end offset after the cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CutPoint {
    pub segment_base: Offset,
    pub position: u64,
    pub log_end_offset: Offset,
}

/// One segment's read inputs, copied out of the state so reads can await.
struct SegmentView {
    base_offset: Offset,
    file: Rc<DmaFile>,
    path: PathBuf,
    readable_bytes: u64,
    /// Bytes appended to the segment, written or not: beyond
    /// `readable_bytes` while writes are in flight, when the written end may
    /// fall inside a batch.
    appended_bytes: u64,
    /// Set when the read answers with a file range.
    ranged: Option<RangeView>,
}

/// What a read that answers with a file range needs.
struct RangeView {
    plain_log: Arc<std::fs::File>,
    /// The batch holding the offset, when the last range ended right at it.
    read_on: Option<BatchAt>,
    end: RangeEnd,
}

/// How far a file range may reach.
#[derive(Clone, Copy)]
enum RangeEnd {
    /// A sealed segment, every batch of it visible.
    Sealed { next_offset: Offset, log_bytes: u64 },
    /// The active segment (or one being sealed): up to an indexed batch
    /// below `stable_end`, the lesser of the read's end and the high
    /// watermark (bytes no append rewrites and no truncation cuts).
    Active { stable_end: Offset },
}

/// What a file-range read found.
enum Ranged {
    /// The range, or nothing at all to read.
    Found(Option<(LogData, Offset)>),
    /// No batch boundary past the first batch lies below the active
    /// segment's stable end: the caller reads batches instead, from the
    /// walk's position (the batch holding the offset).
    NotStable,
}

/// What a walk needs from a batch header, copied out of its window.
#[derive(Clone, Copy, Debug)]
struct HeaderFacts {
    size: u64,
    base_offset: Offset,
    last_offset: Offset,
    max_timestamp: TimestampMs,
    producer: ProducerOfBatch,
}

/// Walks the batches of one segment from a position, reading windows.
struct Walk<'a> {
    log: &'a LogInner,
    view: &'a SegmentView,
    position: u64,
    window_start: u64,
    window: Vec<LogBytes>,
    window_len: u64,
}

impl<'a> Walk<'a> {
    fn new(log: &'a LogInner, view: &'a SegmentView, position: u64) -> Walk<'a> {
        Walk {
            log,
            view,
            position,
            window_start: position,
            window: Vec::new(),
            window_len: 0,
        }
    }

    fn holds(&self, position: u64, len: u64) -> bool {
        position >= self.window_start && position + len <= self.window_start + self.window_len
    }

    /// Makes the window hold `len` bytes at `position` (fewer at the end).
    async fn fetch(
        &mut self,
        position: u64,
        len: usize,
        read_ahead: usize,
    ) -> Result<(), StorageError> {
        let want = (len.max(read_ahead) as u64).min(self.view.readable_bytes - position);
        if self.holds(position, want) {
            return Ok(());
        }
        let range = position..position + want;
        let cached = {
            let state = self.log.state.borrow();
            let slot = slot_of(&state, self.view);
            slot.and_then(|slot| state.segments[slot].cached(range.clone()))
        };
        self.window = match cached {
            Some(pieces) => pieces,
            None => vec![LogBytes::Read(
                read_exact(&self.view.file, &self.view.path, position, want as usize).await?,
            )],
        };
        self.window_start = position;
        self.window_len = want;
        Ok(())
    }

    fn copy_out(&self, position: u64, out: &mut [u8]) {
        let mut cursor = self.window_start;
        let mut filled = 0;
        for piece in &self.window {
            let piece_end = cursor + piece.len() as u64;
            let from = position + filled as u64;
            if filled < out.len() && from < piece_end && from >= cursor {
                let start = (from - cursor) as usize;
                let count = (piece.len() - start).min(out.len() - filled);
                out[filled..filled + count].copy_from_slice(&piece[start..start + count]);
                filled += count;
            }
            cursor = piece_end;
        }
        debug_assert_eq!(filled, out.len());
    }

    fn slices(&self, position: u64, len: u64) -> Vec<LogBytes> {
        let mut pieces = Vec::new();
        let mut cursor = self.window_start;
        let end = position + len;
        for piece in &self.window {
            let piece_end = cursor + piece.len() as u64;
            let start = position.max(cursor);
            let stop = end.min(piece_end);
            if start < stop {
                pieces.push(piece.slice((start - cursor) as usize, (stop - start) as usize));
            }
            cursor = piece_end;
        }
        pieces
    }

    /// The header of the batch at the current position, or `None` at the
    /// end of the readable bytes. Parsed once here, so callers never re-parse
    /// bytes that came from disk.
    async fn header(&mut self, read_ahead: usize) -> Result<Option<HeaderFacts>, StorageError> {
        if !self.header_fits()? {
            return Ok(None);
        }
        self.fetch(self.position, BATCH_HEADER_BYTES, read_ahead)
            .await?;
        let mut header = [0u8; BATCH_HEADER_BYTES];
        self.copy_out(self.position, &mut header);
        self.facts(&header)
    }

    /// Whether a header can be read at the current position: false at the
    /// end of the readable bytes, an error (or false while a write is in
    /// flight) when only part of one is there.
    fn header_fits(&self) -> Result<bool, StorageError> {
        if self.position >= self.view.readable_bytes {
            return Ok(false);
        }
        if self.view.readable_bytes - self.position < BATCH_HEADER_BYTES as u64 {
            return Ok(self
                .partly_written::<()>("a batch header runs past the written end")?
                .is_some());
        }
        Ok(true)
    }

    /// The facts of the header bytes of the batch at the current position.
    fn facts(
        &self,
        header: &[u8; BATCH_HEADER_BYTES],
    ) -> Result<Option<HeaderFacts>, StorageError> {
        let parsed =
            BatchHeader::parse(header).map_err(|error| self.corrupt(&error.to_string()))?;
        let facts = HeaderFacts {
            size: parsed.size_bytes() as u64,
            base_offset: parsed.base_offset(),
            last_offset: parsed.last_offset(),
            max_timestamp: parsed.max_timestamp(),
            producer: ProducerOfBatch::read(parsed),
        };
        if self.position + facts.size > self.view.readable_bytes {
            return self.partly_written("a batch runs past the written end");
        }
        Ok(Some(facts))
    }

    /// The whole batch at the current position, then steps over it.
    async fn take(&mut self, size: u64, read_ahead: usize) -> Result<Vec<LogBytes>, StorageError> {
        self.fetch(self.position, size as usize, read_ahead).await?;
        let pieces = self.slices(self.position, size);
        self.position += size;
        Ok(pieces)
    }

    /// A batch that is not all written: the end of what can be read while
    /// its write is in flight (appended bytes go past the written end); on
    /// disk with nothing more appended, damage.
    fn partly_written<T>(&self, reason: &str) -> Result<Option<T>, StorageError> {
        if self.view.appended_bytes > self.view.readable_bytes {
            Ok(None)
        } else {
            Err(self.corrupt(reason))
        }
    }

    fn corrupt(&self, reason: &str) -> StorageError {
        StorageError::Corrupt {
            path: self.view.path.clone(),
            reason: format!("at position {}: {reason}", self.position),
        }
    }
}

impl PartitionLog {
    /// Reads whole batches starting with the one holding `offset`.
    pub async fn read(
        &self,
        offset: Offset,
        options: ReadOptions,
    ) -> Result<ReadOutcome, StorageError> {
        let log = &*self.inner;
        let (view, end_offset, log_start_offset, log_end_offset) = {
            let state = log.state.borrow();
            state.check_usable()?;
            let (start, end) = (state.log_start_offset, state.log_end_offset());
            if offset < start || offset > end {
                return Err(StorageError::OffsetOutOfRange {
                    requested: offset,
                    log_start: start,
                    log_end: end,
                });
            }
            let end_offset = options.max_offset.min(state.written_offset());
            let count = state.segments.len();
            let slot = segment_for_offset(|slot| state.segments[slot].base_offset, count, offset)
                .unwrap_or(0);
            let empty = ReadOutcome {
                data: LogData::Empty,
                next_offset: offset,
                log_start_offset: start,
                log_end_offset: end,
            };
            if offset >= end_offset {
                return Ok(empty);
            }
            // A segment may end before the next one starts, and a cleaned
            // one may hold nothing at all (compaction gaps): the first
            // segment with a batch ending at or after the offset.
            let slot = (slot..count)
                .find(|slot| {
                    let segment = &state.segments[*slot];
                    segment.next_offset > offset && segment.log_bytes > 0
                })
                .unwrap_or(count - 1);
            let segment = &state.segments[slot];
            let mut lookup = segment.index_lookup(offset.max(segment.base_offset));
            let stable_end = end_offset.min(state.high_watermark());
            let range_end = match (&segment.state, &lookup) {
                _ if !options.allow_file_range => None,
                (SegmentState::Sealed(_), _) if segment.next_offset <= end_offset => {
                    Some(RangeEnd::Sealed {
                        next_offset: segment.next_offset,
                        log_bytes: segment.log_bytes,
                    })
                }
                // Past the tail cache (a consumer catching up): the bytes
                // are on disk only, so the kernel sends them from the file
                // rather than this shard reading and copying them.
                (SegmentState::Open(active), IndexLookup::Known(position))
                    if offset < stable_end && *position < active.log.cached_from() =>
                {
                    Some(RangeEnd::Active { stable_end })
                }
                _ => None,
            };
            let ranged = match range_end {
                Some(end) => {
                    let read_on =
                        segment.ranges.read_on.get().filter(|batch| {
                            batch.base_offset <= offset && offset <= batch.last_offset
                        });
                    if let Some(batch) = read_on {
                        lookup = IndexLookup::Known(batch.position);
                    }
                    Some(RangeView {
                        plain_log: segment.ranges.plain_log(&segment.log_path)?,
                        read_on,
                        end,
                    })
                }
                None => None,
            };
            let view = SegmentView {
                base_offset: segment.base_offset,
                file: segment.log_file.clone(),
                path: segment.log_path.clone(),
                readable_bytes: segment.written_bytes(),
                appended_bytes: segment.log_bytes,
                ranged,
            };
            ((view, lookup), end_offset, start, end)
        };
        let (view, lookup) = view;
        let start_position = lookup
            .offset_position(offset.0 - view.base_offset.0)
            .await?;
        let mut walk = Walk::new(log, &view, start_position);
        let ranged = match &view.ranged {
            Some(ranged) => {
                self.file_range(&mut walk, ranged, offset, options.max_bytes)
                    .await?
            }
            None => Ranged::NotStable,
        };
        let data = match ranged {
            Ranged::Found(data) => data,
            Ranged::NotStable => {
                collect_batches(&mut walk, offset, end_offset, options.max_bytes).await?
            }
        };
        let (data, next_offset) = data.unwrap_or((LogData::Empty, offset));
        Ok(ReadOutcome {
            data,
            next_offset,
            log_start_offset,
            log_end_offset,
        })
    }

    /// Where cutting the log at `offset` leaves it (see [`CutPoint`]), once
    /// every append is written. A batch that holds `offset` goes whole, as
    /// Kafka's `truncateTo` drops it.
    pub(crate) async fn cut_point(&self, offset: Offset) -> Result<CutPoint, StorageError> {
        let (view, lookup, segment_end) = {
            let state = self.inner.state.borrow();
            state.check_usable()?;
            let count = state.segments.len();
            let slot = segment_for_offset(|slot| state.segments[slot].base_offset, count, offset)
                .unwrap_or(0);
            let segment = &state.segments[slot];
            let lookup = segment.index_lookup(offset.max(segment.base_offset));
            (bytes_view(segment), lookup, segment.next_offset)
        };
        let relative = offset.max(view.base_offset).0 - view.base_offset.0;
        let start = lookup.offset_position(relative).await?;
        let mut walk = Walk::new(&self.inner, &view, start);
        while let Some(header) = walk.header(PROBE_BYTES).await? {
            if header.last_offset >= offset {
                return Ok(CutPoint {
                    segment_base: view.base_offset,
                    position: walk.position,
                    log_end_offset: header.base_offset,
                });
            }
            walk.position += header.size;
        }
        Ok(CutPoint {
            segment_base: view.base_offset,
            position: walk.position,
            log_end_offset: segment_end,
        })
    }

    /// Finds the target batch by its header, then extends the range to the
    /// last batch boundary the position index knows within `max_bytes`, and
    /// remembers the batch there for the consumer's next read.
    async fn file_range(
        &self,
        walk: &mut Walk<'_>,
        ranged: &RangeView,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Ranged, StorageError> {
        let mut known = ranged.read_on;
        while let Some(batch) = batch_at(walk, &mut known, &ranged.plain_log).await? {
            if batch.last_offset < offset {
                walk.position += batch.size;
                continue;
            }
            let start = walk.position;
            let limit = start + max_bytes as u64;
            let whole_rest = match ranged.end {
                RangeEnd::Sealed {
                    next_offset,
                    log_bytes,
                } if log_bytes <= limit => Some((log_bytes, next_offset)),
                _ => None,
            };
            let (end, next_offset) = match whole_rest {
                Some(rest) => rest,
                None => match self
                    .boundary_before(walk.view, ranged.end, start, limit)
                    .await?
                {
                    Some(boundary) if boundary > start + batch.size => {
                        walk.position = boundary;
                        // The boundary is at most `limit`, below the log's
                        // end, as long as the index block read from disk is
                        // sorted; a damaged one is an error, not a panic.
                        let next = batch_at(walk, &mut None, &ranged.plain_log)
                            .await?
                            .ok_or_else(|| {
                                walk.corrupt("the position index points past the written end")
                            })?;
                        self.remember_read_on(walk.view, next);
                        (boundary, next.base_offset)
                    }
                    // The first batch alone, if it is stable.
                    _ => match ranged.end {
                        RangeEnd::Active { stable_end } if batch.last_offset >= stable_end => {
                            return Ok(Ranged::NotStable);
                        }
                        _ => (start + batch.size, batch.last_offset.next()),
                    },
                },
            };
            let range = FileRange {
                file: ranged.plain_log.clone(),
                position: start,
                len: end - start,
                read_ahead: self.read_ahead_for(walk.view, start, end - start),
                next_offset,
            };
            return Ok(Ranged::Found(Some((LogData::File(range), next_offset))));
        }
        Ok(Ranged::Found(None))
    }

    /// What to read ahead with the range `position..position + len` of
    /// `view`'s segment ([`read_ahead_span`]), remembered for the next.
    fn read_ahead_for(&self, view: &SegmentView, position: u64, len: u64) -> Range<u64> {
        let state = self.inner.state.borrow();
        let Some(slot) = slot_of(&state, view) else {
            return position..position + len;
        };
        let read_ahead_to = &state.segments[slot].ranges.read_ahead_to;
        let span = read_ahead_span(position, len, read_ahead_to.get());
        read_ahead_to.set(span.end);
        span
    }

    /// Records `batch` as where reading `view`'s segment goes on, if the
    /// segment is still the one read (a cleaned copy may have replaced it).
    fn remember_read_on(&self, view: &SegmentView, batch: BatchAt) {
        let state = self.inner.state.borrow();
        if let Some(slot) = slot_of(&state, view) {
            state.segments[slot].ranges.read_on.set(Some(batch));
        }
    }

    /// The position of the last indexed batch starting after `start` and
    /// at or before `limit` (for an active segment, also ending below its
    /// stable end).
    async fn boundary_before(
        &self,
        view: &SegmentView,
        end: RangeEnd,
        start: u64,
        limit: u64,
    ) -> Result<Option<u64>, StorageError> {
        let block = {
            let state = self.inner.state.borrow();
            // A cleaned segment that replaced this one has its own index.
            let slot = slot_of(&state, view);
            match (slot.map(|slot| &state.segments[slot].state), end) {
                (Some(SegmentState::Sealed(sealed)), RangeEnd::Sealed { .. }) => {
                    sealed.offset.block_in(&sealed.by_position, limit as i64)
                }
                (Some(SegmentState::Open(active)), RangeEnd::Active { stable_end }) => {
                    let relative = stable_end.0.saturating_sub(view.base_offset.0);
                    return Ok(stable_range_end(
                        &active.offset_entries,
                        start,
                        limit,
                        relative,
                    ));
                }
                // Gone, or sealed since this read began (its index is on
                // disk now, and says nothing of the stable end): the first
                // batch alone.
                _ => None,
            }
        };
        let Some(block) = block else { return Ok(None) };
        let cached = self.inner.position_block.borrow_mut().take();
        let block = match cached {
            Some(cached) if block.is_in(&cached) => cached,
            _ => block.read::<OffsetIndexEntry>().await?,
        };
        let entry = block.floor_by::<OffsetIndexEntry>(limit as i64, position_key);
        *self.inner.position_block.borrow_mut() = Some(block);
        Ok(entry?.map(|entry| u64::from(entry.position.get())))
    }

    /// The first record with a timestamp ≥ `target` at or after the log
    /// start offset, among written records (S8). `None` if there is none.
    pub async fn offset_for_timestamp(
        &self,
        target: TimestampMs,
    ) -> Result<Option<RecordStamp>, StorageError> {
        let log = &*self.inner;
        let (first_base, log_start) = {
            let state = log.state.borrow();
            state.check_usable()?;
            let largest = state
                .segments
                .iter()
                .map(|segment| segment.largest_timestamp);
            let first_slot = first_segment_reaching(largest, target);
            (
                first_slot.map(|slot| state.segments[slot].base_offset),
                state.log_start_offset,
            )
        };
        let Some(mut base) = first_base else {
            return Ok(None);
        };
        let mut replaced = 0;
        loop {
            let Some(view) = segment_view_from(log, base) else {
                return Ok(None);
            };
            match self.find_in_segment(&view, target, log_start).await? {
                SegmentSearch::Found(found) => return Ok(Some(found)),
                // A cleaned segment took its place: search that one.
                SegmentSearch::Replaced if replaced < SEGMENT_REPLACEMENTS_MAX => {
                    replaced += 1;
                    continue;
                }
                SegmentSearch::Replaced | SegmentSearch::NotHere => {}
            }
            let Some(next) = view.base_offset.0.checked_add(1) else {
                return Ok(None);
            };
            base = Offset(next);
        }
    }

    /// The first record with a timestamp ≥ `target` (and offset ≥
    /// `log_start`) in the segment of `view`, if it is still there.
    async fn find_in_segment(
        &self,
        view: &SegmentView,
        target: TimestampMs,
        log_start: Offset,
    ) -> Result<SegmentSearch, StorageError> {
        let log = &*self.inner;
        let time_lookup = {
            let state = log.state.borrow();
            let Some(slot) = slot_of(&state, view) else {
                return Ok(gone_or_replaced(&state, view));
            };
            state.segments[slot].time_lookup(target)
        };
        let from_time = match time_lookup {
            Ok(offset) => offset,
            Err(block) => time_block_floor(block, target)
                .await?
                .map(|relative| Offset(view.base_offset.0.saturating_add(relative))),
        };
        let start_offset = from_time.unwrap_or(view.base_offset).max(log_start);
        let lookup = {
            let state = log.state.borrow();
            match slot_of(&state, view) {
                Some(slot) => state.segments[slot].index_lookup(start_offset),
                None => return Ok(gone_or_replaced(&state, view)),
            }
        };
        let position = lookup
            .offset_position(start_offset.0 - view.base_offset.0)
            .await?;
        let mut walk = Walk::new(log, view, position);
        let found = find_timestamp(&mut walk, target, log_start).await?;
        Ok(found.map_or(SegmentSearch::NotHere, SegmentSearch::Found))
    }
}

impl PartitionLog {
    /// Visits, in offset order, the producer part of every written batch
    /// ending at or after `from`: data batches by their headers only (one
    /// probe per batch), markers whole. How the producer state the log
    /// implies is rebuilt on open.
    pub(crate) async fn visit_producers_from(
        &self,
        from: Offset,
        mut visit: impl FnMut(ProducerItem),
    ) -> Result<(), StorageError> {
        let log = &*self.inner;
        let mut offset = from;
        loop {
            let found = {
                let state = log.state.borrow();
                state.check_usable()?;
                let count = state.segments.len();
                let slot =
                    segment_for_offset(|slot| state.segments[slot].base_offset, count, offset)
                        .unwrap_or(0);
                (slot..count)
                    .map(|slot| &state.segments[slot])
                    .find(|segment| segment.next_offset > offset && segment.written_bytes() > 0)
                    .map(|segment| {
                        let lookup = segment.index_lookup(offset.max(segment.base_offset));
                        (bytes_view(segment), lookup, segment.next_offset)
                    })
            };
            let Some((view, lookup, segment_end)) = found else {
                return Ok(());
            };
            let relative = offset.max(view.base_offset).0 - view.base_offset.0;
            let position = lookup.offset_position(relative).await?;
            let mut walk = Walk::new(log, &view, position);
            while let Some(header) = walk.header(PROBE_BYTES).await? {
                if header.last_offset < offset {
                    walk.position += header.size;
                    continue;
                }
                match header.producer {
                    ProducerOfBatch::None => walk.position += header.size,
                    ProducerOfBatch::Data(batch) => {
                        visit(ProducerItem::Data(header.base_offset, batch));
                        walk.position += header.size;
                    }
                    ProducerOfBatch::ControlMarker { .. } => {
                        let pieces = walk.take(header.size, PROBE_BYTES).await?;
                        let bytes: Vec<u8> = pieces
                            .iter()
                            .flat_map(|piece| piece.iter().copied())
                            .collect();
                        let marker = BatchView::parse_exact(&bytes)
                            .ok()
                            .and_then(|batch| TxnMarker::read(&batch).ok().flatten());
                        match marker {
                            Some(marker) => visit(ProducerItem::Marker(header.base_offset, marker)),
                            None => {
                                tracing::warn!(log = %log.name, offset = %header.base_offset, "skipping an unreadable control batch")
                            }
                        }
                    }
                }
            }
            // Every pass moves past one segment, so the loop ends.
            offset = offset.max(segment_end);
        }
    }
}

/// The producer part of a batch in the log.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ProducerItem {
    Data(Offset, ProducerBatch),
    Marker(Offset, TxnMarker),
}

/// How a timestamp search of one segment ended.
enum SegmentSearch {
    Found(RecordStamp),
    /// No record at or after the target here (or the segment was deleted).
    NotHere,
    /// A cleaned segment replaced this one while the search waited on IO.
    Replaced,
}

/// Swaps of one segment a timestamp search follows before moving on (each
/// takes a whole cleaning pass, so one is already rare).
const SEGMENT_REPLACEMENTS_MAX: usize = 8;

/// The slot of the segment `view` was copied from, if it is still in the
/// log. Segments are matched by base offset *and* file: a cleaned segment
/// replaces its first source under the same base offset, with other
/// positions, so one's index must never be used with the other's file.
/// The batch at the walk's position in a sealed segment: `known` when it is
/// that batch (taken), else from its header — read from the page cache when
/// it is there (the bytes sendfile is about to send usually are), from the
/// disk otherwise; `None` at the end of the segment.
async fn batch_at(
    walk: &mut Walk<'_>,
    known: &mut Option<BatchAt>,
    plain_log: &std::fs::File,
) -> Result<Option<BatchAt>, StorageError> {
    if let Some(batch) = known.take().filter(|batch| batch.position == walk.position) {
        return Ok(Some(batch));
    }
    let position = walk.position;
    let cached = match walk.header_fits()? {
        true => header_from_page_cache(plain_log, position),
        false => return Ok(None),
    };
    let facts = match cached {
        Some(header) => walk.facts(&header)?,
        None => walk.header(PROBE_BYTES).await?,
    };
    Ok(facts.map(|header| BatchAt {
        position,
        base_offset: header.base_offset,
        last_offset: header.last_offset,
        size: header.size,
    }))
}

/// The batch header at `position` of `file` if the page cache holds it:
/// `preadv2` with `RWF_NOWAIT` copies from the cache and never waits for
/// the disk (it fails instead), so the shard is never blocked.
fn header_from_page_cache(file: &std::fs::File, position: u64) -> Option<[u8; BATCH_HEADER_BYTES]> {
    use std::os::fd::AsRawFd;
    let mut header = [0u8; BATCH_HEADER_BYTES];
    let vector = libc::iovec {
        iov_base: header.as_mut_ptr().cast(),
        iov_len: header.len(),
    };
    let position = i64::try_from(position).ok()?;
    // SAFETY: one iovec over a live, writable local buffer of exactly its
    // stated length; the descriptor stays open while `file` is borrowed.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &vector, 1, position, libc::RWF_NOWAIT) };
    (read == BATCH_HEADER_BYTES as isize).then_some(header)
}

fn slot_of(state: &LogState, view: &SegmentView) -> Option<usize> {
    state
        .segment_slot(view.base_offset)
        .filter(|slot| Rc::ptr_eq(&state.segments[*slot].log_file, &view.file))
}

fn gone_or_replaced(state: &LogState, view: &SegmentView) -> SegmentSearch {
    match state.segment_slot(view.base_offset) {
        Some(_) => SegmentSearch::Replaced,
        None => SegmentSearch::NotHere,
    }
}

/// The read inputs of the first segment whose base offset is ≥ `base`.
/// Segments are found by base offset, never kept by slot across an await:
/// retention may delete segments from the front while a lookup waits on IO,
/// and every slot after them shifts (and the cleaner may replace segments:
/// see [`slot_of`]).
fn segment_view_from(log: &LogInner, base: Offset) -> Option<SegmentView> {
    let state = log.state.borrow();
    let slot = state
        .segments
        .partition_point(|segment| segment.base_offset < base);
    state.segments.get(slot).map(bytes_view)
}

/// A view of a segment's bytes (never a file range).
fn bytes_view(segment: &Segment) -> SegmentView {
    SegmentView {
        base_offset: segment.base_offset,
        file: segment.log_file.clone(),
        path: segment.log_path.clone(),
        readable_bytes: segment.written_bytes(),
        appended_bytes: segment.log_bytes,
        ranged: None,
    }
}

async fn time_block_floor(
    block: BlockRead,
    target: TimestampMs,
) -> Result<Option<i64>, StorageError> {
    use brook_engine::log::index::{IndexEntry, TimeIndexEntry};
    let entry = block
        .floor_by::<TimeIndexEntry>(target.0, TimeIndexEntry::key)
        .await?;
    Ok(entry.map(|entry| i64::from(entry.relative_offset.get())))
}

/// Whole batches from the walk's position: skips those before `offset`,
/// stops at `end_offset` or once `max_bytes` would be exceeded.
async fn collect_batches(
    walk: &mut Walk<'_>,
    offset: Offset,
    end_offset: Offset,
    max_bytes: usize,
) -> Result<Option<(LogData, Offset)>, StorageError> {
    let mut pieces = Vec::new();
    let (mut taken, mut next_offset) = (0u64, None);
    loop {
        let read_ahead = (max_bytes as u64)
            .saturating_sub(taken)
            .clamp(WINDOW_BYTES_MIN as u64, WINDOW_BYTES_MAX as u64)
            as usize;
        let Some(header) = walk.header(read_ahead).await? else {
            break;
        };
        let size = header.size;
        if header.last_offset < offset {
            walk.position += size;
            continue;
        }
        if header.base_offset >= end_offset
            || (next_offset.is_some() && taken + size > max_bytes as u64)
        {
            break;
        }
        pieces.extend(walk.take(size, read_ahead).await?);
        taken += size;
        next_offset = Some(header.last_offset.next());
    }
    Ok(next_offset.map(|next| (LogData::Memory(pieces), next)))
}

/// The first record with timestamp ≥ `target` (and offset ≥ `min_offset`)
/// from the walk's position to the segment's written end.
async fn find_timestamp(
    walk: &mut Walk<'_>,
    target: TimestampMs,
    min_offset: Offset,
) -> Result<Option<RecordStamp>, StorageError> {
    while let Some(header) = walk.header(WINDOW_BYTES_MIN).await? {
        let size = header.size;
        if header.max_timestamp < target || header.last_offset < min_offset {
            walk.position += size;
            continue;
        }
        let pieces = walk.take(size, WINDOW_BYTES_MIN).await?;
        let bytes: Vec<u8> = pieces
            .iter()
            .flat_map(|piece| piece.iter().copied())
            .collect();
        let batch =
            BatchView::parse_exact(&bytes).map_err(|error| walk.corrupt(&error.to_string()))?;
        let found = first_at_or_after(&batch, target, min_offset)
            .map_err(|error| walk.corrupt(&error.to_string()))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::{READ_AHEAD_RANGES, read_ahead_span};

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_consumer_reading_on_asks_for_each_byte_once() {
        let whole = (1 + READ_AHEAD_RANGES) * MIB;
        // The first range asks for itself and the ranges after it.
        assert_eq!(read_ahead_span(0, MIB, 0), 0..whole);
        // The next asks only for the range past what was asked.
        assert_eq!(read_ahead_span(MIB, MIB, whole), whole..whole + MIB);
        // A range ending right where the last advice ended asks for nothing.
        assert!(read_ahead_span(MIB, MIB / 2, 3 * MIB).is_empty());
    }

    #[test]
    fn a_range_that_does_not_continue_the_last_advice_asks_for_its_whole_span() {
        let whole = (1 + READ_AHEAD_RANGES) * MIB;
        // A read from the start again, long after: its pages may be gone.
        assert_eq!(read_ahead_span(0, MIB, 100 * MIB), 0..whole);
        // A consumer far ahead of the last advice.
        assert_eq!(
            read_ahead_span(50 * MIB, MIB, whole),
            50 * MIB..50 * MIB + whole
        );
        // A range reaching past the end of the file asks no more than that.
        assert_eq!(
            read_ahead_span(u64::MAX - MIB, MIB, 0),
            u64::MAX - MIB..u64::MAX
        );
    }
}
