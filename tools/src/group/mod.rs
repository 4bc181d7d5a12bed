//! `brook group`: not built yet.

use std::process::ExitCode;

use crate::cli::{self, CliError, ClientArgs};

#[derive(Debug, clap::Args)]
pub struct GroupArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: GroupArgs) -> ExitCode {
    let _ = args;
    cli::exit("group", Err(CliError::Failed("not built yet".to_owned())))
}
