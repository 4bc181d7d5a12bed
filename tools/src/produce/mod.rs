//! `brook produce`: not built yet.

use std::process::ExitCode;

use crate::cli::{self, CliError, ClientArgs};

#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: ProduceArgs) -> ExitCode {
    let _ = args;
    cli::exit("produce", Err(CliError::Failed("not built yet".to_owned())))
}
