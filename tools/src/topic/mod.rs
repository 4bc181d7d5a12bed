//! `brook topic`: not built yet.

use std::process::ExitCode;

use crate::cli::{self, CliError, ClientArgs};

#[derive(Debug, clap::Args)]
pub struct TopicArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: TopicArgs) -> ExitCode {
    let _ = args;
    cli::exit("topic", Err(CliError::Failed("not built yet".to_owned())))
}
