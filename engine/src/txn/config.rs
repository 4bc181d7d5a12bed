//! The transaction coordinator's broker configs, by Kafka's names and with
//! Kafka's defaults, parsed once into a validated, read-only struct.

use thiserror::Error;

/// Kafka's `transaction.*` broker configs that the coordinator uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionConfig {
    /// `transaction.max.timeout.ms` (15 minutes): InitProducerId refuses a
    /// longer `transaction.timeout.ms` with INVALID_TRANSACTION_TIMEOUT.
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms` (7 days): an idle id (Empty or
    /// Complete*) not updated for this long is expired with a tombstone.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (10 s):
    /// how often open transactions are checked against their timeout.
    pub abort_timed_out_transaction_cleanup_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (1 hour):
    /// how often idle ids are checked against their expiration.
    pub remove_expired_transaction_cleanup_interval_ms: i64,
    /// `transaction.state.log.num.partitions` (50): must not change once the
    /// topic exists, or ids would move to other partitions.
    pub state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor` (3).
    pub state_log_replication_factor: i16,
    /// `transaction.state.log.min.isr` (2).
    pub state_log_min_isr: i32,
    /// `transaction.state.log.segment.bytes` (100 MiB).
    pub state_log_segment_bytes: i32,
    /// `transaction.state.log.load.buffer.size` (5 MiB): how much the loader
    /// reads at a time.
    pub state_log_load_buffer_size: i32,
    /// The cluster's `transaction.version` feature level. 0 writes log values
    /// in version 0; 1 and up write the flexible version 1, as Kafka 4 does.
    /// The coordinator itself runs transactions v1's protocol (no epoch bump
    /// per transaction) whatever the level.
    pub transaction_version_level: i16,
}

impl Default for TransactionConfig {
    fn default() -> TransactionConfig {
        TransactionConfig {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            state_log_num_partitions: 50,
            state_log_replication_factor: 3,
            state_log_min_isr: 2,
            state_log_segment_bytes: 100 * 1024 * 1024,
            state_log_load_buffer_size: 5 * 1024 * 1024,
            transaction_version_level: 1,
        }
    }
}

/// A config value Kafka's `ConfigDef` would refuse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{name} must be at least 1, got {value}")]
pub struct ConfigError {
    pub name: &'static str,
    pub value: i64,
}

impl TransactionConfig {
    /// Checks every value against Kafka's `atLeast(1)` bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let values: [(&'static str, i64); 9] = [
            (
                "transaction.max.timeout.ms",
                self.transaction_max_timeout_ms.into(),
            ),
            (
                "transactional.id.expiration.ms",
                self.transactional_id_expiration_ms,
            ),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                self.abort_timed_out_transaction_cleanup_interval_ms,
            ),
            (
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                self.remove_expired_transaction_cleanup_interval_ms,
            ),
            (
                "transaction.state.log.num.partitions",
                self.state_log_num_partitions.into(),
            ),
            (
                "transaction.state.log.replication.factor",
                self.state_log_replication_factor.into(),
            ),
            (
                "transaction.state.log.min.isr",
                self.state_log_min_isr.into(),
            ),
            (
                "transaction.state.log.segment.bytes",
                self.state_log_segment_bytes.into(),
            ),
            (
                "transaction.state.log.load.buffer.size",
                self.state_log_load_buffer_size.into(),
            ),
        ];
        match values.into_iter().find(|(_, value)| *value < 1) {
            Some((name, value)) => Err(ConfigError { name, value }),
            None => Ok(()),
        }
    }

    /// The log value version this cluster writes (Kafka's
    /// `TransactionVersion.transactionLogValueVersion`).
    pub fn log_value_version(&self) -> i16 {
        if self.transaction_version_level >= 1 {
            1
        } else {
            0
        }
    }

    /// Whether a client's `transaction.timeout.ms` is acceptable (Kafka's
    /// `validateTransactionTimeoutMs`: positive and at most the maximum).
    pub fn is_valid_timeout(&self, timeout_ms: i32) -> bool {
        timeout_ms > 0 && timeout_ms <= self.transaction_max_timeout_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let config = TransactionConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.transaction_max_timeout_ms, 15 * 60 * 1000);
        assert_eq!(config.transactional_id_expiration_ms, 7 * 24 * 3600 * 1000);
        assert_eq!(config.state_log_num_partitions, 50);
        assert_eq!(config.log_value_version(), 1);
    }

    #[test]
    fn bounds_are_checked() {
        let config = TransactionConfig {
            state_log_num_partitions: 0,
            ..TransactionConfig::default()
        };
        assert_eq!(
            config.validate(),
            Err(ConfigError {
                name: "transaction.state.log.num.partitions",
                value: 0
            })
        );
        let config = TransactionConfig::default();
        for (timeout, valid) in [
            (0, false),
            (1, true),
            (900_000, true),
            (900_001, false),
            (-5, false),
        ] {
            assert_eq!(config.is_valid_timeout(timeout), valid, "{timeout}");
        }
        let old = TransactionConfig {
            transaction_version_level: 0,
            ..TransactionConfig::default()
        };
        assert_eq!(old.log_value_version(), 0);
    }
}
