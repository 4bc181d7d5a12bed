//! DescribeConfigs and IncrementalAlterConfigs, for topics (Kafka's names,
//! effective values and sources) and, read-only, for the broker.

use std::rc::Rc;

use brook_engine::cluster::topic_config::{
    ConfigOperation, TOPIC_CONFIGS, effective_value, is_list_config, resolve,
};
use brook_engine::log::config::LogConfig;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};

use crate::server::controller::{self, Change};
use crate::server::handlers::text;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// Kafka's `ConfigResource.Type`.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Kafka's `DescribeConfigsResponse.ConfigSource`.
pub const CONFIG_SOURCE_TOPIC: i8 = 1;
pub const CONFIG_SOURCE_STATIC_BROKER: i8 = 4;
pub const CONFIG_SOURCE_DEFAULT: i8 = 5;
/// Kafka's `ConfigType` values used here (v3+).
const CONFIG_TYPE_STRING: i8 = 2;
const CONFIG_TYPE_INT: i8 = 3;
const CONFIG_TYPE_LONG: i8 = 5;
const CONFIG_TYPE_DOUBLE: i8 = 6;
const CONFIG_TYPE_LIST: i8 = 7;

fn config_type(name: &str) -> i8 {
    match name {
        name if is_list_config(name) => CONFIG_TYPE_LIST,
        "message.timestamp.type" => CONFIG_TYPE_STRING,
        "min.cleanable.dirty.ratio" => CONFIG_TYPE_DOUBLE,
        "segment.bytes" | "segment.index.bytes" | "index.interval.bytes" | "max.message.bytes" => {
            CONFIG_TYPE_INT
        }
        _ => CONFIG_TYPE_LONG,
    }
}

fn entry(
    name: &str,
    value: Option<String>,
    source: i8,
    synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(text(name))
        .with_value(value.map(|value| text(&value)))
        .with_config_source(source)
        .with_synonyms(synonyms)
        .with_config_type(config_type(name))
}

/// Topic configs with effective values; sources say where each came from.
fn describe_topic(
    shard: &Shard,
    name: &str,
    keys: Option<&[String]>,
    synonyms: bool,
) -> DescribeConfigsResult {
    let result = DescribeConfigsResult::default()
        .with_resource_type(RESOURCE_TOPIC)
        .with_resource_name(text(name));
    let image = shard.image();
    let Some(topic) = image.topic(name) else {
        return result
            .with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0)
            .with_error_message(Some(text("unknown topic")));
    };
    let broker_defaults = &shard.context.config.log_defaults;
    let resolved =
        resolve(broker_defaults, &topic.configs).unwrap_or_else(|_| broker_defaults.clone());
    let configs = TOPIC_CONFIGS
        .iter()
        .filter(|config| keys.is_none_or(|keys| keys.iter().any(|key| key == config.topic)))
        .map(|config| {
            let broker_value = effective_value(broker_defaults, config.topic);
            let from_broker = broker_value != effective_value(&LogConfig::default(), config.topic);
            let source = if topic.configs.contains_key(config.topic) {
                CONFIG_SOURCE_TOPIC
            } else if from_broker {
                CONFIG_SOURCE_STATIC_BROKER
            } else {
                CONFIG_SOURCE_DEFAULT
            };
            let synonyms = if synonyms && from_broker {
                vec![
                    DescribeConfigsSynonym::default()
                        .with_name(text(config.broker))
                        .with_value(broker_value.map(|v| text(&v)))
                        .with_source(CONFIG_SOURCE_STATIC_BROKER),
                ]
            } else {
                Vec::new()
            };
            entry(
                config.topic,
                effective_value(&resolved, config.topic),
                source,
                synonyms,
            )
        })
        .collect();
    result.with_configs(configs)
}

/// The broker's log defaults under their broker-level names (read-only).
fn describe_broker(shard: &Shard, name: &str, keys: Option<&[String]>) -> DescribeConfigsResult {
    let result = DescribeConfigsResult::default()
        .with_resource_type(RESOURCE_BROKER)
        .with_resource_name(text(name));
    if name != shard.context.broker_id.to_string() && !name.is_empty() {
        return result
            .with_error_code(ErrorCode::INVALID_REQUEST.0)
            .with_error_message(Some(text("unknown broker")));
    }
    let config = &shard.context.config;
    let mut values: Vec<(&str, Option<String>)> = TOPIC_CONFIGS
        .iter()
        .map(|entry| {
            (
                entry.broker,
                effective_value(&config.log_defaults, entry.topic),
            )
        })
        .collect();
    values.push(("num.partitions", Some(config.num_partitions.to_string())));
    values.push((
        "auto.create.topics.enable",
        Some(config.auto_create_topics_enable.to_string()),
    ));
    values.push((
        "socket.request.max.bytes",
        Some(config.socket_request_max_bytes.to_string()),
    ));
    let configs = values
        .into_iter()
        .filter(|(key, _)| keys.is_none_or(|keys| keys.iter().any(|wanted| wanted == key)))
        .map(|(key, value)| {
            entry(key, value, CONFIG_SOURCE_STATIC_BROKER, Vec::new()).with_read_only(true)
        })
        .collect();
    result.with_configs(configs)
}

pub fn describe_configs(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: DescribeConfigsRequest = request.decode_body()?;
    let results = body
        .resources
        .iter()
        .map(|resource| {
            let name = resource.resource_name.to_string();
            let keys: Option<Vec<String>> = resource
                .configuration_keys
                .as_ref()
                .map(|keys| keys.iter().map(|key| key.to_string()).collect());
            match resource.resource_type {
                RESOURCE_TOPIC => {
                    describe_topic(shard, &name, keys.as_deref(), body.include_synonyms)
                }
                RESOURCE_BROKER => describe_broker(shard, &name, keys.as_deref()),
                other => DescribeConfigsResult::default()
                    .with_resource_type(other)
                    .with_resource_name(text(&name))
                    .with_error_code(ErrorCode::INVALID_REQUEST.0)
                    .with_error_message(Some(text("unsupported resource type"))),
            }
        })
        .collect();
    encode(
        request,
        &DescribeConfigsResponse::default().with_results(results),
    )
}

pub async fn incremental_alter_configs(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: IncrementalAlterConfigsRequest = request.decode_body()?;
    let mut responses = Vec::with_capacity(body.resources.len());
    for resource in body.resources {
        let name = resource.resource_name.to_string();
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(text(&name));
        if resource.resource_type != RESOURCE_TOPIC {
            let message = "dynamic broker configs are not supported; set them in the config file";
            responses.push(
                response
                    .with_error_code(ErrorCode::INVALID_REQUEST.0)
                    .with_error_message(Some(text(message))),
            );
            continue;
        }
        let changes: Option<Vec<(String, ConfigOperation)>> = resource
            .configs
            .iter()
            .map(|config| {
                let value = config.value.as_ref().map(|value| value.to_string());
                ConfigOperation::from_wire(config.config_operation, value)
                    .map(|operation| (config.name.to_string(), operation))
            })
            .collect();
        let (error, message) = match changes {
            None => (
                ErrorCode::INVALID_REQUEST,
                Some("unknown config operation".to_owned()),
            ),
            Some(changes) => {
                // Applied on the controller, to the topic's configs as they
                // are there, so concurrent alters do not undo each other.
                let change = Change::AlterConfigs {
                    topic: name.clone(),
                    changes,
                    validate_only: body.validate_only,
                };
                let outcome = controller::apply(shard, change).await.pop();
                outcome.map_or((ErrorCode::UNKNOWN_SERVER_ERROR, None), |outcome| {
                    (outcome.error, outcome.message)
                })
            }
        };
        responses.push(
            response
                .with_error_code(error.0)
                .with_error_message(message.as_deref().map(text)),
        );
    }
    encode(
        request,
        &IncrementalAlterConfigsResponse::default().with_responses(responses),
    )
}
