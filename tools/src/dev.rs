//! `brook dev cluster`: a local cluster in one terminal, as
//! `rpk container start -n 3` gives one for Redpanda. Each node is a
//! `brook serve` child process on 127.0.0.1 (client ports from 9092,
//! controller ports from 9192), its own data directory under `--dir`, its
//! log lines prefixed with its node id; the first three nodes are the
//! controller voters. Ctrl-C (or SIGTERM) stops every node cleanly.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};

use brook_shards::server::signals;
use clap::{Args, Subcommand};

/// Voters a dev cluster has at most (Kafka's usual controller quorum).
const VOTERS_MAX: usize = 3;
/// Controller ports sit this far above the client ports.
const CONTROLLER_PORT_OFFSET: u16 = 100;

#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Start a local cluster of `--brokers` nodes on 127.0.0.1 until Ctrl-C.
    Cluster(ClusterArgs),
}

#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Nodes to start (the first three are also the controller quorum).
    #[arg(long, default_value_t = 3)]
    brokers: usize,
    /// Where the nodes' data directories go (`node-<id>` each).
    #[arg(long, default_value = "./brook-dev-cluster")]
    dir: PathBuf,
    /// The first node's client port; node N listens on this + N.
    #[arg(long, default_value_t = 9092)]
    first_port: u16,
    /// Node N serves Prometheus metrics on this port + N.
    #[arg(long, default_value_t = 9644)]
    first_metrics_port: u16,
    /// Shards (cores) each node runs.
    #[arg(long, default_value_t = 1)]
    cores: usize,
    /// Settings given to every node, as key=value (repeatable).
    #[arg(short = 'X', long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

pub fn run(command: DevCommand) -> ExitCode {
    match command {
        DevCommand::Cluster(args) => cluster(args),
    }
}

/// The `brook serve` arguments of node `id` in a cluster of `args.brokers`.
fn node_arguments(args: &ClusterArgs, id: usize) -> Vec<String> {
    let voters = (0..args.brokers.min(VOTERS_MAX))
        .map(|voter| format!("{voter}@127.0.0.1:{}", controller_port(args, voter)))
        .collect::<Vec<_>>()
        .join(",");
    let mut arguments = vec![
        "serve".to_owned(),
        "--listen".to_owned(),
        format!("127.0.0.1:{}", args.first_port + id as u16),
        "--data-dir".to_owned(),
        args.dir.join(format!("node-{id}")).display().to_string(),
        "--cores".to_owned(),
        args.cores.to_string(),
        "--metrics-listen".to_owned(),
        format!("127.0.0.1:{}", args.first_metrics_port + id as u16),
        "--set".to_owned(),
        format!("node.id={id}"),
        "--set".to_owned(),
        format!("controller.quorum.voters={voters}"),
    ];
    if id < VOTERS_MAX {
        arguments.push("--set".to_owned());
        arguments.push(format!(
            "listeners=CONTROLLER://127.0.0.1:{}",
            controller_port(args, id)
        ));
    }
    for setting in &args.settings {
        arguments.push("--set".to_owned());
        arguments.push(setting.clone());
    }
    arguments
}

fn controller_port(args: &ClusterArgs, id: usize) -> u16 {
    args.first_port + CONTROLLER_PORT_OFFSET + id as u16
}

fn cluster(args: ClusterArgs) -> ExitCode {
    if args.brokers == 0
        || args
            .first_port
            .checked_add(CONTROLLER_PORT_OFFSET + args.brokers as u16)
            .is_none()
    {
        eprintln!("brook dev cluster: --brokers must be at least 1 and the ports must fit");
        return ExitCode::FAILURE;
    }
    // Children inherit the blocked mask and wait for the signals themselves.
    signals::block_termination_signals();
    let binary = match std::env::current_exe() {
        Ok(binary) => binary,
        Err(error) => {
            eprintln!("brook dev cluster: cannot find the brook binary: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut children: Vec<Child> = Vec::new();
    for id in 0..args.brokers {
        let spawned = Command::new(&binary)
            .args(node_arguments(&args, id))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(mut child) => {
                prefix_lines(id, child.stdout.take());
                prefix_lines(id, child.stderr.take());
                children.push(child);
            }
            Err(error) => {
                eprintln!("brook dev cluster: cannot start node {id}: {error}");
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
    }
    let bootstrap = (0..args.brokers)
        .map(|id| format!("127.0.0.1:{}", args.first_port + id as u16))
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "brook dev cluster: {} nodes; bootstrap servers: {bootstrap}",
        args.brokers
    );
    println!("brook dev cluster: Ctrl-C stops them");
    let _ = std::io::stdout().flush();
    let signal = signals::wait_for_termination();
    println!("brook dev cluster: {signal}: stopping every node");
    stop(&mut children);
    ExitCode::SUCCESS
}

/// Copies a node's output lines to ours, each prefixed with its id.
fn prefix_lines(id: usize, output: Option<impl Read + Send + 'static>) {
    let Some(output) = output else {
        return;
    };
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "[node {id}] {line}");
        }
    });
}

/// SIGTERM to every node, then wait for each (a node stops cleanly).
fn stop(children: &mut [Child]) {
    for child in children.iter() {
        // SAFETY: kill(2) on a child process this command started.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
    }
    for child in children.iter_mut() {
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_nodes_are_three_voters_and_a_fourth_is_a_broker() {
        let args = ClusterArgs {
            brokers: 4,
            dir: PathBuf::from("/tmp/c"),
            first_port: 9092,
            first_metrics_port: 9644,
            cores: 1,
            settings: vec!["num.partitions=3".into()],
        };
        let first = node_arguments(&args, 0).join(" ");
        assert!(first.contains("--listen 127.0.0.1:9092"), "{first}");
        assert!(first.contains("--metrics-listen 127.0.0.1:9644"), "{first}");
        assert!(
            first.contains(
                "controller.quorum.voters=0@127.0.0.1:9192,1@127.0.0.1:9193,2@127.0.0.1:9194"
            ),
            "{first}"
        );
        assert!(
            first.contains("listeners=CONTROLLER://127.0.0.1:9192"),
            "{first}"
        );
        assert!(first.ends_with("--set num.partitions=3"), "{first}");
        let fourth = node_arguments(&args, 3).join(" ");
        assert!(
            fourth.contains("--listen 127.0.0.1:9095") && !fourth.contains("listeners="),
            "{fourth}"
        );
        assert!(fourth.contains("--data-dir /tmp/c/node-3"), "{fourth}");
    }
}
