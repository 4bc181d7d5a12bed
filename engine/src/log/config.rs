//! A partition log's configuration: Kafka's topic-level names and defaults,
//! parsed once into a typed, validated, read-only value.

use thiserror::Error;

use crate::log::batch::Compression;
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

/// `compression.type`: the codec the broker stores a topic's batches in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicCompression {
    /// Keep each batch as its producer compressed it (Kafka's default).
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl TopicCompression {
    /// The codec batches are rewritten into, or `None` for `producer`.
    pub fn codec(self) -> Option<Compression> {
        Some(match self {
            TopicCompression::Producer => return None,
            TopicCompression::Uncompressed => Compression::None,
            TopicCompression::Gzip => Compression::Gzip,
            TopicCompression::Snappy => Compression::Snappy,
            TopicCompression::Lz4 => Compression::Lz4,
            TopicCompression::Zstd => Compression::Zstd,
        })
    }

    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            TopicCompression::Producer => "producer",
            TopicCompression::Uncompressed => "uncompressed",
            TopicCompression::Gzip => "gzip",
            TopicCompression::Snappy => "snappy",
            TopicCompression::Lz4 => "lz4",
            TopicCompression::Zstd => "zstd",
        }
    }
}

/// `compression.type` and the levels of `compression.gzip.level`,
/// `compression.lz4.level` and `compression.zstd.level` (KIP-390).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressionConfig {
    pub codec: TopicCompression,
    /// -1 (the codec's default) or 1..=9.
    pub gzip_level: i32,
    /// 1..=17 (9).
    pub lz4_level: i32,
    /// -131072..=22 (3).
    pub zstd_level: i32,
}

impl Default for CompressionConfig {
    fn default() -> CompressionConfig {
        CompressionConfig {
            codec: TopicCompression::Producer,
            gzip_level: -1,
            lz4_level: 9,
            zstd_level: 3,
        }
    }
}

/// Kafka 4's `message.timestamp.after.max.ms` default (KIP-1030): one hour.
pub const TIMESTAMP_AFTER_MAX_MS_DEFAULT: i64 = 3_600_000;

/// `message.timestamp.before.max.ms`, `message.timestamp.after.max.ms` and
/// Kafka 3's `message.timestamp.difference.max.ms`, as set (`None`: not set
/// at this level or below). The older setting bounds both sides where the
/// newer ones are not set (Kafka 3.6's rule); Kafka 4 dropped it, Brook still
/// takes it for clients written for Kafka 3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimestampBounds {
    pub before_max_ms: Option<i64>,
    pub after_max_ms: Option<i64>,
    pub difference_max_ms: Option<i64>,
}

impl TimestampBounds {
    /// How far in the past a CreateTime record's timestamp may be.
    pub fn before_ms(&self) -> i64 {
        self.before_max_ms
            .or(self.difference_max_ms)
            .unwrap_or(i64::MAX)
    }

    /// How far in the future a CreateTime record's timestamp may be.
    pub fn after_ms(&self) -> i64 {
        self.after_max_ms
            .or(self.difference_max_ms)
            .unwrap_or(TIMESTAMP_AFTER_MAX_MS_DEFAULT)
    }
}

/// `leader.replication.throttled.replicas` /
/// `follower.replication.throttled.replicas`: validated and kept for
/// replication (they name which replicas a replication quota throttles).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ThrottledReplicas {
    #[default]
    None,
    /// `*`: every replica.
    All,
    /// `partition:broker` pairs, in the order given.
    Listed(std::sync::Arc<[(i32, i32)]>),
}

impl ThrottledReplicas {
    /// Kafka's `ThrottledReplicaListValidator`: `*`, or a comma-separated
    /// list of `partition:broker` (blank items allowed).
    pub fn parse(value: &str) -> Option<ThrottledReplicas> {
        if value.split(',').next().map(str::trim) == Some("*") {
            return Some(ThrottledReplicas::All);
        }
        let mut pairs = Vec::new();
        for item in value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let (partition, broker) = item.split_once(':')?;
            let digits = |text: &str| {
                (!text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
                    .then(|| text.parse::<i32>().ok())
                    .flatten()
            };
            pairs.push((digits(partition)?, digits(broker)?));
        }
        Some(if pairs.is_empty() {
            ThrottledReplicas::None
        } else {
            ThrottledReplicas::Listed(pairs.into())
        })
    }

    /// Kafka's string form.
    pub fn to_value(&self) -> String {
        match self {
            ThrottledReplicas::None => String::new(),
            ThrottledReplicas::All => "*".into(),
            ThrottledReplicas::Listed(pairs) => pairs
                .iter()
                .map(|(partition, broker)| format!("{partition}:{broker}"))
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Settings that only matter once partitions have several replicas; kept
/// (validated) for replication. On one broker a partition's ISR is that
/// broker, so `min.insync.replicas` never refuses an `acks=all` produce:
/// Kafka caps it at the replica count ([`effective_min_insync_replicas`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// `min.insync.replicas` (1).
    pub min_insync_replicas: u32,
    /// `unclean.leader.election.enable` (false).
    pub unclean_leader_election: bool,
    pub leader_throttled_replicas: ThrottledReplicas,
    pub follower_throttled_replicas: ThrottledReplicas,
}

impl Default for ReplicationConfig {
    fn default() -> ReplicationConfig {
        ReplicationConfig {
            min_insync_replicas: 1,
            unclean_leader_election: false,
            leader_throttled_replicas: ThrottledReplicas::None,
            follower_throttled_replicas: ThrottledReplicas::None,
        }
    }
}

/// The ISR size `acks=all` needs: `min.insync.replicas`, but never more
/// than the partition has replicas (Kafka's `Partition.effectiveMinIsr`).
pub fn effective_min_insync_replicas(min_insync_replicas: u32, replicas: usize) -> usize {
    (min_insync_replicas as usize).min(replicas.max(1))
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
    /// `compression.type` and its levels.
    pub compression: CompressionConfig,
    /// The `message.timestamp.*.max.ms` bounds on CreateTime records.
    pub timestamps: TimestampBounds,
    /// `preallocate` (false). Brook reserves the active segment's file
    /// ahead of its appends whatever this says (see the README's on-disk
    /// format); the setting is kept and described.
    pub preallocate: bool,
    pub replication: ReplicationConfig,
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
            compression: CompressionConfig::default(),
            timestamps: TimestampBounds::default(),
            preallocate: false,
            replication: ReplicationConfig::default(),
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
    #[error("{0}")]
    Cluster(#[from] crate::cluster::node_config::ClusterConfigError),
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
                _ => self.apply_produce_or_replication_setting(name, value)?,
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

    /// The settings of compression, timestamps, preallocation and
    /// replication (Kafka's ranges and values), or `Unknown`.
    fn apply_produce_or_replication_setting(
        &mut self,
        name: &str,
        value: &str,
    ) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::Invalid {
            name: name.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let int_in = |range: std::ops::RangeInclusive<i64>, reason| {
            value
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| range.contains(n))
                .map(|n| n as i32)
                .ok_or(invalid(reason))
        };
        let non_negative = || {
            value
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or(invalid("must be a non-negative integer"))
        };
        let boolean = || match value.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(invalid("expected true or false")),
        };
        let throttled = || {
            ThrottledReplicas::parse(value).ok_or(invalid(
                "must be the literal '*' or a list of replicas as [partitionId]:[brokerId],...",
            ))
        };
        match name {
            "compression.type" => {
                self.compression.codec = match value.trim() {
                    "producer" => TopicCompression::Producer,
                    "uncompressed" => TopicCompression::Uncompressed,
                    "gzip" => TopicCompression::Gzip,
                    "snappy" => TopicCompression::Snappy,
                    "lz4" => TopicCompression::Lz4,
                    "zstd" => TopicCompression::Zstd,
                    _ => {
                        return Err(invalid(
                            "expected uncompressed, zstd, lz4, snappy, gzip or producer",
                        ));
                    }
                }
            }
            "compression.gzip.level" => {
                let level = int_in(-1..=9, "must be -1 or between 1 and 9")?;
                if level == 0 {
                    return Err(invalid("must be -1 or between 1 and 9"));
                }
                self.compression.gzip_level = level;
            }
            "compression.lz4.level" => {
                self.compression.lz4_level = int_in(1..=17, "must be between 1 and 17")?
            }
            "compression.zstd.level" => {
                self.compression.zstd_level =
                    int_in(-131_072..=22, "must be between -131072 and 22")?
            }
            "message.timestamp.before.max.ms" => {
                self.timestamps.before_max_ms = Some(non_negative()?)
            }
            "message.timestamp.after.max.ms" => {
                self.timestamps.after_max_ms = Some(non_negative()?)
            }
            "message.timestamp.difference.max.ms" => {
                self.timestamps.difference_max_ms = Some(non_negative()?)
            }
            "preallocate" => self.preallocate = boolean()?,
            "min.insync.replicas" => {
                self.replication.min_insync_replicas =
                    int_in(1..=i64::from(i32::MAX), "must be at least 1")? as u32
            }
            "unclean.leader.election.enable" => {
                self.replication.unclean_leader_election = boolean()?
            }
            "leader.replication.throttled.replicas" => {
                self.replication.leader_throttled_replicas = throttled()?
            }
            "follower.replication.throttled.replicas" => {
                self.replication.follower_throttled_replicas = throttled()?
            }
            _ => return Err(ConfigError::Unknown(name.to_owned())),
        }
        Ok(())
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
    fn produce_and_replication_settings_have_kafkas_names_ranges_and_defaults() {
        let defaults = LogConfig::default();
        assert_eq!(defaults.compression.codec, TopicCompression::Producer);
        assert_eq!(defaults.compression.codec.codec(), None);
        assert_eq!(
            (
                defaults.compression.gzip_level,
                defaults.compression.lz4_level,
                defaults.compression.zstd_level
            ),
            (-1, 9, 3)
        );
        assert_eq!(defaults.timestamps.before_ms(), i64::MAX);
        assert_eq!(defaults.timestamps.after_ms(), 3_600_000);
        assert_eq!(defaults.replication.min_insync_replicas, 1);
        assert!(!defaults.replication.unclean_leader_election && !defaults.preallocate);
        let config = LogConfig::default()
            .with_overrides([
                ("compression.type", "zstd"),
                ("compression.zstd.level", "-5"),
                ("message.timestamp.before.max.ms", "1000"),
                ("min.insync.replicas", "2"),
                ("unclean.leader.election.enable", "true"),
                ("preallocate", "true"),
                ("leader.replication.throttled.replicas", "0:1, 1:1"),
                ("follower.replication.throttled.replicas", "*"),
            ])
            .unwrap();
        assert_eq!(config.compression.codec.codec(), Some(Compression::Zstd));
        assert_eq!(config.compression.zstd_level, -5);
        assert_eq!(config.timestamps.before_ms(), 1000);
        assert_eq!(config.replication.min_insync_replicas, 2);
        assert!(config.replication.unclean_leader_election && config.preallocate);
        assert_eq!(
            config.replication.leader_throttled_replicas.to_value(),
            "0:1,1:1"
        );
        assert_eq!(
            config.replication.follower_throttled_replicas,
            ThrottledReplicas::All
        );
        for (name, value) in [
            ("compression.type", "brotli"),
            ("compression.gzip.level", "0"),
            ("compression.gzip.level", "10"),
            ("compression.lz4.level", "18"),
            ("compression.zstd.level", "23"),
            ("message.timestamp.after.max.ms", "-1"),
            ("min.insync.replicas", "0"),
            ("preallocate", "yes"),
            ("leader.replication.throttled.replicas", "0-1"),
            ("follower.replication.throttled.replicas", "a:1"),
        ] {
            assert!(
                matches!(
                    LogConfig::default().with_overrides([(name, value)]),
                    Err(ConfigError::Invalid { .. })
                ),
                "{name}={value}"
            );
        }
    }

    #[test]
    fn the_kafka_3_difference_bound_fills_in_for_unset_sides() {
        let config = LogConfig::default()
            .with_overrides([("message.timestamp.difference.max.ms", "500")])
            .unwrap();
        assert_eq!(
            (config.timestamps.before_ms(), config.timestamps.after_ms()),
            (500, 500)
        );
        let config = config
            .with_overrides([("message.timestamp.after.max.ms", "9")])
            .unwrap();
        assert_eq!(
            (config.timestamps.before_ms(), config.timestamps.after_ms()),
            (500, 9)
        );
    }

    #[test]
    fn min_insync_replicas_never_exceeds_the_replicas() {
        assert_eq!(effective_min_insync_replicas(2, 1), 1);
        assert_eq!(effective_min_insync_replicas(2, 3), 2);
        assert_eq!(effective_min_insync_replicas(1, 0), 1);
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
