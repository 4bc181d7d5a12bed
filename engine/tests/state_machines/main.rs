//! Black-box tests of the engine's state machines (groups, transactions,
//! a partition's producer state), driven from outside the crate as the
//! runtime drives them. One test binary with a module per area rather than
//! one per file, because every test binary is compiled and linked on its
//! own.
//!
//! `checkpoint_allocation` is still its own binary
//! (`tests/checkpoint_allocation.rs`): it measures allocations with a
//! global allocator, which would count these tests' allocations too.

mod group_coordinator;
mod group_txn_offsets;
mod transactions_partition;
mod txn_coordinator;
