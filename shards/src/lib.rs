//! Brook's runtime: everything that waits on IO or time.
//!
//! `brook-engine` decides; this crate performs. It runs glommio executors (one
//! pinned per core), and owns the io_uring storage of partition logs. Later
//! it also holds the shard mesh, listeners and the Kafka client. glommio stays
//! behind this crate's own small API ([`runtime`], [`storage`]) so it could be
//! swapped for a fork without touching callers.

pub mod client;
pub mod logging;
pub mod net;
pub mod runtime;
pub mod server;
pub mod storage;
