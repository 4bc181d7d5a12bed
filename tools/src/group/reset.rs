//! `brook group reset-offsets G (--topic T[:P,P…]… | --all-topics)
//! <strategy> [--execute]`: as `kafka-consumer-groups --reset-offsets`.
//! Each partition's new offset is picked by the strategy from its log start
//! and end (and, for `--to-datetime`, the offset at that time) and clamped
//! to the log ([`super::target`]). Without `--execute` nothing changes: the
//! new offsets are only printed. With it they are committed as an admin
//! commits for a group with no members (OffsetCommit, generation -1, no
//! member id), which Kafka allows only while the group is inactive (Empty
//! or Dead), so a running consumer cannot overwrite them.

use std::collections::BTreeMap;

use brook_engine::group::assignor::TopicPartition;
use brook_shards::client::PartitionLeader;
use clap::ArgGroup;
use serde::Serialize;

use super::protocol::{self, Description, UNKNOWN_TOPIC_OR_PARTITION};
use super::target::{self, Clamp, PartitionOffsets, Strategy, Target, TopicSpec};
use crate::cli::progress::Progress;
use crate::cli::time::{self, EARLIEST, LATEST};
use crate::cli::{CliError, Format, Out, Session, Table};

#[derive(Debug, clap::Args)]
#[command(group(ArgGroup::new("strategy").required(true).args(
    ["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
#[command(group(ArgGroup::new("scope").required(true).args(["topic", "all_topics"])))]
pub struct ResetArgs {
    /// The group whose committed offsets to set.
    #[arg(value_name = "GROUP")]
    pub group: String,
    /// A topic's partitions: TOPIC (all) or TOPIC:P,P… (repeatable).
    #[arg(long, value_name = "TOPIC[:P,P…]", value_parser = target::parse_topic_spec)]
    pub topic: Vec<TopicSpec>,
    /// Every partition the group has a committed offset for.
    #[arg(long)]
    pub all_topics: bool,
    /// To each partition's log start offset.
    #[arg(long)]
    pub to_earliest: bool,
    /// To each partition's log end offset.
    #[arg(long)]
    pub to_latest: bool,
    /// To this offset (clamped to the log).
    #[arg(long, value_name = "OFFSET", allow_hyphen_values = true)]
    pub to_offset: Option<i64>,
    /// To the first record at or after this time (milliseconds since the
    /// epoch or a date-time like 2026-11-30T10:00:00Z); the log end if none.
    #[arg(long, value_name = "TIME", value_parser = time::parse_timestamp)]
    pub to_datetime: Option<i64>,
    /// Move each committed offset by N (negative: back), clamped to the log.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub shift_by: Option<i64>,
    /// Commit the new offsets (without it, only print them).
    #[arg(long)]
    pub execute: bool,
    /// Only print the new offsets (the default).
    #[arg(long, conflicts_with = "execute")]
    pub dry_run: bool,
}

impl ResetArgs {
    fn strategy(&self) -> Result<Strategy, CliError> {
        let chosen = [
            self.to_earliest.then_some(Strategy::Earliest),
            self.to_latest.then_some(Strategy::Latest),
            self.to_offset.map(Strategy::Offset),
            self.to_datetime.map(Strategy::Datetime),
            self.shift_by.map(Strategy::ShiftBy),
        ];
        let mut chosen = chosen.into_iter().flatten();
        match (chosen.next(), chosen.next()) {
            (Some(strategy), None) => Ok(strategy),
            _ => Err(CliError::Usage(
                "give exactly one of --to-earliest, --to-latest, --to-offset, \
                 --to-datetime, --shift-by"
                    .to_owned(),
            )),
        }
    }
}

/// One partition's reset: printed, and committed with `--execute`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Planned {
    partition: TopicPartition,
    current: Option<i64>,
    target: Target,
}

/// One line of `--format json`.
#[derive(Debug, Serialize)]
struct ResetLine<'a> {
    group: &'a str,
    topic: &'a str,
    partition: i32,
    current_offset: Option<i64>,
    new_offset: i64,
    executed: bool,
}

pub async fn run(session: &Session, args: ResetArgs, format: &Format) -> Result<(), CliError> {
    let strategy = args.strategy()?;
    let group = args.group.as_str();
    let description = protocol::describe_group(session, group).await?;
    if !description.is_inactive() {
        let refusal = refusal(&description);
        if args.execute {
            return Err(CliError::Failed(refusal));
        }
        eprintln!("note: {refusal}");
    }
    let committed = protocol::committed_offsets(session, description.coordinator, group).await?;
    let scope = scope(&args, &committed);
    let planned = plan(session, strategy, &scope, &committed).await?;
    if args.execute {
        let offsets: Vec<(TopicPartition, i64)> = planned
            .iter()
            .map(|planned| (planned.partition.clone(), planned.target.offset))
            .collect();
        protocol::commit_offsets(session, description.coordinator, group, &offsets).await?;
    }
    for planned in &planned {
        if let Some(warning) = clamp_warning(planned) {
            eprintln!("note: {warning}");
        }
    }
    print(&planned, group, args.execute, format)?;
    if !args.execute {
        eprintln!("Dry run: nothing was committed; add --execute to commit these offsets.");
    }
    Ok(())
}

/// Why an active group's offsets are not reset (Kafka refuses the same).
fn refusal(description: &Description) -> String {
    format!(
        "group '{}' is {} with {}: offsets can be reset only while it is \
         inactive (Empty or Dead); stop its consumers first",
        description.group,
        description.state,
        protocol::members_phrase(description.members.len())
    )
}

/// The topics to reset and, per topic, which partitions (`None`: all).
fn scope(
    args: &ResetArgs,
    committed: &BTreeMap<TopicPartition, i64>,
) -> BTreeMap<String, Option<Vec<i32>>> {
    let mut scope: BTreeMap<String, Option<Vec<i32>>> = BTreeMap::new();
    if args.all_topics {
        for partition in committed.keys() {
            let entry = scope
                .entry(partition.topic.clone())
                .or_insert_with(|| Some(Vec::new()));
            if let Some(partitions) = entry {
                partitions.push(partition.partition);
            }
        }
    }
    for spec in &args.topic {
        let entry = scope.entry(spec.topic.clone()).or_insert(Some(Vec::new()));
        match (entry.as_mut(), &spec.partitions) {
            (Some(partitions), Some(more)) => partitions.extend(more),
            _ => *entry = None,
        }
    }
    scope
}

/// Each partition in `scope` with its new offset, asking each topic's
/// leaders for its log start and end (and the offset at the time).
async fn plan(
    session: &Session,
    strategy: Strategy,
    scope: &BTreeMap<String, Option<Vec<i32>>>,
    committed: &BTreeMap<TopicPartition, i64>,
) -> Result<Vec<Planned>, CliError> {
    let mut progress = Progress::new("reading partition offsets");
    let mut planned = Vec::new();
    for (topic, partitions) in scope {
        let leaders = topic_leaders(session, topic, partitions.as_deref()).await?;
        let starts = protocol::offsets_at(session, topic, &leaders, EARLIEST).await?;
        let ends = protocol::offsets_at(session, topic, &leaders, LATEST).await?;
        let at_time = match strategy.timestamp() {
            Some(time) => protocol::offsets_at(session, topic, &leaders, time).await?,
            None => BTreeMap::new(),
        };
        for leader in &leaders {
            let partition = TopicPartition::new(topic.as_str(), leader.partition);
            let found = |offsets: &BTreeMap<i32, i64>| {
                offsets.get(&leader.partition).copied().ok_or_else(|| {
                    CliError::Failed(format!("no offsets were listed for {partition}"))
                })
            };
            let offsets = PartitionOffsets {
                log_start: found(&starts)?,
                log_end: found(&ends)?,
                committed: committed.get(&partition).copied(),
                // ListOffsets by time answers -1 when no record is that late.
                at_time: at_time.get(&leader.partition).copied().filter(|o| *o >= 0),
            };
            let target = target::target(strategy, &offsets)
                .map_err(|error| CliError::Failed(format!("{partition}: {error}")))?;
            planned.push(Planned {
                current: offsets.committed,
                partition,
                target,
            });
        }
        progress.update(planned.len() as u64, None);
    }
    progress.finish();
    Ok(planned)
}

/// The leaders of `topic`'s partitions, only `partitions` when given (each
/// must exist).
async fn topic_leaders(
    session: &Session,
    topic: &str,
    partitions: Option<&[i32]>,
) -> Result<Vec<PartitionLeader>, CliError> {
    let unknown = |what: String| CliError::Kafka {
        what,
        code: UNKNOWN_TOPIC_OR_PARTITION,
    };
    let mut leaders = protocol::leaders(session, topic)
        .await?
        .ok_or_else(|| unknown(format!("topic {topic}")))?;
    if let Some(partitions) = partitions {
        if let Some(missing) = partitions
            .iter()
            .find(|partition| !leaders.iter().any(|l| l.partition == **partition))
        {
            return Err(unknown(format!("partition {topic}-{missing}")));
        }
        leaders.retain(|leader| partitions.contains(&leader.partition));
    }
    Ok(leaders)
}

/// What Kafka warns when a new offset is moved into the log.
fn clamp_warning(planned: &Planned) -> Option<String> {
    let Target {
        offset,
        wanted,
        clamp,
    } = planned.target;
    let partition = &planned.partition;
    match clamp {
        Clamp::Within => None,
        Clamp::ToLogStart => Some(format!(
            "new offset {wanted} of {partition} is below its log start offset: {offset} instead"
        )),
        Clamp::ToLogEnd => Some(format!(
            "new offset {wanted} of {partition} is past its log end offset: {offset} instead"
        )),
    }
}

fn print(
    planned: &[Planned],
    group: &str,
    executed: bool,
    format: &Format,
) -> Result<(), CliError> {
    let mut out = Out::new();
    match format {
        Format::Json => {
            for planned in planned {
                out.json(&ResetLine {
                    group,
                    topic: &planned.partition.topic,
                    partition: planned.partition.partition,
                    current_offset: planned.current,
                    new_offset: planned.target.offset,
                    executed,
                })?;
            }
        }
        _ => {
            let mut table = Table::new(&[
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "NEW-OFFSET",
            ]);
            for planned in planned {
                table.row([
                    group.to_owned(),
                    planned.partition.topic.clone(),
                    planned.partition.partition.to_string(),
                    planned
                        .current
                        .map_or_else(|| "-".to_owned(), |offset| offset.to_string()),
                    planned.target.offset.to_string(),
                ]);
            }
            out.table(&table)?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        reset: ResetArgs,
    }

    fn parse(args: &[&str]) -> Result<ResetArgs, clap::Error> {
        let argv = std::iter::once("reset-offsets").chain(args.iter().copied());
        Command::try_parse_from(argv).map(|command| command.reset)
    }

    #[test]
    fn exactly_one_strategy_and_a_scope_are_required() {
        let ok = parse(&["g", "--topic", "t:0,1", "--shift-by", "-2"]).unwrap();
        assert_eq!(ok.strategy().unwrap(), Strategy::ShiftBy(-2));
        assert!(!ok.execute);
        let ok = parse(&["g", "--all-topics", "--to-offset", "5", "--execute"]).unwrap();
        assert_eq!(ok.strategy().unwrap(), Strategy::Offset(5));
        let ok = parse(&["g", "--topic", "t", "--to-datetime", "1000"]).unwrap();
        assert_eq!(ok.strategy().unwrap(), Strategy::Datetime(1000));
        for bad in [
            &["g", "--topic", "t"][..],
            &["g", "--topic", "t", "--to-earliest", "--to-latest"],
            &["g", "--to-earliest"],
            &["g", "--topic", "t", "--all-topics", "--to-earliest"],
            &["g", "--topic", "t:x", "--to-earliest"],
            &[
                "g",
                "--topic",
                "t",
                "--to-earliest",
                "--execute",
                "--dry-run",
            ],
            &["g", "--topic", "t", "--to-datetime", "tomorrow"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scope_merges_topics_and_all_topics() {
        let committed: BTreeMap<TopicPartition, i64> = [("a", 0), ("a", 2), ("b", 1)]
            .into_iter()
            .map(|(topic, partition)| (TopicPartition::new(topic, partition), 5))
            .collect();
        let args = parse(&["g", "--all-topics", "--to-latest"]).unwrap();
        let all = scope(&args, &committed);
        assert_eq!(all["a"], Some(vec![0, 2]));
        assert_eq!(all["b"], Some(vec![1]));
        let args = parse(&[
            "g",
            "--topic",
            "a:1",
            "--topic",
            "a:3",
            "--topic",
            "c",
            "--to-latest",
        ])
        .unwrap();
        let named = scope(&args, &committed);
        assert_eq!(named["a"], Some(vec![1, 3]));
        assert_eq!(named["c"], None);
        assert!(!named.contains_key("b"));
    }

    #[test]
    fn clamped_offsets_are_reported() {
        let planned = |offset, wanted, clamp| Planned {
            partition: TopicPartition::new("t", 0),
            current: Some(3),
            target: Target {
                offset,
                wanted,
                clamp,
            },
        };
        assert_eq!(clamp_warning(&planned(4, 4, Clamp::Within)), None);
        assert_eq!(
            clamp_warning(&planned(6, 100, Clamp::ToLogEnd)).unwrap(),
            "new offset 100 of t-0 is past its log end offset: 6 instead"
        );
        assert_eq!(
            clamp_warning(&planned(0, -2, Clamp::ToLogStart)).unwrap(),
            "new offset -2 of t-0 is below its log start offset: 0 instead"
        );
    }
}
