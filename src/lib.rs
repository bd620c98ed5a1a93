//! redlock: mutual exclusion for shell scripts, cron jobs and CI pipelines, backed by Redis.
//!
//! The library holds the lock engine ([`lock`], with its Lua scripts and key layout) and the
//! command-line front end ([`cli`], `cmd`). The engine knows nothing of clap; the front end
//! knows nothing of Lua. [`run`] is the whole program: parse, dispatch, map to an exit code.

mod child;
pub mod cli;
pub mod clock;
mod cmd;
pub mod conn;
pub mod duration;
mod events;
pub mod exit;
pub mod keeper;
pub mod keys;
pub mod lock;
pub mod log;
mod scripts;
mod signals;
pub mod supervisor;
pub mod waiting;

use std::ffi::OsString;

use clap::error::ErrorKind;
use clap::{CommandFactory as _, FromArgMatches as _};

pub use cli::Cli;

/// Runs redlock with `args` (program name first) and returns its exit status.
pub fn run(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> u8 {
    let cli = match parse(args) {
        Ok(cli) => cli,
        Err(err) => return report_parse_error(&err),
    };
    let quiet = cli.global.quiet;
    let busy_code = match &cli.command {
        cli::Command::Acquire(args) => args.lock.conflict_exit_code,
        cli::Command::Run(args) => args.lock.conflict_exit_code,
        _ => exit::BUSY,
    };
    match cmd::dispatch(cli) {
        Ok(done) => done.code(busy_code),
        Err(err) => {
            let expected = exit::failure_of(&err).is_some_and(exit::Failure::is_expected);
            if !(quiet && expected) {
                log::line(format_args!("{err:#}"));
            }
            exit::exit_code(&err, busy_code)
        }
    }
}

/// `Cli::try_parse_from`, without freeing clap's command tree afterwards: that took a tenth of
/// the instructions of a whole `run -- true` (callgrind), and the process is short-lived or
/// keeps the few kilobytes for the command's run.
fn parse(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> Result<Cli, clap::Error> {
    let command = Box::leak(Box::new(Cli::command()));
    let matches = command.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches(&matches).map_err(|err| err.format(command))
}

/// Prints help and version as clap does; turns a parse error into one line and exit 64.
fn report_parse_error(err: &clap::Error) -> u8 {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            exit::OK
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            exit::USAGE
        }
        _ => {
            // clap's message is the first paragraph (a list of missing flags may follow on
            // indented lines); keep it and any tip, drop the usage block.
            let rendered = err.render().to_string();
            let what = rendered
                .split("\n\n")
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let what = what.trim_start_matches("error: ");
            let tip = rendered
                .lines()
                .find_map(|line| line.trim().strip_prefix("tip: "))
                .map(|tip| format!(" (tip: {tip})"))
                .unwrap_or_default();
            log::line(format_args!("{what}{tip}; see 'redlock --help'"));
            exit::USAGE
        }
    }
}
