//! The broker's configs as DescribeConfigs reports them: Kafka 4.1's broker
//! config names with their types, each with the value this broker runs with
//! and its source (STATIC_BROKER_CONFIG where the file or `--set` gave it,
//! DEFAULT_CONFIG otherwise, DYNAMIC_BROKER_CONFIG and
//! DYNAMIC_DEFAULT_BROKER_CONFIG where a dynamic config sets it). An entry
//! is read-only unless Kafka can change it dynamically
//! ([`crate::cluster::broker_dynamic`]).
//!
//! Three kinds of value: what Brook reads from its [`BrokerConfig`] (the
//! `log.*` topic defaults, `num.partitions`, `group.*`, `offsets.*`,
//! `transaction.*`, …), what the broker's identity says (`broker.id`,
//! `listeners`, `advertised.listeners`, `log.dirs`), and Kafka's default for
//! settings Brook has no use for yet (thread pools, quotas, KRaft) — listed
//! so that clients reading a key Kafka always returns find it (a client failed
//! on a missing `default.replication.factor`). A given value of one of those
//! is reported as given.

use crate::cluster::broker_config::BrokerConfig;
use crate::cluster::broker_dynamic::is_dynamic_in_kafka;
use crate::cluster::describe::{ConfigEntry, ConfigSource, Synonym, set_synonyms};
use crate::cluster::topic_config::{ConfigType, Listed, TOPIC_CONFIGS, effective_value};
use crate::cluster::{endpoints, node_config};
use crate::log::config::LogConfig;

/// Who this broker is, for the configs that say it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerIdentity {
    /// Its client listeners (`NAME://host:port,…`).
    pub listen: String,
    /// What clients are told to connect to (`NAME://host:port,…`).
    pub advertised: String,
    /// Its log directories (`dir,dir,…`; the first holds the metadata).
    pub log_dirs: String,
}

use ConfigType::{Boolean, Class, Double, Int, List, Long, Short, String as Text};

/// Kafka 4.1 broker configs Brook does not act on, with Kafka's defaults
/// (`None`: Kafka's default is null).
const KAFKA_DEFAULTS: &[(&str, ConfigType, Option<&str>)] = &[
    ("alter.config.policy.class.name", Class, None),
    ("authorizer.class.name", Text, Some("")),
    ("auto.leader.rebalance.enable", Boolean, Some("true")),
    ("background.threads", Int, Some("10")),
    ("broker.heartbeat.interval.ms", Int, Some("2000")),
    ("broker.rack", Text, None),
    ("broker.session.timeout.ms", Int, Some("9000")),
    (
        "connection.failed.authentication.delay.ms",
        Int,
        Some("100"),
    ),
    ("connections.max.idle.ms", Long, Some("600000")),
    ("controlled.shutdown.enable", Boolean, Some("true")),
    ("controller.listener.names", Text, None),
    ("controller.quorum.bootstrap.servers", List, Some("")),
    ("controller.quorum.voters", List, Some("")),
    ("create.topic.policy.class.name", Class, None),
    ("default.replication.factor", Int, Some("1")),
    (
        "delete.records.purgatory.purge.interval.requests",
        Int,
        Some("1"),
    ),
    ("delete.topic.enable", Boolean, Some("true")),
    ("early.start.listeners", Text, None),
    ("eligible.leader.replicas.enable", Boolean, Some("false")),
    ("fetch.purgatory.purge.interval.requests", Int, Some("1000")),
    (
        "follower.replication.throttled.rate",
        Long,
        Some("9223372036854775807"),
    ),
    ("group.consumer.assignors", List, Some("uniform,range")),
    ("group.consumer.heartbeat.interval.ms", Int, Some("5000")),
    (
        "group.consumer.max.heartbeat.interval.ms",
        Int,
        Some("15000"),
    ),
    ("group.consumer.max.session.timeout.ms", Int, Some("60000")),
    ("group.consumer.max.size", Int, Some("2147483647")),
    (
        "group.consumer.migration.policy",
        Text,
        Some("bidirectional"),
    ),
    (
        "group.consumer.min.heartbeat.interval.ms",
        Int,
        Some("5000"),
    ),
    ("group.consumer.min.session.timeout.ms", Int, Some("45000")),
    ("group.consumer.session.timeout.ms", Int, Some("45000")),
    // Brook runs the classic protocol only.
    (
        "group.coordinator.rebalance.protocols",
        List,
        Some("classic"),
    ),
    ("group.coordinator.threads", Int, Some("4")),
    ("group.share.heartbeat.interval.ms", Int, Some("5000")),
    ("group.share.record.lock.duration.ms", Int, Some("30000")),
    ("group.share.session.timeout.ms", Int, Some("45000")),
    ("group.streams.heartbeat.interval.ms", Int, Some("5000")),
    ("group.streams.num.standby.replicas", Int, Some("0")),
    ("group.streams.session.timeout.ms", Int, Some("45000")),
    ("initial.broker.registration.timeout.ms", Int, Some("60000")),
    ("inter.broker.listener.name", Text, None),
    ("leader.imbalance.check.interval.seconds", Long, Some("300")),
    ("leader.imbalance.per.broker.percentage", Int, Some("10")),
    (
        "leader.replication.throttled.rate",
        Long,
        Some("9223372036854775807"),
    ),
    (
        "listener.security.protocol.map",
        Text,
        Some("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    ),
    ("log.cleaner.io.buffer.load.factor", Double, Some("0.9")),
    ("log.cleaner.io.buffer.size", Int, Some("524288")),
    (
        "log.cleaner.io.max.bytes.per.second",
        Double,
        Some("1.7976931348623157E308"),
    ),
    ("log.cleaner.threads", Int, Some("1")),
    ("log.dir.failure.timeout.ms", Long, Some("30000")),
    (
        "log.flush.scheduler.interval.ms",
        Long,
        Some("9223372036854775807"),
    ),
    (
        "log.flush.start.offset.checkpoint.interval.ms",
        Int,
        Some("60000"),
    ),
    ("log.initial.task.delay.ms", Long, Some("30000")),
    ("log.retention.hours", Int, Some("168")),
    ("log.retention.minutes", Int, None),
    ("log.roll.hours", Int, Some("168")),
    ("log.roll.jitter.hours", Int, Some("0")),
    ("log.segment.delete.delay.ms", Long, Some("60000")),
    ("max.connection.creation.rate", Int, Some("2147483647")),
    ("max.connections", Int, Some("2147483647")),
    ("max.connections.per.ip", Int, Some("2147483647")),
    ("max.connections.per.ip.overrides", Text, Some("")),
    ("max.request.partition.size.limit", Int, Some("2000")),
    ("metadata.log.dir", Text, None),
    (
        "metadata.log.max.record.bytes.between.snapshots",
        Long,
        Some("20971520"),
    ),
    (
        "metadata.log.max.snapshot.interval.ms",
        Long,
        Some("3600000"),
    ),
    ("metadata.log.segment.bytes", Int, Some("1073741824")),
    ("metadata.log.segment.ms", Long, Some("604800000")),
    ("metadata.max.idle.interval.ms", Int, Some("500")),
    ("metadata.max.retention.bytes", Long, Some("104857600")),
    ("metadata.max.retention.ms", Long, Some("604800000")),
    ("metric.reporters", List, Some("")),
    ("metrics.num.samples", Int, Some("2")),
    ("metrics.recording.level", Text, Some("INFO")),
    ("metrics.sample.window.ms", Long, Some("30000")),
    ("num.io.threads", Int, Some("8")),
    ("num.network.threads", Int, Some("3")),
    ("num.recovery.threads.per.data.dir", Int, Some("2")),
    ("num.replica.alter.log.dirs.threads", Int, None),
    ("num.replica.fetchers", Int, Some("1")),
    ("offsets.load.buffer.size", Int, Some("5242880")),
    ("offsets.topic.compression.codec", Int, Some("0")),
    (
        "producer.id.expiration.check.interval.ms",
        Int,
        Some("600000"),
    ),
    ("producer.id.expiration.ms", Int, Some("86400000")),
    (
        "producer.purgatory.purge.interval.requests",
        Int,
        Some("1000"),
    ),
    ("queued.max.request.bytes", Long, Some("-1")),
    ("queued.max.requests", Int, Some("500")),
    ("quota.window.num", Int, Some("11")),
    ("quota.window.size.seconds", Int, Some("1")),
    (
        "replica.alter.log.dirs.io.max.bytes.per.second",
        Long,
        Some("9223372036854775807"),
    ),
    ("replica.fetch.backoff.ms", Int, Some("1000")),
    ("replica.fetch.max.bytes", Int, Some("1048576")),
    ("replica.fetch.min.bytes", Int, Some("1")),
    ("replica.fetch.response.max.bytes", Int, Some("10485760")),
    ("replica.fetch.wait.max.ms", Int, Some("500")),
    (
        "replica.high.watermark.checkpoint.interval.ms",
        Long,
        Some("5000"),
    ),
    ("replica.socket.receive.buffer.bytes", Int, Some("65536")),
    ("request.timeout.ms", Int, Some("30000")),
    ("sasl.mechanism.controller.protocol", Text, Some("GSSAPI")),
    ("security.inter.broker.protocol", Text, Some("PLAINTEXT")),
    (
        "socket.connection.setup.timeout.max.ms",
        Long,
        Some("30000"),
    ),
    ("socket.connection.setup.timeout.ms", Long, Some("10000")),
    ("socket.listen.backlog.size", Int, Some("50")),
    (
        "transaction.partition.verification.enable",
        Boolean,
        Some("true"),
    ),
    ("unclean.leader.election.interval.ms", Long, Some("300000")),
    ("unstable.api.versions.enable", Boolean, Some("false")),
];

/// A socket buffer size as Kafka shows it: -1 for the kernel's default.
fn socket_buffer(bytes: Option<u32>) -> i64 {
    bytes.map_or(-1, i64::from)
}

/// Kafka's default of a setting Brook lists without acting on it.
pub(crate) fn kafka_default(name: &str) -> Option<String> {
    KAFKA_DEFAULTS
        .iter()
        .find(|(known, _, _)| *known == name)
        .and_then(|(_, _, default)| default.map(str::to_owned))
}

/// The settings Brook reads, with the values it runs with.
pub(crate) fn brook_values(
    config: &BrokerConfig,
    identity: &BrokerIdentity,
) -> Vec<(&'static str, ConfigType, Option<String>)> {
    let id = config.broker_id.to_string();
    let groups = &config.groups;
    let transactions = &config.transactions;
    let value = |value: &dyn ToString| Some(value.to_string());
    vec![
        (
            "advertised.listeners",
            Text,
            Some(identity.advertised.clone()),
        ),
        (
            "auto.create.topics.enable",
            Boolean,
            value(&config.auto_create_topics_enable),
        ),
        ("broker.id", Int, Some(id.clone())),
        ("fetch.max.bytes", Int, value(&config.fetch_max_bytes)),
        (
            "group.initial.rebalance.delay.ms",
            Int,
            value(&groups.initial_rebalance_delay_ms),
        ),
        (
            "group.max.session.timeout.ms",
            Int,
            value(&groups.session_timeout_max_ms),
        ),
        ("group.max.size", Int, value(&groups.group_size_max)),
        (
            "group.min.session.timeout.ms",
            Int,
            value(&groups.session_timeout_min_ms),
        ),
        ("listeners", Text, Some(identity.listen.clone())),
        (
            "log.cleaner.backoff.ms",
            Long,
            value(&config.cleaner.backoff_ms),
        ),
        (
            "log.cleaner.dedupe.buffer.size",
            Long,
            value(&config.cleaner.dedupe_buffer_bytes),
        ),
        (
            "log.cleaner.enable",
            Boolean,
            value(&config.cleaner.enabled),
        ),
        (
            "log.dir",
            Text,
            identity.log_dirs.split(',').next().map(str::to_owned),
        ),
        ("log.dirs", Text, Some(identity.log_dirs.clone())),
        (
            "log.flush.offset.checkpoint.interval.ms",
            Int,
            value(&config.checkpoint_interval_ms),
        ),
        (
            "log.retention.check.interval.ms",
            Long,
            value(&config.retention_check_interval_ms),
        ),
        (
            "max.incremental.fetch.session.cache.slots",
            Int,
            value(&config.fetch_session_cache_slots),
        ),
        ("node.id", Int, Some(id)),
        ("num.partitions", Int, value(&config.num_partitions)),
        (
            "offset.metadata.max.bytes",
            Int,
            value(&groups.offset_metadata_bytes_max),
        ),
        (
            "offsets.commit.timeout.ms",
            Int,
            value(&config.offsets_commit_timeout_ms),
        ),
        (
            "offsets.retention.check.interval.ms",
            Long,
            value(&config.offsets_retention_check_interval_ms),
        ),
        (
            "offsets.retention.minutes",
            Int,
            value(&(groups.offsets_retention_ms / 60_000)),
        ),
        (
            "offsets.topic.num.partitions",
            Int,
            value(&config.offsets_topic_partitions),
        ),
        (
            "offsets.topic.replication.factor",
            Short,
            value(&config.offsets_topic_replication_factor),
        ),
        (
            "offsets.topic.segment.bytes",
            Int,
            value(&config.offsets_topic_segment_bytes),
        ),
        ("process.roles", List, Some("broker,controller".into())),
        (
            "replica.lag.time.max.ms",
            Long,
            value(&config.replica_lag_time_max_ms),
        ),
        (
            "replica.selector.class",
            Text,
            config.replica_selector.class_name().map(str::to_owned),
        ),
        (
            "replica.socket.timeout.ms",
            Int,
            value(&config.replica_socket_timeout_ms),
        ),
        (
            "socket.receive.buffer.bytes",
            Int,
            value(&socket_buffer(config.socket_receive_buffer_bytes)),
        ),
        (
            "socket.request.max.bytes",
            Int,
            value(&config.socket_request_max_bytes),
        ),
        (
            "socket.send.buffer.bytes",
            Int,
            value(&socket_buffer(config.socket_send_buffer_bytes)),
        ),
        (
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            Int,
            value(&transactions.abort_timed_out_transaction_cleanup_interval_ms),
        ),
        (
            "transaction.max.timeout.ms",
            Int,
            value(&transactions.transaction_max_timeout_ms),
        ),
        (
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            Int,
            value(&transactions.remove_expired_transaction_cleanup_interval_ms),
        ),
        (
            "transaction.state.log.load.buffer.size",
            Int,
            value(&transactions.state_log_load_buffer_size),
        ),
        (
            "transaction.state.log.min.isr",
            Int,
            value(&transactions.state_log_min_isr),
        ),
        (
            "transaction.state.log.num.partitions",
            Int,
            value(&transactions.state_log_num_partitions),
        ),
        (
            "transaction.state.log.replication.factor",
            Short,
            value(&transactions.state_log_replication_factor),
        ),
        (
            "transaction.state.log.segment.bytes",
            Int,
            value(&transactions.state_log_segment_bytes),
        ),
        (
            "transactional.id.expiration.ms",
            Int,
            value(&transactions.transactional_id_expiration_ms),
        ),
    ]
}

/// The topic defaults under their broker-level names.
fn topic_defaults(
    config: &BrokerConfig,
) -> impl Iterator<Item = (&'static str, ConfigType, Option<String>)> + '_ {
    TOPIC_CONFIGS
        .iter()
        .filter(|topic| {
            topic.listed == Listed::Always || topic.broker.iter().any(|name| config.is_set(name))
        })
        .filter_map(move |topic| {
            let broker = topic.broker_name()?;
            Some((
                broker,
                topic.config_type,
                effective_value(&config.log_defaults, topic.topic),
            ))
        })
}

/// Every broker config, sorted by name.
pub fn broker_entries(config: &BrokerConfig, identity: &BrokerIdentity) -> Vec<ConfigEntry> {
    let brook = brook_values(config, identity)
        .into_iter()
        .chain(topic_defaults(config));
    let mut entries: Vec<ConfigEntry> = brook
        .map(|(name, config_type, value)| {
            if let Some((_, kafka_default)) = IDENTITY.iter().find(|(known, _)| *known == name) {
                return identity_entry(name, value, kafka_default.map(str::to_owned));
            }
            let default = default_value(name);
            entry(config, name, config_type, value, default)
        })
        .collect();
    for (name, config_type, default) in KAFKA_DEFAULTS {
        let default = default.map(str::to_owned);
        let value = set_synonyms(config, &[name])
            .next()
            .and_then(|set| set.value)
            .or(default.clone());
        entries.push(entry(config, name, *config_type, value, default));
    }
    // Dynamic settings of no listed name (a plugin's, a security one):
    // listed as set, as Kafka lists them.
    for name in config
        .dynamic_broker
        .keys()
        .chain(config.dynamic_default.keys())
    {
        let synonyms: Vec<Synonym> = set_synonyms(config, &[name.as_str()]).collect();
        let value = synonyms.first().and_then(|set| set.value.clone());
        let config_type = broker_config_type(name).unwrap_or(ConfigType::Unknown);
        entries.push(with_default(name, value, config_type, synonyms, None));
    }
    // Stable: a name listed above keeps its first entry.
    entries.sort_by(|left, right| left.name.cmp(&right.name));
    entries.dedup_by(|later, earlier| later.name == earlier.name);
    entries
}

/// The settings that say where this broker listens and keeps its data,
/// with Kafka's defaults. However they were given (the file, `--listen`,
/// `--data-dir`, or Brook's defaults when nothing was), they are the
/// broker's static settings, as a Kafka broker's `server.properties` always
/// gives them: STATIC_BROKER_CONFIG with the value in force.
const IDENTITY: &[(&str, Option<&str>)] = &[
    ("advertised.listeners", None),
    ("listeners", Some("PLAINTEXT://:9092")),
    ("log.dir", Some("/tmp/kafka-logs")),
    ("log.dirs", None),
];

fn identity_entry(name: &str, value: Option<String>, kafka_default: Option<String>) -> ConfigEntry {
    let given = Synonym {
        name: name.to_owned(),
        value: value.clone(),
        source: ConfigSource::StaticBroker,
    };
    with_default(name, value, Text, vec![given], kafka_default)
}

/// The entry of `name` whose set values are `synonyms`, with `default`
/// as its last synonym when it has one; read-only unless Kafka can change
/// it dynamically.
fn with_default(
    name: &str,
    value: Option<String>,
    config_type: ConfigType,
    mut synonyms: Vec<Synonym>,
    default: Option<String>,
) -> ConfigEntry {
    if default.is_some() {
        synonyms.push(Synonym {
            name: name.to_owned(),
            value: default,
            source: ConfigSource::Default,
        });
    }
    let read_only = !is_dynamic_in_kafka(name);
    ConfigEntry::from_synonyms(name, value, config_type, read_only, synonyms)
}

/// What Brook runs with when nothing sets `name`.
fn default_value(name: &str) -> Option<String> {
    let defaults = BrokerConfig::default();
    let identity = BrokerIdentity::default();
    brook_values(&defaults, &identity)
        .into_iter()
        .find(|(known, _, _)| *known == name)
        .map(|(_, _, value)| value)
        .or_else(|| {
            TOPIC_CONFIGS
                .iter()
                .find(|topic| topic.broker_name() == Some(name))
                .map(|topic| effective_value(&LogConfig::default(), topic.topic))
        })
        .flatten()
}

fn entry(
    config: &BrokerConfig,
    name: &'static str,
    config_type: ConfigType,
    value: Option<String>,
    default: Option<String>,
) -> ConfigEntry {
    let synonyms = set_synonyms(config, &[name]).collect();
    with_default(name, value, config_type, synonyms, default)
}

/// The cluster-wide default resource (an empty broker name): the dynamic
/// defaults set, each with its synonyms below the per-broker level (as
/// Kafka describes it).
pub fn default_entries(config: &BrokerConfig) -> Vec<ConfigEntry> {
    config
        .dynamic_default
        .iter()
        .map(|(name, value)| {
            let synonyms = set_synonyms(config, &[name.as_str()])
                .filter(|synonym| synonym.source != ConfigSource::DynamicBroker)
                .collect();
            let config_type = broker_config_type(name).unwrap_or(ConfigType::Unknown);
            let value = Some(value.clone());
            with_default(name, value, config_type, synonyms, default_value(name))
        })
        .collect()
}

/// Every Kafka broker config name Brook knows, with its type.
fn known_names() -> impl Iterator<Item = (&'static str, ConfigType)> {
    let identity = BrokerIdentity::default();
    brook_values(&BrokerConfig::default(), &identity)
        .into_iter()
        .map(|(name, config_type, _)| (name, config_type))
        .chain(
            KAFKA_DEFAULTS
                .iter()
                .map(|(name, config_type, _)| (*name, *config_type)),
        )
        .chain(TOPIC_CONFIGS.iter().flat_map(|topic| {
            topic
                .broker
                .iter()
                .map(move |name| (*name, topic.config_type))
        }))
        .chain(
            node_config::SETTINGS
                .iter()
                .chain(endpoints::SETTINGS)
                .map(|name| (*name, Text)),
        )
}

/// The type of the Kafka broker config `name`, if it is one.
pub fn broker_config_type(name: &str) -> Option<ConfigType> {
    known_names()
        .find(|(known, _)| *known == name)
        .map(|(_, config_type)| config_type)
}

/// Whether `name` is a Kafka broker config (not a custom one).
pub fn is_broker_config(name: &str) -> bool {
    broker_config_type(name).is_some()
}

/// The value a topic default's broker-level `name` has in `config`.
pub fn topic_default_value(config: &BrokerConfig, name: &str) -> Option<String> {
    let topic = TOPIC_CONFIGS
        .iter()
        .find(|topic| topic.broker_name() == Some(name))?;
    effective_value(&config.log_defaults, topic.topic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::broker_config::parse_properties;

    fn identity() -> BrokerIdentity {
        BrokerIdentity {
            listen: "PLAINTEXT://127.0.0.1:9092".into(),
            advertised: "PLAINTEXT://localhost:9092".into(),
            log_dirs: "/data,/disk2".into(),
        }
    }

    #[test]
    fn every_kafka_key_a_client_reads_is_there_with_its_source() {
        let text = "num.partitions=3\nlog.retention.ms=1000\nnum.io.threads=16\n";
        let config = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        let entries = broker_entries(&config, &identity());
        let find = |name: &str| {
            entries
                .iter()
                .find(|entry| entry.name == name)
                .unwrap_or_else(|| panic!("{name} is missing"))
        };
        for name in [
            "default.replication.factor",
            "group.initial.rebalance.delay.ms",
            "offsets.topic.num.partitions",
            "transaction.state.log.replication.factor",
            "log.retention.hours",
        ] {
            assert!(find(name).read_only, "{name}");
        }
        // What Kafka can change dynamically is not read-only.
        for name in [
            "advertised.listeners",
            "listeners",
            "min.insync.replicas",
            "compression.type",
            "log.message.timestamp.after.max.ms",
            "unclean.leader.election.enable",
            "log.preallocate",
            "num.io.threads",
        ] {
            assert!(!find(name).read_only, "{name}");
        }
        assert!(entries.len() > 150, "{} configs", entries.len());
        let partitions = find("num.partitions");
        assert_eq!(
            (partitions.value.as_deref(), partitions.source),
            (Some("3"), ConfigSource::StaticBroker)
        );
        assert_eq!(partitions.synonyms[1].value.as_deref(), Some("1"));
        let retention = find("log.retention.ms");
        assert_eq!(
            (retention.value.as_deref(), retention.source),
            (Some("1000"), ConfigSource::StaticBroker)
        );
        let replication = find("default.replication.factor");
        assert_eq!(
            (replication.value.as_deref(), replication.source),
            (Some("1"), ConfigSource::Default)
        );
        assert_eq!(find("num.io.threads").value.as_deref(), Some("16"));
        let advertised = find("advertised.listeners");
        assert_eq!(
            (advertised.value.as_deref(), advertised.source),
            (
                Some("PLAINTEXT://localhost:9092"),
                ConfigSource::StaticBroker
            )
        );
        assert_eq!(find("broker.rack").value, None);
        // Every log directory (JBOD); `log.dir` is one, the first.
        assert_eq!(find("log.dirs").value.as_deref(), Some("/data,/disk2"));
        assert_eq!(find("log.dir").value.as_deref(), Some("/data"));
        let mut names: Vec<&str> = entries.iter().map(|entry| entry.name.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), entries.len(), "names are unique");
    }

    /// A dynamic config is its entry's source, above the file's and the
    /// default (Kafka's synonym order); the default resource lists the
    /// cluster-wide ones only.
    #[test]
    fn dynamic_configs_are_sources_in_kafkas_order() {
        use crate::cluster::broker_dynamic::{DynamicConfigs, effective};
        let text = "broker.id=1\nmessage.max.bytes=1000\n";
        let base = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        let dynamic: DynamicConfigs = [
            (
                String::new(),
                [
                    ("message.max.bytes".to_owned(), "2000".to_owned()),
                    ("log.retention.ms".to_owned(), "5000".to_owned()),
                ]
                .into(),
            ),
            (
                "1".to_owned(),
                [("message.max.bytes".to_owned(), "3000".to_owned())].into(),
            ),
        ]
        .into();
        let config = effective(&base, &dynamic);
        let entries = broker_entries(&config, &identity());
        let find = |name: &str| entries.iter().find(|entry| entry.name == name).unwrap();
        let message = find("message.max.bytes");
        assert_eq!(message.value.as_deref(), Some("3000"));
        let sources: Vec<(ConfigSource, Option<&str>)> = message
            .synonyms
            .iter()
            .map(|synonym| (synonym.source, synonym.value.as_deref()))
            .collect();
        assert_eq!(
            sources,
            [
                (ConfigSource::DynamicBroker, Some("3000")),
                (ConfigSource::DynamicDefaultBroker, Some("2000")),
                (ConfigSource::StaticBroker, Some("1000")),
                (ConfigSource::Default, Some("1048588")),
            ]
        );
        assert_eq!(message.source, ConfigSource::DynamicBroker);
        assert_eq!(
            find("log.retention.ms").source,
            ConfigSource::DynamicDefaultBroker
        );
        let defaults = default_entries(&config);
        let names: Vec<&str> = defaults.iter().map(|entry| entry.name.as_str()).collect();
        assert_eq!(names, ["log.retention.ms", "message.max.bytes"]);
        let mut custom = dynamic.clone();
        custom
            .get_mut("1")
            .unwrap()
            .insert("cleanup.policy".into(), "delete".into());
        let entries = broker_entries(&effective(&base, &custom), &identity());
        let custom = entries
            .iter()
            .find(|entry| entry.name == "cleanup.policy")
            .unwrap();
        assert_eq!(
            (custom.value.as_deref(), custom.source),
            (Some("delete"), ConfigSource::DynamicBroker)
        );
        assert_eq!(defaults[1].value.as_deref(), Some("2000"));
        assert_eq!(defaults[1].source, ConfigSource::DynamicDefaultBroker);
    }
}
