//! Brook's end-to-end tests: real `brook serve` processes, real files and
//! real clients. One test binary with a module per area rather than one per
//! file: each binary is linked on its own, with librdkafka, glommio and
//! kafka-protocol.
//!
//! Two are still binaries of their own, each saying why at its top:
//! `tests/consumer_groups/` (its latency test keeps the cores to itself
//! with a lock only its own binary's tests take) and `tests/broker_limits.rs`
//! (it lowers the whole process's open-file limit for a moment).

mod acks_visibility;
mod bench_named;
mod bench_workload;
mod broker_bad_input;
mod broker_clients;
mod broker_compaction;
mod broker_conformance;
mod broker_crash;
mod broker_fetch;
mod broker_produce_order;
mod broker_versions;
mod cli;
mod client_groups;
mod client_transactions;
mod cluster_controller_restart;
mod cluster_delete_records;
mod cluster_epochs;
mod cluster_java;
mod cluster_leader_balance;
mod cluster_list_offsets;
mod cluster_liveness;
mod cluster_partition;
mod cluster_placement;
mod cluster_producer_ids;
mod cluster_quorum;
mod cluster_replication;
mod cluster_topic_visibility;
mod cluster_transactions;
mod crash_recovery;
mod crash_restart;
mod dev_cluster;
mod dynamic_broker_configs;
mod exactly_once;
mod fetch_from_follower;
mod fetch_prepared;
mod fetch_sessions;
mod franz_go;
mod fresh_machine;
mod full_disk;
mod group_admin;
mod group_offsets;
mod group_protocol;
mod group_static_members;
mod idempotent_producer;
mod java_client;
mod java_transactions;
mod kafka_log_format;
mod kafka_tools;
mod kcat_quickstart;
mod log_dirs;
mod metrics;
mod old_clients;
mod one_node_upgrade;
mod transactions;
mod transactions_protocol;
