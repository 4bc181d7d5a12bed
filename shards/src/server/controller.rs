//! Admin changes (topics, partitions, configs) as a broker asks them of the
//! active controller, which validates and places them and commits them to
//! the metadata log; answered once this broker serves the result. Every
//! node, one started alone too, has a controller quorum: this broker
//! decides none of it (its own topics then follow the log, see
//! [`crate::server::quorum::local_topics`]).

use std::collections::BTreeMap;
use std::rc::Rc;

use brook_engine::cluster::controller::TopicRequest;
use brook_engine::cluster::image::{ShardId, TopicId};
use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::cluster::topic_config::ConfigOperation;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::BrokerId;

use crate::server::quorum::FORWARD_TIMEOUT;
use crate::server::shard::Shard;

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
}

/// A topic to create.
#[derive(Clone, Debug)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// -1: `default.replication.factor` (the controller decides).
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// The id it is asked under; `None`: a new one.
    pub id: Option<TopicId>,
    /// Manual replica assignments, (partition, replicas); empty: the
    /// controller places the partitions.
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
}

/// Applies `change` at the active controller (forwarded), answered once
/// this broker serves the result. One outcome per topic.
pub async fn apply(shard: &Rc<Shard>, change: Change) -> Vec<TopicOutcome> {
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

fn change_names(change: &Change) -> Vec<String> {
    match change {
        Change::Create { topics, .. } => topics.iter().map(|topic| topic.name.clone()).collect(),
        Change::Delete { names } => names.clone(),
        Change::AddPartitions { topic, .. }
        | Change::AlterConfigs { topic, .. }
        | Change::ReplaceConfigs { topic, .. } => vec![topic.clone()],
        Change::AlterBrokerConfigs { resource, .. } => vec![resource.clone()],
    }
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
