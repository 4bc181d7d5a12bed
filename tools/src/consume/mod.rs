//! `brook consume`: not built yet.

use std::process::ExitCode;

use crate::cli::{self, CliError, ClientArgs};

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: ConsumeArgs) -> ExitCode {
    let _ = args;
    cli::exit("consume", Err(CliError::Failed("not built yet".to_owned())))
}
