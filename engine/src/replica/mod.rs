//! What one partition replica decides beyond its log's bytes: idempotent
//! producers' state (sequence numbers, epochs, deduplication), and later
//! transactions' last stable offset and replication's high watermark.

pub mod producer_state;
pub mod txn_index;
