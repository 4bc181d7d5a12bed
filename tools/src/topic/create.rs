//! `brook topic create NAME… [--partitions N] [--replication-factor N]
//! [--config KEY=VALUE]… [--if-not-exists]`: CreateTopics v7, whose -1
//! partitions and replication factor (allowed from v4) leave them to the
//! broker's defaults, as kafka-topics does.

use std::collections::BTreeMap;
use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_shards::client::cluster::{CREATE_TOPICS_VERSION, topic_name};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::cli::{CliError, Format, KafkaCode, Out, Session, Table};
use crate::topic::{
    Failures, broker_timeout_ms, kafka_error, parse_setting, topic_id_text, unique,
};

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Topics to create.
    #[arg(required = true, value_name = "TOPIC")]
    topics: Vec<String>,
    /// Partitions of each topic (-1: the broker's num.partitions).
    #[arg(short = 'p', long, default_value_t = -1, allow_negative_numbers = true)]
    partitions: i32,
    /// Replicas of each partition (-1: the broker's default.replication.factor).
    #[arg(short = 'r', long, default_value_t = -1, allow_negative_numbers = true)]
    replication_factor: i16,
    /// A topic config by its Kafka name, KEY=VALUE (repeatable).
    #[arg(short = 'c', long = "config", value_name = "KEY=VALUE")]
    configs: Vec<String>,
    /// A topic that already exists is not an error.
    #[arg(long)]
    if_not_exists: bool,
}

/// The checked arguments.
#[derive(Debug, PartialEq)]
pub struct Plan {
    topics: Vec<String>,
    partitions: i32,
    replication_factor: i16,
    configs: Vec<(String, String)>,
    if_not_exists: bool,
}

impl Plan {
    pub fn new(args: CreateArgs) -> Result<Plan, CliError> {
        let mut configs: Vec<(String, String)> = Vec::with_capacity(args.configs.len());
        for text in &args.configs {
            let (key, value) = parse_setting("--config", text)?;
            if configs.iter().any(|(seen, _)| *seen == key) {
                return Err(CliError::Usage(format!("--config {key} is given twice")));
            }
            configs.push((key, value));
        }
        Ok(Plan {
            topics: unique(args.topics),
            partitions: args.partitions,
            replication_factor: args.replication_factor,
            configs,
            if_not_exists: args.if_not_exists,
        })
    }

    fn request(&self, timeout_ms: i32) -> CreateTopicsRequest {
        let configs: Vec<CreatableTopicConfig> = self
            .configs
            .iter()
            .map(|(key, value)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(key.clone()))
                    .with_value(Some(StrBytes::from_string(value.clone())))
            })
            .collect();
        let topics = self
            .topics
            .iter()
            .map(|name| {
                CreatableTopic::default()
                    .with_name(topic_name(name))
                    .with_num_partitions(self.partitions)
                    .with_replication_factor(self.replication_factor)
                    .with_configs(configs.clone())
            })
            .collect();
        CreateTopicsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(timeout_ms)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Created,
    /// Already there, and `--if-not-exists` said that is fine.
    Exists,
    Failed,
}

/// One line of the output.
#[derive(Debug, PartialEq, Serialize)]
struct CreatedTopic {
    topic: String,
    status: Status,
    /// As the broker reports them (unknown when it failed).
    partitions: Option<i32>,
    replication_factor: Option<i16>,
    topic_id: Option<String>,
    error_code: i16,
    /// The one-line error, when it failed.
    error: Option<String>,
}

/// What became of `name`, from its result (`None`: the broker left it out).
fn outcome(
    name: &str,
    result: Option<&CreatableTopicResult>,
    if_not_exists: bool,
) -> (CreatedTopic, Option<CliError>) {
    let what = || format!("creating topic {name}");
    let Some(result) = result else {
        let error = CliError::Failed(format!("{}: the broker did not answer for it", what()));
        let row = CreatedTopic {
            topic: name.to_owned(),
            status: Status::Failed,
            partitions: None,
            replication_factor: None,
            topic_id: None,
            error_code: ErrorCode::UNKNOWN_SERVER_ERROR.0,
            error: Some(error.to_string()),
        };
        return (row, Some(error));
    };
    let code = result.error_code;
    let (status, error) = match code {
        0 => (Status::Created, None),
        code if code == ErrorCode::TOPIC_ALREADY_EXISTS.0 && if_not_exists => {
            (Status::Exists, None)
        }
        code => (
            Status::Failed,
            Some(kafka_error(what(), code, result.error_message.as_ref())),
        ),
    };
    let id = result.topic_id.as_bytes();
    let row = CreatedTopic {
        topic: name.to_owned(),
        status,
        partitions: (result.num_partitions >= 0).then_some(result.num_partitions),
        replication_factor: (result.replication_factor >= 0).then_some(result.replication_factor),
        topic_id: (code == 0 && *id != [0; 16]).then(|| topic_id_text(id)),
        error_code: code,
        error: error.as_ref().map(CliError::to_string),
    };
    (row, error)
}

fn table(rows: &[CreatedTopic]) -> Table {
    let mut table = Table::new(&["TOPIC", "PARTITIONS", "REPLICATION", "STATUS"]);
    let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
    for row in rows {
        let status = match row.status {
            Status::Created => "created".to_owned(),
            Status::Exists => "exists".to_owned(),
            Status::Failed => KafkaCode(row.error_code).to_string(),
        };
        table.row([
            row.topic.clone(),
            or_dash(row.partitions.map(|n| n.to_string())),
            or_dash(row.replication_factor.map(|n| n.to_string())),
            status,
        ]);
    }
    table
}

pub async fn create(session: Rc<Session>, plan: Plan, format: Format) -> Result<(), CliError> {
    let request = plan.request(broker_timeout_ms(session.timeout()));
    let response: CreateTopicsResponse = session
        .request(
            session.bootstrap(),
            ApiKey::CreateTopics,
            CREATE_TOPICS_VERSION,
            &request,
        )
        .await?;
    let results: BTreeMap<&str, &CreatableTopicResult> = response
        .topics
        .iter()
        .map(|result| (result.name.as_str(), result))
        .collect();
    let mut failures = Failures::default();
    let mut rows = Vec::with_capacity(plan.topics.len());
    for name in &plan.topics {
        let (row, error) = outcome(
            name,
            results.get(name.as_str()).copied(),
            plan.if_not_exists,
        );
        rows.push(row);
        if let Some(error) = error {
            failures.push(error);
        }
    }
    Out::new().rows(&format, &rows, table)?;
    failures.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(topics: &[&str], configs: &[&str]) -> CreateArgs {
        CreateArgs {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            partitions: 3,
            replication_factor: -1,
            configs: configs.iter().map(|c| c.to_string()).collect(),
            if_not_exists: false,
        }
    }

    #[test]
    fn plans_parse_configs_and_drop_repeated_topics() {
        let plan = Plan::new(args(&["a", "b", "a"], &["retention.ms=1000"])).unwrap();
        assert_eq!(plan.topics, ["a", "b"]);
        assert_eq!(plan.configs, [("retention.ms".into(), "1000".into())]);
        let request = plan.request(5000);
        assert_eq!(request.timeout_ms, 5000);
        assert_eq!(request.topics.len(), 2);
        assert_eq!(request.topics[1].name.as_str(), "b");
        assert_eq!(request.topics[1].num_partitions, 3);
        assert_eq!(request.topics[1].replication_factor, -1);
        assert_eq!(request.topics[1].configs[0].name.as_str(), "retention.ms");

        let error = Plan::new(args(&["a"], &["retention.ms"])).unwrap_err();
        assert!(error.to_string().contains("expected KEY=VALUE"), "{error}");
        let error = Plan::new(args(&["a"], &["x=1", "x=2"])).unwrap_err();
        assert_eq!(error.to_string(), "--config x is given twice");
    }

    fn result(code: i16, partitions: i32) -> CreatableTopicResult {
        CreatableTopicResult::default()
            .with_name(topic_name("t"))
            .with_error_code(code)
            .with_num_partitions(partitions)
            .with_replication_factor(if code == 0 { 1 } else { -1 })
    }

    #[test]
    fn outcomes_by_error_code() {
        let (row, error) = outcome("t", Some(&result(0, 3)), false);
        assert!(error.is_none());
        assert_eq!((row.status, row.partitions), (Status::Created, Some(3)));
        assert_eq!(row.replication_factor, Some(1));

        let exists = result(36, -1).with_error_message(Some(StrBytes::from_static_str("x")));
        let (row, error) = outcome("t", Some(&exists), false);
        assert_eq!(row.status, Status::Failed);
        assert_eq!(row.partitions, None);
        assert_eq!(
            error.unwrap().to_string(),
            "creating topic t (x): TOPIC_ALREADY_EXISTS (36)"
        );
        let (row, error) = outcome("t", Some(&exists), true);
        assert_eq!((row.status, error.is_none()), (Status::Exists, true));

        let (row, error) = outcome("t", None, false);
        assert_eq!(row.status, Status::Failed);
        assert!(error.unwrap().to_string().contains("did not answer"));
    }

    #[test]
    fn the_table_shows_the_status_or_the_error_name() {
        let rows = [
            outcome("new", Some(&result(0, 3)), false).0,
            outcome("old", Some(&result(36, -1)), false).0,
        ];
        assert_eq!(
            table(&rows).render(),
            "TOPIC  PARTITIONS  REPLICATION  STATUS\n\
             new    3           1            created\n\
             old    -           -            TOPIC_ALREADY_EXISTS (36)\n"
        );
    }
}
