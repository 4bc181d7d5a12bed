//! This broker's own topics: the local image (`brook-metadata` in the first
//! log directory) names each topic the metadata log holds with its id and
//! configs, the shard that owns each of its partitions this broker is a
//! replica of, and the log offset it follows. [`follow`] applies what [`super::reconcile`] found
//! changed in the log, one batch at a time on the controller shard: persist
//! the new image, open, reconfigure or delete the affected logs on their
//! owning shards, then publish the image to every shard. Persisting first
//! means a crash in between leaves a metadata file that the next start
//! completes (owners open the logs the image lists).
//!
//! Nothing here checks or decides what the controller does (names, counts,
//! configs, replicas): the log already holds the controller's decisions.
//! What is local is where each partition lives on this broker's shards.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use brook_engine::cluster::broker_dynamic::{self, DynamicConfigs};
use brook_engine::cluster::image::{
    LocalImage, ShardId, TopicId, TopicMetadata, place_held, place_partitions,
};
use brook_engine::cluster::topic_config::resolve;
use brook_engine::log::config::LogConfig;
use brook_engine::types::{PartitionId, TopicPartition};

use crate::server::shard::Shard;
use crate::storage::StorageError;

/// The local image's file in the first log directory.
pub const METADATA_FILE: &str = "brook-metadata";

pub fn load_image(data_dir: &Path) -> Result<LocalImage, StorageError> {
    let path = data_dir.join(METADATA_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => LocalImage::decode(&text).map_err(|error| StorageError::Corrupt {
            path,
            reason: error.to_string(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(LocalImage::default()),
        Err(error) => Err(StorageError::io("reading", &path, error)),
    }
}

/// A topic of the metadata log this broker does not have yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowedTopic {
    pub name: String,
    pub id: TopicId,
    /// By partition number: whether this broker is one of its replicas.
    pub held: Vec<bool>,
    pub configs: BTreeMap<String, String>,
}

/// One step of following the metadata log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Topics the log deleted (or whose name it gave to another id).
    Delete {
        names: Vec<String>,
    },
    /// A topic's partitions are now `held.len()` (the log grew it, or not),
    /// and this broker is a replica of those `held` says.
    Hold {
        topic: String,
        held: Vec<bool>,
    },
    /// A topic's overrides are now exactly `configs`.
    Configs {
        topic: String,
        configs: BTreeMap<String, String>,
    },
    Create {
        topics: Vec<FollowedTopic>,
    },
    /// The dynamic broker configs are now the log's.
    BrokerConfigs {
        configs: DynamicConfigs,
    },
    /// The topics now follow the log up to `offset`
    /// ([`LocalImage::follows`]).
    Offset {
        offset: u64,
    },
}

/// The logs a change opens, deletes or reconfigures, by owning shard.
#[derive(Default)]
struct Effects {
    open: BTreeMap<ShardId, Vec<(TopicPartition, LogConfig)>>,
    delete: BTreeMap<ShardId, Vec<TopicPartition>>,
    reconfigure: BTreeMap<ShardId, Vec<(TopicPartition, LogConfig)>>,
    /// Topics the log deleted (their committed offsets go too), beside
    /// partitions this broker merely stopped holding.
    deleted_topics: BTreeSet<String>,
}

/// Applies `steps` on the controller shard; an error (a metadata file that
/// cannot be written, a log that cannot be opened) is returned to be
/// logged, and the next image tries again.
pub async fn follow(shard: &Rc<Shard>, steps: Vec<Follow>) -> Result<(), String> {
    let controller = shard.context.controller_shard();
    shard
        .on_shard(controller, move |controller| async move {
            follow_here(&controller, steps).await
        })
        .await
        .map_err(|gone| gone.to_string())?
}

/// Each step is committed before the next is worked out (a topic deleted
/// and created again under its name is closed and removed before its new
/// logs open).
async fn follow_here(controller: &Rc<Shard>, steps: Vec<Follow>) -> Result<(), String> {
    let _permit = controller
        .controller_lock
        .acquire_permit(1)
        .await
        .map_err(|_| "stopping".to_owned())?;
    for step in steps {
        let current = controller.local_image();
        let mut image = (*current).clone();
        let mut effects = Effects::default();
        let defaults = controller.config().log_defaults.clone();
        apply_step(
            &mut image,
            &mut effects,
            &defaults,
            controller.context.shards,
            step,
        );
        if image == *current {
            continue;
        }
        if image.broker_configs != current.broker_configs {
            reconfigure_all(controller, &image, &mut effects);
        }
        commit(controller, image, effects).await?;
    }
    Ok(())
}

fn apply_step(
    image: &mut LocalImage,
    effects: &mut Effects,
    defaults: &LogConfig,
    shards: u16,
    step: Follow,
) {
    match step {
        Follow::Delete { names } => {
            for name in names {
                delete(image, effects, &name);
            }
        }
        Follow::Hold { topic, held } => hold(image, effects, defaults, shards, &topic, &held),
        Follow::Configs { topic, configs } => {
            if let Some(known) = image.topics.get_mut(&topic) {
                known.configs = configs;
                let config = resolve(defaults, &known.configs).unwrap_or_else(|_| defaults.clone());
                by_owner(
                    &mut effects.reconfigure,
                    &topic,
                    &known.partitions,
                    |partition| (partition, config.clone()),
                );
            }
        }
        Follow::Create { topics } => {
            for topic in topics {
                create(image, effects, defaults, shards, topic);
            }
        }
        Follow::BrokerConfigs { configs } => image.broker_configs = configs,
        Follow::Offset { offset } => image.follows = image.follows.max(offset),
    }
}

/// The partitions of `topic` held here, each (made into an item by `item`)
/// under its owning shard, `owners[i]` owning partition `i`.
fn by_owner<T>(
    by_shard: &mut BTreeMap<ShardId, Vec<T>>,
    topic: &str,
    owners: &[Option<ShardId>],
    item: impl Fn(TopicPartition) -> T,
) {
    for (index, owner) in owners.iter().enumerate() {
        let Some(owner) = owner else { continue };
        let partition = TopicPartition {
            topic: topic.to_owned(),
            partition: PartitionId(index as i32),
        };
        by_shard.entry(*owner).or_default().push(item(partition));
    }
}

/// Every partition's log config under `image`'s dynamic broker configs
/// (their topic defaults changed): applied live on the owning shards.
fn reconfigure_all(controller: &Shard, image: &LocalImage, effects: &mut Effects) {
    let defaults =
        broker_dynamic::effective(&controller.context.config, &image.broker_configs).log_defaults;
    for topic in image.topics.values() {
        let config = resolve(&defaults, &topic.configs).unwrap_or_else(|_| defaults.clone());
        by_owner(
            &mut effects.reconfigure,
            &topic.name,
            &topic.partitions,
            |partition| (partition, config.clone()),
        );
    }
}

fn create(
    image: &mut LocalImage,
    effects: &mut Effects,
    defaults: &LogConfig,
    shards: u16,
    topic: FollowedTopic,
) {
    let mut loads = image.shard_loads(shards);
    let metadata = TopicMetadata {
        name: topic.name,
        id: topic.id,
        partitions: place_held(&topic.held, &mut loads),
        configs: topic.configs,
    };
    let config = resolve(defaults, &metadata.configs).unwrap_or_else(|_| defaults.clone());
    by_owner(
        &mut effects.open,
        &metadata.name,
        &metadata.partitions,
        |partition| (partition, config.clone()),
    );
    image.topics.insert(metadata.name.clone(), metadata);
}

fn delete(image: &mut LocalImage, effects: &mut Effects, name: &str) {
    if let Some(topic) = image.topics.remove(name) {
        by_owner(
            &mut effects.delete,
            &topic.name,
            &topic.partitions,
            |partition| partition,
        );
        effects.deleted_topics.insert(topic.name);
    }
}

/// Makes `name`'s partitions those `held` says (a topic's partitions only
/// grow): a partition newly held opens on the least-loaded shard, one no
/// longer held (its replicas no longer name this broker) is deleted here.
fn hold(
    image: &mut LocalImage,
    effects: &mut Effects,
    defaults: &LogConfig,
    shards: u16,
    name: &str,
    held: &[bool],
) {
    let mut loads = image.shard_loads(shards);
    let Some(topic) = image.topics.get_mut(name) else {
        return;
    };
    let config = resolve(defaults, &topic.configs).unwrap_or_else(|_| defaults.clone());
    if held.len() > topic.partitions.len() {
        topic.partitions.resize(held.len(), None);
    }
    let partition = |index: usize| TopicPartition {
        topic: name.to_owned(),
        partition: PartitionId(index as i32),
    };
    for (index, (owner, held)) in topic.partitions.iter_mut().zip(held).enumerate() {
        match (*owner, *held) {
            (None, true) => {
                let shard = place_partitions(1, &mut loads)[0];
                *owner = Some(shard);
                let opened = effects.open.entry(shard).or_default();
                opened.push((partition(index), config.clone()));
            }
            (Some(shard), false) => {
                *owner = None;
                let deleted = effects.delete.entry(shard).or_default();
                deleted.push(partition(index));
            }
            _ => {}
        }
    }
}

/// Persists `image`, applies `effects` on the owning shards, publishes.
async fn commit(controller: &Rc<Shard>, image: LocalImage, effects: Effects) -> Result<(), String> {
    let path: PathBuf = controller.context.data_dir.join(METADATA_FILE);
    crate::storage::write_file_atomically(&path, image.encode().as_bytes())
        .await
        .map_err(|error| error.to_string())?;
    let image = Arc::new(image);
    for (owner, partitions) in effects.open {
        let opened = controller
            .on_shard(owner, move |shard| async move {
                shard
                    .open_partitions(partitions)
                    .await
                    .map_err(|error| error.to_string())
            })
            .await;
        match opened {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                return Err(format!("opening partitions on shard {}: {reason}", owner.0));
            }
            Err(gone) => return Err(gone.to_string()),
        }
    }
    for (owner, partitions) in effects.reconfigure {
        let reconfigured = controller
            .on_shard(owner, move |shard| async move {
                for (topic_partition, config) in partitions {
                    if let Some(log) = shard.log(&topic_partition) {
                        log.set_config(config);
                    }
                }
            })
            .await;
        reconfigured.map_err(|gone| gone.to_string())?;
    }
    for shard in controller.context.shard_ids() {
        let image = image.clone();
        controller
            .on_shard(
                shard,
                move |shard| async move { shard.set_local_image(image) },
            )
            .await
            .map_err(|gone| gone.to_string())?;
    }
    for (owner, partitions) in effects.delete {
        let deleted = controller
            .on_shard(owner, move |shard| async move {
                shard.delete_partitions(partitions).await
            })
            .await;
        deleted.map_err(|gone| gone.to_string())?;
    }
    let deleted_topics = effects.deleted_topics;
    if !deleted_topics.is_empty() {
        // Committed offsets of deleted topics go with them (Kafka).
        for shard in controller.context.shard_ids() {
            let topics = deleted_topics.clone();
            controller
                .on_shard(shard, move |shard| async move {
                    shard.groups.forget_topics(&shard, &topics).await
                })
                .await
                .map_err(|gone| gone.to_string())?;
        }
    }
    Ok(())
}
