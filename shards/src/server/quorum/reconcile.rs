//! Makes this broker's own topics (its local image, see [`super::local_topics`]:
//! topics, ids, the shard of each partition held here, configs) follow the
//! cluster image: topics the log created are known here with the log's ids
//! and their partitions this broker is a replica of opened, deleted ones
//! are removed, grown ones get their new partitions, partitions whose
//! replicas newly name this broker are opened and those that no longer do
//! deleted, changed configs (topics' and the dynamic broker configs) are
//! applied.
//!
//! Only ever forward: the local image records the log offset it follows,
//! and an older cluster image changes nothing. A restarting broker rebuilds
//! its view from the controller a snapshot and a chunk of entries at a
//! time (and a controller elected a moment ago may still be behind);
//! following one of those older images deleted the logs of every topic
//! created after it, and the next image created them again, empty.
//!
//! A broker opens only the partitions it is a replica of, as Kafka's
//! brokers do; requests for the others answer NOT_LEADER_OR_FOLLOWER
//! ([`LocalImage::not_here`]).

use std::rc::Rc;

use brook_engine::cluster::cluster_image::ClusterImage;
use brook_engine::cluster::image::LocalImage;
use brook_engine::types::BrokerId;

use super::local_topics::{self, Follow, FollowedTopic};
use crate::server::shard::Shard;

pub async fn reconcile(shard: &Rc<Shard>, image: &ClusterImage) {
    let local = BrokerId(shard.context.broker_id);
    let steps = changes_to_follow(&shard.local_image(), image, local);
    if steps.is_empty() {
        return;
    }
    if let Err(reason) = local_topics::follow(shard, steps).await {
        tracing::error!(%reason, "this broker cannot follow the cluster's topics");
    }
}

/// What makes `local`, the image of broker `broker`, follow `image`, the
/// last step recording the offset followed; nothing when `image` is older
/// than what `local` already follows.
fn changes_to_follow(local: &LocalImage, image: &ClusterImage, broker: BrokerId) -> Vec<Follow> {
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
        let held: Vec<bool> = topic
            .partitions
            .iter()
            .map(|registration| registration.replicas.contains(&broker))
            .collect();
        match local.topic(&topic.name) {
            Some(known) if known.id == topic.id => {
                if !known
                    .partitions
                    .iter()
                    .map(Option::is_some)
                    .eq(held.iter().copied())
                {
                    changes.push(Follow::Hold {
                        topic: topic.name.clone(),
                        held,
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
                held,
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
    use brook_engine::cluster::image::{LocalImage, ShardId, TopicId, TopicMetadata};
    use brook_engine::cluster::records::{MetadataRecord, PartitionRegistration};
    use brook_engine::types::{BrokerId, LeaderEpoch, PartitionId};

    use super::changes_to_follow;
    use crate::server::quorum::local_topics::Follow;

    /// This broker.
    const HERE: BrokerId = BrokerId(0);

    /// The cluster image after `topics` (name, id byte, partitions) were
    /// created, one log entry each from offset 1, every partition on this
    /// broker.
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
    fn local(topics: &[(&str, u8, usize)], follows: u64) -> LocalImage {
        let mut image = LocalImage {
            follows,
            ..LocalImage::default()
        };
        for (name, id, partitions) in topics {
            image.topics.insert(
                (*name).to_owned(),
                TopicMetadata {
                    name: (*name).to_owned(),
                    id: TopicId([*id; 16]),
                    partitions: vec![Some(ShardId(0)); *partitions],
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
                Follow::Hold { topic, held } => format!("hold {topic} {held:?}"),
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
        assert!(changes_to_follow(&followed, &older, HERE).is_empty());
    }

    /// Forward, the topics follow and the offset is recorded last; with
    /// nothing to change nothing is written.
    #[test]
    fn a_newer_image_is_followed_and_its_offset_recorded() {
        let followed = local(&[("a", 1, 1), ("gone", 9, 1)], 1);
        let newer = cluster(&[("a", 1, 3), ("b", 2, 1)]);
        assert_eq!(
            kinds(&changes_to_follow(&followed, &newer, HERE)),
            [
                "delete gone",
                "hold a [true, true, true]",
                "create b",
                "follow 2"
            ]
        );
        let current = local(&[("a", 1, 3), ("b", 2, 1)], 2);
        assert!(changes_to_follow(&current, &newer, HERE).is_empty());
        // A name the log gave to another topic: the old one goes.
        let renamed = local(&[("a", 7, 3), ("b", 2, 1)], 0);
        assert_eq!(
            kinds(&changes_to_follow(&renamed, &newer, HERE)),
            ["delete a", "create a", "follow 2"]
        );
    }

    /// Another broker holds only what names it: its image knows every
    /// topic and partition, and holds none of these. A local image that
    /// held a partition whose replicas no longer name the broker (written
    /// before brokers opened only their own replicas) lets it go.
    #[test]
    fn a_broker_holds_only_the_partitions_it_is_a_replica_of() {
        let image = cluster(&[("a", 1, 2)]);
        let elsewhere = BrokerId(1);
        let empty = local(&[], 0);
        let changes = changes_to_follow(&empty, &image, elsewhere);
        assert_eq!(kinds(&changes), ["create a", "follow 1"]);
        assert!(matches!(
            &changes[0],
            Follow::Create { topics } if topics[0].held == [false, false]
        ));
        let held_everything = local(&[("a", 1, 2)], 0);
        assert_eq!(
            kinds(&changes_to_follow(&held_everything, &image, elsewhere)),
            ["hold a [false, false]", "follow 1"]
        );
    }
}
