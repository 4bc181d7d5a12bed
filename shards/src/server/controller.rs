//! Metadata changes, applied one at a time on the controller shard (shard
//! 0): validate, persist the new image, open or delete the affected logs on
//! their owning shards, then publish the image to every shard. Persisting
//! first means a crash in between leaves a metadata file that the next start
//! completes (owners open the logs the image lists).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use brook_engine::cluster::broker_dynamic::{self, DynamicConfigs};
use brook_engine::cluster::controller::{
    Refusal, TopicRequest, check_new_topic_name, check_partition_count,
};
use brook_engine::cluster::image::{
    MetadataImage, ShardId, TopicId, TopicMetadata, place_partitions,
};
use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::cluster::topic_changes::{
    altered_overrides, check_assignment_count, check_partition_increase,
};
use brook_engine::cluster::topic_config::{ConfigOperation, check_overrides, resolve};
use brook_engine::log::config::LogConfig;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::{BrokerId, PartitionId, TopicPartition};

use crate::server::quorum::FORWARD_TIMEOUT;
use crate::server::shard::Shard;
use crate::storage::StorageError;

/// The metadata file in the data directory.
pub const METADATA_FILE: &str = "brook-metadata";

/// The outcome of one topic's change, as admin responses report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicOutcome {
    pub name: String,
    pub error: ErrorCode,
    pub message: Option<String>,
    pub topic_id: TopicId,
    pub partitions: usize,
    pub replication_factor: i16,
}

impl TopicOutcome {
    fn failed(name: &str, error: ErrorCode, message: impl Into<String>) -> TopicOutcome {
        TopicOutcome {
            name: name.to_owned(),
            error,
            message: Some(message.into()),
            topic_id: TopicId::default(),
            partitions: 0,
            replication_factor: 0,
        }
    }

    /// A change to something other than a topic (a broker's configs).
    fn accepted(name: &str) -> TopicOutcome {
        TopicOutcome {
            error: ErrorCode::NONE,
            message: None,
            ..TopicOutcome::failed(name, ErrorCode::NONE, "")
        }
    }

    fn refused(name: &str, refusal: Refusal) -> TopicOutcome {
        TopicOutcome::failed(name, refusal.error, refusal.message)
    }

    fn done(topic: &TopicMetadata) -> TopicOutcome {
        TopicOutcome {
            name: topic.name.clone(),
            error: ErrorCode::NONE,
            message: None,
            topic_id: topic.id,
            partitions: topic.partitions.len(),
            replication_factor: 1,
        }
    }
}

/// A topic to create.
#[derive(Clone, Debug)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// -1: `default.replication.factor` (a cluster's controller decides).
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// The id the metadata log gave it (a cluster); `None`: a new one.
    pub id: Option<TopicId>,
    /// A cluster's manual replica assignments, (partition, replicas); empty:
    /// the controller places the partitions. (A one-node broker has
    /// checked and turned them into `partitions`.)
    pub assignments: Vec<(i32, Vec<BrokerId>)>,
}

/// A requested metadata change.
#[derive(Clone, Debug)]
pub enum Change {
    Create {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    Delete {
        names: Vec<String>,
    },
    AddPartitions {
        topic: String,
        total: i32,
        /// Replica lists for the new partitions (see
        /// [`NewTopic::assignments`]); `None`: placed by the controller.
        assignments: Option<Vec<Vec<BrokerId>>>,
        validate_only: bool,
    },
    /// IncrementalAlterConfigs on one topic's overrides.
    AlterConfigs {
        topic: String,
        changes: Vec<(String, ConfigOperation)>,
        validate_only: bool,
    },
    /// AlterConfigs: one topic's overrides become exactly `configs`.
    ReplaceConfigs {
        topic: String,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    /// IncrementalAlterConfigs (`replace` false) or AlterConfigs
    /// (`replace` true) on a BROKER resource (KIP-226): `resource` is a
    /// broker's id, or "" for the cluster-wide default.
    AlterBrokerConfigs {
        resource: String,
        changes: Vec<(String, ConfigOperation)>,
        replace: bool,
        validate_only: bool,
    },
    /// A broker of a cluster: the dynamic broker configs are now the
    /// metadata log's.
    FollowBrokerConfigs {
        configs: DynamicConfigs,
    },
    /// A broker of a cluster: its topics now follow the metadata log up to
    /// `offset` ([`MetadataImage::follows`]).
    Follow {
        offset: u64,
    },
}

pub fn load_image(data_dir: &Path) -> Result<MetadataImage, StorageError> {
    let path = data_dir.join(METADATA_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => MetadataImage::decode(&text).map_err(|error| StorageError::Corrupt {
            path,
            reason: error.to_string(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(MetadataImage::default()),
        Err(error) => Err(StorageError::io("reading", &path, error)),
    }
}

/// Applies `change`: in a one-node cluster here, on the controller shard;
/// in a cluster at the active controller (forwarded), answered once this
/// broker serves the result. One outcome per topic.
pub async fn apply(shard: &Rc<Shard>, change: Change) -> Vec<TopicOutcome> {
    if shard.context.config.cluster.is_some() {
        return forward(shard, change).await;
    }
    apply_local(shard, change).await
}

async fn forward(shard: &Rc<Shard>, change: Change) -> Vec<TopicOutcome> {
    let names = change_names(&change);
    let refuse_all = |error: ErrorCode, message: &str| -> Vec<TopicOutcome> {
        names
            .iter()
            .map(|name| TopicOutcome::failed(name, error, message))
            .collect()
    };
    let creates = matches!(
        change,
        Change::Create {
            validate_only: false,
            ..
        }
    );
    let request = match change {
        Change::Create {
            topics,
            validate_only,
        } => PeerRequest::CreateTopics {
            topics: topics
                .into_iter()
                .map(|topic| TopicRequest {
                    name: topic.name,
                    partitions: topic.partitions,
                    replication_factor: topic.replication_factor,
                    configs: topic.configs,
                    assignments: topic.assignments,
                    // Ours, so that the request asked again of the next
                    // controller (the first died before answering) finds
                    // the topic it made.
                    id: Some(topic.id.unwrap_or_else(|| TopicId(random_id()))),
                })
                .collect(),
            validate_only,
        },
        Change::Delete { names } => PeerRequest::DeleteTopics { names },
        Change::AddPartitions {
            topic,
            total,
            assignments,
            validate_only,
        } => PeerRequest::CreatePartitions {
            topic,
            total,
            assignments,
            validate_only,
        },
        Change::AlterConfigs {
            topic,
            changes,
            validate_only,
        } => PeerRequest::AlterConfigs {
            topic,
            changes,
            replace: false,
            validate_only,
        },
        Change::ReplaceConfigs {
            topic,
            configs,
            validate_only,
        } => PeerRequest::AlterConfigs {
            topic,
            changes: configs
                .into_iter()
                .map(|(key, value)| (key, ConfigOperation::Set(Some(value))))
                .collect(),
            replace: true,
            validate_only,
        },
        Change::AlterBrokerConfigs {
            resource,
            changes,
            replace,
            validate_only,
        } => PeerRequest::AlterBrokerConfigs {
            resource,
            changes,
            replace,
            validate_only,
        },
        // This broker's own bookkeeping: reconcile applies it locally.
        Change::Follow { .. } | Change::FollowBrokerConfigs { .. } => return Vec::new(),
    };
    let answered = shard
        .on_shard(ShardId(0), move |first| async move {
            crate::server::quorum::ask_controller(&first, request, FORWARD_TIMEOUT).await
        })
        .await;
    match answered {
        Ok(Some(PeerResponse::Topics { results, offset })) => {
            let created: Vec<TopicId> = results
                .iter()
                .filter(|result| creates && result.error == ErrorCode::NONE)
                .map(|result| result.id)
                .collect();
            crate::server::quorum::wait_for_offset(shard, offset, &created).await;
            results
                .into_iter()
                .map(|result| TopicOutcome {
                    name: result.name,
                    error: result.error,
                    message: result.message,
                    topic_id: result.id,
                    partitions: result.partitions.max(0) as usize,
                    replication_factor: result.replication_factor,
                })
                .collect()
        }
        _ => refuse_all(
            ErrorCode::REQUEST_TIMED_OUT,
            "no active controller answered in time",
        ),
    }
}

/// Applies `change` to this broker's own topics, on the controller shard.
pub async fn apply_local(shard: &Rc<Shard>, change: Change) -> Vec<TopicOutcome> {
    let controller = shard.context.controller_shard();
    let names = change_names(&change);
    let applied = shard
        .on_shard(controller, move |controller| async move {
            apply_here(&controller, change).await
        })
        .await;
    applied.unwrap_or_else(|gone| {
        names
            .iter()
            .map(|name| {
                TopicOutcome::failed(name, ErrorCode::UNKNOWN_SERVER_ERROR, gone.to_string())
            })
            .collect()
    })
}

fn change_names(change: &Change) -> Vec<String> {
    match change {
        Change::Create { topics, .. } => topics.iter().map(|topic| topic.name.clone()).collect(),
        Change::Delete { names } => names.clone(),
        Change::AddPartitions { topic, .. }
        | Change::AlterConfigs { topic, .. }
        | Change::ReplaceConfigs { topic, .. } => vec![topic.clone()],
        Change::AlterBrokerConfigs { resource, .. } => vec![resource.clone()],
        Change::Follow { .. } | Change::FollowBrokerConfigs { .. } => Vec::new(),
    }
}

/// The logs a change opens, deletes or reconfigures, by owning shard.
#[derive(Default)]
struct Effects {
    open: BTreeMap<ShardId, Vec<(TopicPartition, LogConfig)>>,
    delete: BTreeMap<ShardId, Vec<TopicPartition>>,
    reconfigure: BTreeMap<ShardId, Vec<(TopicPartition, LogConfig)>>,
}

async fn apply_here(controller: &Rc<Shard>, change: Change) -> Vec<TopicOutcome> {
    let Ok(_permit) = controller.controller_lock.acquire_permit(1).await else {
        return change_names(&change)
            .iter()
            .map(|name| TopicOutcome::failed(name, ErrorCode::UNKNOWN_SERVER_ERROR, "stopping"))
            .collect();
    };
    let mut image = (*controller.image()).clone();
    let mut effects = Effects::default();
    let defaults = controller.config().log_defaults.clone();
    let shards = controller.context.shards;
    let outcomes = match change {
        Change::Create {
            topics,
            validate_only,
        } => topics
            .into_iter()
            .map(|topic| {
                create(
                    &mut image,
                    &mut effects,
                    &defaults,
                    shards,
                    topic,
                    validate_only,
                )
            })
            .collect::<Vec<_>>(),
        Change::Delete { names } => names
            .iter()
            .map(|name| delete(&mut image, &mut effects, name))
            .collect(),
        Change::AddPartitions {
            topic,
            total,
            assignments,
            validate_only,
        } => {
            let growth = Growth {
                name: &topic,
                total,
                assigned: assignments.map(|assignments| assignments.len()),
                validate_only,
            };
            vec![add_partitions(
                &mut image,
                &mut effects,
                &defaults,
                shards,
                growth,
            )]
        }
        Change::AlterConfigs {
            topic,
            changes,
            validate_only,
        } => {
            vec![alter_configs(
                &mut image,
                &mut effects,
                &defaults,
                &topic,
                &changes,
                validate_only,
            )]
        }
        Change::ReplaceConfigs {
            topic,
            configs,
            validate_only,
        } => {
            // Every override goes, then the given ones are set: under the
            // controller lock, against the configs as they are here.
            let current = image
                .topic(&topic)
                .map(|known| known.configs.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default();
            let changes: Vec<(String, ConfigOperation)> = current
                .into_iter()
                .map(|key| (key, ConfigOperation::Delete))
                .chain(
                    configs
                        .into_iter()
                        .map(|(key, value)| (key, ConfigOperation::Set(Some(value)))),
                )
                .collect();
            vec![alter_configs(
                &mut image,
                &mut effects,
                &defaults,
                &topic,
                &changes,
                validate_only,
            )]
        }
        Change::AlterBrokerConfigs {
            resource,
            changes,
            replace,
            validate_only,
        } => {
            let altered = broker_dynamic::altered(
                &controller.context.config,
                &image.broker_configs,
                &resource,
                &changes,
                replace,
            );
            vec![match altered {
                Err(refusal) => TopicOutcome::refused(&resource, refusal),
                Ok(configs) => {
                    if !validate_only {
                        set_broker_configs(&mut image.broker_configs, &resource, configs);
                    }
                    TopicOutcome::accepted(&resource)
                }
            }]
        }
        Change::FollowBrokerConfigs { configs } => {
            image.broker_configs = configs;
            Vec::new()
        }
        Change::Follow { offset } => {
            image.follows = image.follows.max(offset);
            Vec::new()
        }
    };
    if image == *controller.image() {
        return outcomes;
    }
    if image.broker_configs != controller.image().broker_configs {
        reconfigure_all(controller, &image, &mut effects);
    }
    if let Err(reason) = commit(controller, image, effects).await {
        tracing::error!(%reason, "applying a metadata change failed");
        return outcomes
            .into_iter()
            .map(|outcome| TopicOutcome {
                error: ErrorCode::KAFKA_STORAGE_ERROR,
                message: Some(reason.clone()),
                ..outcome
            })
            .collect();
    }
    outcomes
}

/// Partitions `first`.. of `topic`, each (made into an item by `item`)
/// under its owning shard, `owners[i]` owning partition `first + i`.
fn by_owner<T>(
    by_shard: &mut BTreeMap<ShardId, Vec<T>>,
    topic: &str,
    first: usize,
    owners: &[ShardId],
    item: impl Fn(TopicPartition) -> T,
) {
    for (offset, owner) in owners.iter().enumerate() {
        let partition = TopicPartition {
            topic: topic.to_owned(),
            partition: PartitionId((first + offset) as i32),
        };
        by_shard.entry(*owner).or_default().push(item(partition));
    }
}

/// `resource`'s dynamic configs become `configs` (none: it goes).
fn set_broker_configs(
    dynamic: &mut DynamicConfigs,
    resource: &str,
    configs: BTreeMap<String, String>,
) {
    match configs.is_empty() {
        true => dynamic.remove(resource),
        false => dynamic.insert(resource.to_owned(), configs),
    };
}

/// Every partition's log config under `image`'s dynamic broker configs
/// (their topic defaults changed): applied live on the owning shards.
fn reconfigure_all(controller: &Shard, image: &MetadataImage, effects: &mut Effects) {
    let defaults =
        broker_dynamic::effective(&controller.context.config, &image.broker_configs).log_defaults;
    for topic in image.topics.values() {
        let config = resolve(&defaults, &topic.configs).unwrap_or_else(|_| defaults.clone());
        by_owner(
            &mut effects.reconfigure,
            &topic.name,
            0,
            &topic.partitions,
            |partition| (partition, config.clone()),
        );
    }
}

fn create(
    image: &mut MetadataImage,
    effects: &mut Effects,
    defaults: &LogConfig,
    shards: u16,
    topic: NewTopic,
    validate_only: bool,
) -> TopicOutcome {
    // The controller's rules (engine/cluster), as a cluster applies them.
    let checked = check_new_topic_name(&topic.name, image.topic(&topic.name).is_some())
        .and_then(|()| check_partition_count(topic.partitions))
        .and_then(|()| {
            check_overrides(defaults, &topic.configs)
                .map_err(|message| Refusal::new(ErrorCode::INVALID_CONFIG, message))
        });
    if let Err(refusal) = checked {
        return TopicOutcome::refused(&topic.name, refusal);
    }
    let mut loads = image.shard_loads(shards);
    let placement = place_partitions(topic.partitions as usize, &mut loads);
    let metadata = TopicMetadata {
        name: topic.name.clone(),
        id: topic.id.unwrap_or_else(|| TopicId(random_id())),
        partitions: placement,
        configs: topic.configs,
    };
    let outcome = TopicOutcome::done(&metadata);
    if validate_only {
        return outcome;
    }
    let config = resolve(defaults, &metadata.configs).unwrap_or_else(|_| defaults.clone());
    by_owner(
        &mut effects.open,
        &metadata.name,
        0,
        &metadata.partitions,
        |partition| (partition, config.clone()),
    );
    image.topics.insert(metadata.name.clone(), metadata);
    outcome
}

fn delete(image: &mut MetadataImage, effects: &mut Effects, name: &str) -> TopicOutcome {
    let Some(topic) = image.topics.remove(name) else {
        return TopicOutcome::failed(
            name,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no topic {name}"),
        );
    };
    by_owner(
        &mut effects.delete,
        &topic.name,
        0,
        &topic.partitions,
        |partition| partition,
    );
    TopicOutcome::done(&topic)
}

/// CreatePartitions of one topic on a broker of its own.
struct Growth<'a> {
    name: &'a str,
    total: i32,
    /// How many replica lists it gave (each of them this broker, as the
    /// handler checked), if it gave a list.
    assigned: Option<usize>,
    validate_only: bool,
}

fn add_partitions(
    image: &mut MetadataImage,
    effects: &mut Effects,
    defaults: &LogConfig,
    shards: u16,
    growth: Growth,
) -> TopicOutcome {
    let Growth {
        name,
        total,
        assigned,
        validate_only,
    } = growth;
    let mut loads = image.shard_loads(shards);
    let Some(topic) = image.topics.get_mut(name) else {
        return TopicOutcome::failed(
            name,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no topic {name}"),
        );
    };
    let current = topic.partitions.len();
    let checked = check_partition_increase(name, current, total).and_then(|()| {
        assigned.map_or(Ok(()), |count| {
            check_assignment_count(current, total, count)
        })
    });
    if let Err(refusal) = checked {
        return TopicOutcome::refused(name, refusal);
    }
    if validate_only {
        return TopicOutcome {
            partitions: total as usize,
            ..TopicOutcome::done(topic)
        };
    }
    let config = resolve(defaults, &topic.configs).unwrap_or_else(|_| defaults.clone());
    let owners = place_partitions(total as usize - current, &mut loads);
    by_owner(&mut effects.open, name, current, &owners, |partition| {
        (partition, config.clone())
    });
    topic.partitions.extend(owners);
    TopicOutcome::done(topic)
}

fn alter_configs(
    image: &mut MetadataImage,
    effects: &mut Effects,
    defaults: &LogConfig,
    name: &str,
    changes: &[(String, ConfigOperation)],
    validate_only: bool,
) -> TopicOutcome {
    let Some(topic) = image.topics.get_mut(name) else {
        return TopicOutcome::failed(
            name,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no topic {name}"),
        );
    };
    let configs = match altered_overrides(&topic.configs, changes, false, defaults) {
        Ok(configs) => configs,
        Err(refusal) => return TopicOutcome::refused(name, refusal),
    };
    if validate_only {
        return TopicOutcome::done(topic);
    }
    topic.configs = configs;
    let config = resolve(defaults, &topic.configs).unwrap_or_else(|_| defaults.clone());
    by_owner(
        &mut effects.reconfigure,
        name,
        0,
        &topic.partitions,
        |partition| (partition, config.clone()),
    );
    TopicOutcome::done(topic)
}

/// Persists `image`, applies `effects` on the owning shards, publishes.
async fn commit(
    controller: &Rc<Shard>,
    image: MetadataImage,
    effects: Effects,
) -> Result<(), String> {
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
            .on_shard(shard, move |shard| async move { shard.set_image(image) })
            .await
            .map_err(|gone| gone.to_string())?;
    }
    let mut deleted_topics = std::collections::BTreeSet::new();
    for (owner, partitions) in effects.delete {
        deleted_topics.extend(partitions.iter().map(|partition| partition.topic.clone()));
        let deleted = controller
            .on_shard(owner, move |shard| async move {
                shard.delete_partitions(partitions).await
            })
            .await;
        deleted.map_err(|gone| gone.to_string())?;
    }
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

/// 16 random bytes (a topic id), from the kernel.
pub fn random_id() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut urandom| std::io::Read::read_exact(&mut urandom, &mut bytes));
    if read.is_err() {
        // Without /dev/urandom, fall back to the clock: ids must only differ.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_be_bytes();
    }
    bytes
}
