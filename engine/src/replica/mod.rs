//! What one partition replica decides beyond its log's bytes: idempotent
//! producers' state (sequence numbers, epochs, deduplication), transactions'
//! index, and replication: the high watermark,
//! the ISR a leader proposes, and where a follower truncates; and which
//! replica a consumer reads from (KIP-392).

pub mod divergence;
pub mod follower;
pub mod producer_state;
pub mod read_replica;
pub mod replication;
pub mod sim;
pub mod txn_index;
