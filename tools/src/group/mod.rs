//! `brook group`: Kafka's `kafka-consumer-groups` over Brook's own client,
//! so it works against any Kafka cluster.
//!
//! - `list`: ListGroups asked of every broker (each knows only the groups
//!   it coordinates), merged.
//! - `describe G…`: each partition's committed offset, log end and lag, and
//!   the member that owns it (DescribeGroups and OffsetFetch to the group's
//!   coordinator, ListOffsets to each partition's leader).
//! - `reset-offsets G`: new committed offsets by a strategy; a dry run
//!   unless `--execute`, and only for an inactive group, as Kafka does.
//! - `delete G…`: DeleteGroups to each group's coordinator.
//!
//! The network calls every subcommand shares are in [`protocol`]; the rules
//! (which offset a strategy picks, how it is clamped, what `T:P,P` means)
//! are pure functions in [`target`], tested by table.

mod delete;
mod describe;
mod list;
mod protocol;
mod reset;
mod target;

use std::process::ExitCode;

use crate::cli::{self, ClientArgs};

#[derive(Debug, clap::Args)]
pub struct GroupArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: GroupCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum GroupCommand {
    /// Every group of the cluster: GROUP, STATE, PROTOCOL-TYPE.
    List(list::ListArgs),
    /// Per partition: committed offset, log end offset, lag and the member
    /// that owns it (as `kafka-consumer-groups --describe`).
    Describe(describe::DescribeArgs),
    /// Set an inactive group's committed offsets (a dry run unless --execute).
    ResetOffsets(reset::ResetArgs),
    /// Delete groups that have no members (and their committed offsets).
    Delete(delete::DeleteArgs),
}

pub fn run(args: GroupArgs) -> ExitCode {
    let client = args.client.clone();
    cli::run("group", &client, move |session| async move {
        let format = args.client.format.table_or_json()?;
        match args.command {
            GroupCommand::List(list) => list::run(&session, list, &format).await,
            GroupCommand::Describe(describe) => describe::run(&session, describe, &format).await,
            GroupCommand::ResetOffsets(reset) => reset::run(&session, reset, &format).await,
            GroupCommand::Delete(delete) => delete::run(&session, delete, &format).await,
        }
    })
}
