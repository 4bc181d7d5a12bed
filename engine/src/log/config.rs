//! A partition log's configuration: Kafka's topic-level names and defaults,
//! parsed once into a typed, validated, read-only value.

use thiserror::Error;

use crate::log::recovery::Contiguity;

/// When the log forces its data to stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Brook's default: fsync continuously, one `fdatasync` covering every
    /// append that arrived while the previous one ran (group commit).
    Continuous,
    /// Kafka's `flush.messages` / `flush.ms`: fsync once this many messages or
    /// this much time have accumulated (`None` = never by that measure).
    /// Appends waiting for durability still get an fsync promptly.
    Interval {
        messages: Option<u64>,
        ms: Option<u64>,
    },
}

/// `cleanup.policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanupPolicy {
    Delete,
    Compact,
    CompactAndDelete,
}

impl CleanupPolicy {
    /// Compacted logs keep original offsets, so their batches may have gaps.
    pub fn contiguity(self) -> Contiguity {
        match self {
            CleanupPolicy::Delete => Contiguity::Strict,
            CleanupPolicy::Compact | CleanupPolicy::CompactAndDelete => Contiguity::GapsAllowed,
        }
    }

    pub fn compacts(self) -> bool {
        matches!(
            self,
            CleanupPolicy::Compact | CleanupPolicy::CompactAndDelete
        )
    }

    pub fn deletes(self) -> bool {
        matches!(
            self,
            CleanupPolicy::Delete | CleanupPolicy::CompactAndDelete
        )
    }
}

/// `min.cleanable.dirty.ratio`: a fraction in `[0, 1]`, never NaN (so it is
/// `Eq`, as every config value is).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct DirtyRatio(f64);

impl Eq for DirtyRatio {}

impl DirtyRatio {
    /// Kafka's default (`log.cleaner.min.cleanable.ratio`).
    pub const DEFAULT: DirtyRatio = DirtyRatio(0.5);

    /// `None` unless `value` lies in `[0, 1]`.
    pub fn new(value: f64) -> Option<DirtyRatio> {
        // Adding zero turns -0.0 into 0.0, so equal ratios compare equal.
        (0.0..=1.0)
            .contains(&value)
            .then_some(DirtyRatio(value + 0.0))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// `message.timestamp.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageTimestampType {
    CreateTime,
    LogAppendTime,
}

/// Topic-level log settings with Kafka's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes` (1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms` (7 days).
    pub segment_ms: i64,
    /// `segment.jitter.ms` (0).
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes` (10 MiB): an index this large rolls the segment.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes` (4096).
    pub index_interval_bytes: u64,
    /// `retention.ms` (7 days; `None` for -1, keep forever).
    pub retention_ms: Option<i64>,
    /// `retention.bytes` (`None` for -1, no size limit).
    pub retention_bytes: Option<u64>,
    /// `flush.messages` / `flush.ms`.
    pub flush: FlushPolicy,
    /// `max.message.bytes` (1048588): the largest batch accepted.
    pub max_message_bytes: u64,
    /// `message.timestamp.type`.
    pub message_timestamp_type: MessageTimestampType,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio` (0.5): the share of a log's sealed bytes
    /// written since its last cleaning above which the cleaner takes it.
    pub min_cleanable_dirty_ratio: DirtyRatio,
    /// `delete.retention.ms` (1 day): how long a tombstone outlives the
    /// cleaning pass that first saw it.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms` (0): a segment holding a record younger than
    /// this is not cleaned yet.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (`Long.MAX_VALUE`): a log whose oldest
    /// uncleaned segment is older than this is cleaned whatever its ratio.
    pub max_compaction_lag_ms: i64,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: Some(7 * 24 * 60 * 60 * 1000),
            retention_bytes: None,
            flush: FlushPolicy::Continuous,
            max_message_bytes: 1_048_588,
            message_timestamp_type: MessageTimestampType::CreateTime,
            cleanup_policy: CleanupPolicy::Delete,
            min_cleanable_dirty_ratio: DirtyRatio::DEFAULT,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown topic config {0}")]
    Unknown(String),
    #[error("invalid value {value:?} for {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: &'static str,
    },
}

/// The smallest `segment.bytes` Kafka accepts (`LegacyRecord.RECORD_OVERHEAD_V0` + 1 byte
/// would be silly; Kafka's floor is 14 bytes but we require room for a header).
pub const SEGMENT_BYTES_MIN: u64 = 1024;

impl LogConfig {
    /// Applies Kafka topic-level settings (`segment.bytes=…`) on top of `self`.
    pub fn with_overrides<'a>(
        mut self,
        settings: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<LogConfig, ConfigError> {
        let (mut flush_messages, mut flush_ms) = (None, None);
        for (name, value) in settings {
            let invalid = |reason| ConfigError::Invalid {
                name: name.to_owned(),
                value: value.to_owned(),
                reason,
            };
            // Values are kept as given, one per line of the metadata file.
            if value.chars().any(char::is_control) {
                return Err(invalid("contains a control character"));
            }
            let number = || {
                value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| invalid("not an integer"))
            };
            let positive = || {
                number().and_then(|n| {
                    if n > 0 {
                        Ok(n as u64)
                    } else {
                        Err(invalid("must be positive"))
                    }
                })
            };
            let at_least = |floor: i64| {
                number().and_then(|n| {
                    if n >= floor {
                        Ok(n)
                    } else if floor == 0 {
                        Err(invalid("must not be negative"))
                    } else {
                        Err(invalid("must be positive"))
                    }
                })
            };
            let limit = || {
                number().and_then(|n| match n {
                    -1 => Ok(None),
                    n if n >= 0 => Ok(Some(n)),
                    _ => Err(invalid("must be -1 or at least 0")),
                })
            };
            match name {
                // Kafka's INT settings: positions in a segment must stay
                // addressable by the index's 32-bit entries.
                "segment.bytes" => {
                    self.segment_bytes = positive()?;
                    if self.segment_bytes < SEGMENT_BYTES_MIN {
                        return Err(invalid("below the minimum segment size"));
                    }
                    if self.segment_bytes > i32::MAX as u64 {
                        return Err(invalid("above the largest INT"));
                    }
                }
                "segment.ms" => self.segment_ms = positive()? as i64,
                "segment.jitter.ms" => {
                    self.segment_jitter_ms = number().and_then(|n| {
                        if n >= 0 {
                            Ok(n)
                        } else {
                            Err(invalid("must not be negative"))
                        }
                    })?
                }
                "segment.index.bytes" => self.segment_index_bytes = positive()?.max(8),
                "index.interval.bytes" => {
                    self.index_interval_bytes = number().and_then(|n| {
                        if n >= 0 {
                            Ok(n as u64)
                        } else {
                            Err(invalid("must not be negative"))
                        }
                    })?
                }
                "retention.ms" => self.retention_ms = limit()?,
                "retention.bytes" => self.retention_bytes = limit()?.map(|n| n as u64),
                "flush.messages" => flush_messages = Some(positive()?),
                "flush.ms" => {
                    flush_ms = Some(number().and_then(|n| {
                        if n >= 0 {
                            Ok(n as u64)
                        } else {
                            Err(invalid("must not be negative"))
                        }
                    })?)
                }
                "max.message.bytes" => {
                    self.max_message_bytes = positive()?;
                    if self.max_message_bytes > i32::MAX as u64 {
                        return Err(invalid("above the largest INT"));
                    }
                }
                "message.timestamp.type" => {
                    self.message_timestamp_type = match value.trim() {
                        "CreateTime" => MessageTimestampType::CreateTime,
                        "LogAppendTime" => MessageTimestampType::LogAppendTime,
                        _ => return Err(invalid("expected CreateTime or LogAppendTime")),
                    }
                }
                "cleanup.policy" => {
                    let mut parts: Vec<&str> = value.split(',').map(str::trim).collect();
                    parts.sort_unstable();
                    self.cleanup_policy = match parts.as_slice() {
                        ["delete"] => CleanupPolicy::Delete,
                        ["compact"] => CleanupPolicy::Compact,
                        ["compact", "delete"] => CleanupPolicy::CompactAndDelete,
                        _ => return Err(invalid("expected delete, compact or compact,delete")),
                    }
                }
                "min.cleanable.dirty.ratio" => {
                    self.min_cleanable_dirty_ratio = value
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .and_then(DirtyRatio::new)
                        .ok_or(invalid("expected a number between 0 and 1"))?
                }
                "delete.retention.ms" => self.delete_retention_ms = at_least(0)?,
                "min.compaction.lag.ms" => self.min_compaction_lag_ms = at_least(0)?,
                "max.compaction.lag.ms" => self.max_compaction_lag_ms = at_least(1)?,
                _ => return Err(ConfigError::Unknown(name.to_owned())),
            }
        }
        // Kafka's LogConfig.validateValues refuses the pair, whichever was set.
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(ConfigError::Invalid {
                name: "min.compaction.lag.ms".to_owned(),
                value: self.min_compaction_lag_ms.to_string(),
                reason: "greater than max.compaction.lag.ms",
            });
        }
        if flush_messages.is_some() || flush_ms.is_some() {
            // Kafka's "never" default (Long.MAX_VALUE) reads as no limit.
            let never = |limit: Option<u64>| limit.filter(|n| *n < i64::MAX as u64);
            self.flush = FlushPolicy::Interval {
                messages: never(flush_messages),
                ms: never(flush_ms),
            };
        }
        Ok(self)
    }

    /// Offset index entries the segment may hold before it must roll.
    pub fn offset_index_entries_max(&self) -> u64 {
        (self.segment_index_bytes / 8).max(1)
    }

    /// Time index entries the segment may hold before it must roll.
    pub fn time_index_entries_max(&self) -> u64 {
        (self.segment_index_bytes / 12).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let config = LogConfig::default();
        assert_eq!(config.segment_bytes, 1_073_741_824);
        assert_eq!(config.segment_ms, 604_800_000);
        assert_eq!(config.index_interval_bytes, 4096);
        assert_eq!(config.retention_ms, Some(604_800_000));
        assert_eq!(config.retention_bytes, None);
        assert_eq!(config.max_message_bytes, 1_048_588);
        assert_eq!(config.offset_index_entries_max(), 1_310_720);
        assert_eq!(config.min_cleanable_dirty_ratio.get(), 0.5);
        assert_eq!(config.delete_retention_ms, 86_400_000);
        assert_eq!(config.min_compaction_lag_ms, 0);
        assert_eq!(config.max_compaction_lag_ms, i64::MAX);
    }

    #[test]
    fn compaction_settings_use_kafka_names_and_bounds() {
        let config = LogConfig::default()
            .with_overrides([
                ("min.cleanable.dirty.ratio", "0.01"),
                ("delete.retention.ms", "0"),
                ("min.compaction.lag.ms", "100"),
                ("max.compaction.lag.ms", "60000"),
            ])
            .unwrap();
        assert_eq!(
            config.min_cleanable_dirty_ratio,
            DirtyRatio::new(0.01).unwrap()
        );
        assert_eq!(config.delete_retention_ms, 0);
        assert_eq!(config.min_compaction_lag_ms, 100);
        assert_eq!(config.max_compaction_lag_ms, 60_000);
        for (name, value) in [
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.cleanable.dirty.ratio", "-0.1"),
            ("min.cleanable.dirty.ratio", "NaN"),
            ("delete.retention.ms", "-1"),
            ("min.compaction.lag.ms", "-1"),
            ("max.compaction.lag.ms", "0"),
        ] {
            assert!(
                LogConfig::default()
                    .with_overrides([(name, value)])
                    .is_err(),
                "{name}={value}"
            );
        }
        let conflict = LogConfig::default().with_overrides([
            ("min.compaction.lag.ms", "2000"),
            ("max.compaction.lag.ms", "1000"),
        ]);
        assert!(
            matches!(conflict, Err(ConfigError::Invalid { reason, .. }) if reason.contains("max.compaction"))
        );
    }

    #[test]
    fn overrides_use_kafka_names() {
        let config = LogConfig::default()
            .with_overrides([
                ("segment.bytes", "1048576"),
                ("retention.ms", "-1"),
                ("retention.bytes", "5000000"),
                ("flush.messages", "1000"),
                ("cleanup.policy", "delete,compact"),
                ("message.timestamp.type", "LogAppendTime"),
            ])
            .unwrap();
        assert_eq!(config.segment_bytes, 1 << 20);
        assert_eq!(config.retention_ms, None);
        assert_eq!(config.retention_bytes, Some(5_000_000));
        assert_eq!(
            config.flush,
            FlushPolicy::Interval {
                messages: Some(1000),
                ms: None
            }
        );
        assert_eq!(config.cleanup_policy, CleanupPolicy::CompactAndDelete);
        assert_eq!(
            config.message_timestamp_type,
            MessageTimestampType::LogAppendTime
        );
    }

    #[test]
    fn kafkas_never_flush_default_means_no_limit() {
        let config = LogConfig::default()
            .with_overrides([("flush.ms", "9223372036854775807")])
            .unwrap();
        assert_eq!(
            config.flush,
            FlushPolicy::Interval {
                messages: None,
                ms: None
            }
        );
    }

    #[test]
    fn bad_values_are_named() {
        assert_eq!(
            LogConfig::default().with_overrides([("segment.bytes", "ten")]),
            Err(ConfigError::Invalid {
                name: "segment.bytes".into(),
                value: "ten".into(),
                reason: "not an integer"
            })
        );
        assert!(
            LogConfig::default()
                .with_overrides([("retention.ms", "-2")])
                .is_err()
        );
        assert!(
            LogConfig::default()
                .with_overrides([("cleanup.policy", "shred")])
                .is_err()
        );
        assert_eq!(
            LogConfig::default().with_overrides([("segment.size", "1")]),
            Err(ConfigError::Unknown("segment.size".into()))
        );
        assert!(
            LogConfig::default()
                .with_overrides([("segment.bytes", "4294967296")])
                .is_err()
        );
        assert!(
            LogConfig::default()
                .with_overrides([("max.message.bytes", "2147483648")])
                .is_err()
        );
        // Stored values are one line each in the metadata file.
        assert!(
            LogConfig::default()
                .with_overrides([("retention.ms", "1000\nconfig x y=z")])
                .is_err()
        );
    }
}
