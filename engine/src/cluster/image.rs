//! The local metadata image: every topic of the cluster as this broker
//! applied it (its id, its partition count, its config overrides), and the
//! shard owning each partition this broker holds a replica of. Immutable
//! once published; each change makes a new one, so shards read it without
//! locks.
//!
//! Persisted by the controller as text, one record per line (names are
//! Kafka-legal, so they never contain spaces):
//!
//! ```text
//! brook-metadata 1
//! follows <offset of the cluster's metadata log>
//! topic <name> <topic id as 32 hex digits> <shard of p0>,<shard of p1>,…
//! config <name> <key>=<value>
//! broker-config <broker id, or "default"> <key>=<value>
//! ```
//!
//! A partition this broker holds no replica of has `-` for its shard.
//!
//! `broker-config` lines are the dynamic broker configs (KIP-226): those
//! of this broker and the cluster-wide default.
//!
//! `follows` is written by a broker of a cluster only (a one-node broker's
//! image is its own): the offset of the metadata log whose topics these
//! are. A broker that restarts rebuilds its view of the log from the
//! controller, passing through older images on the way; its topics follow
//! none of those (following one would delete the logs of every topic
//! created after it).

use std::collections::BTreeMap;

use thiserror::Error;

use crate::cluster::broker_dynamic::{CLUSTER_DEFAULT, DynamicConfigs};
use crate::protocol::errors::ErrorCode;
use crate::types::{PartitionId, TopicPartition};

/// Kafka's limit on topic name length.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Partitions a topic may have (bounds what one request can create).
pub const PARTITIONS_MAX: usize = 100_000;

/// A shard (core) of this broker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u16);

/// A topic's 16-byte id (Kafka's `Uuid`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    pub fn to_hex(self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    pub fn from_hex(text: &str) -> Option<TopicId> {
        if text.len() != 32 {
            return None;
        }
        let mut id = [0u8; 16];
        for (slot, pair) in id.iter_mut().zip(text.as_bytes().chunks(2)) {
            *slot = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
        }
        Some(TopicId(id))
    }

    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub id: TopicId,
    /// By partition number, the shard owning the partition's log here;
    /// `None` for a partition this broker holds no replica of (it has no
    /// log here).
    pub partitions: Vec<Option<ShardId>>,
    pub configs: BTreeMap<String, String>,
}

/// One broker's image of the cluster's topics (see the module
/// documentation): what it applied of the metadata log (Kafka's
/// `MetadataImage` is the whole log's state, Brook's
/// [`crate::cluster::cluster_image::ClusterImage`]) and where it holds
/// each partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalImage {
    pub topics: BTreeMap<String, TopicMetadata>,
    /// In a cluster, the metadata log offset these topics follow (0: none
    /// yet, or a one-node broker).
    pub follows: u64,
    /// Dynamic broker configs by resource ("": the cluster-wide default),
    /// as the metadata log (or a one-node broker's own admin) set them.
    pub broker_configs: DynamicConfigs,
}

/// How the image file names the cluster-wide default's resource ("").
const DEFAULT_RESOURCE_WORD: &str = "default";

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum TopicNameError {
    #[error("topic name is empty")]
    Empty,
    #[error("topic name cannot be \".\" or \"..\"")]
    Dots,
    #[error("topic name is longer than {TOPIC_NAME_BYTES_MAX} characters")]
    TooLong,
    #[error("topic name {0:?} has characters other than ASCII alphanumerics, '.', '_' and '-'")]
    IllegalCharacters(String),
}

/// Kafka's topic name rules (`Topic.validate`).
pub fn validate_topic_name(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if name == "." || name == ".." {
        return Err(TopicNameError::Dots);
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(TopicNameError::TooLong);
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
    {
        return Err(TopicNameError::IllegalCharacters(name.to_owned()));
    }
    Ok(())
}

impl LocalImage {
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<&TopicMetadata> {
        self.topics.values().find(|topic| topic.id == id)
    }

    /// The shard owning a partition's log, if this broker holds it.
    pub fn owner(&self, topic_partition: &TopicPartition) -> Option<ShardId> {
        self.owner_at(&topic_partition.topic, topic_partition.partition)
    }

    /// [`LocalImage::owner`] without building a `TopicPartition`.
    pub fn owner_at(&self, topic: &str, partition: PartitionId) -> Option<ShardId> {
        let topic = self.topics.get(topic)?;
        usize::try_from(partition.0)
            .ok()
            .and_then(|index| topic.partitions.get(index).copied().flatten())
    }

    /// Whether the partition exists, held here or not.
    pub fn has_partition(&self, topic_partition: &TopicPartition) -> bool {
        self.topics
            .get(&topic_partition.topic)
            .zip(usize::try_from(topic_partition.partition.0).ok())
            .is_some_and(|(topic, index)| index < topic.partitions.len())
    }

    /// The error for a partition whose log is not here: NOT_LEADER_OR_FOLLOWER
    /// if it exists (another broker holds it), UNKNOWN_TOPIC_OR_PARTITION if
    /// not, as Kafka's `ReplicaManager.getPartitionOrError` answers.
    pub fn not_here(&self, topic_partition: &TopicPartition) -> ErrorCode {
        match self.has_partition(topic_partition) {
            true => ErrorCode::NOT_LEADER_OR_FOLLOWER,
            false => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        }
    }

    /// How many partitions each of `shards` shards owns.
    pub fn shard_loads(&self, shards: u16) -> Vec<usize> {
        let mut loads = vec![0usize; usize::from(shards.max(1))];
        for shard in self
            .topics
            .values()
            .flat_map(|topic| topic.partitions.iter().flatten())
        {
            if let Some(load) = loads.get_mut(usize::from(shard.0)) {
                *load += 1;
            }
        }
        loads
    }

    /// Gives partitions owned by shards the broker no longer runs (it was
    /// restarted with fewer `--cores`) to the least-loaded running shards;
    /// returns how many moved. Partition data is not per shard, so only the
    /// owner changes.
    pub fn reassign_beyond(&mut self, shards: u16) -> usize {
        let mut loads = self.shard_loads(shards);
        let mut moved = 0;
        for topic in self.topics.values_mut() {
            for owner in topic
                .partitions
                .iter_mut()
                .flatten()
                .filter(|owner| owner.0 >= shards)
            {
                *owner = place_partitions(1, &mut loads)[0];
                moved += 1;
            }
        }
        moved
    }

    /// Every partition this broker holds, with its owner.
    pub fn partitions(&self) -> impl Iterator<Item = (TopicPartition, ShardId)> + '_ {
        self.topics.values().flat_map(|topic| {
            let held = topic.partitions.iter().enumerate();
            held.filter_map(|(index, shard)| {
                let topic_partition = TopicPartition {
                    topic: topic.name.clone(),
                    partition: PartitionId(index as i32),
                };
                Some((topic_partition, (*shard)?))
            })
        })
    }

    pub fn encode(&self) -> String {
        let mut text = String::from("brook-metadata 1\n");
        if self.follows > 0 {
            text.push_str(&format!("follows {}\n", self.follows));
        }
        for topic in self.topics.values() {
            let shards: Vec<String> = topic
                .partitions
                .iter()
                .map(|shard| shard.map_or("-".to_owned(), |shard| shard.0.to_string()))
                .collect();
            text.push_str(&format!(
                "topic {} {} {}\n",
                topic.name,
                topic.id.to_hex(),
                shards.join(",")
            ));
            for (key, value) in &topic.configs {
                text.push_str(&format!("config {} {key}={value}\n", topic.name));
            }
        }
        for (resource, configs) in &self.broker_configs {
            let resource = match resource.as_str() {
                CLUSTER_DEFAULT => DEFAULT_RESOURCE_WORD,
                broker => broker,
            };
            for (key, value) in configs {
                text.push_str(&format!("broker-config {resource} {key}={value}\n"));
            }
        }
        text
    }

    pub fn decode(text: &str) -> Result<LocalImage, ImageError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(number, line)| (number + 1, line));
        match lines.next() {
            Some((_, "brook-metadata 1")) => {}
            _ => {
                return Err(ImageError {
                    line: 1,
                    reason: "not a brook-metadata 1 file",
                });
            }
        }
        let mut image = LocalImage::default();
        for (line, content) in lines.filter(|(_, content)| !content.trim().is_empty()) {
            // A config value may hold spaces ("compact, delete"): it is the
            // rest of its line.
            if let Some(config) = content.strip_prefix("broker-config ") {
                let bad = ImageError {
                    line,
                    reason: "bad broker config",
                };
                let (resource, setting) = config.split_once(' ').ok_or(bad.clone())?;
                let (key, value) = setting.split_once('=').ok_or(bad)?;
                let resource = match resource {
                    DEFAULT_RESOURCE_WORD => CLUSTER_DEFAULT,
                    broker => broker,
                };
                image
                    .broker_configs
                    .entry(resource.to_owned())
                    .or_default()
                    .insert(key.to_owned(), value.to_owned());
                continue;
            }
            if let Some(config) = content.strip_prefix("config ") {
                let (name, setting) = config.split_once(' ').ok_or(ImageError {
                    line,
                    reason: "bad config",
                })?;
                let (key, value) = setting.split_once('=').ok_or(ImageError {
                    line,
                    reason: "bad config",
                })?;
                let topic = image.topics.get_mut(name).ok_or(ImageError {
                    line,
                    reason: "config of an unknown topic",
                })?;
                topic.configs.insert(key.to_owned(), value.to_owned());
                continue;
            }
            let fields: Vec<&str> = content.split(' ').collect();
            match fields.as_slice() {
                ["topic", name, id, shards] => {
                    let id = TopicId::from_hex(id).ok_or(ImageError {
                        line,
                        reason: "bad topic id",
                    })?;
                    let partitions = parse_shards(shards).ok_or(ImageError {
                        line,
                        reason: "bad shard list",
                    })?;
                    let topic = TopicMetadata {
                        name: (*name).to_owned(),
                        id,
                        partitions,
                        configs: BTreeMap::new(),
                    };
                    image.topics.insert(topic.name.clone(), topic);
                }
                ["follows", offset] => {
                    image.follows = offset.parse().map_err(|_| ImageError {
                        line,
                        reason: "bad offset",
                    })?;
                }
                _ => {
                    return Err(ImageError {
                        line,
                        reason: "unknown record",
                    });
                }
            }
        }
        Ok(image)
    }
}

fn parse_shards(text: &str) -> Option<Vec<Option<ShardId>>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|shard| match shard {
            "-" => Some(None),
            shard => shard.parse::<u16>().ok().map(|shard| Some(ShardId(shard))),
        })
        .collect()
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("metadata line {line}: {reason}")]
pub struct ImageError {
    pub line: usize,
    pub reason: &'static str,
}

/// Owners for new partitions, `held` saying which of them this broker
/// holds: each held one goes to the least-loaded shard (see
/// [`place_partitions`]), the others have none.
pub fn place_held(held: &[bool], loads: &mut [usize]) -> Vec<Option<ShardId>> {
    held.iter()
        .map(|held| held.then(|| place_partitions(1, loads)[0]))
        .collect()
}

/// Owners for `count` new partitions: each goes to the least-loaded shard
/// (the lowest-numbered on ties), counting the ones placed before it.
pub fn place_partitions(count: usize, loads: &mut [usize]) -> Vec<ShardId> {
    (0..count)
        .map(|_| {
            let (shard, load) = loads
                .iter_mut()
                .enumerate()
                .min_by_key(|(shard, load)| (**load, *shard))
                .expect("at least one shard");
            *load += 1;
            ShardId(shard as u16)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> LocalImage {
        let mut image = LocalImage::default();
        let orders = TopicMetadata {
            name: "orders".into(),
            id: TopicId([0xab; 16]),
            partitions: vec![Some(ShardId(0)), Some(ShardId(1)), Some(ShardId(0)), None],
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        };
        image.topics.insert(orders.name.clone(), orders);
        image
    }

    #[test]
    fn images_round_trip_through_text() {
        let image = image();
        let text = image.encode();
        assert_eq!(
            text,
            "brook-metadata 1\ntopic orders abababababababababababababababab 0,1,0,-\nconfig orders retention.ms=1000\n"
        );
        assert_eq!(LocalImage::decode(&text), Ok(image));
        assert!(LocalImage::decode("brook-metadata 2\n").is_err());
        assert!(LocalImage::decode("brook-metadata 1\ntopic x zz 0\n").is_err());
        assert!(LocalImage::decode("brook-metadata 1\nconfig x a=b\n").is_err());
        assert!(LocalImage::decode("brook-metadata 1\nfollows x\n").is_err());
    }

    /// A cluster broker's image says which metadata log offset it follows;
    /// a one-node broker's file is unchanged (no `follows` line).
    #[test]
    fn the_followed_offset_round_trips() {
        let mut image = image();
        image.follows = 1234;
        let text = image.encode();
        assert!(text.starts_with("brook-metadata 1\nfollows 1234\ntopic orders "));
        assert_eq!(LocalImage::decode(&text), Ok(image));
    }

    #[test]
    fn config_values_with_spaces_round_trip() {
        let mut image = image();
        let orders = image.topics.get_mut("orders").unwrap();
        orders
            .configs
            .insert("cleanup.policy".into(), "compact, delete".into());
        orders.configs.insert("retention.ms".into(), " 1000".into());
        assert_eq!(LocalImage::decode(&image.encode()), Ok(image));
    }

    /// Dynamic broker configs round-trip, the cluster-wide default's
    /// empty resource name included.
    #[test]
    fn broker_configs_round_trip() {
        let mut image = image();
        image.broker_configs.insert(
            CLUSTER_DEFAULT.into(),
            [("log.retention.ms".to_owned(), "5000".to_owned())].into(),
        );
        image.broker_configs.insert(
            "1".into(),
            [("custom".to_owned(), "a b=c".to_owned())].into(),
        );
        let text = image.encode();
        assert!(text.ends_with(
            "broker-config default log.retention.ms=5000\nbroker-config 1 custom=a b=c\n"
        ));
        assert_eq!(LocalImage::decode(&text), Ok(image));
        assert!(LocalImage::decode("brook-metadata 1\nbroker-config 1\n").is_err());
    }

    #[test]
    fn owners_and_loads() {
        let image = image();
        assert_eq!(
            image.owner(&TopicPartition::new("orders", 1)),
            Some(ShardId(1))
        );
        // Partition 3 exists, held by other brokers.
        assert_eq!(image.owner(&TopicPartition::new("orders", 3)), None);
        assert!(image.has_partition(&TopicPartition::new("orders", 3)));
        assert_eq!(
            image.not_here(&TopicPartition::new("orders", 3)),
            ErrorCode::NOT_LEADER_OR_FOLLOWER
        );
        assert_eq!(image.owner(&TopicPartition::new("orders", 4)), None);
        assert!(!image.has_partition(&TopicPartition::new("orders", 4)));
        assert_eq!(
            image.not_here(&TopicPartition::new("orders", 4)),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
        assert!(!image.has_partition(&TopicPartition::new("orders", -1)));
        assert_eq!(image.shard_loads(3), vec![2, 1, 0]);
        assert_eq!(image.partitions().count(), 3);
    }

    #[test]
    fn partitions_of_shards_gone_move_to_running_ones() {
        let mut image = image();
        // orders: shards 0, 1, 0; run with one shard.
        assert_eq!(image.reassign_beyond(1), 1);
        assert_eq!(
            image.topics["orders"].partitions,
            [vec![Some(ShardId(0)); 3], vec![None]].concat()
        );
        assert_eq!(image.reassign_beyond(1), 0);
    }

    #[test]
    fn placement_fills_the_least_loaded_shards_first() {
        let mut loads = vec![2, 1, 0];
        let placed = place_partitions(5, &mut loads);
        assert_eq!(
            placed,
            vec![ShardId(2), ShardId(1), ShardId(2), ShardId(0), ShardId(1)]
        );
        assert_eq!(loads, vec![3, 3, 2]);
    }

    #[test]
    fn topic_names_follow_kafka() {
        assert_eq!(validate_topic_name("orders.v1_x-2"), Ok(()));
        assert_eq!(validate_topic_name(""), Err(TopicNameError::Empty));
        assert_eq!(validate_topic_name(".."), Err(TopicNameError::Dots));
        assert!(matches!(
            validate_topic_name("a b"),
            Err(TopicNameError::IllegalCharacters(_))
        ));
        assert_eq!(
            validate_topic_name(&"x".repeat(250)),
            Err(TopicNameError::TooLong)
        );
    }
}
