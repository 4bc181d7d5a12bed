//! The `brook` command. Thin on purpose: it parses arguments and hands them
//! to the crate that does the work, so every subcommand stays usable (and
//! testable) as a library call.

mod cli;
mod consume;
mod dev;
mod group;
mod log_dump;
mod offsets;
mod produce;
mod topic;

use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use brook_engine::cluster::broker_config::{BrokerConfig, parse_properties};
use brook_engine::cluster::endpoints::{self, ServeFlags};
use brook_shards::server::{OtherListener, ServerOptions};
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "brook",
    version,
    about = "Brook: a Kafka-compatible broker",
    after_help = "The client commands (topic, produce, consume, offsets, group) reach the \
                  brokers named by --brokers HOST:PORT[,HOST:PORT...] (or BROOK_BROKERS; \
                  default 127.0.0.1:9092, where `brook serve` listens with no settings).\n\
                  `brook <COMMAND> --help` says more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker: Kafka clients connect to it as to a Kafka broker.
    Serve(ServeArgs),
    /// Measure Brook against the machine it runs on (runs the brook-bench
    /// program beside this one).
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
    /// Read partition log files directly, with no broker.
    #[command(subcommand)]
    Log(LogCommand),
    /// Developer conveniences: `brook dev cluster` starts a local cluster.
    #[command(subcommand)]
    Dev(dev::DevCommand),
    /// Create, list, describe, configure, grow and delete topics.
    Topic(topic::TopicArgs),
    /// Produce records read from stdin or a file, one per line.
    Produce(produce::ProduceArgs),
    /// Print a topic's records (alone, or as a member of a consumer group).
    Consume(consume::ConsumeArgs),
    /// Each partition's offset at a time: `topic:partition:offset` lines.
    Offsets(offsets::OffsetsArgs),
    /// List, describe, reset and delete consumer groups.
    Group(group::GroupArgs),
}

#[derive(Debug, Subcommand)]
enum LogCommand {
    /// Print segment files as Kafka's kafka-dump-log does: a `.log`'s
    /// batches (and records), an `.index`'s or `.timeindex`'s entries.
    Dump(LogDumpArgs),
}

#[derive(Debug, Args)]
struct LogDumpArgs {
    /// Segment files: `<base offset>.log`, `.index` or `.timeindex`.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print each record of a `.log`'s batches.
    #[arg(long)]
    records: bool,
    /// Check an index against the `.log` beside it (or a `.log`'s CRCs) and
    /// print only mismatches; exit non-zero when there are any.
    #[arg(long)]
    verify: bool,
    /// Decode records as `__consumer_offsets` records (implies --records).
    #[arg(long, conflicts_with = "transaction_decoder")]
    offsets_decoder: bool,
    /// Decode records as `__transaction_state` records (implies --records).
    #[arg(long)]
    transaction_decoder: bool,
    /// Output: readable text, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = DumpFormat::Text)]
    format: DumpFormat,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DumpFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to accept Kafka clients on (port 0: any free port); over
    /// `listeners` [default: 127.0.0.1:9092].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Host name given to clients in Metadata; over `advertised.listeners`
    /// (default: the listen host).
    #[arg(long)]
    advertised_host: Option<String>,
    /// Where partition logs and metadata live; over `log.dirs`
    /// [default: ./brook-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Shards (cores) to run (default: every core).
    #[arg(long)]
    cores: Option<usize>,
    /// A Kafka server.properties-style file (num.partitions, log.segment.bytes, …).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Single settings on top of the file, as key=value (repeatable).
    #[arg(short = 'X', long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// `node.id`: this node's id in a cluster.
    #[arg(long)]
    node_id: Option<i32>,
    /// `controller.quorum.voters`: the controller quorum, id@host:port,…
    /// (the same on every node; none: a one-node cluster).
    #[arg(long, value_name = "ID@HOST:PORT,...")]
    voters: Option<String>,
    /// `listeners=CONTROLLER://ADDRESS`: where a voter hears its peers.
    #[arg(long, value_name = "HOST:PORT")]
    controller_listen: Option<String>,
    /// `broker.rack`.
    #[arg(long)]
    rack: Option<String>,
    /// Where to serve Prometheus metrics (`GET /metrics`; port 0: any free
    /// port), or `none`.
    #[arg(long, default_value = "127.0.0.1:9644", value_parser = metrics_listen)]
    metrics_listen: MetricsListen,
}

/// `--metrics-listen`: an address, or `none`.
#[derive(Clone, Debug)]
struct MetricsListen(Option<SocketAddr>);

fn metrics_listen(text: &str) -> Result<MetricsListen, String> {
    if text == "none" {
        return Ok(MetricsListen(None));
    }
    text.parse()
        .map(|address| MetricsListen(Some(address)))
        .map_err(|error| format!("{error} (an address like 127.0.0.1:9644, or none)"))
}

impl ServeArgs {
    /// The flags as the settings they stand for (`--set` overrides them).
    fn flag_settings(&self) -> Vec<(String, String)> {
        let mut settings = Vec::new();
        if let Some(id) = self.node_id {
            settings.push(("node.id".to_owned(), id.to_string()));
        }
        if let Some(voters) = &self.voters {
            settings.push(("controller.quorum.voters".to_owned(), voters.clone()));
        }
        if let Some(address) = &self.controller_listen {
            settings.push(("listeners".to_owned(), format!("CONTROLLER://{address}")));
        }
        if let Some(rack) = &self.rack {
            settings.push(("broker.rack".to_owned(), rack.clone()));
        }
        settings
    }
}

/// `brook bench`'s arguments, all handed to `brook-bench` as they are.
#[derive(Debug, Args)]
struct BenchArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(cli::hoist_client_options(std::env::args_os().collect()));
    brook_shards::logging::init_stderr();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Dev(command) => dev::run(command),
        Command::Bench(args) => bench(args),
        Command::Log(LogCommand::Dump(args)) => log_dump(args),
        Command::Topic(args) => topic::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Offsets(args) => offsets::run(args),
        Command::Group(args) => group::run(args),
    }
}

fn log_dump(args: LogDumpArgs) -> ExitCode {
    let decoder = if args.offsets_decoder {
        log_dump::RecordDecoder::Offsets
    } else if args.transaction_decoder {
        log_dump::RecordDecoder::Transactions
    } else {
        log_dump::RecordDecoder::Raw
    };
    let options = log_dump::DumpOptions {
        records: args.records,
        verify: args.verify,
        decoder,
        format: match args.format {
            DumpFormat::Text => log_dump::OutputFormat::Text,
            DumpFormat::Json => log_dump::OutputFormat::Json,
        },
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let clean = log_dump::run(&args.files, &options, &mut out, &mut std::io::stderr());
    let flushed = out.flush().is_ok();
    if clean && flushed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let mut settings = match &args.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => parse_properties(&text),
            Err(error) => {
                eprintln!("brook serve: cannot read {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => Vec::new(),
    };
    settings.extend(args.flag_settings());
    settings.extend(
        args.settings
            .iter()
            .flat_map(|setting| parse_properties(setting)),
    );
    let config = match BrokerConfig::from_properties(&settings) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("brook serve: {error}");
            return ExitCode::FAILURE;
        }
    };
    let flags = ServeFlags {
        listen: args
            .listen
            .map(|address| (address.ip().to_string(), address.port())),
        advertised_host: args.advertised_host.clone(),
        data_dir: args
            .data_dir
            .as_ref()
            .map(|dir| dir.to_string_lossy().into_owned()),
    };
    let endpoints = match endpoints::resolve(&config.given, &flags) {
        Ok(endpoints) => endpoints,
        Err(error) => {
            eprintln!("brook serve: {error}");
            return ExitCode::FAILURE;
        }
    };
    let listen = match listen_address(&endpoints.listen_host, endpoints.listen_port) {
        Ok(listen) => listen,
        Err(error) => {
            eprintln!("brook serve: {error}");
            return ExitCode::FAILURE;
        }
    };
    let others = endpoints
        .others
        .iter()
        .map(|other| {
            Ok(OtherListener {
                name: other.name.clone(),
                listen: listen_address(&other.host, other.port)?,
                advertised_host: other.advertised_host.clone(),
                advertised_port: other.advertised_port,
            })
        })
        .collect::<Result<Vec<_>, String>>();
    let others = match others {
        Ok(others) => others,
        Err(error) => {
            eprintln!("brook serve: {error}");
            return ExitCode::FAILURE;
        }
    };
    let options = ServerOptions {
        listener_name: endpoints.listener_name,
        listen,
        advertised_host: endpoints.advertised_host,
        advertised_port: endpoints.advertised_port,
        others,
        log_dirs: endpoints.log_dirs.iter().map(PathBuf::from).collect(),
        cores: args.cores,
        config,
        metrics_listen: args.metrics_listen.0,
    };
    let ready = |ready: brook_shards::server::Ready| {
        let (address, shards) = (ready.listen, ready.shards);
        match ready.metrics {
            Some(metrics) => {
                println!("brook listening on {address} ({shards} shards; metrics on {metrics})")
            }
            None => println!("brook listening on {address} ({shards} shards)"),
        }
        let _ = std::io::Write::flush(&mut std::io::stdout());
    };
    match brook_shards::server::run(options, ready) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("brook serve: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The client listener's address: an empty host is every address (as in
/// Kafka's `listeners`), a name is resolved.
fn listen_address(host: &str, port: u16) -> Result<SocketAddr, String> {
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|error| format!("cannot resolve the listener host {host}: {error}"))?
        .next()
        .ok_or_else(|| format!("the listener host {host} resolves to no address"))
}

/// Runs `brook-bench` (`<this program's name>-bench`, beside it) with the
/// arguments, in place of this process. The benchmarks live in a program
/// of their own so that the broker neither links them nor pays for their
/// counting allocator; `brook bench` stays the one command users type.
fn bench(args: BenchArgs) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let this = match std::env::current_exe() {
        Ok(this) => this,
        Err(error) => {
            eprintln!("brook bench: cannot find this program: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut name = this.file_name().unwrap_or_default().to_os_string();
    name.push("-bench");
    let bench = this.with_file_name(name);
    let error = std::process::Command::new(&bench).args(&args.args).exec();
    eprintln!(
        "brook bench: cannot run {}: {error} (it is built beside brook: \
         cargo build --release -p brook-bench)",
        bench.display()
    );
    ExitCode::FAILURE
}
