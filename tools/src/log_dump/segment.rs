//! `.log` files: one line per batch (Kafka's `kafka-dump-log` field names
//! where it has them), and with `--records` (or a decoder) each record under
//! its batch. In JSON a batch is one object and its records an array in it,
//! so that every line stands alone.

use std::io::Write;
use std::path::Path;

use brook_engine::log::batch::{BatchView, Compression, TimestampType};
use brook_engine::log::control::{ControlRecordType, EndTxnMarker, MarkerKind};

use crate::log_dump::decoders::{RecordDecoder, decode};
use crate::log_dump::json::{JsonObject, array, quote};
use crate::log_dump::reader::BatchReader;
use crate::log_dump::record::{Record, bytes_json, bytes_text, parse_records, section_of};
use crate::log_dump::{DumpError, DumpOptions, FileReport, OutputFormat, write_line};

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
        let crc_valid = batch.crc_stored() == batch.crc_computed();
        if options.verify && !crc_valid {
            report.mismatches += 1;
        }
        if !options.prints_records() {
            write_line(out, &batch_line(&batch, position, None, options.format))?;
            continue;
        }
        let lines = section_of(&batch).and_then(|section| {
            let records = parse_records(&batch, &section)?;
            Ok(records_lines(&batch, &records, options))
        });
        match lines {
            Ok(lines) => {
                write_line(
                    out,
                    &batch_line(&batch, position, Some(lines), options.format),
                )?;
            }
            Err(reason) => {
                // The header was readable: show it before the error stops the file.
                write_line(out, &batch_line(&batch, position, None, options.format))?;
                return Err(DumpError::Corrupt { position, reason });
            }
        }
    }
    Ok(report)
}

/// The batch's line, followed (in text) or completed (in JSON) by its
/// records' lines.
fn batch_line(
    batch: &BatchView<'_>,
    position: u64,
    records: Option<Vec<String>>,
    format: OutputFormat,
) -> String {
    match format {
        OutputFormat::Text => {
            let mut text = batch_text(batch, position);
            for line in records.into_iter().flatten() {
                text.push('\n');
                text.push_str(&line);
            }
            text
        }
        OutputFormat::Json => {
            let mut object = batch_json(batch, position);
            if let Some(records) = records {
                object = object.raw("records", &array(records));
            }
            object.render()
        }
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

pub fn compression_name(compression: Compression) -> String {
    match compression {
        Compression::None => "none".to_owned(),
        Compression::Gzip => "gzip".to_owned(),
        Compression::Snappy => "snappy".to_owned(),
        Compression::Lz4 => "lz4".to_owned(),
        Compression::Zstd => "zstd".to_owned(),
        Compression::Unknown(id) => format!("unknown({id})"),
    }
}

fn timestamp_type_name(batch: &BatchView<'_>) -> &'static str {
    match batch.attributes().timestamp_type() {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

fn batch_text(batch: &BatchView<'_>, position: u64) -> String {
    let attributes = batch.attributes();
    let (stored, computed) = (batch.crc_stored(), batch.crc_computed());
    let crc = if stored == computed {
        format!("crc: {stored:#010x} isvalid: true")
    } else {
        format!("crc: {stored:#010x} (computed {computed:#010x}) isvalid: false")
    };
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} \
         producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
         isControl: {} position: {position} firstTimestamp: {} maxTimestamp: {} \
         timestampType: {} size: {} compresscodec: {} {crc}",
        batch.base_offset().0,
        batch.last_offset().0,
        batch.records_count(),
        batch.base_sequence(),
        last_sequence(batch),
        batch.producer_id(),
        batch.producer_epoch(),
        batch.partition_leader_epoch().0,
        attributes.is_transactional(),
        attributes.is_control(),
        batch.base_timestamp().0,
        batch.max_timestamp().0,
        timestamp_type_name(batch),
        batch.size_bytes(),
        compression_name(attributes.compression()),
    )
}

fn batch_json(batch: &BatchView<'_>, position: u64) -> JsonObject {
    let attributes = batch.attributes();
    let (stored, computed) = (batch.crc_stored(), batch.crc_computed());
    JsonObject::new()
        .string("type", "batch")
        .integer("baseOffset", batch.base_offset().0)
        .integer("lastOffset", batch.last_offset().0)
        .integer("count", batch.records_count())
        .integer("baseSequence", batch.base_sequence())
        .integer("lastSequence", last_sequence(batch))
        .integer("producerId", batch.producer_id())
        .integer("producerEpoch", batch.producer_epoch())
        .integer("partitionLeaderEpoch", batch.partition_leader_epoch().0)
        .boolean("isTransactional", attributes.is_transactional())
        .boolean("isControl", attributes.is_control())
        .unsigned("position", position)
        .integer("firstTimestamp", batch.base_timestamp().0)
        .integer("maxTimestamp", batch.max_timestamp().0)
        .string("timestampType", timestamp_type_name(batch))
        .unsigned("size", batch.size_bytes() as u64)
        .string("compression", &compression_name(attributes.compression()))
        .unsigned("crc", u64::from(stored))
        .unsigned("crcComputed", u64::from(computed))
        .boolean("crcValid", stored == computed)
}

/// Each record's line (text) or object (JSON).
fn records_lines(
    batch: &BatchView<'_>,
    records: &[Record<'_>],
    options: &DumpOptions,
) -> Vec<String> {
    let control = batch.attributes().is_control();
    records
        .iter()
        .map(|record| {
            let content = if control {
                control_content(record)
            } else {
                data_content(record, options.decoder)
            };
            match options.format {
                OutputFormat::Text => format!(
                    "| offset: {} timestamp: {} sequence: {} {}",
                    record.offset, record.timestamp, record.sequence, content.text
                ),
                OutputFormat::Json => {
                    let mut object = JsonObject::new()
                        .integer("offset", record.offset)
                        .integer("timestamp", record.timestamp)
                        .integer("sequence", record.sequence);
                    for (key, value) in content.json {
                        object = object.raw(key, &value);
                    }
                    object.render()
                }
            }
        })
        .collect()
}

/// What a record holds, in both formats (JSON as rendered fields).
struct Content {
    text: String,
    json: Vec<(&'static str, String)>,
}

/// A control record: its type and, for a transaction marker, the epoch of
/// the coordinator that wrote it.
fn control_content(record: &Record<'_>) -> Content {
    let control_type = match record.key.map(ControlRecordType::parse_key) {
        Some(Ok(control_type)) => control_type,
        Some(Err(error)) => return undecodable(record, &error.to_string()),
        None => return undecodable(record, "control record has no key"),
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
                json: vec![
                    ("endTxnMarker", quote(kind)),
                    ("coordinatorEpoch", marker.coordinator_epoch.to_string()),
                ],
            }
        }
        Err(_) => Content {
            text: format!("controlType: {control_type:?}"),
            json: vec![("controlType", quote(&format!("{control_type:?}")))],
        },
    }
}

/// A data record: key, value and headers, or what a decoder reads in them.
fn data_content(record: &Record<'_>, decoder: RecordDecoder) -> Content {
    if decoder != RecordDecoder::Raw {
        return match decode(decoder, record.key, record.value) {
            Ok(decoded) => Content {
                text: decoded.text,
                json: vec![("decoded", decoded.json.render())],
            },
            Err(reason) => undecodable(record, &reason),
        };
    }
    raw_content(record)
}

fn raw_content(record: &Record<'_>) -> Content {
    let size = |bytes: Option<&[u8]>| bytes.map_or(-1, |bytes| bytes.len() as i64);
    let headers_text: Vec<String> = record
        .headers
        .iter()
        .map(|(key, value)| format!("{}: {}", bytes_text(Some(key)), bytes_text(*value)))
        .collect();
    let headers_json = record.headers.iter().map(|(key, value)| {
        JsonObject::new()
            .raw("key", &bytes_json(Some(key)))
            .raw("value", &bytes_json(*value))
            .render()
    });
    Content {
        text: format!(
            "keySize: {} valueSize: {} key: {} value: {} headers: [{}]",
            size(record.key),
            size(record.value),
            bytes_text(record.key),
            bytes_text(record.value),
            headers_text.join(", ")
        ),
        json: vec![
            ("key", bytes_json(record.key)),
            ("value", bytes_json(record.value)),
            ("headers", array(headers_json)),
        ],
    }
}

/// A record a decoder could not read: the reason, and its bytes as they are.
fn undecodable(record: &Record<'_>, reason: &str) -> Content {
    let mut raw = raw_content(record);
    raw.text = format!("undecodable ({reason}): {}", raw.text);
    raw.json.insert(0, ("decodeError", quote(reason)));
    raw
}
