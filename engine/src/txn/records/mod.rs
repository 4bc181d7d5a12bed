//! The records the transaction coordinator writes to `__transaction_state`,
//! byte for byte as Apache Kafka writes them, so Kafka's tools (the
//! `TransactionLogMessageFormatter`, `kafka-dump-log --transaction-log-decoder`)
//! read Brook's log and Brook loads a log Kafka wrote.
//!
//! # Layout
//!
//! The topic is compacted: the newest value per key wins, and a key with a
//! null value (a *tombstone*) means the transactional id was expired. Key and
//! value both start with a big-endian int16 version.
//!
//! Key (`TransactionLogKey`, Kafka 4 calls its version the record type):
//! int16 `0`, then `TransactionalId` STRING (int16 length).
//!
//! Value (`TransactionLogValue`), version 0 classic, version 1 flexible:
//!
//! | field                            | type                 | versions       |
//! |----------------------------------|----------------------|----------------|
//! | ProducerId                       | int64                | 0+             |
//! | PreviousProducerId               | int64, default -1    | tag 0 in 1+    |
//! | NextProducerId                   | int64, default -1    | tag 1 in 1+    |
//! | ProducerEpoch                    | int16                | 0+             |
//! | TransactionTimeoutMs             | int32                | 0+             |
//! | TransactionStatus                | int8 (state id)      | 0+             |
//! | TransactionPartitions            | nullable [Partitions]| 0+             |
//! | TransactionLastUpdateTimestampMs | int64                | 0+             |
//! | TransactionStartTimestampMs      | int64                | 0+             |
//! | ClientTransactionVersion         | int16, default 0     | tag 2 in 1+    |
//!
//! Partitions: `Topic` string, `PartitionIds` [int32] (and, in version 1, a
//! tagged-field section). Tagged fields are written only when they differ from
//! their default, in ascending tag order, as Kafka's generated code does;
//! tags this module does not know (Kafka 4.2's `NextProducerEpoch`, tag 3)
//! are kept and written back. An `Empty` transaction's partitions are null.
//!
//! Kafka writes version 1 once `transaction.version` ≥ 1 (every Kafka 4
//! cluster) and version 0 before; both are read.
//!
//! # Placement
//!
//! Transactional id T lives in partition `abs(javaStringHash(T)) %
//! transaction.state.log.num.partitions` ([`partition_for`]): the same rule
//! as groups in `__consumer_offsets`, so the function is shared.

use bytes::Bytes;

use crate::group::records::offsets_partition_for;
pub use crate::protocol::schema_wire::STRING_BYTES_MAX;
use crate::protocol::schema_wire::{Format, Reader, Writer};
use crate::replica::producer_state::ProducerEpoch;
use crate::txn::state::TransactionState;
use crate::types::ProducerId;

/// Why a record could not be read or written: the error of the wire module
/// shared with `__consumer_offsets`' records.
pub use crate::protocol::schema_wire::SchemaError as RecordsError;

/// The internal topic's name.
pub const TRANSACTION_STATE_TOPIC_NAME: &str = "__transaction_state";
/// The only key version (record type) of the transaction log.
pub const TRANSACTION_LOG_KEY_VERSION: i16 = 0;
/// The classic value version (Kafka before `transaction.version` 1).
pub const TRANSACTION_LOG_VALUE_VERSION_CLASSIC: i16 = 0;
/// The flexible value version with tagged fields.
pub const TRANSACTION_LOG_VALUE_VERSION_FLEXIBLE: i16 = 1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// The fewest bytes one `PartitionsSchema` entry takes (flexible: empty
/// compact string, empty compact array, empty tagged section).
const PARTITIONS_ENTRY_BYTES_MIN: usize = 3;

/// The `__transaction_state` partition that holds `transactional_id`:
/// Kafka's `Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount`.
///
/// Panics if `partitions` is not positive; it comes from a validated
/// `transaction.state.log.num.partitions`.
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    offsets_partition_for(transactional_id, partitions)
}

/// Identifies a transactional id's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TransactionLogKey {
    pub transactional_id: String,
}

/// One topic's partitions in a transaction, as the value groups them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartitions {
    pub topic: String,
    pub partition_ids: Vec<i32>,
}

/// A transactional id's state as of its last durable transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionLogValue {
    pub producer_id: ProducerId,
    /// Version 1 only (tag 0): the producer id before the last transition.
    pub previous_producer_id: ProducerId,
    /// Version 1 only (tag 1): the producer id the next epoch bump moves to.
    pub next_producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TransactionState,
    /// `None` is a null array (what Kafka writes for `Empty`).
    pub partitions: Option<Vec<TopicPartitions>>,
    pub last_update_timestamp_ms: i64,
    pub start_timestamp_ms: i64,
    /// Version 1 only (tag 2): the client's `transaction.version`.
    pub client_transaction_version: i16,
    /// Tagged fields of a newer Kafka, kept so they are written back.
    pub unknown_tagged_fields: Vec<(u32, Bytes)>,
}

/// One record of `__transaction_state`, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransactionRecord {
    /// `version` is the value version written or read (0 or 1).
    Value {
        key: TransactionLogKey,
        value: TransactionLogValue,
        version: i16,
    },
    /// The transactional id expired.
    Tombstone(TransactionLogKey),
    /// A key version Kafka's loader skips (left over from an aborted
    /// upgrade, in Kafka's words); carried as its version only.
    UnknownKey { key_version: i16 },
}

impl TransactionLogKey {
    pub fn encode(&self) -> Result<Bytes, RecordsError> {
        let mut writer = Writer::new(Format::Classic);
        writer.int16(TRANSACTION_LOG_KEY_VERSION);
        writer.string("transactional_id", &self.transactional_id)?;
        Ok(writer.finish())
    }

    /// Reads a key; `Ok(None)` for a key version this module does not know.
    pub fn decode(bytes: &[u8]) -> Result<Option<TransactionLogKey>, RecordsError> {
        let mut reader = Reader::new(bytes, Format::Classic);
        if reader.int16()? != TRANSACTION_LOG_KEY_VERSION {
            return Ok(None);
        }
        let key = TransactionLogKey {
            transactional_id: reader.string("transactional_id")?,
        };
        reader.finish("transaction log key")?;
        Ok(Some(key))
    }
}

impl TransactionLogValue {
    /// Writes `version` (0 or 1); version 0 drops the tagged fields.
    pub fn encode(&self, version: i16) -> Result<Bytes, RecordsError> {
        let format = value_format(version)?;
        let mut writer = Writer::new(format);
        writer.int16(version);
        writer.int64(self.producer_id.0);
        writer.int16(self.producer_epoch.0);
        writer.int32(self.timeout_ms);
        writer.int8(self.state.id());
        let count = self.partitions.as_ref().map(Vec::len);
        writer.nullable_array_length("transaction_partitions", count)?;
        for entry in self.partitions.iter().flatten() {
            writer.string("topic", &entry.topic)?;
            writer.array_length("partition_ids", entry.partition_ids.len())?;
            for partition in &entry.partition_ids {
                writer.int32(*partition);
            }
            writer.tagged_fields(&[]);
        }
        writer.int64(self.last_update_timestamp_ms);
        writer.int64(self.start_timestamp_ms);
        let tagged = self.tagged_fields();
        let borrowed: Vec<(u32, &[u8])> =
            tagged.iter().map(|(tag, data)| (*tag, &data[..])).collect();
        writer.tagged_fields(&borrowed);
        Ok(writer.finish())
    }

    /// The value's tagged fields that differ from their defaults, with the
    /// unknown ones, in ascending tag order.
    fn tagged_fields(&self) -> Vec<(u32, Bytes)> {
        let mut fields = self.unknown_tagged_fields.clone();
        if self.previous_producer_id.0 != -1 {
            let data = Bytes::copy_from_slice(&self.previous_producer_id.0.to_be_bytes());
            fields.push((TAG_PREVIOUS_PRODUCER_ID, data));
        }
        if self.next_producer_id.0 != -1 {
            let data = Bytes::copy_from_slice(&self.next_producer_id.0.to_be_bytes());
            fields.push((TAG_NEXT_PRODUCER_ID, data));
        }
        if self.client_transaction_version != 0 {
            let data = Bytes::copy_from_slice(&self.client_transaction_version.to_be_bytes());
            fields.push((TAG_CLIENT_TRANSACTION_VERSION, data));
        }
        fields.sort_by_key(|(tag, _)| *tag);
        fields.dedup_by_key(|(tag, _)| *tag);
        fields
    }

    /// Reads version 0 or 1; returns the value and its version.
    pub fn decode(bytes: &[u8]) -> Result<(TransactionLogValue, i16), RecordsError> {
        let mut reader = Reader::new(bytes, Format::Classic);
        let version = reader.int16()?;
        reader.set_format(value_format(version)?);
        let producer_id = ProducerId(reader.int64()?);
        let producer_epoch = ProducerEpoch(reader.int16()?);
        let timeout_ms = reader.int32()?;
        let status = reader.int8()?;
        let state = TransactionState::from_id(status)
            .ok_or(RecordsError::UnknownTransactionState { id: status })?;
        let partitions = decode_partitions(&mut reader)?;
        let mut value = TransactionLogValue {
            producer_id,
            previous_producer_id: ProducerId(-1),
            next_producer_id: ProducerId(-1),
            producer_epoch,
            timeout_ms,
            state,
            partitions,
            last_update_timestamp_ms: reader.int64()?,
            start_timestamp_ms: reader.int64()?,
            client_transaction_version: 0,
            unknown_tagged_fields: Vec::new(),
        };
        reader.tagged_fields(|tag, data| value.read_tagged_field(tag, data))?;
        reader.finish("transaction log value")?;
        Ok((value, version))
    }

    fn read_tagged_field(&mut self, tag: u32, data: &[u8]) -> Result<(), RecordsError> {
        match tag {
            TAG_PREVIOUS_PRODUCER_ID => {
                self.previous_producer_id = ProducerId(tagged_int64(tag, data)?)
            }
            TAG_NEXT_PRODUCER_ID => self.next_producer_id = ProducerId(tagged_int64(tag, data)?),
            TAG_CLIENT_TRANSACTION_VERSION => {
                let bytes: [u8; 2] =
                    data.try_into().map_err(|_| RecordsError::TaggedFieldSize {
                        tag,
                        size: data.len(),
                        expected: 2,
                    })?;
                self.client_transaction_version = i16::from_be_bytes(bytes);
            }
            _ => self
                .unknown_tagged_fields
                .push((tag, Bytes::copy_from_slice(data))),
        }
        Ok(())
    }
}

fn tagged_int64(tag: u32, data: &[u8]) -> Result<i64, RecordsError> {
    let bytes: [u8; 8] = data.try_into().map_err(|_| RecordsError::TaggedFieldSize {
        tag,
        size: data.len(),
        expected: 8,
    })?;
    Ok(i64::from_be_bytes(bytes))
}

fn decode_partitions(
    reader: &mut Reader<'_>,
) -> Result<Option<Vec<TopicPartitions>>, RecordsError> {
    let Some(count) =
        reader.nullable_array_length("transaction_partitions", PARTITIONS_ENTRY_BYTES_MIN)?
    else {
        return Ok(None);
    };
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let topic = reader.string("topic")?;
        let ids = reader.array_length("partition_ids", 4)?;
        let mut partition_ids = Vec::with_capacity(ids);
        for _ in 0..ids {
            partition_ids.push(reader.int32()?);
        }
        // Tagged fields of a partitions entry carry nothing Kafka defines.
        reader.tagged_fields(|_, _| Ok(()))?;
        entries.push(TopicPartitions {
            topic,
            partition_ids,
        });
    }
    Ok(Some(entries))
}

fn value_format(version: i16) -> Result<Format, RecordsError> {
    match version {
        TRANSACTION_LOG_VALUE_VERSION_CLASSIC => Ok(Format::Classic),
        TRANSACTION_LOG_VALUE_VERSION_FLEXIBLE => Ok(Format::Flexible),
        version => Err(RecordsError::UnsupportedValueVersion {
            record: "transaction log value",
            version,
        }),
    }
}

impl TransactionRecord {
    /// The record's key and value (`None` for a tombstone). An unknown key
    /// cannot be written (it carries no bytes).
    pub fn encode(&self) -> Result<(Bytes, Option<Bytes>), RecordsError> {
        match self {
            TransactionRecord::Value {
                key,
                value,
                version,
            } => Ok((key.encode()?, Some(value.encode(*version)?))),
            TransactionRecord::Tombstone(key) => Ok((key.encode()?, None)),
            TransactionRecord::UnknownKey { key_version } => {
                Err(RecordsError::UnknownKeyNotWritable {
                    key_version: *key_version,
                })
            }
        }
    }

    /// Reads one record; `value` is `None` for a tombstone. A key version
    /// other than 0 is [`TransactionRecord::UnknownKey`], not an error.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<TransactionRecord, RecordsError> {
        let Some(key) = TransactionLogKey::decode(key)? else {
            let key_version = Reader::new(key, Format::Classic).int16()?;
            return Ok(TransactionRecord::UnknownKey { key_version });
        };
        Ok(match value {
            None => TransactionRecord::Tombstone(key),
            Some(value) => {
                let (value, version) = TransactionLogValue::decode(value)?;
                TransactionRecord::Value {
                    key,
                    value,
                    version,
                }
            }
        })
    }

    /// The transactional id the record is about, when it is one of ours.
    pub fn transactional_id(&self) -> Option<&str> {
        match self {
            TransactionRecord::Value { key, .. } | TransactionRecord::Tombstone(key) => {
                Some(&key.transactional_id)
            }
            TransactionRecord::UnknownKey { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests;
