//! `brook topic list [--internal]`: every topic with its partition count and
//! replication factor, from one Metadata v12 request for all topics.

use std::rc::Rc;

use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use serde::Serialize;

use crate::cli::{CliError, Format, Out, Session, Table};
use crate::topic::{Failures, topic_id_text};

/// Kafka's internal topics (`Topic.INTERNAL_TOPICS`), hidden even from a
/// broker that does not flag them `is_internal`.
const INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Also list internal topics (__consumer_offsets, __transaction_state).
    #[arg(long)]
    internal: bool,
}

/// One line of the output.
#[derive(Debug, PartialEq, Serialize)]
struct ListedTopic {
    topic: String,
    partitions: usize,
    replication_factor: usize,
    internal: bool,
    topic_id: String,
}

/// The topics to show, by name; topics the broker reports with an error
/// become failures.
fn rows(
    topics: &[MetadataResponseTopic],
    internal: bool,
    failures: &mut Failures,
) -> Vec<ListedTopic> {
    let mut rows: Vec<ListedTopic> = Vec::with_capacity(topics.len());
    for topic in topics {
        let name = topic.name.as_ref().map_or("", |name| name.as_str());
        if topic.error_code != 0 {
            failures.push(CliError::Kafka {
                what: format!("listing topic {name}"),
                code: topic.error_code,
            });
            continue;
        }
        let is_internal = is_internal(topic);
        if is_internal && !internal {
            continue;
        }
        rows.push(ListedTopic {
            topic: name.to_owned(),
            partitions: topic.partitions.len(),
            replication_factor: replication_factor(topic),
            internal: is_internal,
            topic_id: topic_id_text(topic.topic_id.as_bytes()),
        });
    }
    rows.sort_by(|a, b| a.topic.cmp(&b.topic));
    rows
}

/// Whether `topic` is one of Kafka's internal topics.
pub fn is_internal(topic: &MetadataResponseTopic) -> bool {
    let name = topic.name.as_ref().map_or("", |name| name.as_str());
    topic.is_internal || INTERNAL_TOPICS.contains(&name)
}

/// The most replicas any partition has (they agree unless a reassignment
/// is under way).
pub fn replication_factor(topic: &MetadataResponseTopic) -> usize {
    topic
        .partitions
        .iter()
        .map(|partition| partition.replica_nodes.len())
        .max()
        .unwrap_or(0)
}

fn table(rows: &[ListedTopic]) -> Table {
    let mut table = Table::new(&["TOPIC", "PARTITIONS", "REPLICATION"]);
    for row in rows {
        table.row([
            row.topic.clone(),
            row.partitions.to_string(),
            row.replication_factor.to_string(),
        ]);
    }
    table
}

pub async fn list(session: Rc<Session>, args: ListArgs, format: Format) -> Result<(), CliError> {
    let metadata = session.metadata(None).await?;
    let mut failures = Failures::default();
    let rows = rows(&metadata.topics, args.internal, &mut failures);
    Out::new().rows(&format, &rows, table)?;
    failures.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_shards::client::cluster::topic_name;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::metadata_response::MetadataResponsePartition;

    fn topic(name: &str, partitions: usize, internal: bool) -> MetadataResponseTopic {
        let partition = MetadataResponsePartition::default()
            .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
            .with_isr_nodes(vec![BrokerId(1)]);
        MetadataResponseTopic::default()
            .with_name(Some(topic_name(name)))
            .with_is_internal(internal)
            .with_partitions(vec![partition; partitions])
    }

    #[test]
    fn internal_topics_are_hidden_unless_asked_for() {
        let topics = [
            topic("orders", 3, false),
            topic("__consumer_offsets", 50, true),
            // Not flagged by the broker, but one of Kafka's internal topics.
            topic("__transaction_state", 50, false),
            topic("audit", 1, false),
        ];
        let mut failures = Failures::default();
        let shown = rows(&topics, false, &mut failures);
        let names: Vec<&str> = shown.iter().map(|row| row.topic.as_str()).collect();
        assert_eq!(names, ["audit", "orders"]);
        assert_eq!(shown[1].partitions, 3);
        assert_eq!(shown[1].replication_factor, 2);
        let all = rows(&topics, true, &mut failures);
        assert_eq!(all.len(), 4);
        assert!(all.iter().filter(|row| row.internal).count() == 2);
        assert!(failures.finish().is_ok());
        assert_eq!(
            table(&shown).render(),
            "TOPIC   PARTITIONS  REPLICATION\n\
             audit   1           2\n\
             orders  3           2\n"
        );
    }

    #[test]
    fn topics_with_errors_fail_the_listing() {
        let topics = [
            topic("bad", 0, false).with_error_code(29),
            topic("ok", 1, false),
        ];
        let mut failures = Failures::default();
        assert_eq!(rows(&topics, false, &mut failures).len(), 1);
        let error = failures.finish().unwrap_err().to_string();
        assert_eq!(error, "listing topic bad: TOPIC_AUTHORIZATION_FAILED (29)");
    }
}
