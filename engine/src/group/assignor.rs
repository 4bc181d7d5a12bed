//! Partition assignors (being written).
