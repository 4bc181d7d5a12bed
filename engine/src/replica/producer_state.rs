//! Idempotent producers per partition (being written).
