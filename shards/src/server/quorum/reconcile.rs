//! Makes this broker's own topics (its local image, see [`super::local_topics`]:
//! topics, ids, the shard of each partition, configs) follow the cluster
//! image: topics the log created are opened here with the log's ids,
//! deleted ones are removed, grown ones get their new partitions, changed
//! configs (topics' and the dynamic broker configs) are applied.
//!
//! Only ever forward: the local image records the log offset it follows,
//! and an older cluster image changes nothing. A restarting broker rebuilds
//! its view from the controller a snapshot and a chunk of entries at a
//! time (and a controller elected a moment ago may still be behind);
//! following one of those older images deleted the logs of every topic
//! created after it, and the next image created them again, empty.
//!
//! Every broker opens every partition and serves those it leads or follows
//! ([`crate::server::shard::Shard::leads`]); the others answer
//! NOT_LEADER_OR_FOLLOWER.

use std::rc::Rc;

use brook_engine::cluster::cluster_image::ClusterImage;
use brook_engine::cluster::image::MetadataImage;

use super::local_topics::{self, Follow, FollowedTopic};
use crate::server::shard::Shard;

pub async fn reconcile(shard: &Rc<Shard>, image: &ClusterImage) {
    let steps = changes_to_follow(&shard.image(), image);
    if steps.is_empty() {
        return;
    }
    if let Err(reason) = local_topics::follow(shard, steps).await {
        tracing::error!(%reason, "this broker cannot follow the cluster's topics");
    }
}

/// What makes `local` follow `image`, the last step recording the offset
/// followed; nothing when `image` is older than what `local` already
/// follows.
fn changes_to_follow(local: &MetadataImage, image: &ClusterImage) -> Vec<Follow> {
    if image.offset < local.follows {
        return Vec::new();
    }
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
        changes.push(Follow::Delete { names: stale });
    }
    let mut created = Vec::new();
    for topic in image.topics.values() {
        match local.topic(&topic.name) {
            Some(known) if known.id == topic.id => {
                if known.partitions.len() < topic.partitions.len() {
                    changes.push(Follow::Grow {
                        topic: topic.name.clone(),
                        total: topic.partitions.len(),
                    });
                }
                if known.configs != topic.configs {
                    changes.push(Follow::Configs {
                        topic: topic.name.clone(),
                        configs: topic.configs.clone(),
                    });
                }
            }
            _ => created.push(FollowedTopic {
                name: topic.name.clone(),
                id: topic.id,
                partitions: topic.partitions.len(),
                configs: topic.configs.clone(),
            }),
        }
    }
    if !created.is_empty() {
        changes.push(Follow::Create { topics: created });
    }
    if local.broker_configs != image.broker_configs {
        changes.push(Follow::BrokerConfigs {
            configs: image.broker_configs.clone(),
        });
    }
    if !changes.is_empty() {
        changes.push(Follow::Offset {
            offset: image.offset,
        });
    }
    changes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use brook_engine::cluster::cluster_image::ClusterImage;
    use brook_engine::cluster::image::{MetadataImage, ShardId, TopicId, TopicMetadata};
    use brook_engine::cluster::records::{MetadataRecord, PartitionRegistration};
    use brook_engine::types::{BrokerId, LeaderEpoch, PartitionId};

    use super::changes_to_follow;
    use crate::server::quorum::local_topics::Follow;

    /// The cluster image after `topics` (name, id byte, partitions) were
    /// created, one log entry each from offset 1.
    fn cluster(topics: &[(&str, u8, i32)]) -> ClusterImage {
        let mut image = ClusterImage::default();
        for (offset, (name, id, partitions)) in topics.iter().enumerate() {
            let mut records = vec![MetadataRecord::Topic {
                name: (*name).to_owned(),
                id: TopicId([*id; 16]),
            }];
            records.extend((0..*partitions).map(|partition| MetadataRecord::Partition {
                topic: TopicId([*id; 16]),
                partition: PartitionId(partition),
                registration: PartitionRegistration {
                    replicas: vec![BrokerId(0)],
                    isr: vec![BrokerId(0)],
                    leader: BrokerId(0),
                    leader_epoch: LeaderEpoch(0),
                    partition_epoch: 0,
                },
            }));
            image.apply(offset as u64 + 1, &records).unwrap();
        }
        image
    }

    /// This broker's own topics, following the log up to `follows`.
    fn local(topics: &[(&str, u8, usize)], follows: u64) -> MetadataImage {
        let mut image = MetadataImage {
            follows,
            ..MetadataImage::default()
        };
        for (name, id, partitions) in topics {
            image.topics.insert(
                (*name).to_owned(),
                TopicMetadata {
                    name: (*name).to_owned(),
                    id: TopicId([*id; 16]),
                    partitions: vec![ShardId(0); *partitions],
                    configs: BTreeMap::new(),
                },
            );
        }
        image
    }

    fn kinds(changes: &[Follow]) -> Vec<String> {
        changes
            .iter()
            .map(|change| match change {
                Follow::Create { topics } => format!(
                    "create {}",
                    topics
                        .iter()
                        .map(|topic| topic.name.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Follow::Delete { names } => format!("delete {}", names.join(",")),
                Follow::Grow { topic, total } => format!("grow {topic} {total}"),
                Follow::Configs { topic, .. } => format!("configs {topic}"),
                Follow::BrokerConfigs { configs } => format!("broker configs {}", configs.len()),
                Follow::Offset { offset } => format!("follow {offset}"),
            })
            .collect()
    }

    /// A restarted broker whose topics followed offset 3 is shown the log
    /// at offset 1 (a snapshot, or a controller still behind): its two
    /// newer topics stay, and nothing is recorded.
    #[test]
    fn an_older_image_changes_nothing() {
        let followed = local(&[("a", 1, 1), ("b", 2, 1), ("c", 3, 2)], 3);
        let older = cluster(&[("a", 1, 1)]);
        assert_eq!(older.offset, 1);
        assert!(changes_to_follow(&followed, &older).is_empty());
    }

    /// Forward, the topics follow and the offset is recorded last; with
    /// nothing to change nothing is written.
    #[test]
    fn a_newer_image_is_followed_and_its_offset_recorded() {
        let followed = local(&[("a", 1, 1), ("gone", 9, 1)], 1);
        let newer = cluster(&[("a", 1, 3), ("b", 2, 1)]);
        assert_eq!(
            kinds(&changes_to_follow(&followed, &newer)),
            ["delete gone", "grow a 3", "create b", "follow 2"]
        );
        let current = local(&[("a", 1, 3), ("b", 2, 1)], 2);
        assert!(changes_to_follow(&current, &newer).is_empty());
        // A name the log gave to another topic: the old one goes.
        let renamed = local(&[("a", 7, 3), ("b", 2, 1)], 0);
        assert_eq!(
            kinds(&changes_to_follow(&renamed, &newer)),
            ["delete a", "create a", "follow 2"]
        );
    }
}
