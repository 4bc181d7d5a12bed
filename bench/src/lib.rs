//! Brook's measurements.
//!
//! Each benchmark runs Brook's real code (the storage engine today, the
//! broker over the wire later) next to a reference measured in the same run
//! on the same machine — the raw device, the raw syscall — so every number
//! comes with the ceiling it should be judged against, not a figure from
//! another day or another disk.
//!
//! [`allocator`] counts live heap bytes; the `brook` binary installs it as
//! the global allocator so memory figures come from the allocator itself
//! rather than from each type's own estimate.

pub mod allocator;
pub mod broker;
pub mod ceiling;
pub mod client;
pub mod log;
pub mod workload;
