//! Brook's measurements.
//!
//! Each benchmark runs Brook's real code (the storage engine, the broker
//! over the wire) next to a reference measured in the same run
//! on the same machine — the raw device, the raw syscall — so every number
//! comes with the ceiling it should be judged against, not a figure from
//! another day or another disk.
//!
//! [`allocator`] counts live heap bytes; the `brook-bench` binary (which
//! `brook bench` runs) installs it as the global allocator so memory figures
//! come from the allocator itself rather than from each type's own
//! estimate. Nothing in the broker depends on this crate.
//!
//! - [`log`]: the storage engine alone (`brook bench log`).
//! - [`ceiling`]: the machine's limits (`brook bench ceiling`).
//! - [`workload`]: a Kafka load generator (`brook bench run custom`) on
//!   Brook's own client (`brook_shards::client`); `brook_launch` starts
//!   the broker it measures.
//! - [`named`]: the workloads behind the performance bar (`brook bench run
//!   throughput`, …).

pub mod allocator;
pub mod ceiling;
pub mod log;
pub mod named;
pub mod workload;
