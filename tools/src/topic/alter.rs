//! `brook topic alter-config NAME --set KEY=VALUE… --delete KEY…`:
//! IncrementalAlterConfigs v1 on the topic (SET and DELETE, as
//! kafka-configs' `--add-config` and `--delete-config`), between two
//! DescribeConfigs of the keys it touches, so it prints what changed:
//! each key's value before and after.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::cli::{CliError, Format, Out, Session, Table};
use crate::topic::configs::{self, ConfigValue};
use crate::topic::{RESOURCE_TOPIC, parse_setting, topic_result};

/// IncrementalAlterConfigs v1: flexible versions (Kafka 2.4+; Brook serves 0-1).
const INCREMENTAL_ALTER_CONFIGS_VERSION: i16 = 1;

#[derive(Debug, clap::Args)]
pub struct AlterConfigArgs {
    /// The topic whose configs change.
    #[arg(value_name = "TOPIC")]
    topic: String,
    /// Set a config by its Kafka name, KEY=VALUE (repeatable).
    #[arg(short = 's', long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Remove a config from the topic, back to its default (repeatable).
    #[arg(short = 'd', long = "delete", value_name = "KEY")]
    deletes: Vec<String>,
}

/// Kafka's `AlterConfigOp.OpType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Operation {
    Set,
    Delete,
}

impl Operation {
    fn wire(self) -> i8 {
        match self {
            Operation::Set => 0,
            Operation::Delete => 1,
        }
    }
}

/// The checked arguments: each key once, in the order given.
#[derive(Debug, PartialEq)]
pub struct Plan {
    topic: String,
    changes: Vec<(String, Operation, Option<String>)>,
}

impl Plan {
    pub fn new(args: AlterConfigArgs) -> Result<Plan, CliError> {
        let mut changes: Vec<(String, Operation, Option<String>)> = Vec::new();
        let sets = args
            .sets
            .iter()
            .map(|text| parse_setting("--set", text).map(|(key, value)| (key, Some(value))));
        let deletes = args.deletes.iter().map(|key| {
            let key = key.trim();
            if key.is_empty() || key.contains('=') {
                Err(CliError::Usage(format!(
                    "--delete '{key}': expected a config name, like retention.ms"
                )))
            } else {
                Ok((key.to_owned(), None))
            }
        });
        for change in sets.chain(deletes) {
            let (key, value) = change?;
            if changes.iter().any(|(seen, _, _)| *seen == key) {
                return Err(CliError::Usage(format!(
                    "config {key} is changed twice (--set and --delete take each key once)"
                )));
            }
            let operation = match value {
                Some(_) => Operation::Set,
                None => Operation::Delete,
            };
            changes.push((key, operation, value));
        }
        if changes.is_empty() {
            return Err(CliError::Usage(
                "nothing to change: give --set KEY=VALUE or --delete KEY".to_owned(),
            ));
        }
        Ok(Plan {
            topic: args.topic,
            changes,
        })
    }

    fn keys(&self) -> Vec<String> {
        self.changes.iter().map(|(key, _, _)| key.clone()).collect()
    }

    fn request(&self) -> IncrementalAlterConfigsRequest {
        let configs = self
            .changes
            .iter()
            .map(|(key, operation, value)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(key.clone()))
                    .with_config_operation(operation.wire())
                    .with_value(value.clone().map(StrBytes::from_string))
            })
            .collect();
        let resource = AlterConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_string(self.topic.clone()))
            .with_configs(configs);
        IncrementalAlterConfigsRequest::default().with_resources(vec![resource])
    }
}

/// One line of the output: a config and its value before and after.
#[derive(Debug, PartialEq, Serialize)]
struct ConfigChange {
    topic: String,
    config: String,
    operation: Operation,
    before: Option<String>,
    after: Option<String>,
}

fn changes(
    plan: &Plan,
    before: &BTreeMap<String, ConfigValue>,
    after: &BTreeMap<String, ConfigValue>,
) -> Vec<ConfigChange> {
    let value = |configs: &BTreeMap<String, ConfigValue>, key: &str| {
        configs.get(key).and_then(|config| config.value.clone())
    };
    plan.changes
        .iter()
        .map(|(key, operation, _)| ConfigChange {
            topic: plan.topic.clone(),
            config: key.clone(),
            operation: *operation,
            before: value(before, key),
            after: value(after, key),
        })
        .collect()
}

fn table(rows: &[ConfigChange]) -> Table {
    let mut table = Table::new(&["CONFIG", "OPERATION", "BEFORE", "AFTER"]);
    let cell = |value: &Option<String>| value.clone().unwrap_or_else(|| "(none)".to_owned());
    for row in rows {
        let operation = match row.operation {
            Operation::Set => "set",
            Operation::Delete => "delete",
        };
        table.row([
            row.config.clone(),
            operation.to_owned(),
            cell(&row.before),
            cell(&row.after),
        ]);
    }
    table
}

/// The current values of the plan's keys (every source, defaults too).
async fn current(
    session: &Session,
    plan: &Plan,
) -> Result<BTreeMap<String, ConfigValue>, CliError> {
    let topics = [plan.topic.clone()];
    let results = configs::describe(session, &topics, Some(&plan.keys())).await?;
    configs::configs_of(&plan.topic, results.get(&plan.topic), true)
}

pub async fn alter(session: Rc<Session>, plan: Plan, format: Format) -> Result<(), CliError> {
    let before = current(&session, &plan).await?;
    let response: IncrementalAlterConfigsResponse = session
        .request(
            session.bootstrap(),
            ApiKey::IncrementalAlterConfigs,
            INCREMENTAL_ALTER_CONFIGS_VERSION,
            &plan.request(),
        )
        .await?;
    let what = format!("altering the configs of topic {}", plan.topic);
    topic_result(&response.responses, &plan.topic, &what, |result| {
        let name = result.resource_name.as_str();
        (name, result.error_code, result.error_message.as_ref())
    })?;
    let after = current(&session, &plan).await?;
    let rows = changes(&plan, &before, &after);
    Out::new().rows(&format, &rows, table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic::configs::tests::result;

    fn args(sets: &[&str], deletes: &[&str]) -> AlterConfigArgs {
        AlterConfigArgs {
            topic: "t".into(),
            sets: sets.iter().map(|s| s.to_string()).collect(),
            deletes: deletes.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn plans_take_each_key_once() {
        let plan = Plan::new(args(&["retention.ms=1000"], &["cleanup.policy"])).unwrap();
        assert_eq!(plan.keys(), ["retention.ms", "cleanup.policy"]);
        let request = plan.request();
        let resource = &request.resources[0];
        assert_eq!(resource.resource_type, 2);
        assert_eq!(resource.resource_name.as_str(), "t");
        let wire: Vec<(&str, i8, Option<&str>)> = resource
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.config_operation, c.value.as_deref()))
            .collect();
        assert_eq!(
            wire,
            [
                ("retention.ms", 0, Some("1000")),
                ("cleanup.policy", 1, None)
            ]
        );

        let failures = [
            (args(&[], &[]), "nothing to change"),
            (args(&["retention.ms"], &[]), "expected KEY=VALUE"),
            (args(&[], &["a=b"]), "expected a config name"),
            (args(&["a=1"], &["a"]), "config a is changed twice"),
            (args(&["a=1", "a=2"], &[]), "config a is changed twice"),
        ];
        for (args, expected) in failures {
            let error = Plan::new(args).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn changes_show_values_before_and_after() {
        let plan = Plan::new(args(&["retention.ms=1000"], &["cleanup.policy"])).unwrap();
        let before = result(&[
            ("retention.ms", Some("604800000"), 5),
            ("cleanup.policy", Some("compact"), 1),
        ]);
        let after = result(&[
            ("retention.ms", Some("1000"), 1),
            ("cleanup.policy", Some("delete"), 5),
        ]);
        let before = configs::configs_of("t", Some(&before), true).unwrap();
        let after = configs::configs_of("t", Some(&after), true).unwrap();
        let rows = changes(&plan, &before, &after);
        assert_eq!(rows[1].operation, Operation::Delete);
        assert_eq!(
            table(&rows).render(),
            "CONFIG          OPERATION  BEFORE     AFTER\n\
             retention.ms    set        604800000  1000\n\
             cleanup.policy  delete     compact    delete\n"
        );
        let unknown = changes(&plan, &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(
            (unknown[0].before.as_deref(), unknown[0].after.as_deref()),
            (None, None)
        );
    }
}
