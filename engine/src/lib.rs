//! Brook's deterministic core.
//!
//! Everything that *decides* lives here: on-disk and wire formats, lookups,
//! recovery scans, roll and retention rules, and (later) the replica, group and
//! transaction state machines. Nothing here performs IO, reads a clock, spawns a
//! thread or depends on an async runtime: time and bytes come in as arguments and
//! decisions go out as values. That is what lets `brook-shards` drive the same
//! code with io_uring and lets tests drive it with nothing at all.

#![forbid(unsafe_code)]

pub mod cluster;
pub mod group;
pub mod log;
pub mod protocol;
pub mod replica;
pub mod txn;
pub mod types;
pub mod units;
