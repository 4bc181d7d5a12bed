//! The `brook` command. Thin on purpose: it parses arguments and hands them
//! to the crate that does the work, so every subcommand stays usable (and
//! testable) as a library call.

use std::path::PathBuf;
use std::process::ExitCode;

use brook_bench::allocator::CountingAllocator;
use brook_bench::log::{
    BYTES_DEFAULT, LogBenchOptions, PARTITIONS_DEFAULT, SAMPLES_DEFAULT, parse_bytes,
};
use clap::{Args, Parser, Subcommand};

/// Counts live heap bytes so `brook bench log` can report what an idle
/// partition really costs; one relaxed atomic add per allocation.
#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[derive(Debug, Parser)]
#[command(name = "brook", version, about = "Brook: a Kafka-compatible broker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure Brook against the machine it runs on.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// The storage engine: append throughput vs raw O_DIRECT writes, append+fsync
    /// latency vs raw fdatasync, heap per idle partition.
    Log(LogArgs),
}

#[derive(Debug, Args)]
struct LogArgs {
    /// Directory for the benchmark's files (on the disk to measure).
    #[arg(long)]
    dir: PathBuf,
    /// Bytes written by the throughput runs (suffixes KiB, MiB, GiB).
    #[arg(long, default_value_t = BYTES_DEFAULT, value_parser = parse_bytes)]
    bytes: u64,
    /// Append+fsync latency samples.
    #[arg(long, default_value_t = SAMPLES_DEFAULT)]
    samples: u64,
    /// Idle partitions to open.
    #[arg(long, default_value_t = PARTITIONS_DEFAULT)]
    partitions: usize,
    /// CPU to pin the benchmark's executor to.
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Bench(BenchCommand::Log(args)) => bench_log(args),
    }
}

fn bench_log(args: LogArgs) -> ExitCode {
    let options = LogBenchOptions {
        dir: args.dir,
        bytes: args.bytes,
        samples: args.samples,
        partitions: args.partitions,
        cpu: args.cpu,
    };
    match brook_bench::log::run(options) {
        Ok(report) if args.json => println!("{}", report.to_json()),
        Ok(report) => print!("{report}"),
        Err(error) => {
            eprintln!("brook bench log: {error}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
