//! `brook topic add-partitions NAME --total N`: CreatePartitions v3, whose
//! count is the new total (as kafka-topics' `--alter --partitions N`); the
//! broker places the new partitions. Prints the count before and after.

use std::rc::Rc;

use brook_shards::client::cluster::topic_name;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::{ApiKey, CreatePartitionsRequest, CreatePartitionsResponse};
use serde::Serialize;

use crate::cli::{CliError, Format, Out, Session, Table};
use crate::topic::{broker_timeout_ms, topic_result};

/// CreatePartitions v3: flexible versions (Kafka 2.7+; Brook serves 0-3).
const CREATE_PARTITIONS_VERSION: i16 = 3;

#[derive(Debug, clap::Args)]
pub struct AddPartitionsArgs {
    /// The topic to grow.
    #[arg(value_name = "TOPIC")]
    topic: String,
    /// The number of partitions it will have (more than it has now).
    #[arg(long, value_name = "N")]
    total: i32,
}

/// The output.
#[derive(Debug, PartialEq, Serialize)]
struct Grown {
    topic: String,
    /// `None` when the metadata did not say.
    partitions_before: Option<usize>,
    partitions: i32,
}

fn request(args: &AddPartitionsArgs, timeout_ms: i32) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic_name(&args.topic))
                .with_count(args.total)
                .with_assignments(None),
        ])
        .with_timeout_ms(timeout_ms)
}

fn table(grown: &Grown) -> Table {
    let mut table = Table::new(&["TOPIC", "PARTITIONS-BEFORE", "PARTITIONS"]);
    let before = grown
        .partitions_before
        .map_or("-".to_owned(), |count| count.to_string());
    table.row([grown.topic.clone(), before, grown.partitions.to_string()]);
    table
}

/// The topic's partition count now, if the metadata says (the broker's
/// answer to CreatePartitions is what decides).
async fn partition_count(session: &Session, topic: &str) -> Option<usize> {
    let names = [topic.to_owned()];
    let metadata = session.metadata(Some(&names)).await.ok()?;
    let found = metadata.topics.iter().find(|found| {
        found.error_code == 0
            && found
                .name
                .as_ref()
                .is_some_and(|name| name.as_str() == topic)
    })?;
    Some(found.partitions.len())
}

pub async fn add(
    session: Rc<Session>,
    args: AddPartitionsArgs,
    format: Format,
) -> Result<(), CliError> {
    let before = partition_count(&session, &args.topic).await;
    let response: CreatePartitionsResponse = session
        .request(
            session.bootstrap(),
            ApiKey::CreatePartitions,
            CREATE_PARTITIONS_VERSION,
            &request(&args, broker_timeout_ms(session.timeout())),
        )
        .await?;
    let what = format!("adding partitions to topic {}", args.topic);
    topic_result(&response.results, &args.topic, &what, |result| {
        let name = result.name.as_str();
        (name, result.error_code, result.error_message.as_ref())
    })?;
    let grown = Grown {
        topic: args.topic.clone(),
        partitions_before: before,
        partitions: args.total,
    };
    let mut out = Out::new();
    match format {
        Format::Json => out.json(&grown)?,
        _ => out.table(&table(&grown))?,
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_the_new_total() {
        let args = AddPartitionsArgs {
            topic: "t".into(),
            total: 6,
        };
        let request = request(&args, 10_000);
        assert_eq!(request.timeout_ms, 10_000);
        assert!(!request.validate_only);
        let topic = &request.topics[0];
        assert_eq!((topic.name.as_str(), topic.count), ("t", 6));
        assert!(topic.assignments.is_none());
        let grown = Grown {
            topic: "t".into(),
            partitions_before: Some(2),
            partitions: 6,
        };
        assert_eq!(
            table(&grown).render(),
            "TOPIC  PARTITIONS-BEFORE  PARTITIONS\nt      2                  6\n"
        );
    }
}
