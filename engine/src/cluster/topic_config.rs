//! Topic configs: the names Brook implements (Kafka's topic-level names),
//! their defaults, the broker-level names that set those defaults, and how a
//! topic's overrides resolve into a [`LogConfig`].

use std::collections::BTreeMap;

use crate::log::config::{ConfigError, LogConfig};

/// A topic config Brook implements: its topic-level name, and the
/// broker-level name whose value is the topic default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicConfigName {
    pub topic: &'static str,
    pub broker: &'static str,
}

const fn name(topic: &'static str, broker: &'static str) -> TopicConfigName {
    TopicConfigName { topic, broker }
}

/// Every topic config Brook acts on. Anything else is rejected
/// (INVALID_CONFIG) rather than stored and ignored.
pub const TOPIC_CONFIGS: &[TopicConfigName] = &[
    name("cleanup.policy", "log.cleanup.policy"),
    name("segment.bytes", "log.segment.bytes"),
    name("segment.ms", "log.roll.ms"),
    name("segment.jitter.ms", "log.roll.jitter.ms"),
    name("segment.index.bytes", "log.index.size.max.bytes"),
    name("index.interval.bytes", "log.index.interval.bytes"),
    name("retention.ms", "log.retention.ms"),
    name("retention.bytes", "log.retention.bytes"),
    name("flush.messages", "log.flush.interval.messages"),
    name("flush.ms", "log.flush.interval.ms"),
    name("max.message.bytes", "message.max.bytes"),
    name("message.timestamp.type", "log.message.timestamp.type"),
];

pub fn is_topic_config(key: &str) -> bool {
    TOPIC_CONFIGS.iter().any(|config| config.topic == key)
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
    Some(match key {
        "cleanup.policy" => match config.cleanup_policy {
            CleanupPolicy::Delete => "delete".into(),
            CleanupPolicy::Compact => "compact".into(),
            CleanupPolicy::CompactAndDelete => "compact,delete".into(),
        },
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
        "flush.ms" => ms.map_or(never, |n| n.to_string()),
        "max.message.bytes" => config.max_message_bytes.to_string(),
        "message.timestamp.type" => match config.message_timestamp_type {
            MessageTimestampType::CreateTime => "CreateTime".into(),
            MessageTimestampType::LogAppendTime => "LogAppendTime".into(),
        },
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
        assert_eq!(effective_value(&config, "compression.type"), None);
        for config_name in TOPIC_CONFIGS {
            assert!(
                effective_value(&config, config_name.topic).is_some(),
                "{}",
                config_name.topic
            );
        }
    }
}
