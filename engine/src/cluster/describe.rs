//! What DescribeConfigs (and CreateTopics' config list) reports for a topic
//! or a group: every config with its effective value, the source it came
//! from and its synonyms, as Kafka's `ConfigHelper` builds them. The
//! broker's own configs are in [`crate::cluster::broker_describe`].
//!
//! Synonyms run from the most specific source to the least: the topic's own
//! override, the broker settings given in the file (or `--set`), then the
//! default; an entry's source is its first synonym's.

use std::collections::BTreeMap;

use crate::cluster::broker_config::BrokerConfig;
use crate::cluster::topic_config::{
    ConfigType, Listed, TOPIC_CONFIGS, TopicConfigName, effective_value, resolve,
};
use crate::log::config::LogConfig;

/// Kafka's `DescribeConfigsResponse.ConfigSource`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigSource {
    Topic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    Group = 8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Synonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// One described config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
    pub config_type: ConfigType,
    pub read_only: bool,
    pub synonyms: Vec<Synonym>,
}

impl ConfigEntry {
    /// An entry whose source is its first synonym's (DEFAULT without any).
    pub fn from_synonyms(
        name: &str,
        value: Option<String>,
        config_type: ConfigType,
        read_only: bool,
        synonyms: Vec<Synonym>,
    ) -> ConfigEntry {
        ConfigEntry {
            name: name.to_owned(),
            value,
            source: synonyms
                .first()
                .map_or(ConfigSource::Default, |synonym| synonym.source),
            config_type,
            read_only,
            synonyms,
        }
    }
}

fn synonym(name: &str, value: Option<String>, source: ConfigSource) -> Synonym {
    Synonym {
        name: name.to_owned(),
        value,
        source,
    }
}

/// Every topic config of a topic with `overrides`, on a broker configured
/// by `broker`. Configs Kafka 4 dropped are listed only where set.
pub fn topic_entries(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
) -> Vec<ConfigEntry> {
    let defaults = &broker.log_defaults;
    let resolved = resolve(defaults, overrides).unwrap_or_else(|_| defaults.clone());
    TOPIC_CONFIGS
        .iter()
        .filter(|config| {
            config.listed == Listed::Always
                || overrides.contains_key(config.topic)
                || config.broker.iter().any(|name| broker.is_set(name))
        })
        .map(|config| topic_entry(broker, overrides, &resolved, config))
        .collect()
}

fn topic_entry(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    resolved: &LogConfig,
    config: &TopicConfigName,
) -> ConfigEntry {
    let value = effective_value(resolved, config.topic);
    let mut synonyms = Vec::new();
    if overrides.contains_key(config.topic) {
        synonyms.push(synonym(config.topic, value.clone(), ConfigSource::Topic));
    }
    synonyms.extend(broker_synonyms(broker, config));
    ConfigEntry::from_synonyms(config.topic, value, config.config_type, false, synonyms)
}

/// Broker-level synonyms Kafka gives no default: the most precise unit of
/// a setting whose coarser unit carries it (`log.retention.ms`,
/// `log.retention.minutes` beside `log.retention.hours`, …) and
/// `log.flush.interval.ms`.
const NO_KAFKA_DEFAULT: &[&str] = &[
    "log.retention.ms",
    "log.retention.minutes",
    "log.roll.ms",
    "log.roll.jitter.ms",
    "log.flush.interval.ms",
];

/// Kafka's defaults of the coarser units that carry one.
const UNIT_DEFAULTS: &[(&str, &str)] = &[
    ("log.retention.hours", "168"),
    ("log.roll.hours", "168"),
    ("log.roll.jitter.hours", "0"),
    ("log.flush.scheduler.interval.ms", "9223372036854775807"),
];

/// The broker-level synonyms of a topic config, as Kafka's
/// `ConfigHelper.configSynonyms` lists them: every one given to the broker
/// (STATIC_BROKER_CONFIG), then every one with a Kafka default
/// (DEFAULT_CONFIG), from the first entry that names the config's own
/// broker setting on. So `retention.ms` at its default has none (its
/// default comes from `log.retention.hours`, and `log.retention.ms` has no
/// default), while `compression.type` has its DEFAULT.
fn broker_synonyms(broker: &BrokerConfig, config: &TopicConfigName) -> Vec<Synonym> {
    let Some(primary) = config.broker_name() else {
        return Vec::new();
    };
    let given = set_synonyms(broker, config.broker);
    let defaults = config.broker.iter().filter_map(|name| {
        let default = if NO_KAFKA_DEFAULT.contains(name) {
            None
        } else if let Some((_, default)) = UNIT_DEFAULTS.iter().find(|(unit, _)| unit == name) {
            Some((*default).to_owned())
        } else if *name == primary {
            effective_value(&LogConfig::default(), config.topic)
        } else {
            None
        }?;
        Some(synonym(name, Some(default), ConfigSource::Default))
    });
    given
        .chain(defaults)
        .skip_while(|synonym| synonym.name != primary)
        .collect()
}

/// The synonyms among `names` that were set on the broker, as Kafka's
/// `ConfigHelper.configSynonyms` orders them: each name's per-broker
/// dynamic value, then each's cluster-wide default, then each's static.
pub fn set_synonyms<'a>(
    broker: &'a BrokerConfig,
    names: &'a [&'a str],
) -> impl Iterator<Item = Synonym> + 'a {
    [
        (&broker.dynamic_broker, ConfigSource::DynamicBroker),
        (&broker.dynamic_default, ConfigSource::DynamicDefaultBroker),
        (&broker.given, ConfigSource::StaticBroker),
    ]
    .into_iter()
    .flat_map(move |(set, source)| {
        names.iter().filter_map(move |name| {
            let value = set.get(*name)?;
            Some(synonym(name, Some(value.clone()), source))
        })
    })
}

/// A group config (Kafka 4.1's `GroupConfig`): its name, type and default
/// (the broker-level `group.*` setting's Kafka default; Brook runs only the
/// classic protocol, so none of these change how its groups behave).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupConfigName {
    pub name: &'static str,
    pub config_type: ConfigType,
    pub default: &'static str,
}

const fn group(
    name: &'static str,
    config_type: ConfigType,
    default: &'static str,
) -> GroupConfigName {
    GroupConfigName {
        name,
        config_type,
        default,
    }
}

pub const GROUP_CONFIGS: &[GroupConfigName] = &[
    group("consumer.heartbeat.interval.ms", ConfigType::Int, "5000"),
    group("consumer.session.timeout.ms", ConfigType::Int, "45000"),
    group("share.auto.offset.reset", ConfigType::String, "latest"),
    group("share.heartbeat.interval.ms", ConfigType::Int, "5000"),
    group(
        "share.isolation.level",
        ConfigType::String,
        "read_uncommitted",
    ),
    group("share.record.lock.duration.ms", ConfigType::Int, "30000"),
    group("share.session.timeout.ms", ConfigType::Int, "45000"),
    group("streams.heartbeat.interval.ms", ConfigType::Int, "5000"),
    group("streams.num.standby.replicas", ConfigType::Int, "0"),
    group("streams.session.timeout.ms", ConfigType::Int, "45000"),
];

/// Every config of a group (whether or not the group exists, as in Kafka):
/// its overrides (GROUP_CONFIG) over the defaults (DEFAULT_CONFIG).
pub fn group_entries(overrides: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
    GROUP_CONFIGS
        .iter()
        .map(|config| {
            let (value, source) = match overrides.get(config.name) {
                Some(value) => (value.clone(), ConfigSource::Group),
                None => (config.default.to_owned(), ConfigSource::Default),
            };
            let synonyms = vec![synonym(config.name, Some(value.clone()), source)];
            ConfigEntry::from_synonyms(
                config.name,
                Some(value),
                config.config_type,
                false,
                synonyms,
            )
        })
        .collect()
}

/// The entries a DescribeConfigs resource asks for: all of them when it
/// names no keys (null or empty, as Kafka reads both), else those named.
pub fn wanted(entries: Vec<ConfigEntry>, keys: Option<&[String]>) -> Vec<ConfigEntry> {
    match keys {
        Some(keys) if !keys.is_empty() => entries
            .into_iter()
            .filter(|entry| keys.contains(&entry.name))
            .collect(),
        _ => entries,
    }
}

/// Kafka's `ConfigResource.Type` codes.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
pub const RESOURCE_CLIENT_METRICS: i8 = 16;
pub const RESOURCE_GROUP: i8 = 32;

/// The types ListConfigResources v1 lists, in the order Kafka lists them.
const LISTED_RESOURCE_TYPES: [i8; 5] = [
    RESOURCE_GROUP,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
];

/// ListConfigResources (KIP-1142): the resources of the asked types (all
/// when none are named; v0, Kafka's ListClientMetricsResources, lists client
/// metrics only), as (type, name), or UNSUPPORTED_VERSION for a request
/// naming a type it cannot list. Brook has no client-metrics subscriptions
/// and no group configs, so those types list nothing.
pub fn config_resources(
    version: i16,
    types: &[i8],
    topics: impl Iterator<Item = String>,
    broker_id: i32,
) -> Result<Vec<(i8, String)>, crate::protocol::errors::ErrorCode> {
    if version >= 1
        && types
            .iter()
            .any(|kind| !LISTED_RESOURCE_TYPES.contains(kind))
    {
        return Err(crate::protocol::errors::ErrorCode::UNSUPPORTED_VERSION);
    }
    let wanted = |kind: i8| {
        if version == 0 {
            kind == RESOURCE_CLIENT_METRICS
        } else {
            types.is_empty() || types.contains(&kind)
        }
    };
    let mut topics: Vec<String> = topics.collect();
    topics.sort();
    let mut listed = Vec::new();
    for kind in LISTED_RESOURCE_TYPES
        .into_iter()
        .filter(|kind| wanted(*kind))
    {
        match kind {
            RESOURCE_BROKER_LOGGER | RESOURCE_BROKER => listed.push((kind, broker_id.to_string())),
            RESOURCE_TOPIC => listed.extend(topics.iter().map(|name| (kind, name.clone()))),
            _ => {}
        }
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::broker_config::parse_properties;

    fn entry<'a>(entries: &'a [ConfigEntry], name: &str) -> &'a ConfigEntry {
        entries.iter().find(|entry| entry.name == name).unwrap()
    }

    #[test]
    fn sources_run_from_the_topic_to_the_file_to_the_default() {
        let broker =
            BrokerConfig::from_properties(&parse_properties("log.retention.ms=1000\n")).unwrap();
        let overrides = BTreeMap::from([("segment.bytes".to_owned(), "1048576".to_owned())]);
        let entries = topic_entries(&broker, &overrides);
        let segment = entry(&entries, "segment.bytes");
        assert_eq!(segment.value.as_deref(), Some("1048576"));
        assert_eq!(segment.source, ConfigSource::Topic);
        assert_eq!(segment.synonyms[1].source, ConfigSource::Default);
        assert_eq!(segment.synonyms[1].name, "log.segment.bytes");
        let retention = entry(&entries, "retention.ms");
        assert_eq!(
            (retention.value.as_deref(), retention.source),
            (Some("1000"), ConfigSource::StaticBroker)
        );
        let cleanup = entry(&entries, "cleanup.policy");
        assert_eq!(cleanup.source, ConfigSource::Default);
        assert_eq!(cleanup.config_type, ConfigType::List);
        let throttled = entry(&entries, "leader.replication.throttled.replicas");
        assert_eq!(
            (throttled.value.as_deref(), throttled.synonyms.len()),
            (Some(""), 0)
        );
        // Kafka 4 dropped it: listed only where set.
        assert!(
            !entries
                .iter()
                .any(|entry| entry.name == "message.timestamp.difference.max.ms")
        );
        let set = BTreeMap::from([(
            "message.timestamp.difference.max.ms".to_owned(),
            "10".to_owned(),
        )]);
        let entries = topic_entries(&broker, &set);
        assert_eq!(
            entry(&entries, "message.timestamp.difference.max.ms").source,
            ConfigSource::Topic
        );
    }

    /// Kafka 4.1.2's answers (kafkajs' describeConfigs test and a direct
    /// check): a topic config's broker synonyms start at its own broker
    /// setting, so `retention.ms` at its default has none.
    #[test]
    fn broker_synonyms_are_kafkas() {
        let synonyms = |file: &str, name: &str| {
            let broker = BrokerConfig::from_properties(&parse_properties(file)).unwrap();
            entry(&topic_entries(&broker, &BTreeMap::new()), name)
                .synonyms
                .iter()
                .map(|synonym| (synonym.name.clone(), synonym.value.clone(), synonym.source))
                .collect::<Vec<_>>()
        };
        let named =
            |name: &str, value: &str, source| (name.to_owned(), Some(value.to_owned()), source);
        assert_eq!(synonyms("", "retention.ms"), []);
        assert_eq!(synonyms("log.retention.hours=24\n", "retention.ms"), []);
        assert_eq!(
            synonyms("log.retention.ms=1000\n", "retention.ms"),
            [
                named("log.retention.ms", "1000", ConfigSource::StaticBroker),
                named("log.retention.hours", "168", ConfigSource::Default),
            ]
        );
        assert_eq!(
            synonyms("", "compression.type"),
            [named("compression.type", "producer", ConfigSource::Default)]
        );
        assert_eq!(synonyms("", "flush.ms"), []);
        assert_eq!(synonyms("", "segment.ms"), []);
    }

    #[test]
    fn config_resources_are_listed_by_type_in_kafkas_order() {
        let topics = || ["b".to_owned(), "a".to_owned()].into_iter();
        assert_eq!(config_resources(0, &[], topics(), 3), Ok(Vec::new()));
        assert_eq!(
            config_resources(1, &[], topics(), 3).unwrap(),
            vec![
                (RESOURCE_BROKER_LOGGER, "3".to_owned()),
                (RESOURCE_BROKER, "3".to_owned()),
                (RESOURCE_TOPIC, "a".to_owned()),
                (RESOURCE_TOPIC, "b".to_owned()),
            ]
        );
        assert_eq!(
            config_resources(
                1,
                &[RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_TOPIC],
                topics(),
                3
            )
            .unwrap()
            .len(),
            3
        );
        assert_eq!(
            config_resources(1, &[RESOURCE_TOPIC, 64], topics(), 3),
            Err(crate::protocol::errors::ErrorCode::UNSUPPORTED_VERSION)
        );
    }

    #[test]
    fn groups_are_described_with_defaults_and_keys_select() {
        let entries = group_entries(&BTreeMap::new());
        assert_eq!(entries.len(), GROUP_CONFIGS.len());
        let session = entry(&entries, "consumer.session.timeout.ms");
        assert_eq!(
            (session.value.as_deref(), session.source),
            (Some("45000"), ConfigSource::Default)
        );
        let keys = vec!["share.auto.offset.reset".to_owned()];
        assert_eq!(wanted(entries.clone(), Some(&keys)).len(), 1);
        assert_eq!(wanted(entries.clone(), Some(&[])).len(), entries.len());
        assert_eq!(wanted(entries.clone(), None).len(), entries.len());
    }
}
