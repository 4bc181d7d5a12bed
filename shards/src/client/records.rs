//! Record batches as the load generator writes and reads them: the v2 batch
//! format written straight into one reusable buffer (the `kafka-protocol`
//! encoder builds a `Record` per record, too slow for a million records a
//! second), and a walker over fetched batches that borrows every field from
//! the response bytes. Compression and decompression are kafka-protocol's.
//!
//! `brook produce` writes through the same builder: records with headers
//! ([`BatchBuilder::push_with_headers`]) and idempotent batches
//! ([`BatchBuilder::finish_as`] with a [`BatchProducer`]).

use brook_engine::log::batch::{BATCH_HEADER_BYTES, BatchView, Compression};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use crate::client::ClientError;

/// Who wrote a batch, in its header: an idempotent producer's id and epoch
/// and the sequence number of the batch's first record (Kafka's v2 batch
/// fields `producerId`, `producerEpoch`, `baseSequence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl BatchProducer {
    /// No producer: what a non-idempotent client writes (-1, -1, -1).
    pub const NONE: BatchProducer = BatchProducer {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
}

/// One record header: a key and a value (`None`: null).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

/// Writes one batch at a time; `finish` hands it out and starts the next.
/// Records are written after room for the batch header, so an uncompressed
/// batch is handed out without copying its records again (at a million
/// records a second that copy was a third of the load generator's time).
/// With [`with_headroom`](Self::with_headroom) there is room before the
/// header too, for the request that will carry the batch
/// ([`SealedBatch::framed`]).
#[derive(Debug)]
pub struct BatchBuilder {
    /// Headroom, header room, then the records.
    records: BytesMut,
    capacity: usize,
    headroom: usize,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

/// Room kept after a batch for what follows it in a request (a Produce
/// request's closing tagged fields), so framing it does not reallocate.
const TRAILER_ROOM_BYTES: usize = 16;

/// A buffer for a new batch: headroom and room for the header, nothing
/// else yet. Only the header room is written (zeros, overwritten on
/// finish): a buffer's worth of memset per batch would cost as much as
/// the copy the buffer exists to avoid.
fn batch_buffer(capacity: usize, headroom: usize) -> BytesMut {
    let mut buffer =
        BytesMut::with_capacity(headroom + capacity.max(BATCH_HEADER_BYTES) + TRAILER_ROOM_BYTES);
    buffer.put_bytes(0, headroom + BATCH_HEADER_BYTES);
    buffer
}

impl BatchBuilder {
    pub fn new(capacity: usize) -> BatchBuilder {
        BatchBuilder::with_headroom(capacity, 0)
    }

    /// A builder whose batches keep `headroom` bytes free before them, for
    /// a request's fields to be written there instead of the batch being
    /// copied after them.
    pub fn with_headroom(capacity: usize, headroom: usize) -> BatchBuilder {
        BatchBuilder {
            records: batch_buffer(capacity, headroom),
            capacity,
            headroom,
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn record_count(&self) -> usize {
        self.count as usize
    }

    /// The batch's size so far, uncompressed.
    pub fn size_bytes(&self) -> usize {
        self.records.len() - self.headroom
    }

    /// Adds a record whose value is `value_parts` back to back (so a
    /// per-record stamp and a shared payload need no copy into one value).
    pub fn push(&mut self, timestamp_ms: i64, key: Option<&[u8]>, value_parts: &[&[u8]]) {
        self.push_with_headers(timestamp_ms, key, value_parts, &[]);
    }

    /// As [`push`](Self::push), with `headers` after the value (Kafka's v2
    /// record: a varint count, then per header a varint key length, the
    /// key, a varint value length (-1: null) and the value).
    pub fn push_with_headers(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value_parts: &[&[u8]],
        headers: &[RecordHeader<'_>],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp_ms;
            self.max_timestamp = timestamp_ms;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let value_len: usize = value_parts.iter().map(|part| part.len()).sum();
        let timestamp_delta = timestamp_ms - self.base_timestamp;
        let offset_delta = i64::from(self.count);
        let key_len = key.map_or(-1, |key| key.len() as i64);
        let headers_len: usize = headers.iter().map(header_len).sum();
        let body_len = 1
            + varint_len(timestamp_delta)
            + varint_len(offset_delta)
            + varint_len(key_len)
            + key.map_or(0, <[u8]>::len)
            + varint_len(value_len as i64)
            + value_len
            + varint_len(headers.len() as i64)
            + headers_len;
        let records = &mut self.records;
        put_varint(records, body_len as i64);
        let body_start = records.len();
        records.put_u8(0);
        put_varint(records, timestamp_delta);
        put_varint(records, offset_delta);
        put_varint(records, key_len);
        if let Some(key) = key {
            records.put_slice(key);
        }
        put_varint(records, value_len as i64);
        for part in value_parts {
            records.put_slice(part);
        }
        put_varint(records, headers.len() as i64);
        for header in headers {
            put_varint(records, header.key.len() as i64);
            records.put_slice(header.key);
            put_varint(records, header.value.map_or(-1, |value| value.len() as i64));
            if let Some(value) = header.value {
                records.put_slice(value);
            }
        }
        debug_assert_eq!(records.len() - body_start, body_len, "record length");
        self.count += 1;
    }

    /// The finished batch (base offset 0, no producer id), compressed as
    /// asked; the builder is empty again.
    pub fn finish(&mut self, compression: Compression) -> Result<Bytes, ClientError> {
        self.finish_as(compression, BatchProducer::NONE)
    }

    /// As [`finish`](Self::finish), with `producer`'s id, epoch and base
    /// sequence in the header (covered by the CRC like every field from the
    /// attributes on).
    pub fn finish_as(
        &mut self,
        compression: Compression,
        producer: BatchProducer,
    ) -> Result<Bytes, ClientError> {
        self.seal(compression, producer)
            .map(SealedBatch::into_bytes)
    }

    /// As [`finish_as`](Self::finish_as), with the batch still in its
    /// buffer after the builder's headroom, to be framed by a request.
    pub fn seal(
        &mut self,
        compression: Compression,
        producer: BatchProducer,
    ) -> Result<SealedBatch, ClientError> {
        let mut header = BytesMut::with_capacity(BATCH_HEADER_BYTES);
        header.put_i64(0); // base offset
        header.put_i32(0); // length, below
        header.put_i32(-1); // partition leader epoch
        header.put_i8(2); // magic
        header.put_u32(0); // crc, below
        let codec = match compression {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(code) => {
                return Err(ClientError::Encode(format!("unknown codec {code}")));
            }
        };
        header.put_i16(codec);
        header.put_i32(self.count - 1); // last offset delta
        header.put_i64(self.base_timestamp);
        header.put_i64(self.max_timestamp);
        header.put_i64(producer.producer_id);
        header.put_i16(producer.producer_epoch);
        header.put_i32(producer.base_sequence);
        header.put_i32(self.count);
        debug_assert_eq!(header.len(), BATCH_HEADER_BYTES);
        let start = self.headroom;
        let mut batch = match compression {
            Compression::None => {
                let fresh = batch_buffer(self.capacity, self.headroom);
                let mut batch = std::mem::replace(&mut self.records, fresh);
                batch[start..start + BATCH_HEADER_BYTES].copy_from_slice(&header);
                batch
            }
            compressed => {
                let records = &self.records[start + BATCH_HEADER_BYTES..];
                let mut batch = BytesMut::with_capacity(
                    start + BATCH_HEADER_BYTES + records.len() / 2 + TRAILER_ROOM_BYTES,
                );
                batch.put_bytes(0, start);
                batch.put_slice(&header);
                let copy = |out: &mut BytesMut| {
                    out.put_slice(records);
                    Ok(())
                };
                let written = match compressed {
                    Compression::Gzip => Gzip::compress(&mut batch, copy),
                    Compression::Snappy => Snappy::compress(&mut batch, copy),
                    Compression::Lz4 => Lz4::compress(&mut batch, copy),
                    Compression::Zstd => Zstd::compress(&mut batch, copy),
                    other => Err(anyhow_unsupported(other)),
                };
                written.map_err(|error| ClientError::Encode(error.to_string()))?;
                self.records.truncate(start + BATCH_HEADER_BYTES);
                batch
            }
        };
        let length = (batch.len() - start - 12) as i32;
        batch[start + 8..start + 12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&batch[start + 21..]);
        batch[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
        self.count = 0;
        Ok(SealedBatch {
            buffer: batch,
            start,
        })
    }
}

/// A finished batch in its builder's buffer, after the headroom.
#[derive(Debug)]
pub struct SealedBatch {
    buffer: BytesMut,
    /// Where the batch starts (the headroom before it is free).
    start: usize,
}

impl SealedBatch {
    pub fn len(&self) -> usize {
        self.buffer.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch alone.
    pub fn into_bytes(mut self) -> Bytes {
        self.buffer.advance(self.start);
        self.buffer.freeze()
    }

    /// `before`, the batch, then `after`, as one buffer: `before` is
    /// written into the headroom and `after` into the room kept behind the
    /// batch, so the batch itself is not copied (it is when `before` does
    /// not fit the headroom).
    pub fn framed(mut self, before: &[u8], after: &[u8]) -> Bytes {
        let Some(at) = self.start.checked_sub(before.len()) else {
            let mut frame = BytesMut::with_capacity(before.len() + self.len() + after.len());
            frame.put_slice(before);
            frame.put_slice(&self.buffer[self.start..]);
            frame.put_slice(after);
            return frame.freeze();
        };
        self.buffer[at..self.start].copy_from_slice(before);
        self.buffer.put_slice(after);
        self.buffer.advance(at);
        self.buffer.freeze()
    }
}

/// A header's bytes in a record.
fn header_len(header: &RecordHeader<'_>) -> usize {
    let value_len = header.value.map_or(-1, |value| value.len() as i64);
    varint_len(header.key.len() as i64)
        + header.key.len()
        + varint_len(value_len)
        + header.value.map_or(0, <[u8]>::len)
}

fn anyhow_unsupported(compression: Compression) -> anyhow::Error {
    anyhow::anyhow!("the client does not write {compression:?}")
}

/// One record of a fetched batch, borrowed from the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Visits every record of the whole batches in `bytes` (a partition's
/// records from a Fetch response, which may end in a partial batch) with
/// offsets at or after `from`; returns the offset after the last whole
/// batch (or `from` if there was none). With `check_crcs` (Kafka's
/// `check.crcs`), batches must pass their CRC.
pub fn for_each_record(
    bytes: &Bytes,
    from: i64,
    check_crcs: bool,
    mut visit: impl FnMut(RecordView<'_>),
) -> Result<i64, ClientError> {
    let mut next = from;
    for batch in batches_after(bytes, from) {
        let batch = batch?;
        if check_crcs {
            batch
                .verify_crc()
                .map_err(|error| ClientError::Protocol(format!("fetched batch: {error}")))?;
        }
        next = batch.next_offset().0;
        if batch.attributes().is_control() {
            continue;
        }
        let decompressed;
        let records: &[u8] = match batch.attributes().compression() {
            Compression::None => batch.records_bytes(),
            compression => {
                decompressed = decompress(compression, batch.records_bytes())?;
                &decompressed
            }
        };
        walk(&batch, records, from, &mut visit)?;
    }
    Ok(next)
}

/// The offset [`for_each_record`] returns for the same bytes, from the
/// batch headers alone (no CRC, no records): where the next fetch starts,
/// known before this one's records are walked.
pub fn next_offset_after(bytes: &[u8], from: i64) -> Result<i64, ClientError> {
    let mut next = from;
    for batch in batches_after(bytes, from) {
        next = batch?.next_offset().0;
    }
    Ok(next)
}

/// The whole batches of `bytes` holding offsets at or after `from`, up to
/// a partial batch at the end; a malformed header is an error.
fn batches_after(
    bytes: &[u8],
    from: i64,
) -> impl Iterator<Item = Result<BatchView<'_>, ClientError>> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        while !rest.is_empty() {
            let batch = match BatchView::parse_prefix(rest) {
                Ok(batch) => batch,
                Err(brook_engine::log::batch::BatchError::Truncated { .. }) => return None,
                Err(error) => {
                    rest = &[];
                    return Some(Err(ClientError::Protocol(format!(
                        "fetched batch: {error}"
                    ))));
                }
            };
            rest = &rest[batch.size_bytes()..];
            if batch.next_offset().0 > from {
                return Some(Ok(batch));
            }
        }
        None
    })
}

fn decompress(compression: Compression, records: &[u8]) -> Result<Bytes, ClientError> {
    let mut input = Bytes::copy_from_slice(records);
    let take = |bytes: &mut Bytes| Ok(std::mem::take(bytes));
    let result = match compression {
        Compression::Gzip => Gzip::decompress(&mut input, take),
        Compression::Snappy => Snappy::decompress(&mut input, take),
        Compression::Lz4 => Lz4::decompress(&mut input, take),
        Compression::Zstd => Zstd::decompress(&mut input, take),
        other => Err(anyhow_unsupported(other)),
    };
    result.map_err(|error| ClientError::Protocol(format!("decompressing: {error}")))
}

fn walk(
    batch: &BatchView<'_>,
    mut records: &[u8],
    from: i64,
    visit: &mut impl FnMut(RecordView<'_>),
) -> Result<(), ClientError> {
    let malformed = || ClientError::Protocol("a malformed record".into());
    for _ in 0..batch.records_count().max(0) {
        let (length, used) = get_varint(records).ok_or_else(malformed)?;
        let length = usize::try_from(length).map_err(|_| malformed())?;
        let record = records.get(used..used + length).ok_or_else(malformed)?;
        records = &records[used + length..];
        let mut fields = record.get(1..).ok_or_else(malformed)?;
        let mut next_varint = || {
            let (value, used) = get_varint(fields).ok_or_else(malformed)?;
            fields = &fields[used..];
            Ok::<i64, ClientError>(value)
        };
        let timestamp_delta = next_varint()?;
        let offset_delta = next_varint()?;
        let key_len = next_varint()?;
        let (key, after_key) = split_field(fields, key_len).ok_or_else(malformed)?;
        let (value_len, used) = get_varint(after_key).ok_or_else(malformed)?;
        let (value, _) = split_field(&after_key[used..], value_len).ok_or_else(malformed)?;
        let offset = batch.base_offset().0 + offset_delta;
        if offset < from {
            continue;
        }
        visit(RecordView {
            offset,
            timestamp: batch.base_timestamp().0 + timestamp_delta,
            key,
            value,
        });
    }
    Ok(())
}

/// A length-prefixed field (-1: null) and the bytes after it.
fn split_field(bytes: &[u8], len: i64) -> Option<(Option<&[u8]>, &[u8])> {
    if len < 0 {
        return Some((None, bytes));
    }
    let len = usize::try_from(len).ok()?;
    Some((Some(bytes.get(..len)?), &bytes[len..]))
}

/// Kafka's zigzag varint (also varlong).
fn put_varint(out: &mut BytesMut, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.put_u8((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.put_u8(zigzag as u8);
}

fn varint_len(value: i64) -> usize {
    let zigzag = ((value << 1) ^ (value >> 63)) as u64;
    (64 - zigzag.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Reads a zigzag varint: its value and the bytes it used.
fn get_varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut zigzag = 0u64;
    for (index, byte) in bytes.iter().take(10).enumerate() {
        zigzag |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            return Some((((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64), index + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
    use brook_engine::types::{Offset, TimestampMs};

    #[test]
    fn varints_round_trip() {
        for value in [
            0,
            1,
            -1,
            63,
            64,
            -65,
            300,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            assert_eq!(out.len(), varint_len(value), "{value}");
            assert_eq!(get_varint(&out), Some((value, out.len())), "{value}");
        }
    }

    /// Our batches are what kafka-protocol's encoder writes, byte for byte,
    /// and pass the broker's own validation.
    #[test]
    fn batches_match_kafka_protocols_encoding() {
        let mut builder = BatchBuilder::new(1024);
        builder.push(1000, Some(b"k1"), &[b"stamp", b"-payload"]);
        builder.push(1003, None, &[b"v2"]);
        let ours = builder.finish(Compression::None).unwrap();
        let theirs = encode_batch(
            &[
                NewRecord {
                    key: Some(Bytes::from_static(b"k1")),
                    value: Some(Bytes::from_static(b"stamp-payload")),
                    timestamp: TimestampMs(1000),
                    headers: Vec::new(),
                },
                NewRecord::value(&b"v2"[..], TimestampMs(1003)),
            ],
            &BatchOptions::default(),
        );
        assert_eq!(&ours[..], &theirs[..]);
        let batch = BatchView::parse_exact(&ours).unwrap();
        assert_eq!(batch.validate_for_append(Offset(0)), Ok(()));
        assert!(builder.is_empty());
    }

    #[test]
    fn compressed_batches_walk_back_to_their_records() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut builder = BatchBuilder::new(1024);
            for index in 0..10u8 {
                builder.push(5, None, &[&[index; 3], &[7; 100]]);
            }
            let mut bytes = builder.finish(compression).unwrap().to_vec();
            let second = builder_batch(&mut builder, compression);
            // Place the second batch at offset 10, as a broker would.
            let mut placed = second.to_vec();
            placed[..8].copy_from_slice(&10i64.to_be_bytes());
            bytes.extend(placed);
            let bytes = Bytes::from(bytes);
            let mut seen = Vec::new();
            let next = for_each_record(&bytes, 3, true, |record| {
                seen.push((record.offset, record.value.unwrap()[0]));
            })
            .unwrap();
            assert_eq!(next, 11, "{compression:?}");
            assert_eq!(seen.first(), Some(&(3, 3)));
            assert_eq!(seen.last(), Some(&(10, 42)));
            assert_eq!(seen.len(), 8);
            // A partial batch at the end is left for the next fetch.
            let cut = bytes.slice(..bytes.len() - 5);
            assert_eq!(for_each_record(&cut, 0, true, |_| {}).unwrap(), 10);
            // The headers alone say the same, from anywhere.
            for (bytes, from) in [
                (&bytes, 3),
                (&bytes, 10),
                (&bytes, 11),
                (&cut, 0),
                (&cut, 12),
            ] {
                assert_eq!(
                    next_offset_after(bytes, from).unwrap(),
                    for_each_record(bytes, from, true, |_| {}).unwrap(),
                    "{compression:?} from {from}"
                );
            }
        }
    }

    /// Headers and an idempotent producer's fields come out as
    /// kafka-protocol writes them, CRC included.
    #[test]
    fn headers_and_producer_fields_match_kafka_protocols_encoding() {
        let producer = BatchProducer {
            producer_id: 4242,
            producer_epoch: 3,
            base_sequence: 17,
        };
        for compression in [Compression::None, Compression::Gzip, Compression::Snappy] {
            let mut builder = BatchBuilder::new(1024);
            let headers = [
                RecordHeader {
                    key: b"trace",
                    value: Some(b"abc"),
                },
                RecordHeader {
                    key: b"empty",
                    value: None,
                },
            ];
            builder.push_with_headers(2000, Some(b"k"), &[b"value"], &headers);
            builder.push_with_headers(2001, None, &[b""], &[]);
            let ours = builder.finish_as(compression, producer).unwrap();
            let theirs = encode_batch(
                &[
                    NewRecord {
                        key: Some(Bytes::from_static(b"k")),
                        value: Some(Bytes::from_static(b"value")),
                        timestamp: TimestampMs(2000),
                        headers: vec![
                            ("trace".to_owned(), Some(Bytes::from_static(b"abc"))),
                            ("empty".to_owned(), None),
                        ],
                    },
                    NewRecord::value(&b""[..], TimestampMs(2001)),
                ],
                &BatchOptions {
                    compression,
                    producer_id: 4242,
                    producer_epoch: 3,
                    base_sequence: 17,
                    transactional: false,
                },
            );
            if compression == Compression::None {
                assert_eq!(&ours[..], &theirs[..]);
            }
            let batch = BatchView::parse_exact(&ours).unwrap();
            assert_eq!(
                batch.validate_for_append(Offset(0)),
                Ok(()),
                "{compression:?}"
            );
            assert_eq!(batch.producer_id(), 4242);
            assert_eq!(batch.producer_epoch(), 3);
            assert_eq!(batch.base_sequence(), 17);
            assert_eq!(batch.attributes().compression(), compression);
            let mut values = Vec::new();
            for_each_record(&ours, 0, true, |record| {
                values.push(record.value.map(<[u8]>::to_vec))
            })
            .unwrap();
            assert_eq!(values, [Some(b"value".to_vec()), Some(Vec::new())]);
        }
    }

    /// A damaged record fails the fetch when CRCs are checked (Kafka's
    /// `check.crcs`), and is walked as it is when they are not.
    #[test]
    fn a_damaged_batch_fails_only_when_crcs_are_checked() {
        let mut builder = BatchBuilder::new(1024);
        builder.push(5, None, &[b"value"]);
        let mut damaged = builder.finish(Compression::None).unwrap().to_vec();
        *damaged.last_mut().unwrap() ^= 0xFF;
        let damaged = Bytes::from(damaged);
        assert!(for_each_record(&damaged, 0, true, |_| {}).is_err());
        let mut values = 0;
        assert_eq!(
            for_each_record(&damaged, 0, false, |_| values += 1).unwrap(),
            1
        );
        assert_eq!(values, 1);
    }

    /// A batch header that is not a v2 batch's fails the fetch, whether the
    /// next offset is taken from the headers or from the records.
    #[test]
    fn a_malformed_batch_header_fails_both_walks() {
        let mut builder = BatchBuilder::new(1024);
        builder.push(5, None, &[b"value"]);
        let mut bad = builder.finish(Compression::None).unwrap().to_vec();
        bad[16] = 1; // the magic byte
        let bad = Bytes::from(bad);
        assert!(next_offset_after(&bad, 0).is_err());
        assert!(for_each_record(&bad, 0, false, |_| {}).is_err());
    }

    /// A builder with headroom writes the same batches; framing one puts
    /// the frame's start in the headroom and its end after the batch, in
    /// the same buffer (no copy), or copies when the start does not fit.
    #[test]
    fn headroom_leaves_batches_as_they_are_and_frames_them_in_place() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let mut plain = BatchBuilder::new(4096);
            let mut roomy = BatchBuilder::with_headroom(4096, 32);
            for builder in [&mut plain, &mut roomy] {
                for index in 0..20u8 {
                    builder.push(9, Some(b"k"), &[&[index; 24], &[0; 100]]);
                }
            }
            assert_eq!(plain.size_bytes(), roomy.size_bytes());
            let expected = plain.finish(compression).unwrap();
            let sealed = roomy.seal(compression, BatchProducer::NONE).unwrap();
            assert_eq!(sealed.len(), expected.len(), "{compression:?}");
            let batch_address = sealed.buffer[sealed.start..].as_ptr();
            let frame = sealed.framed(b"before", b"after");
            assert_eq!(&frame[..6], b"before");
            assert_eq!(&frame[6..frame.len() - 5], &expected[..]);
            assert_eq!(&frame[frame.len() - 5..], b"after");
            assert_eq!(frame[6..].as_ptr(), batch_address, "framed in place");
            assert!(BatchView::parse_exact(&frame[6..frame.len() - 5]).is_ok());

            roomy.push(9, None, &[b"v"]);
            let sealed = roomy.seal(compression, BatchProducer::NONE).unwrap();
            let alone = sealed.len();
            let frame = sealed.framed(&[1; 40], b"");
            assert_eq!(frame.len(), 40 + alone, "copied when the headroom is short");
            assert_eq!(roomy.size_bytes(), BATCH_HEADER_BYTES);
        }
    }

    fn builder_batch(builder: &mut BatchBuilder, compression: Compression) -> Bytes {
        builder.push(6, Some(b"key"), &[&[42; 4]]);
        builder.finish(compression).unwrap()
    }
}
