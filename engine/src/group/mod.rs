//! Consumer groups: the classic rebalance protocol's coordinator state machine,
//! the records it persists in `__consumer_offsets`, and the client-side
//! partition assignors.
//!
//! The coordinator for group G is hosted by the shard that owns partition
//! `abs(javaStringHash(G)) % offsets.topic.num.partitions` of `__consumer_offsets`;
//! this module decides, that shard performs the IO.

pub mod assignor;
pub mod records;
