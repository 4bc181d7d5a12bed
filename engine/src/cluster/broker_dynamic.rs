//! Dynamic broker configs (KIP-226): what AlterConfigs and
//! IncrementalAlterConfigs may set on a BROKER resource, and the settings a
//! broker runs with once they apply.
//!
//! A BROKER resource is one broker (its id as the resource name) or the
//! cluster-wide default (an empty name, `kafka-configs --entity-default`).
//! Both are kept in the metadata log, so they outlive restarts and
//! controller failovers. A broker runs with its static settings (file and
//! `--set`), overlaid by the cluster-wide default, overlaid by its own:
//! Kafka's order.
//!
//! Which names may be set, as Kafka 4.1's `DynamicBrokerConfig` decides,
//! with Brook's one addition (configs Kafka changes live that Brook does not
//! act on yet are refused, never kept and ignored):
//!
//! - the broker-level name of every topic default (`log.retention.ms`,
//!   `message.max.bytes`, `min.insync.replicas`, …): applied live to every
//!   partition whose topic does not override it; and the cleaner's
//!   `log.cleaner.backoff.ms` and `log.cleaner.dedupe.buffer.size`, from
//!   its next pass;
//! - Kafka's thread-pool sizes: kept and shown, no effect (as when given in
//!   the file; [`crate::cluster::broker_config::NO_EFFECT`]); likewise the
//!   security settings (`ssl.*`, `sasl.*`, `listener.name.*`), which no
//!   listener Brook serves uses;
//! - any other Kafka broker config: refused, "Cannot update these configs
//!   dynamically" (read-only in Kafka), or Brook's "not served" message;
//! - a name that is no Kafka broker config: kept as given (Kafka allows
//!   custom configs for plugins).

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::broker_config::BrokerConfig;
use crate::cluster::broker_describe::{broker_config_type, is_broker_config, topic_default_value};
use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::controller::Refusal;
use crate::cluster::records::MetadataRecord;
use crate::cluster::topic_config::{
    ConfigOperation, ConfigType, TOPIC_CONFIGS, by_broker_name, edit_list,
};
use crate::log::config::LogConfig;
use crate::protocol::errors::ErrorCode;

/// The resource name of the cluster-wide default.
pub const CLUSTER_DEFAULT: &str = "";

/// The dynamic configs set, by resource name (`""`: the cluster-wide
/// default; a broker's id: that broker's own).
pub type DynamicConfigs = BTreeMap<String, BTreeMap<String, String>>;

/// Kafka's thread-pool sizes, dynamic in Kafka, with no effect in Brook.
const THREAD_POOLS: &[&str] = &[
    "num.io.threads",
    "num.network.threads",
    "num.replica.fetchers",
    "num.recovery.threads.per.data.dir",
    "background.threads",
];

/// Configs Kafka 4.1 changes live that Brook does not act on yet (some of
/// them Brook does not have at all: listeners, connection quotas,
/// throttles).
const NOT_SERVED: &[&str] = &[
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "principal.builder.class",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
    "metric.reporters",
    "log.cleaner.threads",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "producer.id.expiration.ms",
    "transaction.partition.verification.enable",
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "remote.log.index.file.cache.total.size.bytes",
    "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second",
    "remote.list.offsets.request.timeout.ms",
];

/// Broker settings besides the topic defaults that Brook applies live
/// (Kafka's `LogCleaner.ReconfigurableConfigs` it has).
const APPLIED: &[&str] = &["log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size"];

/// Prefixes of Kafka's security and per-listener settings: kept with no
/// effect, as no listener Brook serves uses them (an SSL or SASL listener
/// is refused at start). librdkafka's admin test sets one on a broker.
const SECURITY_PREFIXES: &[&str] = &["ssl.", "sasl.", "listener.name."];

/// What a BROKER resource may do with a config name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A topic default under its broker name: applied live.
    Applied,
    /// Kept and shown, no effect in a thread-per-core broker.
    NoEffect,
    /// Dynamic in Kafka; Brook does not act on it yet: refused.
    NotServed,
    /// A Kafka broker config that is not dynamic: refused.
    ReadOnly,
    /// No Kafka broker config: kept as given.
    Custom,
}

pub fn kind(name: &str) -> Kind {
    let topic_default = TOPIC_CONFIGS
        .iter()
        .any(|config| config.broker_name() == Some(name));
    if topic_default || APPLIED.contains(&name) {
        Kind::Applied
    } else if THREAD_POOLS.contains(&name)
        || SECURITY_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
    {
        Kind::NoEffect
    } else if NOT_SERVED.contains(&name) {
        Kind::NotServed
    } else if is_broker_config(name) {
        Kind::ReadOnly
    } else {
        Kind::Custom
    }
}

/// Whether Kafka can change `name` while the broker runs (DescribeConfigs'
/// `read_only` is the opposite).
pub fn is_dynamic_in_kafka(name: &str) -> bool {
    matches!(kind(name), Kind::Applied | Kind::NoEffect | Kind::NotServed)
}

/// The settings a broker whose static settings are `base` runs with under
/// `dynamic`: `base` overlaid by the cluster-wide default, then by the
/// broker's own. `given` stays the static settings (DescribeConfigs'
/// STATIC_BROKER_CONFIG). Dynamic values were checked when set; should a
/// combination still not parse, the static settings stand.
pub fn effective(base: &BrokerConfig, dynamic: &DynamicConfigs) -> BrokerConfig {
    let default = dynamic.get(CLUSTER_DEFAULT).cloned().unwrap_or_default();
    let own = dynamic
        .get(&base.broker_id.to_string())
        .cloned()
        .unwrap_or_default();
    if default.is_empty() && own.is_empty() {
        return base.clone();
    }
    let mut config = overlaid(base, &default, &own).unwrap_or_else(|_| base.clone());
    config.given = base.given.clone();
    config.unknown = base.unknown.clone();
    config.dynamic_default = default;
    config.dynamic_broker = own;
    config
}

/// `base`'s static settings with `default` and `own` over them, parsed.
fn overlaid(
    base: &BrokerConfig,
    default: &BTreeMap<String, String>,
    own: &BTreeMap<String, String>,
) -> Result<BrokerConfig, String> {
    let settings: Vec<(String, String)> = base
        .given
        .iter()
        .chain(
            default
                .iter()
                .filter(|(name, _)| kind(name) != Kind::Custom),
        )
        .chain(own.iter().filter(|(name, _)| kind(name) != Kind::Custom))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    BrokerConfig::from_properties(&settings).map_err(|error| error.to_string())
}

/// Kafka's rendering of a set of names in its messages (Scala's `Set(…)`).
fn scala_set(names: &BTreeSet<&str>) -> String {
    format!(
        "Set({})",
        names.iter().copied().collect::<Vec<_>>().join(", ")
    )
}

/// The configs of `resource` after `changes` (IncrementalAlterConfigs,
/// `replace` false) or exactly the `Set` ones (AlterConfigs, `replace`
/// true), checked as Kafka checks them on a broker whose static settings
/// are `base`, with `dynamic` the configs set now. Refusals are
/// INVALID_REQUEST, as Kafka answers them (KAFKA-13609).
pub fn altered(
    base: &BrokerConfig,
    dynamic: &DynamicConfigs,
    resource: &str,
    changes: &[(String, ConfigOperation)],
    replace: bool,
) -> Result<BTreeMap<String, String>, Refusal> {
    let invalid = |message: String| Refusal::new(ErrorCode::INVALID_REQUEST, message);
    let mut names = BTreeSet::new();
    if !changes.iter().all(|(name, _)| names.insert(name.as_str())) {
        return Err(invalid("Error due to duplicate config keys".into()));
    }
    let nulls: Vec<&str> = changes
        .iter()
        .filter(|(_, operation)| operation.value_missing())
        .map(|(name, _)| name.as_str())
        .collect();
    if !nulls.is_empty() {
        return Err(invalid(format!(
            "Null value not supported for : {}",
            nulls.join(", ")
        )));
    }
    let current = dynamic.get(resource).cloned().unwrap_or_default();
    let mut configs = if replace { BTreeMap::new() } else { current };
    for (name, operation) in changes {
        match operation {
            ConfigOperation::Set(value) => {
                configs.insert(name.clone(), value.clone().unwrap_or_default());
            }
            ConfigOperation::Delete => {
                configs.remove(name);
            }
            ConfigOperation::Append(value) | ConfigOperation::Subtract(value) => {
                if broker_config_type(name) != Some(ConfigType::List) {
                    return Err(invalid(format!(
                        "Config value append is not allowed for config key: {name}"
                    )));
                }
                // The value in force: the resource's own, the cluster-wide
                // default's (for a broker), else the static one.
                let now = configs
                    .get(name)
                    .or(dynamic
                        .get(CLUSTER_DEFAULT)
                        .filter(|_| resource != CLUSTER_DEFAULT)
                        .and_then(|default| default.get(name)))
                    .cloned()
                    .or_else(|| topic_default_value(base, name))
                    .unwrap_or_default();
                configs.insert(name.clone(), edit_list(&now, operation, value.as_deref()));
            }
        }
    }
    check(base, dynamic, resource, &configs).map_err(invalid)?;
    Ok(configs)
}

/// Kafka's checks of a resource's whole dynamic set, in Kafka's order,
/// then whether the values parse.
fn check(
    base: &BrokerConfig,
    dynamic: &DynamicConfigs,
    resource: &str,
    configs: &BTreeMap<String, String>,
) -> Result<(), String> {
    let of_kind = |wanted: Kind| -> BTreeSet<&str> {
        configs
            .keys()
            .map(String::as_str)
            .filter(|name| kind(name) == wanted)
            .collect()
    };
    let read_only = of_kind(Kind::ReadOnly);
    if !read_only.is_empty() {
        return Err(format!(
            "Cannot update these configs dynamically: {}",
            scala_set(&read_only)
        ));
    }
    let not_served = of_kind(Kind::NotServed);
    if !not_served.is_empty() {
        return Err(format!(
            "Brook does not serve these configs dynamically yet (set them in the config file \
             where Brook has them): {}",
            scala_set(&not_served)
        ));
    }
    let unwritable = configs
        .iter()
        .find(|(name, value)| name.is_empty() || format!("{name}{value}").contains(['\n', '\r']));
    if let Some((name, _)) = unwritable {
        return Err(format!("config {name:?} has a line break or an empty name"));
    }
    let thread_pools = of_kind(Kind::NoEffect)
        .into_iter()
        .filter(|name| THREAD_POOLS.contains(name));
    for name in thread_pools {
        let positive = configs[name].trim().parse::<i32>().is_ok_and(|n| n > 0);
        if !positive {
            return Err(format!(
                "Dynamic thread count update validation failed for {name}={}, value should be at \
                 least 1",
                configs[name]
            ));
        }
    }
    for name in of_kind(Kind::Applied) {
        // The others are checked with the whole set below.
        let Some(topic) = by_broker_name(name) else {
            continue;
        };
        let value = configs[name].as_str();
        if let Err(error) = LogConfig::default().with_overrides([(topic.topic, value)]) {
            return Err(format!(
                "Invalid value {value} for configuration {name}: {error}"
            ));
        }
    }
    let (default, own) = match resource {
        CLUSTER_DEFAULT => (configs.clone(), BTreeMap::new()),
        _ => (
            dynamic.get(CLUSTER_DEFAULT).cloned().unwrap_or_default(),
            configs.clone(),
        ),
    };
    overlaid(base, &default, &own).map(|_| ())
}

/// [`altered`] at the active controller: the records that make it so in
/// `image`. The broker that took the request checked the values against
/// its own static settings (as Kafka's does); here `base` is the
/// controller's.
pub fn alter_broker_configs(
    image: &ClusterImage,
    base: &BrokerConfig,
    resource: &str,
    changes: &[(String, ConfigOperation)],
    replace: bool,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let configs = altered(base, &image.broker_configs, resource, changes, replace)?;
    let old = image
        .broker_configs
        .get(resource)
        .cloned()
        .unwrap_or_default();
    Ok(records(resource, &old, &configs))
}

/// Records that take `resource`'s configs from `old` to `new`: one per
/// config set, changed or removed.
pub fn records(
    resource: &str,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> Vec<MetadataRecord> {
    changed(old, new)
        .map(|(key, value)| MetadataRecord::BrokerConfig {
            resource: resource.to_owned(),
            key,
            value,
        })
        .collect()
}

/// Every key whose value differs between `old` and `new`, with its new
/// value (`None`: removed): the config records of a change, a topic's or
/// a broker resource's.
pub fn changed<'a>(
    old: &'a BTreeMap<String, String>,
    new: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = (String, Option<String>)> + 'a {
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|key| old.get(*key) != new.get(*key))
        .map(|key| (key.clone(), new.get(key).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::broker_config::parse_properties;

    fn base(text: &str) -> BrokerConfig {
        BrokerConfig::from_properties(&parse_properties(text)).unwrap()
    }

    fn set(name: &str, value: &str) -> (String, ConfigOperation) {
        (
            name.to_owned(),
            ConfigOperation::Set(Some(value.to_owned())),
        )
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn names_are_sorted_as_kafka_sorts_them() {
        assert_eq!(kind("log.retention.ms"), Kind::Applied);
        assert_eq!(kind("message.max.bytes"), Kind::Applied);
        assert_eq!(kind("min.insync.replicas"), Kind::Applied);
        assert_eq!(kind("log.cleanup.policy"), Kind::Applied);
        // Only a topic default's first broker name is dynamic in Kafka.
        assert_eq!(kind("log.retention.hours"), Kind::ReadOnly);
        assert_eq!(kind("num.partitions"), Kind::ReadOnly);
        assert_eq!(kind("broker.id"), Kind::ReadOnly);
        assert_eq!(kind("num.io.threads"), Kind::NoEffect);
        assert_eq!(kind("log.cleaner.backoff.ms"), Kind::Applied);
        assert_eq!(kind("log.cleaner.threads"), Kind::NotServed);
        assert_eq!(kind("max.connections"), Kind::NotServed);
        assert_eq!(
            kind("listener.name.plain.ssl.keystore.location"),
            Kind::NoEffect
        );
        assert_eq!(
            kind("sasl.kerberos.min.time.before.relogin"),
            Kind::NoEffect
        );
        assert_eq!(kind("cleanup.policy"), Kind::Custom);
        assert!(is_dynamic_in_kafka("log.segment.bytes"));
        assert!(!is_dynamic_in_kafka("num.partitions"));
    }

    /// Per broker over the cluster default over the file; the file's
    /// coarser unit loses to a dynamic `log.retention.ms`.
    #[test]
    fn a_broker_runs_with_its_own_then_the_default_then_its_file() {
        let base = base("broker.id=1\nlog.retention.hours=1\nmessage.max.bytes=1000\n");
        let dynamic: DynamicConfigs = [
            (
                CLUSTER_DEFAULT.to_owned(),
                configs(&[("log.retention.ms", "5000"), ("message.max.bytes", "2000")]),
            ),
            ("1".to_owned(), configs(&[("message.max.bytes", "3000")])),
            ("2".to_owned(), configs(&[("message.max.bytes", "4000")])),
        ]
        .into();
        let config = effective(&base, &dynamic);
        assert_eq!(config.log_defaults.retention_ms, Some(5000));
        assert_eq!(config.log_defaults.max_message_bytes, 3000);
        assert_eq!(config.given, base.given);
        assert_eq!(
            config.dynamic_broker,
            configs(&[("message.max.bytes", "3000")])
        );
        assert_eq!(effective(&base, &DynamicConfigs::new()), base);
    }

    #[test]
    fn changes_are_checked_as_kafka_checks_them() {
        let base = base("broker.id=1\n");
        let none = DynamicConfigs::new();
        let refused = |changes: &[(String, ConfigOperation)], resource: &str| {
            altered(&base, &none, resource, changes, false)
                .unwrap_err()
                .message
        };
        assert_eq!(
            refused(&[set("num.partitions", "3"), set("broker.id", "2")], "1"),
            "Cannot update these configs dynamically: Set(broker.id, num.partitions)"
        );
        assert!(refused(&[set("max.connections", "10")], "").contains("Set(max.connections)"));
        assert!(refused(&[set("message.max.bytes", "lots")], "1").contains("message.max.bytes"));
        assert!(
            refused(&[set("log.cleaner.backoff.ms", "-1")], "").contains("log.cleaner.backoff.ms")
        );
        assert_eq!(
            refused(&[set("num.io.threads", "0")], "1"),
            "Dynamic thread count update validation failed for num.io.threads=0, value should be \
             at least 1"
        );
        assert_eq!(
            refused(&[set("a", "1"), set("a", "2")], "1"),
            "Error due to duplicate config keys"
        );
        let null = ("message.max.bytes".to_owned(), ConfigOperation::Set(None));
        assert_eq!(
            refused(&[null], "1"),
            "Null value not supported for : message.max.bytes"
        );
        assert!(refused(&[set("custom", "a\nb")], "1").contains("line break"));
        let error = altered(&base, &none, "1", &[set("num.partitions", "3")], false).unwrap_err();
        assert_eq!(error.error, ErrorCode::INVALID_REQUEST);
    }

    #[test]
    fn incremental_and_replacing_changes() {
        let base = base("broker.id=1\n");
        let dynamic: DynamicConfigs = [(
            "1".to_owned(),
            configs(&[("log.retention.ms", "1000"), ("custom", "x")]),
        )]
        .into();
        let incremental = altered(
            &base,
            &dynamic,
            "1",
            &[
                set("message.max.bytes", "5000"),
                ("custom".to_owned(), ConfigOperation::Delete),
                (
                    "log.cleanup.policy".to_owned(),
                    ConfigOperation::Append(Some("compact".into())),
                ),
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            incremental,
            configs(&[
                ("log.cleanup.policy", "delete,compact"),
                ("log.retention.ms", "1000"),
                ("message.max.bytes", "5000"),
            ])
        );
        let replaced = altered(&base, &dynamic, "1", &[set("num.io.threads", "4")], true).unwrap();
        assert_eq!(replaced, configs(&[("num.io.threads", "4")]));
        let appended = altered(
            &base,
            &dynamic,
            "1",
            &[(
                "message.max.bytes".to_owned(),
                ConfigOperation::Append(Some("1".into())),
            )],
            false,
        );
        assert!(appended.is_err());
        assert_eq!(
            records("1", &dynamic["1"], &replaced),
            vec![
                MetadataRecord::BrokerConfig {
                    resource: "1".into(),
                    key: "custom".into(),
                    value: None
                },
                MetadataRecord::BrokerConfig {
                    resource: "1".into(),
                    key: "log.retention.ms".into(),
                    value: None
                },
                MetadataRecord::BrokerConfig {
                    resource: "1".into(),
                    key: "num.io.threads".into(),
                    value: Some("4".into())
                },
            ]
        );
    }
}
