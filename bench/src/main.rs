//! `brook-bench`: Brook's measurements, a program of their own so that the
//! broker does not carry them. Users run it as `brook bench …`: `brook`
//! runs the `brook-bench` beside it (`<its name>-bench`), and the brokers
//! a benchmark starts are that `brook` (the binary beside this one, named
//! without `-bench`; `--binary` names another).

use std::path::PathBuf;
use std::process::ExitCode;

use brook_bench::allocator::CountingAllocator;
use brook_bench::ceiling::CeilingOptions;
use brook_bench::log::error::BenchError;
use brook_bench::log::{BYTES_DEFAULT, LogBenchOptions, PARTITIONS_DEFAULT, SAMPLES_DEFAULT};
use brook_bench::named::NamedOptions;
use brook_bench::workload::options::WorkloadOptions;
use brook_bench::workload::report::WorkloadReport;
use brook_engine::units::parse_bytes;
use clap::{Args, Parser, Subcommand};

/// Counts live heap bytes so `brook bench log` can report what an idle
/// partition really costs; one relaxed atomic add per allocation, paid by
/// this program only (the broker uses the system allocator).
#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Measure Brook against the machine it runs on.
#[derive(Debug, Parser)]
#[command(name = "brook bench", bin_name = "brook bench", version)]
struct Cli {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// The storage engine: append throughput vs raw O_DIRECT writes, append+fsync
    /// latency vs raw fdatasync, heap per idle partition.
    Log(LogArgs),
    /// The machine's limits through Brook's IO path: O_DIRECT write and read,
    /// fsync latency, loopback TCP.
    Ceiling(CeilingArgs),
    /// A named workload from the performance bar (producer-perf,
    /// consumer-perf, kcat-read and end-to-end with clients Brook did not
    /// write; throughput, latency, catchup, many-partitions, recovery,
    /// scaling, replication, controller-failover, all), each figure beside
    /// the same-run ceiling; starts its own broker unless --brokers is
    /// given.
    Run(RunArgs),
    /// Any workload against a running broker: `brook bench workload
    /// --brokers host:port [options]`.
    Workload(WorkloadArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    named: NamedOptions,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct WorkloadArgs {
    #[command(flatten)]
    workload: WorkloadOptions,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct CeilingArgs {
    /// Directory for the disk measurements (on the disk to measure).
    #[arg(long)]
    dir: PathBuf,
    /// Bytes written and read back (suffixes KiB, MiB, GiB).
    #[arg(long, default_value_t = brook_bench::ceiling::BYTES_DEFAULT, value_parser = parse_bytes)]
    bytes: u64,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
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
    brook_shards::logging::init_stderr();
    match cli.command {
        BenchCommand::Log(args) => bench_log(args),
        BenchCommand::Ceiling(args) => bench_ceiling(args),
        BenchCommand::Run(args) => bench_run(args),
        BenchCommand::Workload(args) => bench_workload(args),
    }
}

/// Prints a benchmark's report (JSON or text) on stdout, or its error.
fn print_report<R>(
    command: &str,
    result: Result<R, BenchError>,
    json: bool,
    to_json: impl FnOnce(&R) -> String,
    to_text: impl FnOnce(&R) -> String,
) -> ExitCode {
    match result {
        Ok(report) if json => println!("{}", to_json(&report)),
        Ok(report) => print!("{}", to_text(&report)),
        Err(error) => {
            eprintln!("brook bench {command}: {error}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn bench_log(args: LogArgs) -> ExitCode {
    let options = LogBenchOptions {
        dir: args.dir,
        bytes: args.bytes,
        samples: args.samples,
        partitions: args.partitions,
        cpu: args.cpu,
    };
    let result = brook_bench::log::run(options);
    print_report("log", result, args.json, |r| r.to_json(), |r| r.to_string())
}

fn bench_ceiling(args: CeilingArgs) -> ExitCode {
    let mut options = CeilingOptions::new(args.dir);
    options.bytes = args.bytes;
    let result = brook_bench::ceiling::run(options);
    print_report(
        "ceiling",
        result,
        args.json,
        |r| r.to_json(),
        |r| r.to_text(),
    )
}

/// Live progress goes to stderr, so that stdout holds only the report.
fn progress(line: &str) {
    eprintln!("{line}");
}

fn bench_run(args: RunArgs) -> ExitCode {
    let result = brook_bench::named::run(&args.named, &mut progress);
    let failed = result.as_ref().is_ok_and(|report| report.any_failed());
    let printed = print_report("run", result, args.json, |r| r.to_json(), |r| r.to_text());
    if failed { ExitCode::FAILURE } else { printed }
}

fn bench_workload(args: WorkloadArgs) -> ExitCode {
    let result = brook_bench::workload::run(args.workload, progress);
    let json = |r: &WorkloadReport| r.to_json_object().render();
    print_report("workload", result, args.json, json, |r| r.to_text())
}
