//! `brook group describe G… [--members]`: as `kafka-consumer-groups
//! --describe`, per partition the group's committed offset, the log end
//! offset, the lag between them and the member the partition is assigned
//! to; a line with the group's state above. A partition with a committed
//! offset and no member shows `-` for the member; an assigned partition
//! with no committed offset shows `-` for the offset and the lag; a member
//! with no partitions gets a row of its own. `--members` prints one row per
//! member instead. A group that does not exist is an error, as in Kafka 4.

use std::collections::{BTreeMap, BTreeSet};

use brook_engine::group::assignor::TopicPartition;
use serde::Serialize;

use super::protocol::{self, Description, Member, STATE_DEAD};
use crate::cli::{CliError, Format, Out, Session, Table};

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// Groups to describe.
    #[arg(required = true, value_name = "GROUP")]
    pub groups: Vec<String>,
    /// One row per member (its partitions) instead of one per partition.
    #[arg(long)]
    pub members: bool,
}

/// One partition of a group (`--format json`: in its `partitions`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct PartitionRow {
    topic: String,
    partition: i32,
    current_offset: Option<i64>,
    log_end_offset: Option<i64>,
    lag: Option<i64>,
    consumer_id: Option<String>,
    host: Option<String>,
    client_id: Option<String>,
}

/// A member's partitions of one topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct AssignedTopic {
    topic: String,
    partitions: Vec<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct MemberReport {
    consumer_id: String,
    group_instance_id: Option<String>,
    host: String,
    client_id: String,
    assignment: Vec<AssignedTopic>,
}

/// One group (`--format json`: one such object per line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct GroupReport {
    group: String,
    coordinator: String,
    state: String,
    protocol_type: String,
    assignment_strategy: String,
    partitions: Vec<PartitionRow>,
    members: Vec<MemberReport>,
}

pub async fn run(session: &Session, args: DescribeArgs, format: &Format) -> Result<(), CliError> {
    let mut out = Out::new();
    for (index, group) in args.groups.iter().enumerate() {
        let description = protocol::describe_group(session, group).await?;
        let committed =
            protocol::committed_offsets(session, description.coordinator, group).await?;
        if description.state == STATE_DEAD && committed.is_empty() {
            out.flush()?;
            return Err(CliError::Failed(format!(
                "consumer group '{group}' does not exist"
            )));
        }
        let wanted: BTreeSet<TopicPartition> = committed
            .keys()
            .cloned()
            .chain(assigned(&description.members))
            .collect();
        let log_ends = log_end_offsets(session, &wanted).await?;
        let report = report(&description, &committed, &log_ends);
        match format {
            Format::Json => out.json(&report)?,
            _ => {
                if index > 0 {
                    out.line("")?;
                }
                out.line(&state_line(&report))?;
                let table = if args.members {
                    members_table(&report)
                } else {
                    partitions_table(&report)
                };
                if !table.is_empty() {
                    out.table(&table)?;
                }
            }
        }
    }
    out.flush()
}

fn assigned(members: &[Member]) -> impl Iterator<Item = TopicPartition> + '_ {
    members
        .iter()
        .flat_map(|member| member.assignment.iter().cloned())
}

/// The log end offset of each of `partitions` whose topic still exists.
async fn log_end_offsets(
    session: &Session,
    partitions: &BTreeSet<TopicPartition>,
) -> Result<BTreeMap<TopicPartition, i64>, CliError> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for partition in partitions {
        by_topic
            .entry(&partition.topic)
            .or_default()
            .push(partition.partition);
    }
    let mut log_ends = BTreeMap::new();
    for (topic, numbers) in by_topic {
        let Some(mut leaders) = protocol::leaders(session, topic).await? else {
            continue;
        };
        leaders.retain(|leader| numbers.contains(&leader.partition));
        let ends = protocol::offsets_at(session, topic, &leaders, crate::cli::time::LATEST).await?;
        for (partition, end) in ends {
            log_ends.insert(TopicPartition::new(topic, partition), end);
        }
    }
    Ok(log_ends)
}

/// The group's rows: every partition a member is assigned or the group
/// has an offset for, sorted; and its members.
fn report(
    description: &Description,
    committed: &BTreeMap<TopicPartition, i64>,
    log_ends: &BTreeMap<TopicPartition, i64>,
) -> GroupReport {
    let mut owners: BTreeMap<&TopicPartition, &Member> = BTreeMap::new();
    for member in &description.members {
        for partition in &member.assignment {
            owners.insert(partition, member);
        }
    }
    let all: BTreeSet<&TopicPartition> = committed.keys().chain(owners.keys().copied()).collect();
    let partitions = all
        .into_iter()
        .map(|partition| {
            let current = committed.get(partition).copied();
            let end = log_ends.get(partition).copied();
            let owner = owners.get(partition);
            PartitionRow {
                topic: partition.topic.clone(),
                partition: partition.partition,
                current_offset: current,
                log_end_offset: end,
                lag: current.zip(end).map(|(current, end)| end - current),
                consumer_id: owner.map(|member| member.member_id.clone()),
                host: owner.map(|member| member.host.clone()),
                client_id: owner.map(|member| member.client_id.clone()),
            }
        })
        .collect();
    GroupReport {
        group: description.group.clone(),
        coordinator: description.coordinator.to_string(),
        state: description.state.clone(),
        protocol_type: description.protocol_type.clone(),
        assignment_strategy: description.assignment_strategy.clone(),
        partitions,
        members: description.members.iter().map(member_report).collect(),
    }
}

fn member_report(member: &Member) -> MemberReport {
    let mut assignment: Vec<AssignedTopic> = Vec::new();
    let mut partitions = member.assignment.clone();
    partitions.sort();
    for partition in partitions {
        match assignment.last_mut() {
            Some(topic) if topic.topic == partition.topic => {
                topic.partitions.push(partition.partition);
            }
            _ => assignment.push(AssignedTopic {
                topic: partition.topic,
                partitions: vec![partition.partition],
            }),
        }
    }
    MemberReport {
        consumer_id: member.member_id.clone(),
        group_instance_id: member.group_instance_id.clone(),
        host: member.host.clone(),
        client_id: member.client_id.clone(),
        assignment,
    }
}

/// `Group 'G' is Stable with 2 members (assignor range, coordinator …).`
fn state_line(report: &GroupReport) -> String {
    let members = protocol::members_phrase(report.members.len());
    let assignor = if report.assignment_strategy.is_empty() {
        String::new()
    } else {
        format!("assignor {}, ", report.assignment_strategy)
    };
    format!(
        "Group '{}' is {} with {members} ({assignor}coordinator {}).",
        report.group, report.state, report.coordinator
    )
}

fn cell<T: ToString>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string)
}

fn partitions_table(report: &GroupReport) -> Table {
    let mut table = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    for row in &report.partitions {
        table.row([
            report.group.clone(),
            row.topic.clone(),
            row.partition.to_string(),
            cell(&row.current_offset),
            cell(&row.log_end_offset),
            cell(&row.lag),
            cell(&row.consumer_id),
            cell(&row.host),
            cell(&row.client_id),
        ]);
    }
    // Members with nothing assigned, as Kafka shows them.
    for member in report.members.iter().filter(|m| m.assignment.is_empty()) {
        let dashes = std::iter::repeat_n("-".to_owned(), 5);
        let cells = std::iter::once(report.group.clone()).chain(dashes).chain([
            member.consumer_id.clone(),
            member.host.clone(),
            member.client_id.clone(),
        ]);
        table.row(cells);
    }
    table
}

fn members_table(report: &GroupReport) -> Table {
    let mut table = Table::new(&[
        "GROUP",
        "CONSUMER-ID",
        "GROUP-INSTANCE-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ]);
    for member in &report.members {
        let count: usize = member.assignment.iter().map(|t| t.partitions.len()).sum();
        let assignment: Vec<String> = member
            .assignment
            .iter()
            .map(|topic| {
                let numbers: Vec<String> = topic.partitions.iter().map(i32::to_string).collect();
                format!("{}({})", topic.topic, numbers.join(","))
            })
            .collect();
        table.row([
            report.group.clone(),
            member.consumer_id.clone(),
            cell(&member.group_instance_id),
            member.host.clone(),
            member.client_id.clone(),
            count.to_string(),
            if assignment.is_empty() {
                "-".to_owned()
            } else {
                assignment.join(" ")
            },
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, partitions: &[(&str, i32)]) -> Member {
        Member {
            member_id: format!("{id}-uuid"),
            group_instance_id: None,
            client_id: id.to_owned(),
            host: "/127.0.0.1".to_owned(),
            assignment: partitions
                .iter()
                .map(|(topic, partition)| TopicPartition::new(*topic, *partition))
                .collect(),
        }
    }

    fn description(state: &str, members: Vec<Member>) -> Description {
        Description {
            group: "g".to_owned(),
            coordinator: "127.0.0.1:9092".parse().unwrap(),
            state: state.to_owned(),
            protocol_type: "consumer".to_owned(),
            assignment_strategy: "range".to_owned(),
            members,
        }
    }

    fn offsets(entries: &[(&str, i32, i64)]) -> BTreeMap<TopicPartition, i64> {
        entries
            .iter()
            .map(|(topic, partition, offset)| (TopicPartition::new(*topic, *partition), *offset))
            .collect()
    }

    #[test]
    fn lag_is_end_minus_committed_and_unknowns_are_dashes() {
        let group = description(
            "Stable",
            vec![member("a", &[("t", 1), ("t", 0)]), member("idle", &[])],
        );
        // t-0 committed and owned, t-1 owned with no commit, u-0 committed
        // with no owner, gone-0 committed on a topic that no longer exists.
        let committed = offsets(&[("t", 0, 4), ("u", 0, 2), ("gone", 0, 9)]);
        let ends = offsets(&[("t", 0, 6), ("t", 1, 4), ("u", 0, 2)]);
        let report = report(&group, &committed, &ends);
        let table = partitions_table(&report).render();
        let rows: Vec<Vec<&str>> = table
            .lines()
            .skip(1)
            .map(|line| line.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec!["g", "gone", "0", "9", "-", "-", "-", "-", "-"],
                vec!["g", "t", "0", "4", "6", "2", "a-uuid", "/127.0.0.1", "a"],
                vec!["g", "t", "1", "-", "4", "-", "a-uuid", "/127.0.0.1", "a"],
                vec!["g", "u", "0", "2", "2", "0", "-", "-", "-"],
                vec![
                    "g",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "idle-uuid",
                    "/127.0.0.1",
                    "idle"
                ],
            ]
        );
        assert_eq!(
            report.members[0].assignment,
            [AssignedTopic {
                topic: "t".to_owned(),
                partitions: vec![0, 1]
            }]
        );
        let members = members_table(&report).render();
        let first: Vec<&str> = members.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            first,
            ["g", "a-uuid", "-", "/127.0.0.1", "a", "2", "t(0,1)"]
        );
    }

    #[test]
    fn the_state_line_names_state_members_and_coordinator() {
        let stable = report(
            &description("Stable", vec![member("a", &[("t", 0)])]),
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        assert_eq!(
            state_line(&stable),
            "Group 'g' is Stable with 1 member (assignor range, coordinator 127.0.0.1:9092)."
        );
        let mut empty = description("Empty", Vec::new());
        empty.assignment_strategy.clear();
        let empty = report(&empty, &offsets(&[("t", 0, 1)]), &BTreeMap::new());
        assert_eq!(
            state_line(&empty),
            "Group 'g' is Empty with 0 members (coordinator 127.0.0.1:9092)."
        );
    }
}
