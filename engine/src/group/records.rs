//! `__consumer_offsets` records (being written).
