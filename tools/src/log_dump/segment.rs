//! `.log` files: one line per batch (Kafka's `kafka-dump-log` field names
//! where it has them), and with `--records` (or a decoder) each record under
//! its batch. In JSON a batch is one object and its records an array in it,
//! so that every line stands alone.

use std::io::Write;
use std::path::Path;

use brook_engine::log::batch::{BatchView, TimestampType};
use brook_engine::log::control::{ControlRecordType, EndTxnMarker, MarkerKind};
use serde::Serialize;

use crate::log_dump::decoders::{DecodedJson, RecordDecoder, decode};
use crate::log_dump::reader::BatchReader;
use crate::log_dump::record::{BytesJson, Record, bytes_text, parse_records, section_of};
use crate::log_dump::{
    DumpError, DumpOptions, FileReport, OutputFormat, write_json_line, write_line,
};

/// Prints every batch of the `.log` at `path`. With `--verify`, a batch whose
/// CRC does not match counts as a mismatch.
pub fn dump_log(
    path: &Path,
    options: &DumpOptions,
    out: &mut dyn Write,
) -> Result<FileReport, DumpError> {
    let mut reader = BatchReader::open(path)?;
    let mut report = FileReport::default();
    while let Some((position, batch)) = reader.next_batch()? {
        report.entries += 1;
        if options.verify && batch.crc_stored() != batch.crc_computed() {
            report.mismatches += 1;
        }
        if !options.prints_records() {
            write_batch(out, &batch, position, None, options)?;
            continue;
        }
        let section = section_of(&batch);
        let records = match &section {
            Ok(section) => parse_records(&batch, section),
            Err(reason) => Err(reason.clone()),
        };
        match records {
            Ok(records) => write_batch(out, &batch, position, Some(&records), options)?,
            Err(reason) => {
                // The header was readable: show it before the error stops the file.
                write_batch(out, &batch, position, None, options)?;
                return Err(DumpError::Corrupt { position, reason });
            }
        }
    }
    Ok(report)
}

/// The batch's line, followed (in text) or completed (in JSON) by its
/// records'.
fn write_batch(
    out: &mut dyn Write,
    batch: &BatchView<'_>,
    position: u64,
    records: Option<&[Record<'_>]>,
    options: &DumpOptions,
) -> Result<(), DumpError> {
    let control = batch.attributes().is_control();
    match options.format {
        OutputFormat::Text => {
            write_line(out, &BatchLine::new(batch, position, None).text())?;
            for record in records.unwrap_or_default() {
                let content = Content::of(record, control, options.decoder);
                let text = format!(
                    "| offset: {} timestamp: {} sequence: {} {}",
                    record.offset, record.timestamp, record.sequence, content.text
                );
                write_line(out, &text)?;
            }
            Ok(())
        }
        OutputFormat::Json => {
            let records = records.map(|records| {
                records
                    .iter()
                    .map(|record| RecordJson {
                        offset: record.offset,
                        timestamp: record.timestamp,
                        sequence: record.sequence,
                        content: Content::of(record, control, options.decoder).json,
                    })
                    .collect()
            });
            write_json_line(out, &BatchLine::new(batch, position, records))
        }
    }
}

/// A batch's header fields, printed as a line of text or a JSON object.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "batch", rename_all = "camelCase")]
struct BatchLine<'a> {
    base_offset: i64,
    last_offset: i64,
    count: i32,
    base_sequence: i32,
    last_sequence: i64,
    producer_id: i64,
    producer_epoch: i16,
    partition_leader_epoch: i32,
    is_transactional: bool,
    is_control: bool,
    position: u64,
    first_timestamp: i64,
    max_timestamp: i64,
    timestamp_type: &'static str,
    size: usize,
    compression: String,
    crc: u32,
    crc_computed: u32,
    crc_valid: bool,
    /// In JSON only, and only when the records are printed.
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<Vec<RecordJson<'a>>>,
}

impl<'a> BatchLine<'a> {
    fn new(
        batch: &BatchView<'_>,
        position: u64,
        records: Option<Vec<RecordJson<'a>>>,
    ) -> BatchLine<'a> {
        let attributes = batch.attributes();
        let (crc, crc_computed) = (batch.crc_stored(), batch.crc_computed());
        BatchLine {
            base_offset: batch.base_offset().0,
            last_offset: batch.last_offset().0,
            count: batch.records_count(),
            base_sequence: batch.base_sequence(),
            last_sequence: last_sequence(batch),
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            partition_leader_epoch: batch.partition_leader_epoch().0,
            is_transactional: attributes.is_transactional(),
            is_control: attributes.is_control(),
            position,
            first_timestamp: batch.base_timestamp().0,
            max_timestamp: batch.max_timestamp().0,
            timestamp_type: match attributes.timestamp_type() {
                TimestampType::CreateTime => "CreateTime",
                TimestampType::LogAppendTime => "LogAppendTime",
            },
            size: batch.size_bytes(),
            compression: attributes.compression().to_string(),
            crc,
            crc_computed,
            crc_valid: crc == crc_computed,
            records,
        }
    }

    fn text(&self) -> String {
        let crc = if self.crc_valid {
            format!("crc: {:#010x} isvalid: true", self.crc)
        } else {
            format!(
                "crc: {:#010x} (computed {:#010x}) isvalid: false",
                self.crc, self.crc_computed
            )
        };
        format!(
            "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} \
             producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
             isControl: {} position: {} firstTimestamp: {} maxTimestamp: {} \
             timestampType: {} size: {} compresscodec: {} {crc}",
            self.base_offset,
            self.last_offset,
            self.count,
            self.base_sequence,
            self.last_sequence,
            self.producer_id,
            self.producer_epoch,
            self.partition_leader_epoch,
            self.is_transactional,
            self.is_control,
            self.position,
            self.first_timestamp,
            self.max_timestamp,
            self.timestamp_type,
            self.size,
            self.compression,
        )
    }
}

/// `baseSequence + lastOffsetDelta`, or -1 for a batch without sequences.
fn last_sequence(batch: &BatchView<'_>) -> i64 {
    let base = i64::from(batch.base_sequence());
    if base < 0 {
        return -1;
    }
    (base + i64::from(batch.last_offset_delta())) % (i64::from(i32::MAX) + 1)
}

/// A record in a batch's JSON `records`.
#[derive(Debug, Serialize)]
struct RecordJson<'a> {
    offset: i64,
    timestamp: i64,
    sequence: i64,
    #[serde(flatten)]
    content: ContentJson<'a>,
}

/// What a record holds, as the fields that follow its offset, timestamp
/// and sequence.
#[derive(Debug, Serialize)]
#[serde(untagged, rename_all_fields = "camelCase")]
enum ContentJson<'a> {
    EndTxnMarker {
        end_txn_marker: &'static str,
        coordinator_epoch: i32,
    },
    Control {
        control_type: String,
    },
    Decoded {
        decoded: DecodedJson,
    },
    /// Key, value and headers as they are; for a record a decoder could not
    /// read, after the reason.
    Raw {
        #[serde(skip_serializing_if = "Option::is_none")]
        decode_error: Option<String>,
        key: BytesJson<'a>,
        value: BytesJson<'a>,
        headers: Vec<HeaderJson<'a>>,
    },
}

#[derive(Debug, Serialize)]
struct HeaderJson<'a> {
    key: BytesJson<'a>,
    value: BytesJson<'a>,
}

/// What a record holds, in both formats.
struct Content<'a> {
    text: String,
    json: ContentJson<'a>,
}

impl<'a> Content<'a> {
    fn of(record: &Record<'a>, control: bool, decoder: RecordDecoder) -> Content<'a> {
        if control {
            control_content(record)
        } else {
            data_content(record, decoder)
        }
    }
}

/// A control record: its type and, for a transaction marker, the epoch of
/// the coordinator that wrote it.
fn control_content<'a>(record: &Record<'a>) -> Content<'a> {
    let control_type = match record.key.map(ControlRecordType::parse_key) {
        Some(Ok(control_type)) => control_type,
        Some(Err(error)) => return undecodable(record, error.to_string()),
        None => return undecodable(record, "control record has no key".to_owned()),
    };
    match EndTxnMarker::parse(control_type, record.value) {
        Ok(marker) => {
            let kind = match marker.kind {
                MarkerKind::Commit => "COMMIT",
                MarkerKind::Abort => "ABORT",
            };
            Content {
                text: format!(
                    "endTxnMarker: {kind} coordinatorEpoch: {}",
                    marker.coordinator_epoch
                ),
                json: ContentJson::EndTxnMarker {
                    end_txn_marker: kind,
                    coordinator_epoch: marker.coordinator_epoch,
                },
            }
        }
        Err(_) => Content {
            text: format!("controlType: {control_type:?}"),
            json: ContentJson::Control {
                control_type: format!("{control_type:?}"),
            },
        },
    }
}

/// A data record: key, value and headers, or what a decoder reads in them.
fn data_content<'a>(record: &Record<'a>, decoder: RecordDecoder) -> Content<'a> {
    if decoder == RecordDecoder::Raw {
        return raw_content(record, None);
    }
    match decode(decoder, record.key, record.value) {
        Ok(decoded) => Content {
            text: decoded.text,
            json: ContentJson::Decoded {
                decoded: decoded.json,
            },
        },
        Err(reason) => undecodable(record, reason),
    }
}

/// A record a decoder could not read: the reason, and its bytes as they are.
fn undecodable<'a>(record: &Record<'a>, reason: String) -> Content<'a> {
    let mut content = raw_content(record, Some(reason.clone()));
    content.text = format!("undecodable ({reason}): {}", content.text);
    content
}

fn raw_content<'a>(record: &Record<'a>, decode_error: Option<String>) -> Content<'a> {
    let size = |bytes: Option<&[u8]>| bytes.map_or(-1, |bytes| bytes.len() as i64);
    let headers_text: Vec<String> = record
        .headers
        .iter()
        .map(|(key, value)| format!("{}: {}", bytes_text(Some(key)), bytes_text(*value)))
        .collect();
    let headers_json = record
        .headers
        .iter()
        .map(|(key, value)| HeaderJson {
            key: BytesJson(Some(key)),
            value: BytesJson(*value),
        })
        .collect();
    Content {
        text: format!(
            "keySize: {} valueSize: {} key: {} value: {} headers: [{}]",
            size(record.key),
            size(record.value),
            bytes_text(record.key),
            bytes_text(record.value),
            headers_text.join(", ")
        ),
        json: ContentJson::Raw {
            decode_error,
            key: BytesJson(record.key),
            value: BytesJson(record.value),
            headers: headers_json,
        },
    }
}
