//! The broker's settings, read from a Kafka `server.properties`-style file
//! with Kafka's names; every setting has Kafka's default, so no file is needed.

use std::collections::BTreeMap;

use crate::cluster::endpoints;
use crate::cluster::node_config::{self, ClusterSettings};
use crate::cluster::topic_config::by_broker_name;
use crate::group::state::GroupSettings;
use crate::log::compaction::CleanerSettings;
use crate::log::config::{ConfigError, LogConfig};
use crate::protocol::frame::SOCKET_REQUEST_MAX_BYTES_DEFAULT;
use crate::replica::read_replica::ReplicaSelector;
use crate::txn::config::TransactionConfig;

/// Kafka's default of `offsets.topic.replication.factor` and
/// `transaction.state.log.replication.factor`.
pub const INTERNAL_TOPIC_REPLICATION_FACTOR_DEFAULT: i16 = 3;
/// Kafka's `replica.fetch.wait.max.ms` default, which Brook's fetchers
/// always use: how long a leader holds a replica fetch that finds nothing.
pub const REPLICA_FETCH_WAIT_MAX_MS: u64 = 500;
/// Kafka's default of `socket.send.buffer.bytes`.
pub const SOCKET_SEND_BUFFER_BYTES_DEFAULT: u32 = 102_400;
/// Default of `log.flush.offset.checkpoint.interval.ms` in Brook.
pub const CHECKPOINT_INTERVAL_MS_DEFAULT: u64 = 2_000;

/// Kafka settings Brook accepts and has no use for, each with why: they
/// tune machinery a thread-per-core broker does not have. A Kafka
/// `server.properties` sets several of them (its stock file does), so
/// they are not reported as unknown; README lists them.
pub const NO_EFFECT: &[(&str, &str)] = &[
    (
        "num.network.threads",
        "each shard accepts and serves its own connections; no network thread pool",
    ),
    (
        "num.io.threads",
        "each shard handles its own requests; no request handler pool",
    ),
    (
        "num.replica.fetchers",
        "each shard runs one fetcher per leader broker",
    ),
    (
        "num.recovery.threads.per.data.dir",
        "each shard recovers the logs it owns, in parallel with the others",
    ),
    (
        "background.threads",
        "background work runs on the shards that own it",
    ),
    (
        "queued.max.requests",
        "no request queue between network and handler threads",
    ),
    (
        "share.coordinator.state.topic.replication.factor",
        "share groups (KIP-932) are not served",
    ),
    (
        "share.coordinator.state.topic.min.isr",
        "share groups (KIP-932) are not served",
    ),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `broker.id` (0).
    pub broker_id: i32,
    /// `num.partitions` (1): partitions of an auto-created topic.
    pub num_partitions: u32,
    /// `auto.create.topics.enable` (true).
    pub auto_create_topics_enable: bool,
    /// `socket.request.max.bytes` (100 MiB).
    pub socket_request_max_bytes: usize,
    /// `socket.send.buffer.bytes` (Kafka's 100 KiB): SO_SNDBUF of every
    /// accepted connection; `None` (-1) keeps the kernel's autotuning.
    /// Kafka's bound matters on loopback: with an autotuned buffer of
    /// megabytes, segments of 8 MB Fetch responses reached the reader out
    /// of order and TCP retransmitted 50-60 of them in every 2 GB kcat read
    /// (`nstat` TcpRetransSegs, TCPSACKReorder), with BBR pacing the
    /// connection down after; with 100 KiB, none.
    pub socket_send_buffer_bytes: Option<u32>,
    /// `socket.receive.buffer.bytes`: SO_RCVBUF of every accepted
    /// connection; `None` (-1, Brook's default) keeps the kernel's
    /// autotuning, which took 1 MiB produce batches faster than Kafka's
    /// 100 KiB did.
    pub socket_receive_buffer_bytes: Option<u32>,
    /// `fetch.max.bytes` (55 MiB): the most record bytes one Fetch response
    /// carries, whatever the request asks (beyond one batch, KIP-74).
    pub fetch_max_bytes: usize,
    /// `max.incremental.fetch.session.cache.slots` (1000): the most fetch
    /// sessions (KIP-227) the broker keeps, shared out among its shards;
    /// 0 turns sessions off.
    pub fetch_session_cache_slots: usize,
    /// `log.retention.check.interval.ms` (5 minutes).
    pub retention_check_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`: Brook syncs the logs and
    /// checkpoints their recovery points this often, 2 seconds by default
    /// (Kafka: 1 minute, with flushes only at segment roll), so that a crash
    /// rescans seconds of writes rather than whole active segments.
    pub checkpoint_interval_ms: u64,
    /// `replica.lag.time.max.ms` (30 s): a follower not caught up for this
    /// long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// `replica.socket.timeout.ms` (30 s): how long a follower's fetcher
    /// waits for a connection to its leader, or for the answer to a fetch,
    /// before it drops the connection and opens another. At least
    /// `replica.fetch.wait.max.ms`, as Kafka checks.
    pub replica_socket_timeout_ms: u64,
    /// `replica.selector.class` (not set): whether a leader sends a
    /// consumer that names its rack to a replica of that rack (KIP-392).
    pub replica_selector: ReplicaSelector,
    /// Topic defaults from the `log.*` names (`log.segment.bytes`, …).
    pub log_defaults: LogConfig,
    /// `log.cleaner.enable`, `log.cleaner.backoff.ms` and
    /// `log.cleaner.dedupe.buffer.size`: the log cleaner of compacted topics.
    pub cleaner: CleanerSettings,
    /// The group coordinator's `group.*` and `offset*` settings.
    pub groups: GroupSettings,
    /// `offsets.topic.num.partitions` (50): partitions of `__consumer_offsets`
    /// when it is created.
    pub offsets_topic_partitions: i32,
    /// `offsets.topic.segment.bytes` (100 MiB).
    pub offsets_topic_segment_bytes: u64,
    /// `offsets.retention.check.interval.ms` (10 minutes).
    pub offsets_retention_check_interval_ms: u64,
    /// `offsets.commit.timeout.ms` (5 s): how long a commit waits for its
    /// write to become durable.
    pub offsets_commit_timeout_ms: u64,
    /// The transaction coordinator's `transaction.*` settings.
    pub transactions: TransactionConfig,
    /// `offsets.topic.replication.factor` and
    /// `transaction.state.log.replication.factor` (3 each): the replicas of
    /// `__consumer_offsets` and `__transaction_state` in a cluster. Brook
    /// creates them with fewer when the cluster has fewer brokers (Kafka
    /// refuses until it has enough), so a cluster of one or two works.
    pub offsets_topic_replication_factor: i16,
    pub transaction_state_log_replication_factor: i16,
    /// The node's place in a cluster (`controller.quorum.voters` and the
    /// KRaft settings around it) as configured; `None`: a cluster of its
    /// own, which the broker runs as [`ClusterSettings::alone`].
    pub cluster: Option<ClusterSettings>,
    /// Settings Brook does not know; the caller logs them (as Kafka does).
    pub unknown: Vec<String>,
    /// Every setting as given (file, then `--set`), known or not: what
    /// DescribeConfigs reports as STATIC_BROKER_CONFIG.
    pub given: BTreeMap<String, String>,
    /// The dynamic configs (KIP-226) in force over `given`: the cluster-wide
    /// default's and this broker's own ([`crate::cluster::broker_dynamic`]).
    pub dynamic_default: BTreeMap<String, String>,
    pub dynamic_broker: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> BrokerConfig {
        BrokerConfig {
            broker_id: 0,
            num_partitions: 1,
            auto_create_topics_enable: true,
            socket_request_max_bytes: SOCKET_REQUEST_MAX_BYTES_DEFAULT,
            socket_send_buffer_bytes: Some(SOCKET_SEND_BUFFER_BYTES_DEFAULT),
            socket_receive_buffer_bytes: None,
            fetch_max_bytes: 57_671_680,
            fetch_session_cache_slots: 1_000,
            retention_check_interval_ms: 300_000,
            checkpoint_interval_ms: CHECKPOINT_INTERVAL_MS_DEFAULT,
            replica_lag_time_max_ms: crate::replica::replication::REPLICA_LAG_TIME_MAX_MS_DEFAULT,
            replica_socket_timeout_ms: 30_000,
            replica_selector: ReplicaSelector::LeaderOnly,
            log_defaults: LogConfig::default(),
            cluster: None,
            cleaner: CleanerSettings::default(),
            groups: GroupSettings::default(),
            offsets_topic_partitions: 50,
            offsets_topic_segment_bytes: 104_857_600,
            offsets_retention_check_interval_ms: 600_000,
            offsets_commit_timeout_ms: 5_000,
            transactions: TransactionConfig::default(),
            offsets_topic_replication_factor: INTERNAL_TOPIC_REPLICATION_FACTOR_DEFAULT,
            transaction_state_log_replication_factor: INTERNAL_TOPIC_REPLICATION_FACTOR_DEFAULT,
            unknown: Vec::new(),
            given: BTreeMap::new(),
            dynamic_default: BTreeMap::new(),
            dynamic_broker: BTreeMap::new(),
        }
    }
}

/// What a socket buffer size may be.
const SOCKET_BUFFER_RANGE: &str = "must be -1 (the kernel's default) or a positive 32-bit integer";

/// A socket buffer size as Kafka reads it: -1 is the kernel's default
/// (`None`), a positive size is the size; anything else is invalid.
fn socket_buffer(number: i64) -> Option<Option<u32>> {
    match number {
        -1 => Some(None),
        1..=0x7fff_ffff => Some(Some(number as u32)),
        _ => None,
    }
}

/// Splits properties text into `(key, value)` pairs (Java `Properties` rules
/// for the forms Kafka's files use: `key=value`, `key: value`, `#`/`!` comments).
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| {
            let split = line.find(['=', ':'])?;
            Some((
                line[..split].trim().to_owned(),
                line[split + 1..].trim().to_owned(),
            ))
        })
        .collect()
}

impl BrokerConfig {
    /// Whether `name` was set: given (file, `--set`) or dynamically.
    pub fn is_set(&self, name: &str) -> bool {
        self.given.contains_key(name)
            || self.dynamic_default.contains_key(name)
            || self.dynamic_broker.contains_key(name)
    }

    /// Applies `server.properties`-style settings over the defaults.
    pub fn from_properties(settings: &[(String, String)]) -> Result<BrokerConfig, ConfigError> {
        let mut config = BrokerConfig {
            given: settings.iter().cloned().collect(),
            ..BrokerConfig::default()
        };
        let mut topic_level = Vec::new();
        // Kafka's precedence for time settings: ms over minutes over hours.
        let mut retention = (None, None, None);
        let mut roll = (None, None);
        for (key, value) in settings {
            let invalid = |reason| ConfigError::Invalid {
                name: key.clone(),
                value: value.clone(),
                reason,
            };
            let number = || value.parse::<i64>().map_err(|_| invalid("not an integer"));
            let non_negative = |number: i64| {
                if number < 0 {
                    Err(invalid("must not be negative"))
                } else {
                    Ok(number)
                }
            };
            let replication_factor = |number: i64| {
                i16::try_from(number)
                    .ok()
                    .filter(|factor| *factor > 0)
                    .ok_or_else(|| invalid("must be between 1 and 32767"))
            };
            let positive_i32 = |number: i64| {
                i32::try_from(number)
                    .ok()
                    .filter(|number| *number > 0)
                    .ok_or(invalid("must be a positive 32-bit integer"))
            };
            match key.as_str() {
                "broker.id" | "node.id" => config.broker_id = number()? as i32,
                "num.partitions" => {
                    config.num_partitions = u32::try_from(number()?)
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(invalid("must be positive"))?
                }
                "auto.create.topics.enable" => {
                    config.auto_create_topics_enable = value
                        .parse()
                        .map_err(|_| invalid("expected true or false"))?
                }
                "socket.request.max.bytes" => {
                    config.socket_request_max_bytes = usize::try_from(number()?)
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(invalid("must be positive"))?
                }
                "socket.send.buffer.bytes" => {
                    config.socket_send_buffer_bytes =
                        socket_buffer(number()?).ok_or(invalid(SOCKET_BUFFER_RANGE))?
                }
                "socket.receive.buffer.bytes" => {
                    config.socket_receive_buffer_bytes =
                        socket_buffer(number()?).ok_or(invalid(SOCKET_BUFFER_RANGE))?
                }
                "fetch.max.bytes" => {
                    config.fetch_max_bytes = usize::try_from(number()?)
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(invalid("must be positive"))?
                }
                "max.incremental.fetch.session.cache.slots" => {
                    config.fetch_session_cache_slots = usize::try_from(non_negative(number()?)?)
                        .map_err(|_| invalid("must fit the platform's size"))?
                }
                "log.retention.check.interval.ms" => {
                    config.retention_check_interval_ms =
                        u64::try_from(number()?).map_err(|_| invalid("must not be negative"))?
                }
                "log.flush.offset.checkpoint.interval.ms" => {
                    config.checkpoint_interval_ms =
                        u64::try_from(number()?).map_err(|_| invalid("must not be negative"))?
                }
                "replica.lag.time.max.ms" => {
                    config.replica_lag_time_max_ms = u64::try_from(number()?)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .ok_or_else(|| invalid("must be positive"))?
                }
                "replica.socket.timeout.ms" => {
                    config.replica_socket_timeout_ms = u64::try_from(number()?)
                        .ok()
                        .filter(|ms| *ms >= REPLICA_FETCH_WAIT_MAX_MS)
                        .ok_or_else(|| {
                            invalid("must be at least replica.fetch.wait.max.ms (500)")
                        })?
                }
                "replica.selector.class" => {
                    config.replica_selector =
                        ReplicaSelector::from_class_name(value).ok_or(invalid(
                            "no such replica selector: Brook has \
                             org.apache.kafka.common.replica.RackAwareReplicaSelector",
                        ))?
                }
                "log.cleaner.enable" => {
                    config.cleaner.enabled = value
                        .parse()
                        .map_err(|_| invalid("expected true or false"))?
                }
                "log.cleaner.backoff.ms" => {
                    config.cleaner.backoff_ms =
                        u64::try_from(number()?).map_err(|_| invalid("must not be negative"))?
                }
                "log.cleaner.dedupe.buffer.size" => {
                    config.cleaner.dedupe_buffer_bytes = u64::try_from(number()?)
                        .ok()
                        .filter(|bytes| *bytes > 0)
                        .ok_or(invalid("must be positive"))?
                }
                "group.initial.rebalance.delay.ms" => {
                    config.groups.initial_rebalance_delay_ms = non_negative(number()?)?
                }
                "group.min.session.timeout.ms" => {
                    config.groups.session_timeout_min_ms = positive_i32(number()?)?
                }
                "group.max.session.timeout.ms" => {
                    config.groups.session_timeout_max_ms = positive_i32(number()?)?
                }
                "group.max.size" => {
                    config.groups.group_size_max = usize::try_from(positive_i32(number()?)?)
                        .unwrap_or(usize::MAX)
                        .min(crate::group::state::GROUP_SIZE_MAX)
                }
                "offsets.retention.minutes" => {
                    config.groups.offsets_retention_ms =
                        positive_i32(number()?).map(|minutes| i64::from(minutes) * 60_000)?
                }
                "offset.metadata.max.bytes" => {
                    config.groups.offset_metadata_bytes_max = non_negative(number()?)? as usize
                }
                "offsets.topic.num.partitions" => {
                    config.offsets_topic_partitions = positive_i32(number()?)?
                }
                "offsets.topic.segment.bytes" => {
                    config.offsets_topic_segment_bytes = positive_i32(number()?)? as u64
                }
                "offsets.retention.check.interval.ms" => {
                    config.offsets_retention_check_interval_ms = positive_i32(number()?)? as u64
                }
                "offsets.commit.timeout.ms" => {
                    config.offsets_commit_timeout_ms = positive_i32(number()?)? as u64
                }
                "transaction.max.timeout.ms" => {
                    config.transactions.transaction_max_timeout_ms = positive_i32(number()?)?
                }
                "transactional.id.expiration.ms" => {
                    config.transactions.transactional_id_expiration_ms =
                        i64::from(positive_i32(number()?)?)
                }
                "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                    config
                        .transactions
                        .abort_timed_out_transaction_cleanup_interval_ms =
                        i64::from(positive_i32(number()?)?)
                }
                "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                    config
                        .transactions
                        .remove_expired_transaction_cleanup_interval_ms =
                        i64::from(positive_i32(number()?)?)
                }
                "offsets.topic.replication.factor" => {
                    config.offsets_topic_replication_factor = replication_factor(number()?)?
                }
                "transaction.state.log.replication.factor" => {
                    config.transaction_state_log_replication_factor = replication_factor(number()?)?
                }
                "transaction.state.log.num.partitions" => {
                    config.transactions.state_log_num_partitions = positive_i32(number()?)?
                }
                "transaction.state.log.min.isr" => {
                    config.transactions.state_log_min_isr = positive_i32(number()?)?
                }
                "transaction.state.log.segment.bytes" => {
                    config.transactions.state_log_segment_bytes = positive_i32(number()?)?
                }
                "log.retention.ms" => retention.0 = Some(number()?),
                "log.retention.minutes" => retention.1 = Some(number()?),
                "log.retention.hours" => retention.2 = Some(number()?),
                "log.roll.ms" => roll.0 = Some(number()?),
                "log.roll.hours" => roll.1 = Some(number()?),
                known
                    if node_config::SETTINGS.contains(&known)
                        || endpoints::SETTINGS.contains(&known)
                        || NO_EFFECT.iter().any(|(name, _)| *name == known) => {}
                broker => match by_broker_name(broker) {
                    Some(name) => topic_level.push((name.topic, value.as_str())),
                    None => config.unknown.push(key.clone()),
                },
            }
        }
        // A count of minutes or hours too large for milliseconds is refused,
        // not wrapped (a wrapped negative would mean "keep forever").
        let in_ms = |setting: Option<i64>, key: &str, unit: i64| {
            setting
                .map(|count| {
                    count.checked_mul(unit).ok_or(ConfigError::Invalid {
                        name: key.to_owned(),
                        value: count.to_string(),
                        reason: "too large",
                    })
                })
                .transpose()
        };
        let retention_ms = retention
            .0
            .or(in_ms(retention.1, "log.retention.minutes", 60_000)?)
            .or(in_ms(retention.2, "log.retention.hours", 3_600_000)?);
        let retention_ms = retention_ms.map(|ms| {
            if ms < 0 {
                "-1".to_owned()
            } else {
                ms.to_string()
            }
        });
        let roll_ms = roll
            .0
            .or(in_ms(roll.1, "log.roll.hours", 3_600_000)?)
            .map(|ms| ms.to_string());
        let mut log_settings: Vec<(&str, &str)> = topic_level;
        if let Some(ms) = retention_ms.as_deref() {
            log_settings.push(("retention.ms", ms));
        }
        if let Some(ms) = roll_ms.as_deref() {
            log_settings.push(("segment.ms", ms));
        }
        config.log_defaults = LogConfig::default().with_overrides(log_settings)?;
        config.cluster = ClusterSettings::parse(&config.given)?;
        match &config.cluster {
            Some(cluster) => config.broker_id = cluster.node.0,
            // Checked here, as a quorum's are: the settings it runs alone with.
            None => drop(ClusterSettings::alone(
                &config.given,
                crate::types::BrokerId(config.broker_id),
                0,
                "",
            )?),
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_properties_set_broker_and_topic_defaults() {
        let text = "# a comment\nnum.partitions=8\nauto.create.topics.enable = false\nlog.segment.bytes: 1048576\n\
                    log.retention.hours=1\nmessage.max.bytes=2000000\nzookeeper.connect=localhost:2181\n";
        let config = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        assert_eq!(config.num_partitions, 8);
        assert!(!config.auto_create_topics_enable);
        assert_eq!(config.log_defaults.segment_bytes, 1 << 20);
        assert_eq!(config.log_defaults.retention_ms, Some(3_600_000));
        assert_eq!(config.log_defaults.max_message_bytes, 2_000_000);
        assert_eq!(config.unknown, vec!["zookeeper.connect".to_owned()]);
    }

    #[test]
    fn cleaner_settings_have_kafkas_names_and_defaults() {
        let defaults = BrokerConfig::default().cleaner;
        assert!(defaults.enabled);
        assert_eq!(defaults.backoff_ms, 15_000);
        assert_eq!(defaults.dedupe_buffer_bytes, 134_217_728);
        let text = "log.cleaner.enable=false\nlog.cleaner.backoff.ms=100\n\
                    log.cleaner.dedupe.buffer.size=1048576\nlog.cleaner.min.cleanable.ratio=0.1\n\
                    log.cleaner.delete.retention.ms=5\nlog.cleaner.min.compaction.lag.ms=7\n\
                    log.cleaner.max.compaction.lag.ms=9\n";
        let config = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        assert!(!config.cleaner.enabled);
        assert_eq!(config.cleaner.backoff_ms, 100);
        assert_eq!(config.cleaner.dedupe_buffer_bytes, 1 << 20);
        let log = &config.log_defaults;
        assert_eq!(log.min_cleanable_dirty_ratio.get(), 0.1);
        assert_eq!(
            (
                log.delete_retention_ms,
                log.min_compaction_lag_ms,
                log.max_compaction_lag_ms
            ),
            (5, 7, 9)
        );
        assert!(config.unknown.is_empty());
        let refused = parse_properties("log.cleaner.dedupe.buffer.size=0");
        assert!(BrokerConfig::from_properties(&refused).is_err());
    }

    #[test]
    fn group_settings_have_kafkas_names_and_defaults() {
        let defaults = BrokerConfig::default();
        assert_eq!(defaults.groups.initial_rebalance_delay_ms, 3_000);
        assert_eq!(defaults.offsets_topic_partitions, 50);
        let text = "group.initial.rebalance.delay.ms=0\ngroup.min.session.timeout.ms=500\n\
                    offsets.topic.num.partitions=3\noffsets.retention.minutes=2\n";
        let config = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        assert_eq!(config.groups.initial_rebalance_delay_ms, 0);
        assert_eq!(config.groups.session_timeout_min_ms, 500);
        assert_eq!(config.offsets_topic_partitions, 3);
        assert_eq!(config.groups.offsets_retention_ms, 120_000);
        assert!(config.unknown.is_empty());
        let refused = parse_properties("offsets.topic.num.partitions=0");
        assert!(BrokerConfig::from_properties(&refused).is_err());
    }

    #[test]
    fn replica_socket_timeout_is_kafkas_and_at_least_the_fetch_wait() {
        assert_eq!(BrokerConfig::default().replica_socket_timeout_ms, 30_000);
        let config =
            BrokerConfig::from_properties(&parse_properties("replica.socket.timeout.ms=2000"));
        assert_eq!(config.unwrap().replica_socket_timeout_ms, 2_000);
        for refused in [
            "replica.socket.timeout.ms=499",
            "replica.socket.timeout.ms=-1",
        ] {
            let error = BrokerConfig::from_properties(&parse_properties(refused)).unwrap_err();
            assert!(
                matches!(&error, ConfigError::Invalid { name, .. } if name == "replica.socket.timeout.ms"),
                "{refused}: {error:?}"
            );
        }
    }

    #[test]
    fn socket_buffers_are_kafkas_send_size_and_the_kernels_receive_size_or_as_set() {
        let defaults = BrokerConfig::default();
        assert_eq!(defaults.socket_send_buffer_bytes, Some(102_400));
        assert_eq!(defaults.socket_receive_buffer_bytes, None);
        let text = "socket.send.buffer.bytes=-1\nsocket.receive.buffer.bytes=65536\n";
        let config = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        assert_eq!(config.socket_send_buffer_bytes, None);
        assert_eq!(config.socket_receive_buffer_bytes, Some(65_536));
        assert!(config.unknown.is_empty());
        for refused in [
            "socket.send.buffer.bytes=0",
            "socket.send.buffer.bytes=-2",
            "socket.receive.buffer.bytes=2147483648",
        ] {
            let error = BrokerConfig::from_properties(&parse_properties(refused)).unwrap_err();
            let name = refused.split('=').next().unwrap();
            assert!(
                matches!(&error, ConfigError::Invalid { name: named, .. } if named == name),
                "{refused}: {error:?}"
            );
        }
    }

    #[test]
    fn replica_selector_is_kafkas_rack_aware_one_or_refused() {
        assert_eq!(
            BrokerConfig::default().replica_selector,
            ReplicaSelector::LeaderOnly
        );
        let text =
            "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector";
        let config = BrokerConfig::from_properties(&parse_properties(text)).unwrap();
        assert_eq!(config.replica_selector, ReplicaSelector::RackAware);
        assert!(config.unknown.is_empty());
        let unknown = "replica.selector.class=com.example.NearestReplicaSelector";
        let error = BrokerConfig::from_properties(&parse_properties(unknown)).unwrap_err();
        assert!(
            matches!(&error, ConfigError::Invalid { name, value, .. }
                if name == "replica.selector.class" && value == "com.example.NearestReplicaSelector"),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("RackAwareReplicaSelector"),
            "{error}"
        );
    }

    #[test]
    fn retention_ms_wins_over_hours_and_bad_values_are_named() {
        let settings = parse_properties("log.retention.hours=5\nlog.retention.ms=-1\n");
        assert_eq!(
            BrokerConfig::from_properties(&settings)
                .unwrap()
                .log_defaults
                .retention_ms,
            None
        );
        let error =
            BrokerConfig::from_properties(&parse_properties("num.partitions=zero")).unwrap_err();
        assert!(matches!(error, ConfigError::Invalid { name, .. } if name == "num.partitions"));
        let error = BrokerConfig::from_properties(&parse_properties(
            "log.retention.hours=9000000000000000",
        ))
        .unwrap_err();
        assert!(
            matches!(error, ConfigError::Invalid { name, .. } if name == "log.retention.hours")
        );
        let config = BrokerConfig::from_properties(&parse_properties("fetch.max.bytes=1024"));
        assert_eq!(config.unwrap().fetch_max_bytes, 1024);
        let config = BrokerConfig::from_properties(&parse_properties(
            "max.incremental.fetch.session.cache.slots=0",
        ));
        assert_eq!(config.unwrap().fetch_session_cache_slots, 0);
        let error = BrokerConfig::from_properties(&parse_properties(
            "max.incremental.fetch.session.cache.slots=-1",
        ))
        .unwrap_err();
        assert!(matches!(error, ConfigError::Invalid { .. }));
    }
}
