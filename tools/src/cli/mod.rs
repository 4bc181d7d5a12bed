//! What every subcommand that talks to a cluster shares: the `--brokers`,
//! `--format` and `--timeout` options, one error type whose message is one
//! line, a [`session::Session`] (Brook's own Kafka client with a deadline on
//! every connect and request), output as a table or JSON lines
//! ([`output`]), and a progress line on terminals ([`progress`]).
//!
//! A subcommand is an `async fn(&Session, args) -> Result<(), CliError>`
//! run by [`run`] on one unpinned glommio executor, so the tools use the
//! same client as the load generator and work against any Kafka cluster.

pub mod output;
pub mod progress;
pub mod session;
pub mod time;

use std::fmt;
use std::future::Future;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use brook_shards::client::ClientError;
use kafka_protocol::error::ResponseError;
use thiserror::Error;

pub use self::output::{Out, Table};
pub use self::session::Session;

/// The bootstrap broker when neither `--brokers` nor `BROOK_BROKERS` says.
pub const BROKERS_DEFAULT: &str = "127.0.0.1:9092";

/// Options of every subcommand that talks to a cluster.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// Bootstrap brokers, host:port[,host:port…] (the first that answers is used).
    #[arg(long, global = true, env = "BROOK_BROKERS", default_value = BROKERS_DEFAULT)]
    pub brokers: String,
    /// Output: `table` for people or `json` (one object per line); `brook
    /// consume` also takes a kcat-like template (%t %p %o %k %v %T %h).
    #[arg(short = 'f', long, global = true, default_value = "table", value_parser = Format::parse)]
    pub format: Format,
    /// How long to wait for a broker: each connect and each request (e.g. 10s, 500ms).
    #[arg(long, global = true, default_value = "10s", value_parser = time::parse_duration)]
    pub timeout: Duration,
}

/// The subcommands that take [`ClientArgs`].
const CLIENT_SUBCOMMANDS: [&str; 5] = ["topic", "produce", "consume", "offsets", "group"];
/// [`ClientArgs`]' options that take their value as the next argument.
const CLIENT_OPTIONS: [&str; 4] = ["--brokers", "--format", "-f", "--timeout"];

/// Moves the shared options given before a client subcommand
/// (`brook --brokers h:9092 topic list`) to just after it, where clap takes
/// them (`brook topic --brokers h:9092 list`): they are global within each
/// client subcommand, not at the top (`serve`, `bench` and `log dump` have
/// options of the same names that mean other things).
pub fn hoist_client_options(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut hoisted = Vec::new();
    let mut rest = args.into_iter();
    let mut out: Vec<std::ffi::OsString> = rest.next().into_iter().collect();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy();
        let takes_value = CLIENT_OPTIONS.contains(&text.as_ref());
        let with_value = CLIENT_OPTIONS
            .iter()
            .any(|option| option.starts_with("--") && text.starts_with(&format!("{option}=")));
        if takes_value {
            hoisted.push(arg);
            hoisted.extend(rest.next());
        } else if with_value {
            hoisted.push(arg);
        } else if hoisted.is_empty() || !CLIENT_SUBCOMMANDS.contains(&text.as_ref()) {
            // Not a client subcommand: leave everything for clap to judge.
            out.append(&mut hoisted);
            out.push(arg);
            out.extend(rest);
            return out;
        } else {
            out.push(arg);
            out.append(&mut hoisted);
            out.extend(rest);
            return out;
        }
    }
    out.append(&mut hoisted);
    out
}

/// How results are printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    /// `brook consume`'s per-record template (kcat's `-f`).
    Template(String),
}

impl Format {
    /// `table` (or `text`), `json`, or anything with a `%` as a template.
    pub fn parse(text: &str) -> Result<Format, String> {
        match text {
            "table" | "text" => Ok(Format::Table),
            "json" => Ok(Format::Json),
            template if template.contains('%') => Ok(Format::Template(template.to_owned())),
            other => Err(format!(
                "'{other}' is not table, json or a template with % placeholders"
            )),
        }
    }

    /// For subcommands that print only tables or JSON.
    pub fn table_or_json(&self) -> Result<Format, CliError> {
        match self {
            Format::Template(_) => Err(CliError::Usage(
                "--format: this subcommand prints `table` or `json`".to_owned(),
            )),
            other => Ok(other.clone()),
        }
    }
}

/// Why a subcommand failed; printed as `brook <subcommand>: <message>`.
#[derive(Debug, Error)]
pub enum CliError {
    /// Arguments that clap accepted but that do not make sense together.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Client(ClientError),
    /// A Kafka error code in a response.
    #[error("{what}: {}", KafkaCode(*code))]
    Kafka { what: String, code: i16 },
    #[error("no answer from {what} within {timeout:?}")]
    Timeout { what: String, timeout: Duration },
    /// Reading input or writing output.
    #[error("{operation}: {source}")]
    Io {
        operation: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Failed(String),
}

impl From<ClientError> for CliError {
    /// Kafka error codes the client met keep their code, for their name.
    fn from(error: ClientError) -> CliError {
        match error {
            ClientError::Kafka { what, code } => CliError::Kafka { what, code },
            other => CliError::Client(other),
        }
    }
}

impl CliError {
    /// `Err` for a non-zero Kafka error code.
    pub fn check(code: i16, what: impl FnOnce() -> String) -> Result<(), CliError> {
        if code == 0 {
            Ok(())
        } else {
            Err(CliError::Kafka { what: what(), code })
        }
    }

    /// Output to a closed pipe (`brook consume | head`) ends the command
    /// quietly, as it does for other Unix tools.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// A Kafka error code as its name and number: `UNKNOWN_TOPIC_OR_PARTITION (3)`.
#[derive(Clone, Copy, Debug)]
pub struct KafkaCode(pub i16);

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match ResponseError::try_from_code(self.0) {
            None => write!(f, "NONE (0)"),
            Some(ResponseError::Unknown(code)) => write!(f, "unknown Kafka error {code}"),
            Some(error) => write!(f, "{} ({})", screaming_snake(&format!("{error:?}")), self.0),
        }
    }
}

/// `UnknownTopicOrPartition` → `UNKNOWN_TOPIC_OR_PARTITION`, Kafka's spelling.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (index, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && index > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Runs a subcommand's body on a fresh executor with a session to the
/// cluster, and turns its outcome into the exit status (errors as one line
/// on stderr).
pub fn run<F, Fut>(name: &str, args: &ClientArgs, body: F) -> ExitCode
where
    F: FnOnce(Rc<Session>) -> Fut + 'static,
    Fut: Future<Output = Result<(), CliError>> + 'static,
{
    let args = args.clone();
    let brokers = BrokersGiven::of(&args.brokers);
    let outcome = session::block_on(async move {
        let session = Rc::new(Session::connect(&args).await?);
        let result = body(session.clone()).await;
        session.close().await;
        result
    });
    exit_with(name, outcome, Some(&brokers))
}

/// The exit status for a subcommand's outcome, printing its error.
pub fn exit(name: &str, outcome: Result<(), CliError>) -> ExitCode {
    exit_with(name, outcome, None)
}

/// [`exit`], with a hint after the error for those a newcomer meets first.
fn exit_with(
    name: &str,
    outcome: Result<(), CliError>,
    brokers: Option<&BrokersGiven>,
) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is_broken_pipe() => ExitCode::SUCCESS,
        Err(error) => {
            // One line still: scripts read the first.
            match error.hint(name, brokers) {
                Some(hint) => eprintln!("brook {name}: {error}; {hint}"),
                None => eprintln!("brook {name}: {error}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// The bootstrap brokers a command used and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokersGiven {
    pub brokers: String,
    /// `--brokers`, `BROOK_BROKERS`, or the default.
    pub from: &'static str,
}

impl BrokersGiven {
    /// Whether one of the brokers given is on `port`.
    fn has_port(&self, port: u16) -> bool {
        self.brokers.split(',').any(|broker| {
            broker
                .trim()
                .rsplit_once(':')
                .and_then(|(_, given)| given.parse::<u16>().ok())
                == Some(port)
        })
    }

    /// Where `brokers` came from: clap takes `--brokers` over
    /// `BROOK_BROKERS` over the default.
    fn of(brokers: &str) -> BrokersGiven {
        let env = std::env::var("BROOK_BROKERS").ok();
        let from = if env.as_deref() == Some(brokers) {
            "BROOK_BROKERS"
        } else if env.is_none() && brokers == BROKERS_DEFAULT {
            "the default"
        } else {
            "--brokers"
        };
        BrokersGiven {
            brokers: brokers.to_owned(),
            from,
        }
    }
}

/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

impl CliError {
    /// What to try next, for an error of `command` that does not say it: no
    /// broker at the address (which address, from where), a topic that does
    /// not exist where one is read or written.
    pub fn hint(&self, command: &str, brokers: Option<&BrokersGiven>) -> Option<String> {
        let uses_topics = ["produce", "consume", "offsets"].contains(&command);
        match (self, brokers) {
            // An address none of the bootstrap brokers has: a broker
            // advertised it.
            (CliError::Client(ClientError::Connect { address, .. }), Some(given))
                if !given.has_port(address.port()) =>
            {
                Some(format!(
                    "a broker told the client to connect to {address} (its advertised.listeners, \
                     or --advertised-host): is the broker there, and does it advertise the \
                     address it listens on?"
                ))
            }
            (CliError::Client(ClientError::Connect { .. }), Some(given)) => Some(format!(
                "is a broker running at {} ({})? `brook serve` starts one on {BROKERS_DEFAULT}; \
                 --brokers or BROOK_BROKERS points the tools elsewhere",
                given.brokers, given.from
            )),
            (
                CliError::Kafka {
                    code: UNKNOWN_TOPIC_OR_PARTITION,
                    ..
                },
                _,
            ) if uses_topics => Some(
                "the topic does not exist: `brook topic create <topic>` creates it (`brook topic \
                 list` lists them); the brook tools never create topics on first use (Kafka \
                 clients' producers do, where the broker has auto.create.topics.enable=true)"
                    .to_owned(),
            ),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_and_an_unknown_topic_say_what_to_try() {
        let refused = CliError::Client(ClientError::Connect {
            address: "127.0.0.1:1".parse().unwrap(),
            reason: "Connection refused".to_owned(),
        });
        let given = BrokersGiven {
            brokers: "127.0.0.1:1".to_owned(),
            from: "--brokers",
        };
        let hint = refused.hint("topic", Some(&given)).unwrap();
        assert!(hint.contains("127.0.0.1:1 (--brokers)"), "{hint}");
        // Refused at an address a broker advertised, not one given.
        let advertised = BrokersGiven {
            brokers: "localhost:9092".to_owned(),
            from: "--brokers",
        };
        let hint = refused.hint("produce", Some(&advertised)).unwrap();
        assert!(
            hint.contains("a broker told the client to connect to 127.0.0.1:1"),
            "{hint}"
        );
        let unknown = CliError::Kafka {
            what: "topic t".to_owned(),
            code: 3,
        };
        assert!(
            unknown
                .hint("produce", None)
                .unwrap()
                .contains("brook topic create")
        );
        // Deleting or describing one: creating it is no answer.
        assert_eq!(unknown.hint("topic", None), None);
        let other = CliError::Kafka {
            what: "topic t".to_owned(),
            code: 38,
        };
        assert_eq!(other.hint("produce", None), None);
    }

    #[test]
    fn formats_are_table_json_or_a_template() {
        assert_eq!(Format::parse("table"), Ok(Format::Table));
        assert_eq!(Format::parse("json"), Ok(Format::Json));
        assert_eq!(
            Format::parse("%k=%v"),
            Ok(Format::Template("%k=%v".to_owned()))
        );
        assert!(Format::parse("yaml").is_err());
        assert!(Format::Template("%v".into()).table_or_json().is_err());
    }

    fn hoisted(args: &[&str]) -> Vec<String> {
        hoist_client_options(args.iter().map(Into::into).collect())
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect()
    }

    #[test]
    fn shared_options_before_a_client_subcommand_move_after_it() {
        assert_eq!(
            hoisted(&["brook", "--brokers", "h:1", "-f", "json", "topic", "list"]),
            ["brook", "topic", "--brokers", "h:1", "-f", "json", "list"]
        );
        assert_eq!(
            hoisted(&["brook", "--timeout=2s", "consume", "t", "-n", "1"]),
            ["brook", "consume", "--timeout=2s", "t", "-n", "1"]
        );
        // Nothing before the subcommand, or a subcommand without them: as given.
        for args in [
            &["brook", "topic", "list", "--brokers", "h:1"][..],
            &["brook", "--format", "json", "log", "dump", "x.log"],
            &["brook", "serve", "--listen", "127.0.0.1:0"],
        ] {
            assert_eq!(hoisted(args), args);
        }
    }

    #[test]
    fn kafka_codes_print_as_kafka_names_them() {
        assert_eq!(KafkaCode(3).to_string(), "UNKNOWN_TOPIC_OR_PARTITION (3)");
        assert_eq!(KafkaCode(-1).to_string(), "UNKNOWN_SERVER_ERROR (-1)");
        assert_eq!(KafkaCode(9999).to_string(), "unknown Kafka error 9999");
        let error = CliError::Kafka {
            what: "describing topic t".into(),
            code: 3,
        };
        assert_eq!(
            error.to_string(),
            "describing topic t: UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
    }
}
