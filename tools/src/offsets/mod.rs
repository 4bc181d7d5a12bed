//! `brook offsets TOPIC… [--time T]`: each partition's offset at a time, as
//! Kafka's GetOffsetShell prints it (`topic:partition:offset`): `-1` the
//! log end, `-2` the log start, `-3` the record with the largest timestamp,
//! or the first offset whose timestamp is at or after a time (`-1` when
//! there is none).

use std::process::ExitCode;
use std::rc::Rc;

use serde::Serialize;

use crate::cli::{self, CliError, ClientArgs, Format, Out, Session, time};

#[derive(Debug, clap::Args)]
pub struct OffsetsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Topics to list.
    #[arg(required = true, value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// -1 / latest, -2 / earliest, -3 / max-timestamp, milliseconds since
    /// the epoch, or a date-time like 2026-11-30T10:00:00Z.
    #[arg(long, default_value = "-1", allow_hyphen_values = true,
          value_parser = time::parse_list_offsets_time)]
    pub time: i64,
    /// Only these partitions (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub partitions: Vec<i32>,
}

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION, for a `--partitions` entry the topic
/// does not have.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// One line of the output.
#[derive(Debug, Serialize)]
struct PartitionOffset<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
}

pub fn run(args: OffsetsArgs) -> ExitCode {
    let client = args.client.clone();
    cli::run("offsets", &client, move |session| list(session, args))
}

async fn list(session: Rc<Session>, args: OffsetsArgs) -> Result<(), CliError> {
    let format = args.client.format.table_or_json()?;
    let mut out = Out::new();
    for topic in &args.topics {
        let offsets = cli::session::within(
            || format!("the offsets of {topic}"),
            session.timeout(),
            async {
                let cluster = session.cluster();
                let mut leaders = cluster.leaders(topic).await?;
                if !args.partitions.is_empty() {
                    if let Some(missing) = args
                        .partitions
                        .iter()
                        .find(|partition| !leaders.iter().any(|l| l.partition == **partition))
                    {
                        return Err(CliError::Kafka {
                            what: format!("partition {topic}-{missing}"),
                            code: UNKNOWN_TOPIC_OR_PARTITION,
                        });
                    }
                    leaders.retain(|leader| args.partitions.contains(&leader.partition));
                }
                Ok(cluster.offsets(topic, &leaders, args.time).await?)
            },
        )
        .await?;
        for (partition, offset) in offsets {
            let line = PartitionOffset {
                topic,
                partition,
                offset,
            };
            match format {
                Format::Json => out.json(&line)?,
                _ => out.line(&format!("{topic}:{partition}:{offset}"))?,
            }
        }
    }
    out.flush()
}
