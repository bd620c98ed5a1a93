//! The command line, as clap derive types. Doc comments are the help text: the first line is
//! `-h`, the rest appears in `--help` and the man pages. Values are parsed to typed form here
//! (durations, tokens); everything that needs Redis happens in `cmd`.

use std::path::PathBuf;
use std::time::Duration;

use std::ffi::OsString;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::duration;

mod commands;
mod tools;

pub use commands::*;
pub use tools::*;

/// Environment variables redlock reads, and what for.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "REDLOCK_URL",
        "Redis URL, when --redis is not given (several, separated by spaces: quorum mode)",
    ),
    (
        "REDIS_URL",
        "Redis URL, when neither --redis nor REDLOCK_URL is set",
    ),
    (
        "REDLOCK_PASSWORD",
        "Redis password; overrides one in the URL, --password-file overrides it",
    ),
    (
        "REDLOCK_SENTINEL_PASSWORD",
        "the sentinels' password, for redis+sentinel:// URLs",
    ),
    ("REDLOCK_PREFIX", "key prefix, when --prefix is not given"),
    ("REDLOCK_NOTE", "--note, when not given"),
    ("REDLOCK_LOG_FORMAT", "--log-format, when not given"),
    ("REDLOCK_TLS_CA", "--tls-ca, when not given"),
    ("REDLOCK_TLS_CERT", "--tls-cert, when not given"),
    ("REDLOCK_TLS_KEY", "--tls-key, when not given"),
    (
        "REDLOCK_TLS_SERVER_NAME",
        "--tls-server-name, when not given",
    ),
    (
        "REDLOCK_TLS_INSECURE",
        "--tls-insecure when set to 1, true or yes",
    ),
    (
        "REDLOCK_TOKEN",
        "token for release and extend, when --token is not given",
    ),
];

/// Worked examples: a sentence, then the commands.
pub const EXAMPLES: &[(&str, &[&str])] = &[
    (
        "Hold a lock around a critical section in a shell script:",
        &[
            "token=$(redlock acquire --key deploy --ttl 10m) || exit",
            "./deploy.sh",
            "REDLOCK_TOKEN=$token redlock release --key deploy   # not --token: argv is public",
        ],
    ),
    (
        "Run a job on one cron host only; the others skip quietly:",
        &["redlock run -q -E 0 --key nightly-report --ttl 1m --min-hold 5m -- ./report.sh"],
    ),
    (
        "See who holds a lock, then break it, leaving an audit line:",
        &[
            "redlock inspect --key deploy",
            "redlock release --key deploy --force",
        ],
    ),
];

/// The text after `--help`: environment, exit status and examples. Attached only when `--help`
/// is asked for (see `lib.rs`): laying it out costs more than the rest of a parse.
pub(crate) fn after_long_help() -> String {
    let mut text = String::from("Environment:\n");
    text.push_str(&two_columns(ENVIRONMENT));
    text.push_str("\nExit status:\n");
    text.push_str(&two_columns(crate::exit::TABLE));
    text.push_str("\nExamples:");
    for (what, commands) in EXAMPLES {
        text.push_str(&format!("\n  {what}\n"));
        for command in *commands {
            text.push_str(&format!("    {command}\n"));
        }
    }
    text
}

/// Rows of `  NAME  meaning`, the meanings aligned and wrapped at 80 columns under themselves
/// (clap would wrap them back to the margin).
fn two_columns(rows: &[(&str, &str)]) -> String {
    let indent = 2 + rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0) + 2;
    let mut text = String::new();
    for (name, meaning) in rows {
        let mut line = format!("  {name:<width$}", width = indent - 2);
        for word in meaning.split(' ') {
            if line.len() > indent && line.len() + 1 + word.len() > 80 {
                text.push_str(line.trim_end());
                text.push('\n');
                line = " ".repeat(indent);
            } else if line.len() > indent {
                line.push(' ');
            }
            line.push_str(word);
        }
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Where the command starts in `redlock [OPTIONS] run [OPTIONS] --key NAME COMMAND...`, the
/// `--key` form without `--`: the index in `args` of the command's first word, before which
/// the caller puts a `--`. `None` for any other command line.
///
/// clap alone would take that word for the name of `run NAME COMMAND...` (flock's form), and
/// the command's options after it for redlock's own: `run --key k grep -v x` would run `grep
/// x` verbosely. So the words are walked here as clap walks them: an option of redlock's (and
/// its value) is skipped, and the first other word is the command's when `--key` came before
/// it, unless `--` follows it (options aside): then it is a name, as in `run NAME -- COMMAND`,
/// and must be K.
pub fn command_after_key(args: &[OsString]) -> Option<usize> {
    let before_dashes = || args.iter().skip(1).take_while(|arg| *arg != "--");
    // Most command lines name no key: spare them building the options below.
    let may_name_a_key = before_dashes().any(|arg| {
        let arg = arg.to_string_lossy();
        arg == "--key"
            || arg.starts_with("--key=")
            || (arg.starts_with('-') && !arg.starts_with("--") && arg.contains('k'))
    });
    if !may_name_a_key {
        return None;
    }
    let global = Global::augment_args(clap::Command::new("redlock"));
    let run = RunArgs::augment_args(clap::Command::new("run"));
    let options: Vec<&clap::Arg> = global
        .get_arguments()
        .chain(run.get_arguments())
        .filter(|arg| !arg.is_positional())
        .collect();
    let takes_value = |arg: &clap::Arg| arg.get_action().takes_values();
    let mut in_run = false;
    let mut key = false;
    // The first word after `run --key K`: the command's, unless a `--` follows it.
    let mut command = None;
    let mut at = 1;
    while at < args.len() {
        let word = args[at].to_string_lossy();
        if word == "--" {
            // `run --key K WORD -- COMMAND`: WORD names the lock (and must be K).
            return None;
        }
        if let Some(long) = word.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            key |= in_run && name == "key";
            let option = options.iter().find(|arg| arg.get_long() == Some(name));
            if !attached && option.is_some_and(|option| takes_value(option)) {
                at += 1;
            }
        } else if word.len() > 1 && word.starts_with('-') {
            // A cluster of short options (-qv), the last of which may take a value, attached
            // (-w60) or as the next word.
            for (offset, short) in word.char_indices().skip(1) {
                key |= in_run && short == 'k';
                let option = options.iter().find(|arg| arg.get_short() == Some(short));
                if option.is_some_and(|option| takes_value(option)) {
                    if offset + short.len_utf8() == word.len() {
                        at += 1;
                    }
                    break;
                }
            }
        } else if !in_run {
            // The subcommand: only `run` takes a command.
            if word != "run" {
                return None;
            }
            in_run = true;
        } else if let Some(first) = command {
            // A second word: the first began the command.
            return Some(first);
        } else if key {
            command = Some(at);
        } else {
            return None;
        }
        at += 1;
    }
    command
}

/// What `redlock --version` prints after the name: the version, the commit it was built from
/// and the target, e.g. `0.1.0 (abc1234 x86_64-unknown-linux-musl)` (build.rs finds the
/// last two). The manual pages name the version alone, so that they do not change with
/// every commit.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("REDLOCK_COMMIT"),
    " ",
    env!("REDLOCK_TARGET"),
    ")"
);

/// clap's tree for `args` (program name first) when they name their subcommand after global
/// options alone (`redlock --redis URL run ...`, `redlock run ...`): the root's options and
/// that subcommand alone. `None` when the words before the subcommand are anything else
/// (help, an option clap would have to judge): the whole tree (`Cli`) parses those. Before it
/// parses, clap copies every global option into every subcommand the root has; with all of
/// them that copy, and freeing it, cost a third of redlock's own start-up
/// (docs/performance.md). What parsing a subcommand takes from the root, its global options
/// and settings, is here; the root's help, the manual pages and the completions use the whole
/// tree.
pub(crate) fn command_for(args: &[OsString]) -> Option<clap::Command> {
    let root = Global::augment_args(
        clap::Command::new("redlock")
            .version(VERSION)
            .max_term_width(HELP_WIDTH)
            .subcommand_required(true)
            .arg_required_else_help(true),
    );
    let global = |found: &dyn Fn(&clap::Arg) -> bool| {
        root.get_arguments()
            .find(|arg| found(arg))
            .map(|arg| arg.get_action().takes_values())
    };
    let mut words = args.iter().skip(1);
    let name = loop {
        let word = words.next()?.to_str()?;
        if let Some(long) = word.strip_prefix("--") {
            // `--NAME VALUE`, `--NAME=VALUE` or a flag; not `--`.
            let (name, value) = long
                .split_once('=')
                .map_or((long, None), |(name, value)| (name, Some(value)));
            let takes_value = global(&|arg| arg.get_long() == Some(name))?;
            if takes_value && value.is_none() {
                words.next()?;
            }
        } else if let Some(flags) = word.strip_prefix('-').filter(|flags| !flags.is_empty()) {
            // Flags only (`-q`, `-vv`): a short option with a value is left to clap.
            for flag in flags.chars() {
                if global(&|arg| arg.get_short() == Some(flag))? {
                    return None;
                }
            }
        } else if word == "-" {
            return None;
        } else {
            break word;
        }
    };
    let subcommands = Command::augment_subcommands(clap::Command::new("redlock"));
    let only = subcommands.find_subcommand(name)?.clone();
    Some(root.subcommand(only))
}

/// The widest help is wrapped to, on a wider terminal or none.
pub(crate) const HELP_WIDTH: usize = 100;

/// Locks for shell scripts, cron jobs and CI pipelines, shared across hosts through Redis.
///
/// A lock is a key in Redis with a lease (TTL): whoever takes it gets a secret token, and only
/// that token can extend or release it. Every lock change is one atomic Lua script. Each
/// acquisition also hands out a fencing token, a number that only ever grows, which a resource
/// can check to refuse a holder whose lease ran out.
#[derive(Debug, Parser)]
#[command(name = "redlock", version, max_term_width = HELP_WIDTH)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand accepts.
#[derive(Debug, Args)]
pub struct Global {
    /// Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]
    ///
    /// redis://[user[:password]@]host[:port][/db], rediss://... for TLS, or unix:///path/to/socket.
    /// Sentinel: redis+sentinel://host:port[,host:port...]/SERVICE (the sentinels' addresses;
    /// their own password in REDLOCK_SENTINEL_PASSWORD, their user as ?sentinel_user=NAME).
    /// Cluster: redis+cluster://host:port[,host:port...] (seed nodes). Both take rediss+...
    /// for TLS. Given N times (N odd, at least 3; in REDLOCK_URL separated by spaces), each an
    /// independent master: quorum mode, the lock held on a majority of them (docs/servers.md,
    /// "Several masters"). A password in the URL works but is visible in the process list; prefer
    /// REDLOCK_PASSWORD or --password-file. Passwords are never printed.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "REDLOCK_URL",
        hide_env_values = true,
        value_delimiter = ' ',
        action = ArgAction::Append,
        help_heading = "Connection"
    )]
    pub redis: Vec<String>,

    /// Whether `redis` came from REDLOCK_URL rather than the command line (set after parsing,
    /// for messages that name where an empty URL came from).
    #[arg(skip)]
    pub redis_from_env: bool,

    /// Read the Redis password from this file (its first line)
    ///
    /// Overrides REDLOCK_PASSWORD and a password in the URL. The file should be readable by its
    /// owner only; redlock warns otherwise.
    #[arg(long, global = true, value_name = "PATH", help_heading = "Connection")]
    pub password_file: Option<PathBuf>,

    /// Prefix of every key redlock writes
    #[arg(
        long,
        global = true,
        value_name = "PREFIX",
        env = "REDLOCK_PREFIX",
        hide_env_values = true,
        default_value = crate::keys::DEFAULT_PREFIX,
        help_heading = "Connection"
    )]
    pub prefix: String,

    /// Give up connecting to Redis after this long (TLS handshake and login included)
    #[arg(long, global = true, value_name = "DURATION", default_value = "2s", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Connection")]
    pub connect_timeout: Duration,

    /// Give up on any single Redis command after this long
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Connection")]
    pub command_timeout: Duration,

    /// Keep sending a release known not to have run (refused, no server reached) this long
    ///
    /// A release answered CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING or READONLY (a master
    /// demoted by a failover), or that reached no server (connection refused, a master the
    /// sentinels no longer name), did not run: it is sent again, finding the master or the
    /// slot's node anew each time, until it runs or this much time has passed since the first
    /// attempt (not past the lease's end, when redlock knows it). A server that does not answer
    /// at all ends the release: after run's command it is given 1 s (0.5 s after a signal;
    /// release gives it --command-timeout), as a release that may have run is never sent twice.
    /// The lock then expires with its lease.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Connection")]
    pub release_timeout: Duration,

    #[command(flatten)]
    pub tls: TlsArgs,

    /// Print no notices for expected outcomes (busy, not held, free); errors still print
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Log each step to stderr
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,

    /// Write redlock's own stderr lines as text, or as one JSON object per line
    #[arg(long, global = true, value_name = "FORMAT", env = "REDLOCK_LOG_FORMAT", default_value = "text", value_parser = LogFormatName)]
    pub log_format: crate::log::Format,
}

fn parse_log_format(text: &str) -> Result<crate::log::Format, String> {
    match text {
        "text" => Ok(crate::log::Format::Text),
        "json" => Ok(crate::log::Format::Json),
        _ => Err("must be text or json".into()),
    }
}

/// `--log-format`: text or json, which help and shell completion offer.
#[derive(Clone)]
struct LogFormatName;

impl clap::builder::TypedValueParser for LogFormatName {
    type Value = crate::log::Format;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<crate::log::Format, clap::Error> {
        clap::builder::TypedValueParser::parse_ref(&parse_log_format, command, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            ["text", "json"]
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// TLS for rediss:// URLs.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// Trust the CAs in this PEM bundle instead of the system's
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "REDLOCK_TLS_CA",
        help_heading = "TLS (rediss://)"
    )]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for servers that require one; needs --tls-key
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "REDLOCK_TLS_CERT",
        requires = "tls_key",
        help_heading = "TLS (rediss://)"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert; should be readable by its owner only
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "REDLOCK_TLS_KEY",
        requires = "tls_cert",
        help_heading = "TLS (rediss://)"
    )]
    pub tls_key: Option<PathBuf>,

    /// Verify the server's certificate against NAME instead of the URL's host
    ///
    /// For connecting by IP address (or through a tunnel) to a server whose certificate names a
    /// host.
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "REDLOCK_TLS_SERVER_NAME",
        help_heading = "TLS (rediss://)"
    )]
    pub tls_server_name: Option<String>,

    /// Do not verify the server's certificate at all (development only; redlock warns)
    ///
    /// The connection is encrypted but anyone on the path can pose as the server, read the
    /// password and change what redlock sends.
    #[arg(long, global = true, env = "REDLOCK_TLS_INSECURE", value_parser = clap::builder::BoolishValueParser::new(), action = ArgAction::SetTrue, help_heading = "TLS (rediss://)")]
    pub tls_insecure: bool,
}

/// The subcommands. Each one's options are built only when it is the one run (`defer`): clap's
/// tree of every option of every subcommand was most of redlock's start-up, in heap pages
/// touched (docs/performance.md). Help builds them all (`lib.rs`), for their descriptions.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    Run(RunArgs),
    Acquire(AcquireArgs),
    Release(ReleaseArgs),
    Extend(ExtendArgs),
    Inspect(InspectArgs),
    History(HistoryArgs),
    Check(CheckArgs),
    List(ListArgs),
    Metrics(MetricsArgs),
    Doctor(DoctorArgs),
    Completions(CompletionsArgs),
    Man(ManArgs),
    #[command(hide = true)]
    KeepAlive(KeepAliveArgs),
    #[command(hide = true)]
    PidNamespaceInit(PidNamespaceInitArgs),
}
