//! A topic's configs as DescribeConfigs v4 gives them (Kafka's names, the
//! effective value and where it comes from), shared by `describe` and
//! `alter-config`.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::cli::{CliError, Session};
use crate::topic::{RESOURCE_TOPIC, kafka_error};

/// DescribeConfigs v4: config types and documentation (Kafka 2.6+; Brook
/// serves 1-4).
const DESCRIBE_CONFIGS_VERSION: i16 = 4;
/// Kafka's `DescribeConfigsResponse.ConfigSource.DEFAULT_CONFIG`.
const SOURCE_DEFAULT: i8 = 5;

/// One config of a topic.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigValue {
    /// `None` when the broker hides it (sensitive) or it has no value.
    pub value: Option<String>,
    /// Kafka's name for where the value comes from: DYNAMIC_TOPIC_CONFIG
    /// (set on the topic), STATIC_BROKER_CONFIG, DEFAULT_CONFIG, ….
    pub source: &'static str,
    pub read_only: bool,
    pub sensitive: bool,
}

impl ConfigValue {
    /// The value as a table cell.
    pub fn cell(&self) -> String {
        match &self.value {
            Some(value) => value.clone(),
            None if self.sensitive => "(sensitive)".to_owned(),
            None => "(none)".to_owned(),
        }
    }
}

/// Kafka's names of `ConfigSource` values.
pub fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        SOURCE_DEFAULT => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// The configs of `topics` (only `keys` when given), one result per topic
/// by name.
pub async fn describe(
    session: &Session,
    topics: &[String],
    keys: Option<&[String]>,
) -> Result<BTreeMap<String, DescribeConfigsResult>, CliError> {
    if topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let keys: Option<Vec<StrBytes>> =
        keys.map(|keys| keys.iter().cloned().map(StrBytes::from_string).collect());
    let resources = topics
        .iter()
        .map(|topic| {
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(topic.clone()))
                .with_configuration_keys(keys.clone())
        })
        .collect();
    let request = DescribeConfigsRequest::default().with_resources(resources);
    let response: DescribeConfigsResponse = session
        .request(
            session.bootstrap(),
            ApiKey::DescribeConfigs,
            DESCRIBE_CONFIGS_VERSION,
            &request,
        )
        .await?;
    Ok(response
        .results
        .into_iter()
        .map(|result| (result.resource_name.to_string(), result))
        .collect())
}

/// The configs in `result` by name: those not at Kafka's default unless
/// `all`; its error code as an error.
pub fn configs_of(
    topic: &str,
    result: Option<&DescribeConfigsResult>,
    all: bool,
) -> Result<BTreeMap<String, ConfigValue>, CliError> {
    let what = || format!("describing the configs of topic {topic}");
    let result = result
        .ok_or_else(|| CliError::Failed(format!("{}: the broker did not answer for it", what())))?;
    if result.error_code != 0 {
        return Err(kafka_error(
            what(),
            result.error_code,
            result.error_message.as_ref(),
        ));
    }
    Ok(result
        .configs
        .iter()
        .filter(|config| all || config.config_source != SOURCE_DEFAULT)
        .map(|config| {
            let value = ConfigValue {
                value: config.value.as_ref().map(|value| value.to_string()),
                source: source_name(config.config_source),
                read_only: config.read_only,
                sensitive: config.is_sensitive,
            };
            (config.name.to_string(), value)
        })
        .collect())
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;

    /// A DescribeConfigs result for topic `t` with `(name, value, source)`.
    pub fn result(configs: &[(&str, Option<&str>, i8)]) -> DescribeConfigsResult {
        DescribeConfigsResult::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_static_str("t"))
            .with_configs(
                configs
                    .iter()
                    .map(|(name, value, source)| {
                        DescribeConfigsResourceResult::default()
                            .with_name(StrBytes::from_string(name.to_string()))
                            .with_value(value.map(|v| StrBytes::from_string(v.to_owned())))
                            .with_config_source(*source)
                    })
                    .collect(),
            )
    }

    #[test]
    fn defaults_are_left_out_unless_all_are_asked_for() {
        let result = result(&[
            ("cleanup.policy", Some("delete"), 5),
            ("retention.ms", Some("3600000"), 1),
            ("segment.bytes", Some("1048576"), 4),
        ]);
        let set = configs_of("t", Some(&result), false).unwrap();
        let names: Vec<&str> = set.keys().map(String::as_str).collect();
        assert_eq!(names, ["retention.ms", "segment.bytes"]);
        assert_eq!(set["retention.ms"].source, "DYNAMIC_TOPIC_CONFIG");
        assert_eq!(set["segment.bytes"].source, "STATIC_BROKER_CONFIG");
        assert_eq!(set["retention.ms"].cell(), "3600000");
        assert_eq!(configs_of("t", Some(&result), true).unwrap().len(), 3);
    }

    #[test]
    fn errors_and_missing_results_fail() {
        let unknown = result(&[]).with_error_code(3);
        let error = configs_of("t", Some(&unknown), false).unwrap_err();
        assert_eq!(
            error.to_string(),
            "describing the configs of topic t: UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
        assert!(configs_of("t", None, false).is_err());
    }

    #[test]
    fn hidden_values_say_why() {
        let hidden = |sensitive| ConfigValue {
            value: None,
            source: source_name(1),
            read_only: false,
            sensitive,
        };
        assert_eq!(hidden(true).cell(), "(sensitive)");
        assert_eq!(hidden(false).cell(), "(none)");
        assert_eq!(source_name(42), "UNKNOWN");
    }
}
