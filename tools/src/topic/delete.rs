//! `brook topic delete NAME… [--if-exists]`: DeleteTopics v6, topics named
//! by name (v6 also takes ids). A topic that fails does not stop the others.

use std::collections::BTreeMap;
use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_shards::client::cluster::topic_name;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse};
use serde::Serialize;

use crate::cli::{CliError, Format, KafkaCode, Out, Session, Table};
use crate::topic::{Failures, broker_timeout_ms, kafka_error, unique};

/// DeleteTopics v6: topics by name or id (Kafka 2.8+; Brook serves 1-6).
const DELETE_TOPICS_VERSION: i16 = 6;

#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Topics to delete.
    #[arg(required = true, value_name = "TOPIC")]
    topics: Vec<String>,
    /// A topic that does not exist is not an error.
    #[arg(long)]
    if_exists: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Deleted,
    /// Not there, and `--if-exists` said that is fine.
    Missing,
    Failed,
}

/// One line of the output.
#[derive(Debug, PartialEq, Serialize)]
struct DeletedTopic {
    topic: String,
    status: Status,
    error_code: i16,
    /// The one-line error, when it failed.
    error: Option<String>,
}

fn request(topics: &[String], timeout_ms: i32) -> DeleteTopicsRequest {
    DeleteTopicsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|name| DeleteTopicState::default().with_name(Some(topic_name(name))))
                .collect(),
        )
        .with_timeout_ms(timeout_ms)
}

/// What became of `name`, from its result (`None`: the broker left it out).
fn outcome(
    name: &str,
    result: Option<&DeletableTopicResult>,
    if_exists: bool,
) -> (DeletedTopic, Option<CliError>) {
    let what = || format!("deleting topic {name}");
    let (status, code, error) = match result {
        None => (
            Status::Failed,
            ErrorCode::UNKNOWN_SERVER_ERROR.0,
            Some(CliError::Failed(format!(
                "{}: the broker did not answer for it",
                what()
            ))),
        ),
        Some(result) => match result.error_code {
            0 => (Status::Deleted, 0, None),
            code if code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0 && if_exists => {
                (Status::Missing, code, None)
            }
            code => (
                Status::Failed,
                code,
                Some(kafka_error(what(), code, result.error_message.as_ref())),
            ),
        },
    };
    let row = DeletedTopic {
        topic: name.to_owned(),
        status,
        error_code: code,
        error: error.as_ref().map(CliError::to_string),
    };
    (row, error)
}

fn table(rows: &[DeletedTopic]) -> Table {
    let mut table = Table::new(&["TOPIC", "STATUS"]);
    for row in rows {
        let status = match row.status {
            Status::Deleted => "deleted".to_owned(),
            Status::Missing => "not found".to_owned(),
            Status::Failed => KafkaCode(row.error_code).to_string(),
        };
        table.row([row.topic.clone(), status]);
    }
    table
}

pub async fn delete(
    session: Rc<Session>,
    args: DeleteArgs,
    format: Format,
) -> Result<(), CliError> {
    let topics = unique(args.topics);
    let response: DeleteTopicsResponse = session
        .request(
            session.bootstrap(),
            ApiKey::DeleteTopics,
            DELETE_TOPICS_VERSION,
            &request(&topics, broker_timeout_ms(session.timeout())),
        )
        .await?;
    let results: BTreeMap<&str, &DeletableTopicResult> = response
        .responses
        .iter()
        .filter_map(|result| result.name.as_ref().map(|name| (name.as_str(), result)))
        .collect();
    let mut failures = Failures::default();
    let mut rows = Vec::with_capacity(topics.len());
    for name in &topics {
        let (row, error) = outcome(name, results.get(name.as_str()).copied(), args.if_exists);
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

    fn result(code: i16) -> DeletableTopicResult {
        DeletableTopicResult::default()
            .with_name(Some(topic_name("t")))
            .with_error_code(code)
    }

    #[test]
    fn topics_go_by_name() {
        let request = request(&["a".into(), "b".into()], 500);
        assert_eq!(request.timeout_ms, 500);
        let names: Vec<Option<&str>> = request
            .topics
            .iter()
            .map(|topic| topic.name.as_ref().map(|name| name.as_str()))
            .collect();
        assert_eq!(names, [Some("a"), Some("b")]);
        assert!(request.topic_names.is_empty());
    }

    #[test]
    fn outcomes_by_error_code() {
        let (row, error) = outcome("t", Some(&result(0)), false);
        assert_eq!((row.status, error.is_none()), (Status::Deleted, true));
        let (row, error) = outcome("t", Some(&result(3)), false);
        assert_eq!(row.status, Status::Failed);
        assert_eq!(
            error.unwrap().to_string(),
            "deleting topic t: UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
        let (row, error) = outcome("t", Some(&result(3)), true);
        assert_eq!((row.status, error.is_none()), (Status::Missing, true));
        let (row, error) = outcome("t", None, true);
        assert_eq!((row.status, error.is_some()), (Status::Failed, true));
        let rows = [
            outcome("a", Some(&result(0)), false).0,
            outcome("b", Some(&result(3)), false).0,
        ];
        assert_eq!(
            table(&rows).render(),
            "TOPIC  STATUS\na      deleted\nb      UNKNOWN_TOPIC_OR_PARTITION (3)\n"
        );
    }
}
