//! DescribeConfigs, IncrementalAlterConfigs and AlterConfigs: topic configs
//! (Kafka's names, effective values and sources), the broker's configs
//! (dynamic ones per broker and cluster-wide, KIP-226) and groups' configs
//! (Kafka 4's GROUP resource; read-only, as Brook runs no KIP-848 groups
//! they would apply to).

use std::rc::Rc;

use brook_engine::cluster::broker_describe::{BrokerIdentity, broker_entries, default_entries};
use brook_engine::cluster::broker_dynamic;
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

use crate::server::ClientEndpoint;
use crate::server::controller::{self, Change};
use crate::server::handlers::text;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// This broker as the broker configs describe it.
pub(crate) fn identity(shard: &Shard) -> BrokerIdentity {
    let context = &shard.context;
    let list = |endpoint: fn(&ClientEndpoint) -> String| {
        context
            .listeners
            .iter()
            .map(|listener| format!("{}://{}", listener.name, endpoint(listener)))
            .collect::<Vec<_>>()
            .join(",")
    };
    BrokerIdentity {
        listen: list(|listener| listener.listen.to_string()),
        advertised: list(|listener| {
            format!("{}:{}", listener.advertised_host, listener.advertised_port)
        }),
        log_dirs: context
            .log_dirs
            .paths()
            .map(|dir| dir.display().to_string())
            .collect::<Vec<_>>()
            .join(","),
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
            let image = shard.local_image();
            match image.topic(name) {
                Some(topic) => Ok(topic_entries(&shard.config(), &topic.configs)),
                None => Err((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, None)),
            }
        }
        // An empty name asks for the cluster-wide dynamic defaults.
        RESOURCE_BROKER if name.is_empty() => Ok(default_entries(&shard.config())),
        RESOURCE_BROKER => match name.parse::<i32>() {
            Ok(id) if id == shard.context.broker_id => {
                Ok(broker_entries(&shard.config(), &identity(shard)))
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
                let alter = Alter {
                    resource_type: resource.resource_type,
                    name: &name,
                    changes,
                    replace: false,
                    validate_only: body.validate_only,
                };
                alter.apply(shard).await
            }
        };
        responses.push(
            AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(text(&name))
                .with_error_code(error.0)
                .with_error_message(message.as_deref().map(text)),
        );
    }
    encode(
        request,
        &IncrementalAlterConfigsResponse::default().with_responses(responses),
    )
}

/// AlterConfigs (Kafka's older, non-incremental API, still used by
/// aiokafka and kafkajs): the resource's configs become exactly the ones
/// given; one left out goes back to its default. A topic config given a
/// null value is left out; a broker config with one is refused (Kafka).
pub async fn alter_configs(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: AlterConfigsRequest = request.decode_body()?;
    let mut responses = Vec::with_capacity(body.resources.len());
    for resource in body.resources {
        let name = resource.resource_name.to_string();
        let changes = resource
            .configs
            .iter()
            .filter(|config| config.value.is_some() || resource.resource_type != RESOURCE_TOPIC)
            .map(|config| {
                let value = config.value.as_ref().map(|value| value.to_string());
                (config.name.to_string(), ConfigOperation::Set(value))
            })
            .collect();
        let alter = Alter {
            resource_type: resource.resource_type,
            name: &name,
            changes,
            replace: true,
            validate_only: body.validate_only,
        };
        let (error, message) = alter.apply(shard).await;
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

/// One resource's config changes, from either AlterConfigs API.
struct Alter<'a> {
    resource_type: i8,
    name: &'a str,
    changes: Vec<(String, ConfigOperation)>,
    /// AlterConfigs: the configs become exactly the `Set` ones.
    replace: bool,
    validate_only: bool,
}

impl Alter<'_> {
    /// Applied on the controller, to the configs as they are there, so
    /// that concurrent alters do not undo each other.
    async fn apply(self, shard: &Rc<Shard>) -> (ErrorCode, Option<String>) {
        let Alter {
            resource_type,
            name,
            changes,
            replace,
            validate_only,
        } = self;
        let change = match resource_type {
            RESOURCE_TOPIC if replace => Change::ReplaceConfigs {
                topic: name.to_owned(),
                configs: changes
                    .into_iter()
                    .filter_map(|(key, operation)| match operation {
                        ConfigOperation::Set(value) => Some((key, value?)),
                        _ => None,
                    })
                    .collect(),
                validate_only,
            },
            RESOURCE_TOPIC => Change::AlterConfigs {
                topic: name.to_owned(),
                changes,
                validate_only,
            },
            RESOURCE_BROKER => {
                // Checked here first, as Kafka's broker does before it
                // forwards: the resource is this broker or the default,
                // and the values hold under this broker's settings.
                if let Err(refused) = this_broker_or_default(shard, name) {
                    return refused;
                }
                let checked = broker_dynamic::altered(
                    &shard.context.config,
                    &shard.local_image().broker_configs,
                    name,
                    &changes,
                    replace,
                );
                if let Err(refusal) = checked {
                    return (refusal.error, Some(refusal.message));
                }
                Change::AlterBrokerConfigs {
                    resource: name.to_owned(),
                    changes,
                    replace,
                    validate_only,
                }
            }
            RESOURCE_BROKER_LOGGER => {
                return (
                    ErrorCode::INVALID_REQUEST,
                    Some(
                        "log levels cannot be changed at run time (KIP-412); Brook reads them \
                         from RUST_LOG at start"
                            .into(),
                    ),
                );
            }
            RESOURCE_GROUP => {
                return (
                    ErrorCode::INVALID_REQUEST,
                    Some("group configs are not supported: Brook runs classic groups only".into()),
                );
            }
            other => {
                return (
                    ErrorCode::INVALID_REQUEST,
                    Some(format!("Unknown resource type {other}")),
                );
            }
        };
        controller::apply(shard, change)
            .await
            .pop()
            .map_or((ErrorCode::UNKNOWN_SERVER_ERROR, None), |outcome| {
                (outcome.error, outcome.message)
            })
    }
}

/// A BROKER resource named for a change: empty (the cluster-wide default)
/// or this broker's id, else Kafka's refusal.
fn this_broker_or_default(shard: &Shard, name: &str) -> Result<(), (ErrorCode, Option<String>)> {
    if name.is_empty() {
        return Ok(());
    }
    let id = shard.context.broker_id;
    match name.parse::<i32>() {
        Ok(named) if named == id => Ok(()),
        Ok(_) => Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "Unexpected broker id, expected {id}, but received {name}"
            )),
        )),
        Err(_) => Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!("Node id must be an integer, but it is: {name}")),
        )),
    }
}

/// ListConfigResources (v0 is Kafka's ListClientMetricsResources).
pub fn list_config_resources(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: ListConfigResourcesRequest = request.decode_body()?;
    let image = shard.local_image();
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
