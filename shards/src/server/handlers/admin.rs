//! CreateTopics, DeleteTopics and CreatePartitions, through the controller.

use std::collections::BTreeMap;
use std::rc::Rc;

use brook_engine::cluster::broker_config::BrokerConfig;
use brook_engine::cluster::describe::topic_entries;
use brook_engine::cluster::image::TopicId;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::types::BrokerId;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use uuid::Uuid;

use crate::server::controller::{self, Change, NewTopic, TopicOutcome};
use crate::server::handlers::cluster::uuid;
use crate::server::handlers::{text, topic_name};
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// A manual assignment's replica list, for the controller.
fn replicas(broker_ids: &[kafka_protocol::messages::BrokerId]) -> Vec<BrokerId> {
    broker_ids.iter().map(|id| BrokerId(id.0)).collect()
}

pub async fn create_topics(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: CreateTopicsRequest = request.decode_body()?;
    let configs_of = |topic: &CreatableTopic| -> BTreeMap<String, String> {
        topic
            .configs
            .iter()
            .filter_map(|config| {
                config
                    .value
                    .as_ref()
                    .map(|value| (config.name.to_string(), value.to_string()))
            })
            .collect()
    };
    // The controller checks the factor and places the replicas (or checks
    // the assignments).
    let new_topics = body
        .topics
        .iter()
        .map(|topic| NewTopic {
            name: topic.name.to_string(),
            partitions: topic.num_partitions,
            replication_factor: topic.replication_factor,
            configs: configs_of(topic),
            id: None,
            assignments: topic
                .assignments
                .iter()
                .map(|assignment| (assignment.partition_index, replicas(&assignment.broker_ids)))
                .collect(),
        })
        .collect();
    let outcomes = controller::apply(
        shard,
        Change::Create {
            topics: new_topics,
            validate_only: body.validate_only,
        },
    )
    .await;
    let mut outcomes = outcomes.into_iter();
    let broker = &shard.context.config;
    let topics = body
        .topics
        .iter()
        .map(|requested| {
            let outcome = outcomes.next().unwrap_or_else(|| TopicOutcome {
                name: requested.name.to_string(),
                error: ErrorCode::UNKNOWN_SERVER_ERROR,
                message: None,
                topic_id: TopicId::default(),
                partitions: 0,
                replication_factor: 0,
            });
            created_result(&outcome, broker, &configs_of(requested))
        })
        .collect();
    encode(
        request,
        &CreateTopicsResponse::default().with_topics(topics),
    )
}

fn failed_result(name: &str, error: ErrorCode, message: &str) -> CreatableTopicResult {
    CreatableTopicResult::default()
        .with_name(topic_name(name))
        .with_error_code(error.0)
        .with_error_message(Some(text(message)))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
}

fn created_result(
    outcome: &TopicOutcome,
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
) -> CreatableTopicResult {
    if outcome.error.is_error() {
        return failed_result(
            &outcome.name,
            outcome.error,
            outcome.message.as_deref().unwrap_or(""),
        );
    }
    let configs = topic_entries(broker, overrides)
        .into_iter()
        .map(|entry| {
            CreatableTopicConfigs::default()
                .with_name(text(&entry.name))
                .with_value(entry.value.as_deref().map(text))
                .with_read_only(entry.read_only)
                .with_config_source(entry.source as i8)
        })
        .collect();
    // Kafka's controller sets a null message on success (the schema's
    // default would be "").
    CreatableTopicResult::default()
        .with_name(topic_name(&outcome.name))
        .with_error_message(None)
        .with_topic_id(uuid(outcome.topic_id))
        .with_num_partitions(outcome.partitions as i32)
        .with_replication_factor(outcome.replication_factor)
        .with_configs(Some(configs))
}

pub async fn delete_topics(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: DeleteTopicsRequest = request.decode_body()?;
    let image = shard.local_image();
    // v6 names topics by name or id; earlier versions by name only.
    let requested: Vec<(Option<String>, Uuid)> = if request.api_version >= 6 {
        body.topics
            .iter()
            .map(|topic| {
                (
                    topic.name.as_ref().map(|name| name.to_string()),
                    topic.topic_id,
                )
            })
            .collect()
    } else {
        body.topic_names
            .iter()
            .map(|name| (Some(name.to_string()), Uuid::nil()))
            .collect()
    };
    let mut names = Vec::new();
    let mut results = Vec::new();
    for (name, id) in &requested {
        let resolved = match name {
            Some(name) => Some(name.clone()),
            None => image
                .topic_by_id(TopicId(*id.as_bytes()))
                .map(|topic| topic.name.clone()),
        };
        match resolved {
            Some(name) => {
                names.push(name.clone());
                results.push((Some(name), *id, None));
            }
            None => results.push((None, *id, Some(ErrorCode::UNKNOWN_TOPIC_ID))),
        }
    }
    let outcomes = controller::apply(shard, Change::Delete { names }).await;
    let mut outcomes = outcomes.into_iter();
    let responses = results
        .into_iter()
        .map(|(name, id, error)| {
            let (error, message, topic_id) = match error {
                Some(error) => (error, Some("unknown topic id".to_owned()), id),
                None => match outcomes.next() {
                    Some(outcome) => (outcome.error, outcome.message, uuid(outcome.topic_id)),
                    None => (ErrorCode::UNKNOWN_SERVER_ERROR, None, id),
                },
            };
            DeletableTopicResult::default()
                .with_name(name.as_deref().map(topic_name))
                .with_topic_id(topic_id)
                .with_error_code(error.0)
                .with_error_message(message.as_deref().map(text))
        })
        .collect();
    encode(
        request,
        &DeleteTopicsResponse::default().with_responses(responses),
    )
}

pub async fn create_partitions(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: CreatePartitionsRequest = request.decode_body()?;
    let mut results = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let name = topic.name.to_string();
        // Null asks the controller to place the new partitions; a list,
        // even an empty one, must give one per partition added.
        let assignments = topic.assignments.as_ref().map(|assignments| {
            assignments
                .iter()
                .map(|assignment| replicas(&assignment.broker_ids))
                .collect()
        });
        let change = Change::AddPartitions {
            topic: name.clone(),
            total: topic.count,
            assignments,
            validate_only: body.validate_only,
        };
        let outcome = controller::apply(shard, change)
            .await
            .pop()
            .unwrap_or_else(|| TopicOutcome {
                name: name.clone(),
                error: ErrorCode::UNKNOWN_SERVER_ERROR,
                message: None,
                topic_id: TopicId::default(),
                partitions: 0,
                replication_factor: 0,
            });
        results.push(
            CreatePartitionsTopicResult::default()
                .with_name(topic_name(&name))
                .with_error_code(outcome.error.0)
                .with_error_message(outcome.message.as_deref().map(text)),
        );
    }
    encode(
        request,
        &CreatePartitionsResponse::default().with_results(results),
    )
}
