//! DescribeConfigs, IncrementalAlterConfigs and AlterConfigs: topic configs
//! (Kafka's names, effective values and sources), the broker's configs
//! (read-only) and groups' configs (Kafka 4's GROUP resource; read-only, as
//! Brook runs no KIP-848 groups they would apply to).

use std::rc::Rc;

use brook_engine::cluster::broker_describe::{BrokerIdentity, broker_entries};
use brook_engine::cluster::describe::{
    ConfigEntry, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP, RESOURCE_TOPIC,
    config_resources, group_entries, topic_entries, wanted,
};
use brook_engine::cluster::topic_config::ConfigOperation;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ListConfigResourcesRequest,
    ListConfigResourcesResponse, alter_configs_response, list_config_resources_response,
};

use crate::server::controller::{self, Change};
use crate::server::handlers::text;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// This broker as the broker configs describe it.
pub(crate) fn identity(shard: &Shard) -> BrokerIdentity {
    let context = &shard.context;
    BrokerIdentity {
        listen: context.listen.to_string(),
        advertised: format!("{}:{}", context.advertised_host, context.advertised_port),
        log_dir: context.data_dir.display().to_string(),
    }
}

fn wire_entry(entry: ConfigEntry, synonyms: bool) -> DescribeConfigsResourceResult {
    let synonyms = if synonyms {
        entry
            .synonyms
            .iter()
            .map(|synonym| {
                DescribeConfigsSynonym::default()
                    .with_name(text(&synonym.name))
                    .with_value(synonym.value.as_deref().map(text))
                    .with_source(synonym.source as i8)
            })
            .collect()
    } else {
        Vec::new()
    };
    DescribeConfigsResourceResult::default()
        .with_name(text(&entry.name))
        .with_value(entry.value.as_deref().map(text))
        .with_read_only(entry.read_only)
        .with_config_source(entry.source as i8)
        .with_synonyms(synonyms)
        .with_config_type(entry.config_type as i8)
        // Kafka sends documentation only when asked for it, else null.
        .with_documentation(None)
}

/// One resource's result: its entries, or an error (with Kafka's message
/// where Kafka gives one).
fn described(
    shard: &Shard,
    resource_type: i8,
    name: &str,
) -> Result<Vec<ConfigEntry>, (ErrorCode, Option<String>)> {
    match resource_type {
        RESOURCE_TOPIC => {
            let image = shard.image();
            match image.topic(name) {
                Some(topic) => Ok(topic_entries(&shard.context.config, &topic.configs)),
                None => Err((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, None)),
            }
        }
        // An empty name asks for the cluster-wide dynamic defaults, which
        // Brook has none of.
        RESOURCE_BROKER if name.is_empty() => Ok(Vec::new()),
        RESOURCE_BROKER => match name.parse::<i32>() {
            Ok(id) if id == shard.context.broker_id => {
                Ok(broker_entries(&shard.context.config, &identity(shard)))
            }
            Ok(_) => Err((
                ErrorCode::INVALID_REQUEST,
                Some(format!(
                    "Unexpected broker id, expected {} or empty string, but received {name}",
                    shard.context.broker_id
                )),
            )),
            Err(_) => Err((
                ErrorCode::INVALID_REQUEST,
                Some(format!("Broker id must be an integer, but it is: {name}")),
            )),
        },
        // Brook's log levels are not configs: a broker's loggers are none.
        RESOURCE_BROKER_LOGGER if name == shard.context.broker_id.to_string() => Ok(Vec::new()),
        RESOURCE_BROKER_LOGGER => Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "Unexpected broker id, expected {} but received {name}",
                shard.context.broker_id
            )),
        )),
        RESOURCE_GROUP if name.is_empty() => Err((
            ErrorCode::INVALID_REQUEST,
            Some("Group name must not be empty".into()),
        )),
        RESOURCE_GROUP => Ok(group_entries(&Default::default())),
        other => Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!("Unsupported resource type: {other}")),
        )),
    }
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
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(text(&name));
            match described(shard, resource.resource_type, &name) {
                Ok(entries) => result.with_configs(
                    wanted(entries, keys.as_deref())
                        .into_iter()
                        .map(|entry| wire_entry(entry, body.include_synonyms))
                        .collect(),
                ),
                // Without a message the field keeps the schema's "", as
                // Kafka leaves it (an unknown topic).
                Err((error, Some(message))) => result
                    .with_error_code(error.0)
                    .with_error_message(Some(text(&message))),
                Err((error, None)) => result.with_error_code(error.0),
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
        if let Some(message) = unalterable(resource.resource_type) {
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

/// Why Brook refuses to alter configs of this resource type (only topic
/// configs can be altered).
fn unalterable(resource_type: i8) -> Option<&'static str> {
    match resource_type {
        RESOURCE_TOPIC => None,
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => {
            Some("dynamic broker configs are not supported; set them in the config file")
        }
        RESOURCE_GROUP => Some("group configs are not supported: Brook runs classic groups only"),
        _ => Some("unsupported resource type"),
    }
}

/// AlterConfigs (Kafka's older, non-incremental API, still used by
/// aiokafka and kafkajs): each topic's overrides become exactly the configs
/// given; one left out (or given a null value) goes back to its default.
pub async fn alter_configs(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: AlterConfigsRequest = request.decode_body()?;
    let mut responses = Vec::with_capacity(body.resources.len());
    for resource in body.resources {
        let name = resource.resource_name.to_string();
        let (error, message) = match unalterable(resource.resource_type) {
            Some(message) => (ErrorCode::INVALID_REQUEST, Some(message.to_owned())),
            None => {
                let configs = resource
                    .configs
                    .iter()
                    .filter_map(|config| {
                        let value = config.value.as_ref()?;
                        Some((config.name.to_string(), value.to_string()))
                    })
                    .collect();
                let change = Change::ReplaceConfigs {
                    topic: name.clone(),
                    configs,
                    validate_only: body.validate_only,
                };
                controller::apply(shard, change)
                    .await
                    .pop()
                    .map_or((ErrorCode::UNKNOWN_SERVER_ERROR, None), |outcome| {
                        (outcome.error, outcome.message)
                    })
            }
        };
        responses.push(
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(text(&name))
                .with_error_code(error.0)
                .with_error_message(message.as_deref().map(text)),
        );
    }
    encode(
        request,
        &AlterConfigsResponse::default().with_responses(responses),
    )
}

/// ListConfigResources (v0 is Kafka's ListClientMetricsResources).
pub fn list_config_resources(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: ListConfigResourcesRequest = request.decode_body()?;
    let image = shard.image();
    let listed = config_resources(
        request.api_version,
        &body.resource_types,
        image.topics.keys().cloned(),
        shard.context.broker_id,
    );
    let response = match listed {
        Ok(resources) => ListConfigResourcesResponse::default().with_config_resources(
            resources
                .into_iter()
                .map(|(kind, name)| {
                    list_config_resources_response::ConfigResource::default()
                        .with_resource_name(text(&name))
                        .with_resource_type(kind)
                })
                .collect(),
        ),
        Err(error) => ListConfigResourcesResponse::default().with_error_code(error.0),
    };
    encode(request, &response)
}
