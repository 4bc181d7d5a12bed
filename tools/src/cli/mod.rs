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

use brook_bench::client::ClientError;
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
    #[arg(long, global = true, default_value = "table", value_parser = Format::parse)]
    pub format: Format,
    /// How long to wait for a broker: each connect and each request (e.g. 10s, 500ms).
    #[arg(long, global = true, default_value = "10s", value_parser = time::parse_duration)]
    pub timeout: Duration,
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
    let outcome = session::block_on(async move {
        let session = Rc::new(Session::connect(&args).await?);
        let result = body(session.clone()).await;
        session.close().await;
        result
    });
    exit(name, outcome)
}

/// The exit status for a subcommand's outcome, printing its error.
pub fn exit(name: &str, outcome: Result<(), CliError>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is_broken_pipe() => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("brook {name}: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
