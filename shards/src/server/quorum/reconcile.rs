//! Makes this broker's own topics (its local image: topics, ids, the shard
//! of each partition, configs) follow the cluster image: topics the log
//! created are opened here with the log's ids, deleted ones are removed,
//! grown ones get their new partitions, changed configs are applied.
//!
//! Until replication exists every broker opens every partition and serves
//! those it leads ([`crate::server::shard::Shard::leads`]); the others
//! answer NOT_LEADER_OR_FOLLOWER.

use std::rc::Rc;

use brook_engine::cluster::cluster_image::ClusterImage;

use crate::server::controller::{self, Change, NewTopic};
use crate::server::shard::Shard;

pub async fn reconcile(shard: &Rc<Shard>, image: &ClusterImage) {
    let local = shard.image();
    let mut changes = Vec::new();
    // Deleted topics, and names the log gave to a new topic id, go first.
    let stale: Vec<String> = local
        .topics
        .values()
        .filter(|topic| {
            image
                .topic_by_name(&topic.name)
                .is_none_or(|registered| registered.id != topic.id)
        })
        .map(|topic| topic.name.clone())
        .collect();
    if !stale.is_empty() {
        changes.push(Change::Delete { names: stale });
    }
    let mut created = Vec::new();
    for topic in image.topics.values() {
        match local.topic(&topic.name) {
            Some(known) if known.id == topic.id => {
                if known.partitions.len() < topic.partitions.len() {
                    changes.push(Change::AddPartitions {
                        topic: topic.name.clone(),
                        total: topic.partitions.len() as i32,
                        assignments: Vec::new(),
                        validate_only: false,
                    });
                }
                if known.configs != topic.configs {
                    changes.push(Change::ReplaceConfigs {
                        topic: topic.name.clone(),
                        configs: topic.configs.clone(),
                        validate_only: false,
                    });
                }
            }
            _ => created.push(NewTopic {
                name: topic.name.clone(),
                partitions: topic.partitions.len() as i32,
                replication_factor: -1,
                configs: topic.configs.clone(),
                id: Some(topic.id),
                assignments: Vec::new(),
            }),
        }
    }
    if !created.is_empty() {
        changes.push(Change::Create {
            topics: created,
            validate_only: false,
        });
    }
    for change in changes {
        for outcome in controller::apply_local(shard, change).await {
            if outcome.error.is_error() {
                tracing::error!(topic = %outcome.name, error = ?outcome.error, message = ?outcome.message, "this broker cannot follow the cluster's topic");
            }
        }
    }
}
