//! `brook topic describe [NAME…] [--all-configs]`: each partition's leader,
//! replicas, ISR and log start and end offsets (Metadata v12, then
//! ListOffsets -2 and -1 to each partition's leader), and the topic's
//! configs by Kafka's names (DescribeConfigs v4): those not at Kafka's
//! default, or all of them. No names: every topic but the internal ones.

use std::collections::BTreeMap;
use std::rc::Rc;

use brook_shards::client::cluster::PartitionLeader;
use kafka_protocol::messages::MetadataResponse;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use serde::Serialize;

use crate::cli::session::within;
use crate::cli::time::{EARLIEST, LATEST};
use crate::cli::{CliError, Format, Out, Session, Table};
use crate::topic::configs::{self, ConfigValue};
use crate::topic::list::{is_internal, replication_factor};
use crate::topic::{Failures, node_list, topic_id_text, unique};

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// Topics to describe (none: every topic but the internal ones).
    #[arg(value_name = "TOPIC")]
    topics: Vec<String>,
    /// Show every config, not only those that differ from Kafka's defaults.
    #[arg(long)]
    all_configs: bool,
}

/// One topic: the JSON object, and what the table shows.
#[derive(Debug, PartialEq, Serialize)]
struct TopicDescription {
    topic: String,
    topic_id: String,
    internal: bool,
    partition_count: usize,
    replication_factor: usize,
    partitions: Vec<PartitionDescription>,
    configs: BTreeMap<String, ConfigValue>,
}

#[derive(Debug, PartialEq, Serialize)]
struct PartitionDescription {
    partition: i32,
    /// `None` when the partition has no leader.
    leader: Option<i32>,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    /// `None` when they could not be read (no leader, or an error).
    log_start_offset: Option<i64>,
    log_end_offset: Option<i64>,
}

/// Log start and end offsets by partition.
#[derive(Debug, Default)]
struct LogOffsets {
    start: BTreeMap<i32, i64>,
    end: BTreeMap<i32, i64>,
}

/// The metadata of the topics to describe, in the order asked for; the
/// ones the broker does not know (or reports with an error) are failures.
fn chosen<'a>(
    metadata: &'a MetadataResponse,
    names: &[String],
    failures: &mut Failures,
) -> Vec<&'a MetadataResponseTopic> {
    let name_of = |topic: &MetadataResponseTopic| {
        topic
            .name
            .as_ref()
            .map_or(String::new(), |name| name.to_string())
    };
    if names.is_empty() {
        let mut all: Vec<&MetadataResponseTopic> = metadata
            .topics
            .iter()
            .filter(|topic| topic.error_code == 0 && !is_internal(topic))
            .collect();
        all.sort_by_key(|topic| name_of(topic));
        return all;
    }
    let mut chosen = Vec::with_capacity(names.len());
    for name in names {
        match metadata.topics.iter().find(|topic| name_of(topic) == *name) {
            Some(topic) if topic.error_code == 0 => chosen.push(topic),
            Some(topic) => failures.push(CliError::Kafka {
                what: format!("describing topic {name}"),
                code: topic.error_code,
            }),
            None => failures.push(CliError::Failed(format!(
                "describing topic {name}: the broker did not answer for it"
            ))),
        }
    }
    chosen
}

/// The partitions' rows, by partition number; partition errors in the
/// metadata are failures (the row still shows what is known).
fn partition_rows(
    topic: &MetadataResponseTopic,
    offsets: &LogOffsets,
    failures: &mut Failures,
) -> Vec<PartitionDescription> {
    let name = topic.name.as_ref().map_or("", |name| name.as_str());
    let mut rows: Vec<PartitionDescription> = topic
        .partitions
        .iter()
        .map(|partition| {
            let index = partition.partition_index;
            if partition.error_code != 0 {
                failures.push(CliError::Kafka {
                    what: format!("partition {name}-{index}"),
                    code: partition.error_code,
                });
            }
            PartitionDescription {
                partition: index,
                leader: (partition.leader_id.0 >= 0).then_some(partition.leader_id.0),
                replicas: partition.replica_nodes.iter().map(|id| id.0).collect(),
                isr: partition.isr_nodes.iter().map(|id| id.0).collect(),
                log_start_offset: offsets.start.get(&index).copied(),
                log_end_offset: offsets.end.get(&index).copied(),
            }
        })
        .collect();
    rows.sort_by_key(|row| row.partition);
    rows
}

/// Each partition's log start and end, asked of its leader; partitions
/// with no leader are left out.
async fn log_offsets(
    session: &Session,
    metadata: &MetadataResponse,
    topic: &MetadataResponseTopic,
    name: &str,
) -> Result<LogOffsets, CliError> {
    let mut leaders = Vec::with_capacity(topic.partitions.len());
    for partition in &topic.partitions {
        if partition.leader_id.0 < 0 {
            continue;
        }
        leaders.push(PartitionLeader {
            partition: partition.partition_index,
            broker: Session::broker_address(metadata, partition.leader_id.0)?,
        });
    }
    let mut offsets = LogOffsets::default();
    for (timestamp, found) in [(EARLIEST, &mut offsets.start), (LATEST, &mut offsets.end)] {
        *found = within(
            || format!("the log offsets of {name}"),
            session.timeout(),
            async { Ok(session.cluster().offsets(name, &leaders, timestamp).await?) },
        )
        .await?;
    }
    Ok(offsets)
}

/// The table form: a line about the topic, its partitions, its configs.
fn render(description: &TopicDescription, all_configs: bool) -> String {
    let mut text = format!(
        "Topic: {}  TopicId: {}  PartitionCount: {}  ReplicationFactor: {}\n",
        description.topic,
        description.topic_id,
        description.partition_count,
        description.replication_factor
    );
    let offset = |offset: Option<i64>| offset.map_or("-".to_owned(), |o| o.to_string());
    let mut partitions = Table::new(&[
        "PARTITION",
        "LEADER",
        "REPLICAS",
        "ISR",
        "LOG-START",
        "LOG-END",
    ]);
    for row in &description.partitions {
        partitions.row([
            row.partition.to_string(),
            row.leader
                .map_or("none".to_owned(), |leader| leader.to_string()),
            node_list(&row.replicas),
            node_list(&row.isr),
            offset(row.log_start_offset),
            offset(row.log_end_offset),
        ]);
    }
    text.push_str(&partitions.render());
    if description.configs.is_empty() {
        text.push_str(if all_configs {
            "No configs.\n"
        } else {
            "Every config has Kafka's default value (--all-configs lists them).\n"
        });
        return text;
    }
    let mut configs = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
    for (name, config) in &description.configs {
        configs.row([name.clone(), config.cell(), config.source.to_owned()]);
    }
    text.push_str(&configs.render());
    text
}

pub async fn describe(
    session: Rc<Session>,
    args: DescribeArgs,
    format: Format,
) -> Result<(), CliError> {
    let names = unique(args.topics);
    let metadata = session
        .metadata((!names.is_empty()).then_some(names.as_slice()))
        .await?;
    let mut failures = Failures::default();
    let topics = chosen(&metadata, &names, &mut failures);
    let found: Vec<String> = topics
        .iter()
        .filter_map(|topic| topic.name.as_ref().map(|name| name.to_string()))
        .collect();
    let config_results = configs::describe(&session, &found, None).await?;
    let mut out = Out::new();
    for (index, (topic, name)) in topics.iter().zip(&found).enumerate() {
        let offsets = log_offsets(&session, &metadata, topic, name)
            .await
            .unwrap_or_else(|error| {
                failures.push(error);
                LogOffsets::default()
            });
        let configs = configs::configs_of(name, config_results.get(name), args.all_configs)
            .unwrap_or_else(|error| {
                failures.push(error);
                BTreeMap::new()
            });
        let description = TopicDescription {
            topic: name.clone(),
            topic_id: topic_id_text(topic.topic_id.as_bytes()),
            internal: is_internal(topic),
            partition_count: topic.partitions.len(),
            replication_factor: replication_factor(topic),
            partitions: partition_rows(topic, &offsets, &mut failures),
            configs,
        };
        match format {
            Format::Json => out.json(&description)?,
            _ => {
                if index > 0 {
                    out.line("")?;
                }
                out.line(render(&description, args.all_configs).trim_end())?;
            }
        }
    }
    out.flush()?;
    failures.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_shards::client::cluster::topic_name;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::metadata_response::MetadataResponsePartition;

    fn partition(index: i32, leader: i32) -> MetadataResponsePartition {
        MetadataResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(leader))
            .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
            .with_isr_nodes(vec![BrokerId(1)])
    }

    fn topic(name: &str) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(Some(topic_name(name)))
            .with_partitions(vec![partition(1, -1), partition(0, 1)])
    }

    #[test]
    fn partitions_show_leaders_replicas_isr_and_offsets() {
        let offsets = LogOffsets {
            start: BTreeMap::from([(0, 2)]),
            end: BTreeMap::from([(0, 6)]),
        };
        let mut failures = Failures::default();
        let rows = partition_rows(&topic("t"), &offsets, &mut failures);
        assert!(failures.finish().is_ok());
        assert_eq!(
            rows,
            [
                PartitionDescription {
                    partition: 0,
                    leader: Some(1),
                    replicas: vec![1, 2],
                    isr: vec![1],
                    log_start_offset: Some(2),
                    log_end_offset: Some(6),
                },
                PartitionDescription {
                    partition: 1,
                    leader: None,
                    replicas: vec![1, 2],
                    isr: vec![1],
                    log_start_offset: None,
                    log_end_offset: None,
                },
            ]
        );
        let description = TopicDescription {
            topic: "t".into(),
            topic_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            internal: false,
            partition_count: 2,
            replication_factor: 2,
            partitions: rows,
            configs: BTreeMap::from([(
                "retention.ms".to_owned(),
                ConfigValue {
                    value: Some("3600000".into()),
                    source: "DYNAMIC_TOPIC_CONFIG",
                    read_only: false,
                    sensitive: false,
                },
            )]),
        };
        assert_eq!(
            render(&description, false),
            "Topic: t  TopicId: AAAAAAAAAAAAAAAAAAAAAA  PartitionCount: 2  ReplicationFactor: 2\n\
             PARTITION  LEADER  REPLICAS  ISR  LOG-START  LOG-END\n\
             0          1       1,2       1    2          6\n\
             1          none    1,2       1    -          -\n\
             CONFIG        VALUE    SOURCE\n\
             retention.ms  3600000  DYNAMIC_TOPIC_CONFIG\n"
        );
    }

    #[test]
    fn partition_errors_fail_but_keep_the_row() {
        let mut failing = topic("t");
        failing.partitions[0].error_code = 5;
        let mut failures = Failures::default();
        let rows = partition_rows(&failing, &LogOffsets::default(), &mut failures);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            failures.finish().unwrap_err().to_string(),
            "partition t-1: LEADER_NOT_AVAILABLE (5)"
        );
    }

    #[test]
    fn named_topics_come_in_order_and_unknown_ones_fail() {
        let metadata = MetadataResponse::default().with_topics(vec![
            topic("b"),
            topic("a"),
            topic("gone").with_error_code(3),
            topic("__consumer_offsets").with_is_internal(true),
        ]);
        let mut failures = Failures::default();
        let names = ["a".to_owned(), "gone".to_owned(), "b".to_owned()];
        let found = chosen(&metadata, &names, &mut failures);
        let found: Vec<&str> = found
            .iter()
            .map(|t| t.name.as_ref().unwrap().as_str())
            .collect();
        assert_eq!(found, ["a", "b"]);
        assert_eq!(
            failures.finish().unwrap_err().to_string(),
            "describing topic gone: UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
        let mut failures = Failures::default();
        let every = chosen(&metadata, &[], &mut failures);
        let every: Vec<&str> = every
            .iter()
            .map(|t| t.name.as_ref().unwrap().as_str())
            .collect();
        assert_eq!(every, ["a", "b"]);
    }
}
