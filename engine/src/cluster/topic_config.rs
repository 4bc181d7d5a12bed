//! Topic configs: the names Brook implements (Kafka's topic-level names),
//! their defaults, the broker-level names that set those defaults, and how a
//! topic's overrides resolve into a [`LogConfig`].

use std::collections::BTreeMap;

use crate::log::config::{ConfigError, LogConfig};

/// Kafka's `ConfigDef.Type` of a config, as DescribeConfigs v3+ reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigType {
    Unknown = 0,
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// A topic config Brook implements: its topic-level name, the broker-level
/// names whose values set its default (the first is the one Brook reads;
/// Kafka's unit variants such as `log.retention.hours` follow), its type,
/// and whether DescribeConfigs lists it always or only once it is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicConfigName {
    pub topic: &'static str,
    pub broker: &'static [&'static str],
    pub config_type: ConfigType,
    pub listed: Listed,
}

/// When DescribeConfigs lists a topic config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    Always,
    /// Kafka 4 dropped it; Brook still takes it, and names it where set.
    WhenSet,
}

impl TopicConfigName {
    /// The broker-level name Brook reads for the default, if any.
    pub fn broker_name(&self) -> Option<&'static str> {
        self.broker.first().copied()
    }
}

const fn name(
    topic: &'static str,
    broker: &'static [&'static str],
    config_type: ConfigType,
) -> TopicConfigName {
    TopicConfigName {
        topic,
        broker,
        config_type,
        listed: Listed::Always,
    }
}

/// Every topic config Brook takes, in Kafka's (alphabetical) order. Anything
/// else is rejected (INVALID_CONFIG) rather than stored and ignored.
pub const TOPIC_CONFIGS: &[TopicConfigName] = &[
    name("cleanup.policy", &["log.cleanup.policy"], ConfigType::List),
    name(
        "compression.gzip.level",
        &["compression.gzip.level"],
        ConfigType::Int,
    ),
    name(
        "compression.lz4.level",
        &["compression.lz4.level"],
        ConfigType::Int,
    ),
    name(
        "compression.type",
        &["compression.type"],
        ConfigType::String,
    ),
    name(
        "compression.zstd.level",
        &["compression.zstd.level"],
        ConfigType::Int,
    ),
    name(
        "delete.retention.ms",
        &["log.cleaner.delete.retention.ms"],
        ConfigType::Long,
    ),
    name(
        "flush.messages",
        &["log.flush.interval.messages"],
        ConfigType::Long,
    ),
    name(
        "flush.ms",
        &["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
        ConfigType::Long,
    ),
    name(
        "follower.replication.throttled.replicas",
        &[],
        ConfigType::List,
    ),
    name(
        "index.interval.bytes",
        &["log.index.interval.bytes"],
        ConfigType::Int,
    ),
    name(
        "leader.replication.throttled.replicas",
        &[],
        ConfigType::List,
    ),
    name(
        "max.compaction.lag.ms",
        &["log.cleaner.max.compaction.lag.ms"],
        ConfigType::Long,
    ),
    name("max.message.bytes", &["message.max.bytes"], ConfigType::Int),
    name(
        "message.timestamp.after.max.ms",
        &["log.message.timestamp.after.max.ms"],
        ConfigType::Long,
    ),
    name(
        "message.timestamp.before.max.ms",
        &["log.message.timestamp.before.max.ms"],
        ConfigType::Long,
    ),
    TopicConfigName {
        listed: Listed::WhenSet,
        ..name(
            "message.timestamp.difference.max.ms",
            &["log.message.timestamp.difference.max.ms"],
            ConfigType::Long,
        )
    },
    name(
        "message.timestamp.type",
        &["log.message.timestamp.type"],
        ConfigType::String,
    ),
    name(
        "min.cleanable.dirty.ratio",
        &["log.cleaner.min.cleanable.ratio"],
        ConfigType::Double,
    ),
    name(
        "min.compaction.lag.ms",
        &["log.cleaner.min.compaction.lag.ms"],
        ConfigType::Long,
    ),
    name(
        "min.insync.replicas",
        &["min.insync.replicas"],
        ConfigType::Int,
    ),
    name("preallocate", &["log.preallocate"], ConfigType::Boolean),
    name(
        "retention.bytes",
        &["log.retention.bytes"],
        ConfigType::Long,
    ),
    name(
        "retention.ms",
        &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        ConfigType::Long,
    ),
    name("segment.bytes", &["log.segment.bytes"], ConfigType::Int),
    name(
        "segment.index.bytes",
        &["log.index.size.max.bytes"],
        ConfigType::Int,
    ),
    name(
        "segment.jitter.ms",
        &["log.roll.jitter.ms", "log.roll.jitter.hours"],
        ConfigType::Long,
    ),
    name(
        "segment.ms",
        &["log.roll.ms", "log.roll.hours"],
        ConfigType::Long,
    ),
    name(
        "unclean.leader.election.enable",
        &["unclean.leader.election.enable"],
        ConfigType::Boolean,
    ),
];

pub fn is_topic_config(key: &str) -> bool {
    topic_config(key).is_some()
}

pub fn topic_config(key: &str) -> Option<&'static TopicConfigName> {
    TOPIC_CONFIGS.iter().find(|config| config.topic == key)
}

/// The topic config whose default the broker-level `key` sets (its first,
/// Brook-read name).
pub fn by_broker_name(key: &str) -> Option<&'static TopicConfigName> {
    TOPIC_CONFIGS
        .iter()
        .find(|config| config.broker_name() == Some(key))
}

/// The effective value of a topic config as Kafka reports it (its string
/// form), given the resolved log config.
pub fn effective_value(config: &LogConfig, key: &str) -> Option<String> {
    use crate::log::config::{CleanupPolicy, FlushPolicy, MessageTimestampType};
    let never = i64::MAX.to_string();
    let (messages, ms) = match config.flush {
        FlushPolicy::Continuous => (None, None),
        FlushPolicy::Interval { messages, ms } => (messages, ms),
    };
    let replication = &config.replication;
    Some(match key {
        "cleanup.policy" => match config.cleanup_policy {
            CleanupPolicy::Delete => "delete".into(),
            CleanupPolicy::Compact => "compact".into(),
            CleanupPolicy::CompactAndDelete => "compact,delete".into(),
        },
        "compression.type" => config.compression.codec.name().into(),
        "compression.gzip.level" => config.compression.gzip_level.to_string(),
        "compression.lz4.level" => config.compression.lz4_level.to_string(),
        "compression.zstd.level" => config.compression.zstd_level.to_string(),
        "segment.bytes" => config.segment_bytes.to_string(),
        "segment.ms" => config.segment_ms.to_string(),
        "segment.jitter.ms" => config.segment_jitter_ms.to_string(),
        "segment.index.bytes" => config.segment_index_bytes.to_string(),
        "index.interval.bytes" => config.index_interval_bytes.to_string(),
        "retention.ms" => config.retention_ms.map_or("-1".into(), |ms| ms.to_string()),
        "retention.bytes" => config
            .retention_bytes
            .map_or("-1".into(), |bytes| bytes.to_string()),
        "flush.messages" => messages.map_or(never.clone(), |n| n.to_string()),
        "flush.ms" => ms.map_or(never.clone(), |n| n.to_string()),
        "max.message.bytes" => config.max_message_bytes.to_string(),
        "message.timestamp.type" => match config.message_timestamp_type {
            MessageTimestampType::CreateTime => "CreateTime".into(),
            MessageTimestampType::LogAppendTime => "LogAppendTime".into(),
        },
        "message.timestamp.before.max.ms" => config
            .timestamps
            .before_max_ms
            .unwrap_or(i64::MAX)
            .to_string(),
        "message.timestamp.after.max.ms" => config
            .timestamps
            .after_max_ms
            .unwrap_or(crate::log::config::TIMESTAMP_AFTER_MAX_MS_DEFAULT)
            .to_string(),
        "message.timestamp.difference.max.ms" => config
            .timestamps
            .difference_max_ms
            .unwrap_or(i64::MAX)
            .to_string(),
        // Java's Double.toString: "0.5", "1.0".
        "min.cleanable.dirty.ratio" => format!("{:?}", config.min_cleanable_dirty_ratio.get()),
        "delete.retention.ms" => config.delete_retention_ms.to_string(),
        "min.compaction.lag.ms" => config.min_compaction_lag_ms.to_string(),
        "max.compaction.lag.ms" => config.max_compaction_lag_ms.to_string(),
        "min.insync.replicas" => replication.min_insync_replicas.to_string(),
        "preallocate" => config.preallocate.to_string(),
        "unclean.leader.election.enable" => replication.unclean_leader_election.to_string(),
        "leader.replication.throttled.replicas" => replication.leader_throttled_replicas.to_value(),
        "follower.replication.throttled.replicas" => {
            replication.follower_throttled_replicas.to_value()
        }
        _ => return None,
    })
}

/// The log config of a topic: Brook's defaults, then the broker's
/// settings, then the topic's own overrides.
pub fn resolve(
    broker_defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<LogConfig, ConfigError> {
    broker_defaults.clone().with_overrides(
        overrides
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str())),
    )
}

/// Whether `overrides` are a topic's valid overrides under
/// `broker_defaults`: every key a topic config Brook knows, every value
/// one it accepts. The message says which is not.
pub fn check_overrides(
    broker_defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<(), String> {
    if let Some(unknown) = overrides.keys().find(|key| !is_topic_config(key)) {
        return Err(format!("config {unknown} is not supported by Brook"));
    }
    resolve(broker_defaults, overrides)
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// One IncrementalAlterConfigs operation on a topic config (KIP-339).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOperation {
    Set(Option<String>),
    Delete,
    Append(Option<String>),
    Subtract(Option<String>),
}

impl ConfigOperation {
    /// An operation other than DELETE without a value (Kafka refuses it).
    pub fn value_missing(&self) -> bool {
        matches!(
            self,
            ConfigOperation::Set(None)
                | ConfigOperation::Append(None)
                | ConfigOperation::Subtract(None)
        )
    }

    /// From the protocol's operation code and value.
    pub fn from_wire(code: i8, value: Option<String>) -> Option<ConfigOperation> {
        Some(match code {
            0 => ConfigOperation::Set(value),
            1 => ConfigOperation::Delete,
            2 => ConfigOperation::Append(value),
            3 => ConfigOperation::Subtract(value),
            _ => return None,
        })
    }
}

/// Whether a topic config is a comma-separated list (APPEND/SUBTRACT apply).
pub fn is_list_config(name: &str) -> bool {
    topic_config(name).is_some_and(|config| config.config_type == ConfigType::List)
}

/// A list config's value (`in_force`, comma-separated) after APPEND or
/// SUBTRACT of the items in `value` (any other operation leaves it).
pub fn edit_list(in_force: &str, operation: &ConfigOperation, value: Option<&str>) -> String {
    let mut items: Vec<String> = in_force
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect();
    let edits = value.unwrap_or("").split(',').map(str::trim);
    for item in edits.filter(|item| !item.is_empty()) {
        match operation {
            ConfigOperation::Append(_) => {
                if !items.iter().any(|existing| existing == item) {
                    items.push(item.to_owned());
                }
            }
            ConfigOperation::Subtract(_) => items.retain(|existing| existing != item),
            ConfigOperation::Set(_) | ConfigOperation::Delete => {}
        }
    }
    items.join(",")
}

/// A topic's overrides after `changes`, in order. APPEND and SUBTRACT edit
/// the value in force: the override, or else the effective value under
/// `defaults` (as Kafka does, so appending `compact` to a topic with the
/// default policy gives `delete,compact`). The result is not validated.
pub fn altered(
    current: &BTreeMap<String, String>,
    defaults: &LogConfig,
    changes: &[(String, ConfigOperation)],
) -> Result<BTreeMap<String, String>, String> {
    let mut configs = current.clone();
    for (name, operation) in changes {
        match operation {
            ConfigOperation::Set(value) => {
                let value = value.clone().ok_or(format!("{name}: SET needs a value"))?;
                configs.insert(name.clone(), value);
            }
            ConfigOperation::Delete => {
                configs.remove(name);
            }
            ConfigOperation::Append(value) | ConfigOperation::Subtract(value) => {
                if !is_list_config(name) {
                    return Err(format!("{name} is not a list"));
                }
                let in_force = match configs.get(name) {
                    Some(value) => value.clone(),
                    None => {
                        let config =
                            resolve(defaults, &configs).map_err(|error| error.to_string())?;
                        effective_value(&config, name).unwrap_or_default()
                    }
                };
                configs.insert(
                    name.clone(),
                    edit_list(&in_force, operation, value.as_deref()),
                );
            }
        }
    }
    Ok(configs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_resolve_over_broker_defaults_and_report_back() {
        let broker = LogConfig {
            segment_bytes: 1 << 20,
            ..LogConfig::default()
        };
        let overrides = BTreeMap::from([("retention.ms".to_owned(), "60000".to_owned())]);
        let config = resolve(&broker, &overrides).unwrap();
        assert_eq!(
            effective_value(&config, "segment.bytes").as_deref(),
            Some("1048576")
        );
        assert_eq!(
            effective_value(&config, "retention.ms").as_deref(),
            Some("60000")
        );
        assert_eq!(
            effective_value(&config, "flush.ms").as_deref(),
            Some("9223372036854775807")
        );
        assert_eq!(
            effective_value(&config, "compression.type").as_deref(),
            Some("producer")
        );
        assert_eq!(effective_value(&config, "remote.storage.enable"), None);
        assert_eq!(
            effective_value(&config, "min.cleanable.dirty.ratio").as_deref(),
            Some("0.5")
        );
        assert_eq!(
            effective_value(&config, "max.compaction.lag.ms").as_deref(),
            Some("9223372036854775807")
        );
        for config_name in TOPIC_CONFIGS {
            assert!(
                effective_value(&config, config_name.topic).is_some(),
                "{}",
                config_name.topic
            );
        }
    }

    #[test]
    fn list_operations_edit_the_value_in_force() {
        let defaults = LogConfig::default();
        let none = BTreeMap::new();
        let append = |value: &str| ConfigOperation::Append(Some(value.into()));
        // No override: APPEND starts from the default policy, delete.
        let appended = altered(
            &none,
            &defaults,
            &[("cleanup.policy".into(), append("compact"))],
        )
        .unwrap();
        assert_eq!(appended["cleanup.policy"], "delete,compact");
        let subtracted = altered(
            &appended,
            &defaults,
            &[(
                "cleanup.policy".into(),
                ConfigOperation::Subtract(Some("delete".into())),
            )],
        )
        .unwrap();
        assert_eq!(subtracted["cleanup.policy"], "compact");
        assert!(altered(&none, &defaults, &[("retention.ms".into(), append("1"))]).is_err());
        let set = altered(
            &none,
            &defaults,
            &[(
                "retention.ms".into(),
                ConfigOperation::Set(Some("1000".into())),
            )],
        )
        .unwrap();
        let deleted = altered(
            &set,
            &defaults,
            &[("retention.ms".into(), ConfigOperation::Delete)],
        )
        .unwrap();
        assert!(deleted.is_empty());
        assert!(
            altered(
                &none,
                &defaults,
                &[("retention.ms".into(), ConfigOperation::Set(None))]
            )
            .is_err()
        );
        assert_eq!(ConfigOperation::from_wire(4, None), None);
    }
}
