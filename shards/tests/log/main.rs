//! Black-box tests of the partition log on real files, one module per
//! area. One test binary rather than one per file: each binary is linked
//! on its own, with glommio and kafka-protocol.
//!
//! `log_index_allocation` is still its own binary
//! (`tests/log_index_allocation.rs`): it measures allocations with a global
//! allocator, which would count these tests' allocations too.

#[path = "../common/mod.rs"]
mod common;

mod log_active_ranges;
mod log_bad_input;
mod log_close;
mod log_compaction;
mod log_delete;
mod log_disk_damage;
mod log_durability;
mod log_format;
mod log_producers;
mod log_recovery;
mod log_recovery_point;
mod log_replication;
mod log_retention;
mod log_roundtrip;
