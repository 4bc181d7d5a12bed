//! A one-node data directory written before a one-node broker ran a quorum
//! of its own (no metadata directory; its topics in `brook-metadata`, its
//! producer-id block in `brook-producer-ids`) becomes its quorum's first
//! snapshot ([`brook_engine::cluster::migrate`]) before the voter starts.

use std::path::Path;

use brook_engine::cluster::migrate::{first_snapshot, one_node_records};
use brook_engine::cluster::node_config::ClusterSettings;
use brook_engine::cluster::producer_ids::ProducerIdBlocks;

use super::disk;
use super::local_topics::load_image;
use crate::storage::StorageError;

/// The file a one-node broker kept its producer-id block end in.
pub const PRODUCER_IDS_FILE: &str = "brook-producer-ids";

/// Migrates `data_dir` when this node is its quorum's only voter and the
/// directory holds a one-node broker's topics or producer ids but no
/// metadata log; otherwise leaves it.
pub fn one_node_directory(data_dir: &Path, cluster: &ClusterSettings) -> Result<(), StorageError> {
    if !cluster.is_alone() || disk::exists(data_dir) {
        return Ok(());
    }
    let image = load_image(data_dir)?;
    let producer_ids_path = data_dir.join(PRODUCER_IDS_FILE);
    let next_producer_id = match std::fs::read_to_string(&producer_ids_path) {
        Ok(text) => Some(
            ProducerIdBlocks::decode(&text).ok_or_else(|| StorageError::Corrupt {
                path: producer_ids_path.clone(),
                reason: "not a producer id block end".to_owned(),
            })?,
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(StorageError::io("reading", &producer_ids_path, error)),
    };
    let records = one_node_records(&image, cluster.node, next_producer_id);
    if records.is_empty() {
        return Ok(());
    }
    let (hard_state, snapshot) = first_snapshot(cluster.node, &records);
    disk::create_with_snapshot(data_dir, &hard_state, &snapshot)?;
    tracing::info!(
        topics = image.topics.len(),
        next_producer_id,
        "this one-node directory's topics and producer ids are now its quorum's first snapshot"
    );
    // Read no more: the metadata log holds the block now.
    if next_producer_id.is_some() {
        std::fs::remove_file(&producer_ids_path)
            .map_err(|error| StorageError::io("removing", &producer_ids_path, error))?;
    }
    Ok(())
}
