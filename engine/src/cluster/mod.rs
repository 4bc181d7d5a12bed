//! The cluster's metadata model: topics, their ids, partitions and where each
//! partition lives, topic configs, and the broker's own settings; with the
//! rules that change them (placement, validation). Applied on the
//! controller shard, persisted there, and published to every shard as an
//! immutable image.

pub mod alter_partition;
pub mod broker_config;
pub mod broker_describe;
pub mod broker_dynamic;
pub mod cluster_image;
pub mod controller;
pub mod describe;
pub mod elections;
pub mod endpoints;
pub mod image;
pub mod manual_assignment;
pub mod migrate;
pub mod node_config;
pub mod peer_wire;
pub mod placement;
pub mod producer_ids;
pub mod quorum;
pub mod records;
pub mod settings_table;
pub mod sim;
pub mod topic_changes;
pub mod topic_config;
pub mod topic_pages;
pub mod visibility;
