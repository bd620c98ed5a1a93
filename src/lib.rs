//! redlock: mutual exclusion for shell scripts, cron jobs and CI pipelines, backed by Redis.
//!
//! [`run`] is the whole program: parse, dispatch, map the outcome to an exit code. The lock
//! engine knows nothing of clap; the command-line front end knows nothing of Lua. The engine's
//! core (`lock`, `conn`, `keys`) is public: the integration tests drive it directly.
//!
//! Front end:
//! - `cli`: the command line as clap derive types; doc comments are the help text.
//! - `cmd`: one module per subcommand; resolves the global options into a connection target.
//! - `exit`: outcomes that have their own exit code, and the one table of codes.
//! - `log`: redlock's lines on stderr (one write each), and `printable` for foreign text.
//! - `duration`: duration flags (bare seconds or humantime, bounded).
//! - `failpoint`: crash points the fault suite arms in debug builds.
//! - `files`: reading a password or certificate file the user names, bounded (no FIFO, no
//!   device, no file larger than its content can be).
//!
//! Engine:
//! - `lock`: acquire, extend, release, inspect, list one lock: arguments in, replies decoded;
//!   `scripts` compiles in the Lua scripts of `lua/` (EVALSHA, EVAL after a cache flush);
//!   `keys` names the Redis keys of a lock under one hash tag; `identity` is who this process
//!   is (host, pid, user, command), as the records show it.
//! - `doctor`: what a server's configuration does to the safety of locks.
//! - `store`: where locks live, one Redis or a quorum of masters: the whole surface the
//!   commands use (renewals, releases, inspect's view and the quorum's verdict, listings, the
//!   history, the forced release), so that they never ask which kind it is.
//! - `conn`: reaching Redis: URL, password, timeouts, errors classified by outcome.
//! - `acquire`: taking a lock, re-entering it, or waiting: in its FIFO queue on one Redis (a
//!   state machine), in rounds over a quorum; the status line of a wait.
//! - `lease`: keeping a lease: its deadlines (`Plan`, `Window`), the renewals (`Renewer`),
//!   and the keeper of `acquire --keep-alive`, which renews in the background.
//! - `supervise`: running the command under the lock (a state machine): a `Renewer` for the
//!   lease, a `Stopper` for the command's process group (`child` starts and reaps it),
//!   self-fencing, and the release.
//! - `inbox`: the main thread's one wait for signals and for the replies of requests, made on
//!   worker threads or, where nothing can block them but Redis, on the main thread with their
//!   waits cut short by a signal (`interrupt`); `signals` says which signals are handled and
//!   what the command inherits; `clock` keeps deadlines on a suspend-aware monotonic clock.

mod acquire;
pub mod cli;
mod clock;
mod cmd;
pub mod conn;
mod doctor;
mod duration;
pub mod exit;
mod failpoint;
mod files;
mod identity;
mod inbox;
mod interrupt;
pub mod keys;
mod lease;
pub mod lock;
pub mod log;
mod scripts;
#[doc(hidden)]
pub use scripts::{PRELUDE, with_scripts};
// (The build script compiles the prelude with it; the tests check the prelude compiled in.)
mod lua_constants;
#[doc(hidden)]
pub use lua_constants::inline_constants;
// (The build script names the scripts with it; here, its tests check those names.)
#[cfg(test)]
mod sha1;
mod signals;
mod store;
mod supervise;

use std::ffi::OsString;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory as _, FromArgMatches as _};

pub use cli::Cli;
pub use signals::Inherited;

/// Runs redlock with `args` (program name first) and returns its exit status. `inherited` is
/// the signal state redlock was started with (see `main.rs`).
pub fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    inherited: Inherited,
) -> u8 {
    // A panic is a bug in redlock: one line and exit 70, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|at| format!(" at {}:{}", at.file(), at.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log::line(format_args!(
            "internal error (a bug in redlock; please report it): {message}{location}"
        ));
    }));
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_parsed(args, inherited)))
        .unwrap_or(exit::INTERNAL)
}

fn run_parsed(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    inherited: Inherited,
) -> u8 {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(err) => {
            // The line that says what was wrong takes the format asked for, if it can be told.
            let json_asked = args
                .windows(2)
                .any(|pair| pair[0] == "--log-format" && pair[1] == "json")
                || args.iter().any(|arg| arg == "--log-format=json")
                || std::env::var_os("REDLOCK_LOG_FORMAT").is_some_and(|format| format == "json");
            if json_asked {
                log::set_format(log::Format::Json);
            }
            return report_parse_error(&err, &args, inherited);
        }
    };
    log::set_format(cli.global.log_format);
    let quiet = cli.global.quiet;
    let busy_code = match &cli.command {
        cli::Command::Acquire(args) => args.lock.conflict_exit_code,
        cli::Command::Run(args) => args.lock.conflict_exit_code,
        _ => exit::BUSY,
    };
    match cmd::dispatch(cli, inherited) {
        Ok(done) => done.code(busy_code),
        Err(err) => {
            let expected = exit::failure_of(&err).is_some_and(exit::Failure::is_expected);
            if !(quiet && expected) {
                let hint = exit::hint_of(&err)
                    .map(|hint| format!("; {}", cmd::hint_text(hint)))
                    .unwrap_or_default();
                let code = exit::exit_code(&err, busy_code);
                if expected {
                    log::outcome(format_args!("{err:#}{hint}"), code);
                } else {
                    log::error(format_args!("{err:#}{hint}"), code);
                }
            }
            exit::exit_code(&err, busy_code)
        }
    }
}

/// `Cli::try_parse_from`, with the top page's closing sections built only for `--help`, and
/// `run --key K COMMAND...` read as the command it is.
fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let first = parse_once(args);
    // `run --key K COMMAND...` without `--`: the command starts at its first word, as if a
    // `--` stood before it (see `cli::command_after_key`). clap takes that word for NAME,
    // or fails on an option of the command's that redlock has too (`sort -k 2`); the usual
    // `run --key K -- COMMAND` costs nothing more.
    let named_and_keyed = matches!(
        &first,
        Ok(Cli { command: cli::Command::Run(run), .. })
            if run.lock.key.is_some() && run.name.is_some() && run.command.is_empty()
    );
    if first.is_ok() && !named_and_keyed {
        return first;
    }
    match cli::command_after_key(args) {
        Some(at) => parse_once(&[&args[..at], &[OsString::from("--")], &args[at..]].concat()),
        None => first,
    }
}

/// One parse of `args`.
fn parse_once(args: &[OsString]) -> Result<Cli, clap::Error> {
    let long_help =
        args.iter().any(|arg| arg == "--help") || args.get(1).is_some_and(|first| first == "help");
    let command = || whole_command(long_help);
    // A command line that names its subcommand after global options alone (as most do) is
    // parsed by that subcommand's tree; any other, by the whole.
    let parser = (!long_help)
        .then(|| cli::command_for(args))
        .flatten()
        .unwrap_or_else(command);
    let mut matches = match parser.try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(err) if is_help(&err) => {
            // Help was asked for: only now build every subcommand (they are deferred, see
            // `cli::Command`), so that the list of commands has their descriptions, and
            // wrap it to the terminal, at most 100 columns (a fresh command: the one parsed
            // has passed its settings on to its subcommands already).
            let mut command = command();
            if let Some(columns) = log::any_terminal_width() {
                command = command.term_width(columns.min(cli::HELP_WIDTH));
            }
            command.build();
            return Err(command.try_get_matches_from(args).err().unwrap_or(err));
        }
        Err(err) => return Err(err),
    };
    cli_from(&mut matches)
}

/// The typed command line of what clap matched.
fn cli_from(matches: &mut clap::ArgMatches) -> Result<Cli, clap::Error> {
    // Global options are propagated down to the subcommand with their source.
    let mut deepest = &*matches;
    while let Some((_, sub)) = deepest.subcommand() {
        deepest = sub;
    }
    let redis_from_env = deepest.value_source("redis") == Some(ValueSource::EnvVariable);
    let mut cli = Cli::from_arg_matches_mut(matches)?;
    cli.global.redis_from_env = redis_from_env;
    Ok(cli)
}

/// The whole tree, every subcommand in it; `long_help`: with the top page's closing sections.
fn whole_command(long_help: bool) -> clap::Command {
    let command = Cli::command().version(cli::VERSION);
    match long_help {
        true => command.after_long_help(cli::after_long_help()),
        false => command,
    }
}

/// Whether clap's "error" is help to print.
fn is_help(err: &clap::Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    )
}

/// Prints help and version as clap does (exit 74 when they cannot be written); turns a parse
/// error into one line and exit 64.
fn report_parse_error(err: &clap::Error, args: &[OsString], inherited: Inherited) -> u8 {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // A reader that stopped reading (`--help | head`) wanted no more: not an error.
            let written = if inherited.stdout_closed() {
                Err(cmd::STDOUT_CLOSED_ERROR.to_owned())
            } else {
                match err.print() {
                    Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
                        Err(format!("writing to stdout: {err}"))
                    }
                    _ => Ok(()),
                }
            };
            match written {
                Ok(()) => exit::OK,
                Err(why) => {
                    log::error(why, exit::OUTPUT);
                    exit::OUTPUT
                }
            }
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
            // A similar flag ("did you mean") is the likelier fix than passing the word on.
            let mut tips: Vec<&str> = rendered
                .lines()
                .filter_map(|line| line.trim().strip_prefix("tip: "))
                .collect();
            tips.sort_by_key(|tip| !tip.contains("similar"));
            let tip = tips
                .first()
                .map(|tip| format!(" (tip: {tip})"))
                .unwrap_or_default();
            // Point to the help of the command given, where its options are: the first word
            // that names one (a global option's value rarely does).
            let words = || args.iter().skip(1).take_while(|arg| *arg != "--");
            let named = words().find_map(|arg| {
                cli::man_pages()
                    .iter()
                    .find(|command| arg.to_str() == Some(command))
            });
            let command = named
                .map(|command| format!(" {command}"))
                .unwrap_or_default();
            let why = format!("{what}{tip}; see 'redlock{command} --help'");
            // A monitoring plugin's bad command line is UNKNOWN (3), with the plugin's line: a
            // typo in a service definition shows as such, not as an out-of-range code.
            if named == Some(&"check") && words().any(|arg| arg == "--nagios") {
                // (Only the plugin line, as for its other UNKNOWNs: a monitoring system that
                // keeps stderr too would show the words twice.)
                cmd::print_plugin_unknown(&why);
                return exit::PLUGIN_UNKNOWN;
            }
            log::error(&why, exit::USAGE);
            exit::USAGE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What clap makes of `args` with `command`: the typed command line, or the error's kind
    /// and its text as printed.
    fn outcome(command: clap::Command, args: &[&str]) -> String {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        match command
            .try_get_matches_from(&args)
            .and_then(|mut matches| cli_from(&mut matches))
        {
            Ok(cli) => format!("{cli:?}"),
            Err(err) => format!("{:?}: {}", err.kind(), err.render()),
        }
    }

    /// The tree of one subcommand (`cli::command_for`) parses every command line that starts
    /// with that subcommand as the whole tree does: the same values with the same sources, or
    /// the same error word for word.
    #[test]
    fn a_subcommand_s_own_tree_parses_as_the_whole_tree_does() {
        // Words split at spaces: no word below has one.
        let globals = [
            "",
            "--redis redis://a:1 --redis redis://b:2 --redis redis://c:3",
            "-v -v --log-format json --prefix ci",
            "--quiet --verbose",
            "--connect-timeout 1s --command-timeout 2s --release-timeout 9s",
            "--tls-ca /ca.pem --tls-server-name redis.internal --tls-insecure",
            "--password-file /run/secret --connect-timeout 10x",
            "--bogus",
            "-h",
        ];
        let lines = [
            "run --key job --ttl 10m -- make -j 2",
            "run job --wait forever -- true",
            "run --key job sort -k 2",
            "run --key job --ttl 10x -- true",
            "run",
            "acquire job --ttl 30s --wait 5s",
            "acquire job",
            "release job --token t --force --reason stuck",
            "extend job --token t --ttl 1m",
            "inspect job --json",
            "history job",
            "check job --succeeded-within 1d",
            "check job",
            "list --json",
            "metrics",
            "doctor",
            "completions bash",
            "completions tcsh",
            "man run",
            "keep-alive --key job --ttl 1m --max-hold 1h",
            "pid-namespace-init -- true",
        ];
        let words = |args: &[&str]| -> Vec<OsString> { args.iter().map(OsString::from).collect() };
        let (mut parsed, mut whole_only) = (0, 0);
        for line in lines {
            let (name, own) = line.split_once(' ').unwrap_or((line, ""));
            for global in globals {
                // The global options after the subcommand, before its own; then before it.
                let after: Vec<&str> = ["redlock", name]
                    .into_iter()
                    .chain(global.split_whitespace())
                    .chain(own.split_whitespace())
                    .collect();
                let before: Vec<&str> = ["redlock"]
                    .into_iter()
                    .chain(global.split_whitespace())
                    .chain([name])
                    .chain(own.split_whitespace())
                    .collect();
                for args in [after, before] {
                    let whole = outcome(whole_command(false), &args);
                    let Some(only) = cli::command_for(&words(&args)) else {
                        whole_only += 1;
                        continue;
                    };
                    assert_eq!(outcome(only, &args), whole, "{args:?}");
                    parsed += usize::from(!whole.contains("Error"));
                }
            }
        }
        // The lines above are mostly ones that parse, not only errors; only those with an
        // option that is not redlock's (`--bogus`) or help before the subcommand need the
        // whole tree.
        assert!(parsed > lines.len() * 6, "{parsed} parsed");
        assert_eq!(
            whole_only,
            lines.len() * 2,
            "lines parsed by the whole tree"
        );
        for first in [
            "help",
            "--help",
            "-h",
            "--version",
            "--",
            "-",
            "--bogus",
            "--redis",
        ] {
            assert!(
                cli::command_for(&words(&["redlock", first, "run"])).is_none(),
                "{first}"
            );
        }
        let readme = [
            "redlock",
            "--redis",
            "redis://h:6379",
            "run",
            "--key",
            "k",
            "--",
            "true",
        ];
        assert!(cli::command_for(&words(&readme)).is_some());
    }
}
