//! `brook consume TOPIC`: print a topic's records, alone or as a member of
//! a consumer group, as kafka-console-consumer and kcat do, through Brook's
//! own client so it works against any Kafka cluster.
//!
//! - Start: the end (new records only) by default, `--from-beginning`,
//!   `--offset N`, or `--since TIME` (ListOffsets by timestamp: the first
//!   record at or after it; a partition with none starts at its end).
//! - `--group G`: a real member (range assignor, heartbeats, rebalances);
//!   starts at the committed offsets (else as `--from-beginning` says) and
//!   commits after printing each fetch (at-least-once) or before it with
//!   `--commit-before` (at-most-once); leaves the group on exit.
//! - `--isolation read_committed`: no records of open or aborted
//!   transactions.
//! - Ends after `-n COUNT` records, after `--idle-exit` with none, or on
//!   Ctrl-C / SIGTERM (committing first); exit 0.
//! - `--format`: the value per line (`--print-key`: key, tab, value),
//!   `json` lines, or a kcat template ([`template`]); see [`print`].
//!
//! Files: [`consumer`] the loop, [`fetch`] Fetch requests, [`decode`]
//! batches to records, [`group`] the member's requests, [`assign`] the pure
//! group rules, [`position`] starts to offsets, [`signal`] Ctrl-C.

mod assign;
mod consumer;
mod decode;
mod fetch;
mod group;
mod position;
mod print;
mod signal;
mod template;

use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use crate::cli::{self, CliError, ClientArgs, Format, Session, session::within, time};
use crate::consume::assign::{Reset, Start};
use crate::consume::consumer::{CommitWhen, Consumer};
use crate::consume::decode::Isolation;
use crate::consume::fetch::Fetcher;
use crate::consume::group::Member;
use crate::consume::print::RecordFormat;
use crate::consume::template::Template;

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION, for a `--partition` the topic lacks.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The topic to read.
    #[arg(value_name = "TOPIC")]
    pub topic: String,
    /// Start at each partition's first record (default: its end, so only
    /// new records). With --group, only where the group has no offset.
    #[arg(long, conflicts_with_all = ["offset", "since"])]
    pub from_beginning: bool,
    /// Start at this offset, in --partition or in every partition.
    #[arg(short = 'o', long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..),
          conflicts_with_all = ["since", "group"])]
    pub offset: Option<i64>,
    /// Start at the first record at or after TIME: milliseconds since the
    /// epoch, a date-time like 2026-11-30T10:00:00Z, or a duration ago (15m).
    #[arg(long, value_name = "TIME", value_parser = parse_since_now, conflicts_with = "group")]
    pub since: Option<i64>,
    /// Read only this partition.
    #[arg(short = 'p', long, value_name = "P", conflicts_with = "group")]
    pub partition: Option<i32>,
    /// Consume as a member of this consumer group, committing what is printed.
    #[arg(short = 'g', long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Commit before printing (at-most-once) instead of after (at-least-once).
    #[arg(long, requires = "group")]
    pub commit_before: bool,
    /// read_uncommitted (every record) or read_committed (only committed
    /// transactions' records).
    #[arg(long, value_enum, default_value = "read_uncommitted")]
    pub isolation: Isolation,
    /// Stop after COUNT records.
    #[arg(short = 'n', long = "max-messages", value_name = "COUNT")]
    pub max_messages: Option<u64>,
    /// Exit once no record has arrived for this long (e.g. 5s).
    #[arg(long, value_name = "DURATION", value_parser = time::parse_duration)]
    pub idle_exit: Option<Duration>,
    /// With the default format, print each key, a tab, then the value.
    #[arg(long)]
    pub print_key: bool,
}

fn parse_since_now(text: &str) -> Result<i64, String> {
    time::parse_since(text, SystemTime::now())
}

/// What the arguments ask for, checked before connecting.
#[derive(Debug)]
pub struct Plan {
    pub topic: String,
    /// Where each partition starts without a group.
    pub start: Start,
    /// Where to go with no committed offset, or out of range.
    pub reset: Reset,
    pub partition: Option<i32>,
    pub group: Option<String>,
    pub commit: CommitWhen,
    pub isolation: Isolation,
    pub max_messages: Option<u64>,
    pub idle_exit: Option<Duration>,
    pub format: RecordFormat,
}

impl Plan {
    fn from_args(args: ConsumeArgs) -> Result<Plan, CliError> {
        let reset = if args.from_beginning {
            Reset::Earliest
        } else {
            Reset::Latest
        };
        let start = match (args.offset, args.since) {
            (Some(offset), _) => Start::Offset(offset),
            (None, Some(millis)) => Start::Timestamp(millis),
            (None, None) => reset.start(),
        };
        let format = match args.client.format {
            Format::Table => RecordFormat::Lines {
                print_key: args.print_key,
            },
            Format::Json => RecordFormat::Json,
            Format::Template(text) => {
                RecordFormat::Template(Template::parse(&text).map_err(CliError::Usage)?)
            }
        };
        if args.topic.is_empty() {
            return Err(CliError::Usage("TOPIC is empty".to_owned()));
        }
        Ok(Plan {
            topic: args.topic,
            start,
            reset,
            partition: args.partition,
            group: args.group,
            commit: if args.commit_before {
                CommitWhen::BeforePrinting
            } else {
                CommitWhen::AfterPrinting
            },
            isolation: args.isolation,
            max_messages: args.max_messages,
            idle_exit: args.idle_exit,
            format,
        })
    }
}

pub fn run(args: ConsumeArgs) -> ExitCode {
    let client = args.client.clone();
    let plan = match Plan::from_args(args).and_then(|plan| signal::install().map(|()| plan)) {
        Ok(plan) => plan,
        Err(error) => return cli::exit("consume", Err(error)),
    };
    cli::run("consume", &client, move |session| consume(session, plan))
}

async fn consume(session: Rc<Session>, plan: Plan) -> Result<(), CliError> {
    let leaders = within(
        || format!("the metadata of {}", plan.topic),
        session.timeout(),
        async {
            // Metadata never creates topics: a missing one is an error here.
            let metadata = session
                .metadata(Some(std::slice::from_ref(&plan.topic)))
                .await?;
            let code = metadata
                .topics
                .first()
                .map_or(UNKNOWN_TOPIC_OR_PARTITION, |t| t.error_code);
            CliError::check(code, || format!("topic {}", plan.topic))?;
            Ok(session.cluster().leaders(&plan.topic).await?)
        },
    )
    .await?;
    if let Some(partition) = plan.partition {
        if !leaders.iter().any(|leader| leader.partition == partition) {
            return Err(CliError::Kafka {
                what: format!("partition {}-{partition}", plan.topic),
                code: UNKNOWN_TOPIC_OR_PARTITION,
            });
        }
    }
    let fetcher = Fetcher::new(session.clone(), &plan.topic, plan.isolation, leaders);
    let mut member = match &plan.group {
        Some(group) => Some(Member::new(session.clone(), group, &plan.topic).await?),
        None => None,
    };
    let result = Consumer::new(&plan, session.clone(), fetcher, member.as_mut())
        .run()
        .await;
    if let Some(member) = member {
        member.leave().await;
    }
    result
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        args: ConsumeArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let command =
            Command::try_parse_from(std::iter::once("consume").chain(args.iter().copied()))
                .map_err(|error| error.kind().to_string())?;
        Plan::from_args(command.args).map_err(|error| error.to_string())
    }

    #[test]
    fn starts_follow_the_options() {
        let rows: &[(&[&str], Start, Reset)] = &[
            (&["t"], Start::Latest, Reset::Latest),
            (&["t", "--from-beginning"], Start::Earliest, Reset::Earliest),
            (&["t", "--offset", "5"], Start::Offset(5), Reset::Latest),
            (
                &["t", "--since", "1700000000000"],
                Start::Timestamp(1_700_000_000_000),
                Reset::Latest,
            ),
            (
                &["t", "--group", "g", "--from-beginning"],
                Start::Earliest,
                Reset::Earliest,
            ),
        ];
        for (args, start, reset) in rows {
            let plan = plan(args).unwrap();
            assert_eq!((plan.start, plan.reset), (*start, *reset), "{args:?}");
        }
    }

    #[test]
    fn options_that_do_not_go_together_are_refused() {
        for args in [
            &["t", "--offset", "1", "--from-beginning"][..],
            &["t", "--offset", "-1"],
            &["t", "--since", "1", "--group", "g"],
            &["t", "--partition", "0", "--group", "g"],
            &["t", "--commit-before"],
            &["t", "--isolation", "dirty"],
            &["t", "--format", "%q"],
            &["t", "--since", "soon"],
        ] {
            assert!(plan(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn options_parse() {
        let plan = plan(&[
            "t",
            "--group",
            "g",
            "--commit-before",
            "--isolation",
            "read_committed",
            "-n",
            "10",
            "--idle-exit",
            "2s",
            "--format",
            "%k=%v\\n",
        ])
        .unwrap();
        assert_eq!(plan.group.as_deref(), Some("g"));
        assert_eq!(plan.commit, CommitWhen::BeforePrinting);
        assert_eq!(plan.isolation, Isolation::ReadCommitted);
        assert_eq!(plan.max_messages, Some(10));
        assert_eq!(plan.idle_exit, Some(Duration::from_secs(2)));
        assert!(matches!(plan.format, RecordFormat::Template(_)));
    }
}
