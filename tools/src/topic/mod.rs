//! `brook topic create|list|describe|alter-config|add-partitions|delete`:
//! kafka-topics and kafka-configs for topics, spoken through Brook's own
//! client with the Kafka versions both Brook and Kafka 3.x/4.x serve
//! (CreateTopics v7, Metadata v12, ListOffsets v7, DescribeConfigs v4,
//! IncrementalAlterConfigs v1, CreatePartitions v3, DeleteTopics v6), so it
//! works against any Kafka cluster.
//!
//! Each subcommand lives in its own file: it sends its requests, turns the
//! responses into rows (plain functions, unit-tested without a broker) and
//! prints them as a table or JSON lines. A topic that fails does not stop
//! the others: its error is kept in [`Failures`], printed as one line, and
//! makes the exit status non-zero. Arguments are checked here before any
//! connection, so a malformed one fails with one line and exit status 1.

mod alter;
mod configs;
mod create;
mod delete;
mod describe;
mod list;
mod partitions;

use std::process::ExitCode;
use std::time::Duration;

use kafka_protocol::protocol::StrBytes;

use crate::cli::{self, CliError, ClientArgs};

/// Kafka's `ConfigResource.Type` for a topic.
const RESOURCE_TOPIC: i8 = 2;
/// The name errors are printed under: `brook topic: …`.
const COMMAND: &str = "topic";

#[derive(Debug, clap::Args)]
pub struct TopicArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: TopicCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TopicCommand {
    /// Create topics (CreateTopics).
    Create(create::CreateArgs),
    /// List topics with their partition counts (Metadata).
    List(list::ListArgs),
    /// Each partition's leader, replicas, ISR, log start and end offsets,
    /// and the topic's configs.
    Describe(describe::DescribeArgs),
    /// Set or delete a topic's configs (IncrementalAlterConfigs).
    AlterConfig(alter::AlterConfigArgs),
    /// Grow a topic to a new total number of partitions (CreatePartitions).
    AddPartitions(partitions::AddPartitionsArgs),
    /// Delete topics (DeleteTopics).
    Delete(delete::DeleteArgs),
}

pub fn run(args: TopicArgs) -> ExitCode {
    // The format and the arguments are checked before connecting: a typo
    // should not wait for a broker.
    let format = match args.client.format.table_or_json() {
        Ok(format) => format,
        Err(error) => return cli::exit(COMMAND, Err(error)),
    };
    let client = &args.client;
    match args.command {
        TopicCommand::Create(args) => match create::Plan::new(args) {
            Ok(plan) => cli::run(COMMAND, client, move |session| {
                create::create(session, plan, format)
            }),
            Err(error) => cli::exit(COMMAND, Err(error)),
        },
        TopicCommand::List(args) => cli::run(COMMAND, client, move |session| {
            list::list(session, args, format)
        }),
        TopicCommand::Describe(args) => cli::run(COMMAND, client, move |session| {
            describe::describe(session, args, format)
        }),
        TopicCommand::AlterConfig(args) => match alter::Plan::new(args) {
            Ok(plan) => cli::run(COMMAND, client, move |session| {
                alter::alter(session, plan, format)
            }),
            Err(error) => cli::exit(COMMAND, Err(error)),
        },
        TopicCommand::AddPartitions(args) => cli::run(COMMAND, client, move |session| {
            partitions::add(session, args, format)
        }),
        TopicCommand::Delete(args) => cli::run(COMMAND, client, move |session| {
            delete::delete(session, args, format)
        }),
    }
}

/// Per-topic failures of a subcommand that goes on with the other topics.
/// All but the last are printed when it ends; the last is its error, which
/// `cli::exit` prints the same way and which makes the exit status 1.
#[derive(Debug, Default)]
struct Failures {
    errors: Vec<CliError>,
}

impl Failures {
    fn push(&mut self, error: CliError) {
        self.errors.push(error);
    }

    fn finish(mut self) -> Result<(), CliError> {
        let Some(last) = self.errors.pop() else {
            return Ok(());
        };
        for error in &self.errors {
            eprintln!("brook {COMMAND}: {error}");
        }
        Err(last)
    }
}

/// A Kafka error code with the broker's message, if it gave one that adds
/// something: `creating topic t (Replication factor: 3 larger than
/// available brokers: 1): INVALID_REPLICATION_FACTOR (38)`.
/// The result for `topic` in a response's `results` (its name, error code
/// and message read by `fields`), or why there is none usable.
fn topic_result<'a, T>(
    results: &'a [T],
    topic: &str,
    what: &str,
    fields: impl Fn(&T) -> (&str, i16, Option<&StrBytes>),
) -> Result<&'a T, CliError> {
    let result = results
        .iter()
        .find(|result| fields(result).0 == topic)
        .ok_or_else(|| CliError::Failed(format!("{what}: the broker did not answer")))?;
    let (_, code, message) = fields(result);
    if code != 0 {
        return Err(kafka_error(what.to_owned(), code, message));
    }
    Ok(result)
}

fn kafka_error(what: String, code: i16, message: Option<&StrBytes>) -> CliError {
    let message = message.map(|m| m.as_str().trim().trim_end_matches('.'));
    let what = match message {
        Some(message) if !message.is_empty() => format!("{what} ({message})"),
        _ => what,
    };
    CliError::Kafka { what, code }
}

/// `KEY=VALUE` (the value may be empty or hold `=`), as `--config` and
/// `--set` take it.
fn parse_setting(option: &str, text: &str) -> Result<(String, String), CliError> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(CliError::Usage(format!(
            "{option} '{text}': expected KEY=VALUE, like retention.ms=3600000"
        ))),
    }
}

/// The names in the order given, each once.
fn unique(names: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names
        .into_iter()
        .filter(|name| seen.insert(name.clone()))
        .collect()
}

/// The `timeout_ms` of admin requests: how long the broker may wait for the
/// change to complete, the same as the tool waits for its answer.
fn broker_timeout_ms(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)
}

/// A topic id as Kafka prints it: its 16 bytes in URL-safe base64 without
/// padding (`Uuid.toString()` in Kafka's Java client).
fn topic_id_text(id: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in id.chunks(3) {
        let bits = chunk.iter().enumerate().fold(0u32, |bits, (index, byte)| {
            bits | u32::from(*byte) << (16 - 8 * index)
        });
        // A chunk of n bytes carries n + 1 six-bit digits.
        for digit in 0..=chunk.len() {
            let index = (bits >> (18 - 6 * digit)) & 0x3f;
            out.push(char::from(ALPHABET[index as usize]));
        }
    }
    out
}

/// Node ids as a table cell: `1,2,3`.
fn node_list(nodes: &[i32]) -> String {
    nodes
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_key_equals_value() {
        let parse = |text| parse_setting("--config", text);
        assert_eq!(
            parse("retention.ms=3600000").unwrap(),
            ("retention.ms".into(), "3600000".into())
        );
        assert_eq!(parse("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(parse("empty=").unwrap(), ("empty".into(), "".into()));
        for bad in ["retention.ms", "=3600000", "", " =x"] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(error.starts_with("--config '"), "{error}");
            assert!(error.contains("expected KEY=VALUE"), "{error}");
        }
    }

    #[test]
    fn topic_ids_print_as_kafka_prints_them() {
        assert_eq!(topic_id_text(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        // Kafka's Uuid.fromString("MR1rW8ZsRVS1j0vkSZ6Ixg") round trip.
        let bytes = [
            0x31, 0x1d, 0x6b, 0x5b, 0xc6, 0x6c, 0x45, 0x54, 0xb5, 0x8f, 0x4b, 0xe4, 0x49, 0x9e,
            0x88, 0xc6,
        ];
        assert_eq!(topic_id_text(&bytes), "MR1rW8ZsRVS1j0vkSZ6Ixg");
        assert_eq!(topic_id_text(&[0xff; 16]), "_____________________w");
    }

    #[test]
    fn broker_messages_join_the_error_once() {
        let message = StrBytes::from_static_str("Topic 't' already exists.");
        let error = kafka_error("creating topic t".into(), 36, Some(&message));
        assert_eq!(
            error.to_string(),
            "creating topic t (Topic 't' already exists): TOPIC_ALREADY_EXISTS (36)"
        );
        let empty = StrBytes::from_static_str("");
        let error = kafka_error("deleting topic t".into(), 3, Some(&empty));
        assert_eq!(
            error.to_string(),
            "deleting topic t: UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
    }

    #[test]
    fn helpers_keep_order_and_bounds() {
        assert_eq!(unique(vec!["b".into(), "a".into(), "b".into()]), ["b", "a"]);
        assert_eq!(broker_timeout_ms(Duration::from_secs(10)), 10_000);
        assert_eq!(broker_timeout_ms(Duration::from_secs(u64::MAX)), i32::MAX);
        assert_eq!(node_list(&[1, 2, 3]), "1,2,3");
        assert_eq!(node_list(&[]), "");
        assert!(Failures::default().finish().is_ok());
    }
}
