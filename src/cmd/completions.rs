//! `redlock completions SHELL`: shell completion scripts generated from the clap definition.

use clap::CommandFactory as _;

use crate::cli::{Cli, CompletionsArgs};
use crate::exit::Done;

pub(super) fn run(args: &CompletionsArgs) -> anyhow::Result<Done> {
    clap_complete::generate(
        args.shell,
        &mut Cli::command(),
        "redlock",
        &mut std::io::stdout(),
    );
    Ok(Done::Success)
}
