//! The command line, as clap derive types. Doc comments are the help text: the first line is
//! `-h`, the rest appears in `--help` and the man pages. Values are parsed to typed form here
//! (durations, tokens); everything that needs Redis happens in `cmd`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use clap_complete::Shell;

use crate::duration;
use crate::lock::Token;

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
            "redlock release --key deploy --token \"$token\"",
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

/// Locks for shell scripts, cron jobs and CI pipelines, shared across hosts through Redis.
///
/// A lock is a key in Redis with a lease (TTL): whoever takes it gets a secret token, and only
/// that token can extend or release it. Every lock change is one atomic Lua script. Each
/// acquisition also hands out a fencing token, a number that only ever grows, which a resource
/// can check to refuse a holder whose lease ran out.
#[derive(Debug, Parser)]
#[command(name = "redlock", version, max_term_width = 100)]
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
    /// independent master: quorum mode, the lock held on a majority of them (README, "Several
    /// masters"). A password in the URL works but is visible in the process list; prefer
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
    List(ListArgs),
    Doctor(DoctorArgs),
    Completions(CompletionsArgs),
    Man(ManArgs),
    #[command(hide = true)]
    KeepAlive(KeepAliveArgs),
}

/// Which lock to take, how, and what to do when it is busy (`run` and `acquire`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Lock")]
pub struct LockArgs {
    /// Name of the lock (or give it as the first word, as flock, consul lock and etcdctl lock
    /// take theirs)
    #[arg(short, long, value_name = "NAME")]
    pub key: Option<String>,

    /// Wait up to this long for a busy lock (e.g. 10m, or `forever`), in a fair FIFO queue
    ///
    /// Waiters are woken by the release itself (no polling) and take the lock in arrival order.
    /// When the wait runs out: exit 75 (or -E), with nothing left behind in Redis. A bare number
    /// is seconds, as flock's -w takes it.
    #[arg(short = 'w', long, value_name = "DURATION", default_value = "0", value_parser = crate::acquire::Wait::parse, allow_hyphen_values = true)]
    pub wait: crate::acquire::Wait,

    /// Do not wait for a busy lock (the default; flock's -n)
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// Share the lock with other --shared holders (a read lock); exclusive requests queued
    /// before a shared one go first, so writers are not starved
    #[arg(short = 's', long, conflicts_with = "limit")]
    pub shared: bool,

    /// Take the lock exclusively (the default; flock's -x)
    #[arg(short = 'x', long, conflicts_with_all = ["shared", "limit"])]
    pub exclusive: bool,

    /// Make the lock a semaphore: at most N holders at once (all must use the same N)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: Option<u32>,

    /// Inside a command run under this same lock, take it anew instead of re-entering it
    ///
    /// By default a nested `run` or `acquire` of the key in REDLOCK_KEY re-enters the lock held
    /// with REDLOCK_TOKEN: the hold count goes up, and only the outermost release frees it.
    #[arg(long)]
    pub no_reenter: bool,

    /// Exit with CODE instead of 75 when the lock is busy (-E 0 -q: skip quietly)
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = crate::exit::BUSY)]
    pub conflict_exit_code: u8,

    /// Without a terminal (a CI log), say where the wait stands this often (0: only when it
    /// starts)
    ///
    /// The line names the holder, how long it has held the lock, the place in the queue and the
    /// time left of --wait. On a terminal one line is redrawn in place instead.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = Every::parse, allow_hyphen_values = true)]
    pub progress_every: Every,

    /// Count the lock as taken, and each renewal as done, only once N replicas acknowledged
    /// them (Redis WAIT)
    ///
    /// Without it a failover can promote a replica the acquisition never reached, and a second
    /// holder takes the lock there. With it, an acquisition too few replicas acknowledged is
    /// given back and fails (exit 69); under `run`, a renewal too few acknowledged counts as
    /// failed. WAIT narrows the window, it does not close it: see the README on failover.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub replicas: Option<u32>,

    /// Why this holds the lock, shown by inspect, list, history and to waiters [default: the CI
    /// job's URL]
    ///
    /// At most 500 bytes, no control characters. Under GitHub Actions, GitLab CI, Jenkins or
    /// Buildkite the default is the URL of the job (run) from the environment they set.
    #[arg(long, value_name = "TEXT", env = "REDLOCK_NOTE")]
    pub note: Option<String>,
}

/// `run --ttl`: run renews the lease and must stop its command within it, so its floor is
/// higher than other durations' (the same rule `lease::Plan` applies).
fn parse_run_ttl(text: &str) -> Result<Duration, String> {
    duration::parse_at_least(
        text,
        crate::lease::MIN_TTL,
        " for run (renewals and the kill schedule must fit in the lease)",
    )
}

/// A period, or `0` for never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every(pub Option<Duration>);

impl Every {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "0" | "0s" => Ok(Self(None)),
            other => duration::parse(other).map(|period| Self(Some(period))),
        }
    }
}

/// Run a command while holding a lock; exit 75 if someone else holds it
///
/// Takes the lock (waiting for it with --wait), runs the command (argv directly, no shell, unless -c) in its own process
/// group, renews the lease every ttl/3 while it runs, and releases the lock once the command
/// and everything in its group are gone. Exits with the command's own status (128+N if it died
/// of signal N).
///
/// If renewals stop being confirmed (Redis down or hung, key deleted or taken), the command's
/// group gets SIGTERM and then SIGKILL early enough to be dead before the lease can lapse in
/// Redis; redlock says why and exits 125. INT, TERM, HUP, QUIT, USR1 and USR2 are forwarded to
/// the group; a second INT or TERM kills it at once. If redlock itself is killed with SIGKILL,
/// the command gets SIGKILL too (Linux parent-death signal).
///
/// The command sees REDLOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE (the fencing token),
/// REDLOCK_TTL_MS and REDLOCK_HELD=1; REDLOCK_PASSWORD and REDLOCK_SENTINEL_PASSWORD are removed
/// from its environment.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub lock: LockArgs,

    /// Lease, renewed while the command runs; how long the lock outlives a crashed host
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_run_ttl, allow_hyphen_values = true, help_heading = "Command")]
    pub ttl: Duration,

    /// Renew the lease this often [default: ttl/3]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Command")]
    pub renew_every: Option<Duration>,

    /// Grace between SIGTERM and SIGKILL when stopping the command [default: 10s]
    ///
    /// When the lock is being lost the grace is shortened if needed, so that the command is
    /// dead before the lease can lapse.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Command")]
    pub kill_after: Option<Duration>,

    /// Stop the command (SIGTERM, grace, SIGKILL) after this long and exit 124
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Command")]
    pub max_runtime: Option<Duration>,

    /// Keep the lock until this long after acquisition, even if the command ends sooner
    ///
    /// The same cron entry firing moments later on a host with a skewed clock then finds the
    /// lock taken and skips, instead of running the job twice. Measured on the Redis server's
    /// clock.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true, help_heading = "Command")]
    pub min_hold: Option<Duration>,

    /// Record only the program's name, not its arguments, in the lock's holder record and
    /// history
    ///
    /// The command line is recorded (its first 256 bytes) for `inspect`, `list` and `history`,
    /// where every Redis user with access to the lock's keys can read it for 30 days. Use this
    /// when arguments carry something private; better still, pass secrets in the environment.
    #[arg(long, help_heading = "Command")]
    pub hide_arguments: bool,

    /// Run STRING with `sh -c` instead of a command given as arguments
    #[arg(
        short = 'c',
        long = "shell-command",
        value_name = "STRING",
        help_heading = "Command"
    )]
    pub shell_command: Option<String>,

    /// The command and its arguments, run directly without a shell; without --key, the lock's
    /// name comes first (`redlock run NAME -- COMMAND...`)
    ///
    /// The command starts at `--` or at the first word that does not begin with `-`; an
    /// unknown option before it is a usage error, not the command. Without --key its first
    /// word is the lock's name, and the command follows (after a `--`, if given).
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        num_args = 1..,
        value_hint = clap::ValueHint::CommandWithArguments,
        required_unless_present = "shell_command",
        value_parser = clap::value_parser!(std::ffi::OsString)
    , help_heading = "Command")]
    pub command: Vec<std::ffi::OsString>,
}

/// Take a lock and print its token; exit 75 if someone else holds it
///
/// On success the token is printed on stdout (with --json: key, token, fence and ttl_ms).
/// Keep the token: `release` and `extend` need it. The lock expires after --ttl unless extended.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present = "key")]
    pub name: Option<String>,

    #[command(flatten)]
    pub lock: LockArgs,

    /// Lease: the lock expires this long after acquisition unless extended (e.g. 30s, 10m, 90)
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Print a JSON object instead of the bare token
    #[arg(long)]
    pub json: bool,

    /// Keep renewing the lease in the background until `release`, for steps that run in
    /// separate shells (CI steps, make recipes)
    ///
    /// A small background process renews the lease every ttl/3 until the lock is released with
    /// its token, until the process --while-pid names exits (then it releases the lock), or
    /// until --max-hold has passed (then it stops renewing, and the lease runs out). If it dies,
    /// the lease runs out as usual.
    #[arg(long)]
    pub keep_alive: bool,

    /// With --keep-alive: release the lock when this process exits (it must exist)
    #[arg(long, value_name = "PID", requires = "keep_alive")]
    pub while_pid: Option<u32>,

    /// With --keep-alive: stop renewing this long after acquisition
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration::parse, allow_hyphen_values = true, requires = "keep_alive")]
    pub max_hold: Duration,
}

/// The background keeper of `acquire --keep-alive` (not for direct use; the token comes in
/// REDLOCK_TOKEN)
#[derive(Debug, Args)]
pub struct KeepAliveArgs {
    #[arg(long, value_name = "NAME")]
    pub key: String,

    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub ttl: Duration,

    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub max_hold: Duration,

    #[arg(long, value_name = "PID")]
    pub while_pid: Option<u32>,

    #[arg(long, value_name = "N")]
    pub replicas: Option<u32>,
}

/// Release a lock held by a token, or --force it free
///
/// With --token: releases only if that token still holds the lock; exit 1 and nothing changed
/// otherwise (expired, already released, or taken by someone else). With --force: removes
/// whatever holds the lock and prints who was evicted, for the audit trail.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present = "key")]
    pub name: Option<String>,

    /// Name of the lock
    #[arg(short, long, value_name = "NAME")]
    pub key: Option<String>,

    /// Token printed by `acquire`
    #[arg(
        short,
        long,
        value_name = "TOKEN",
        env = "REDLOCK_TOKEN",
        hide_env_values = true,
        value_parser = Token::parse,
        required_unless_present = "force"
    )]
    pub token: Option<Token>,

    /// Remove the lock whoever holds it, and print who that was
    ///
    /// The lock's history records the hold as forced, by whom (user@host) and, with --reason,
    /// why.
    #[arg(long)]
    pub force: bool,

    /// With --force: why, for the lock's history (at most 200 characters)
    #[arg(long, value_name = "TEXT", requires = "force", value_parser = parse_reason)]
    pub reason: Option<String>,

    /// Record how the work under the lock ended, for `redlock history` (e.g. `$?` in a trap)
    #[arg(long, value_name = "CODE", conflicts_with = "force", value_parser = clap::value_parser!(i32).range(0..=255))]
    pub exit_status: Option<i32>,
}

/// Renew the lease of a lock you hold; exit 1 if the token no longer holds it
///
/// Sets the remaining lease to --ttl. Never re-creates a lock that has expired or been taken:
/// a holder that lost its lock must find out, not silently get it back.
#[derive(Debug, Args)]
pub struct ExtendArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present = "key")]
    pub name: Option<String>,

    /// Name of the lock
    #[arg(short, long, value_name = "NAME")]
    pub key: Option<String>,

    /// Token printed by `acquire`
    #[arg(short, long, value_name = "TOKEN", env = "REDLOCK_TOKEN", hide_env_values = true, value_parser = Token::parse)]
    pub token: Token,

    /// New lease, counted from now
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Count the renewal as done only once N replicas acknowledged it (exit 69 otherwise)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub replicas: Option<u32>,
}

/// Show who holds a lock, since when, and for how much longer; exit 1 if it is free
///
/// Lists each holder's host, pid, user, command, acquisition time (server clock), time left
/// and fencing token, and the last fencing token issued for the name.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present = "key")]
    pub name: Option<String>,

    /// Name of the lock
    #[arg(short, long, value_name = "NAME")]
    pub key: Option<String>,

    /// Print JSON (documented in the README) instead of a table
    #[arg(long)]
    pub json: bool,

    /// On a terminal, show commands and notes whole instead of fitting the table to its width
    /// (a pipe or a file always gets them whole)
    #[arg(long)]
    pub wide: bool,
}

/// Show a lock's last holds: who, when, how long, and how each ended
///
/// The history keeps the last 100 holds of each lock for 30 days after the last one: fence,
/// holder (host, pid, user, command, note), start, end, and the outcome: released (with the
/// command's exit status under `run`, or `release --exit-status`), expired (the lease ran out
/// first: the holder crashed or was cut off), forced (release --force), lost (`run` found its
/// lease gone) or given back. Newest first; exit 1 if the lock has no history.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present = "key")]
    pub name: Option<String>,

    /// Name of the lock
    #[arg(short, long, value_name = "NAME")]
    pub key: Option<String>,

    /// Print JSON (documented in the README) instead of a table
    #[arg(long)]
    pub json: bool,

    /// On a terminal, show commands and notes whole instead of fitting the table to its width
    /// (a pipe or a file always gets them whole)
    #[arg(long)]
    pub wide: bool,
}

/// List the held locks under the prefix, with their holders
///
/// Walks the keyspace with SCAN (never KEYS), so it is safe on a busy server.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print a JSON array of the objects `inspect --json` prints
    #[arg(long)]
    pub json: bool,

    /// On a terminal, show commands and notes whole instead of fitting the table to its width
    /// (a pipe or a file always gets them whole)
    #[arg(long)]
    pub wide: bool,
}

/// Check what the Redis server does to the safety of locks; exit 1 if anything is unsafe
///
/// Reads what the user may see (INFO, CONFIG GET, ROLE, and the ACL through a script) and says,
/// one line per subject, what is safe and what is not: the server's version and role,
/// replication, the eviction policy, persistence, and whether the user may run every command
/// redlock needs on its keys. Changes nothing. Exit 3 when nothing unsafe was seen but the
/// eviction policy, persistence or replication could not be read: an unknown is no all-clear.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print a JSON array of {check, verdict, detail} instead
    #[arg(long)]
    pub json: bool,
}

/// Print a shell completion script to stdout
///
/// e.g. `redlock completions bash > /etc/bash_completion.d/redlock`
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to generate for
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print a manual page, or install them all
///
/// `redlock man run | man -l -` reads one; `sudo "$(command -v redlock)" man --install
/// /usr/local/share/man` puts every page where `man` finds it (sudo searches a PATH of its own,
/// without ~/.cargo/bin).
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print (default: the overview)
    #[arg(value_name = "COMMAND", value_parser = PageName)]
    pub command: Option<String>,

    /// Write every page into DIR/man1 instead (e.g. /usr/local/share/man)
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub install: Option<PathBuf>,
}

/// The commands that have a manual page (`redlock man COMMAND`), in the order of `--help`.
pub const MAN_PAGES: &[&str] = &[
    "run",
    "acquire",
    "release",
    "extend",
    "inspect",
    "history",
    "list",
    "doctor",
    "completions",
    "man",
];

/// `redlock man`'s COMMAND: any word parses (the command says which pages exist, in its own
/// words), but the pages are the possible values, for help and shell completion.
#[derive(Clone)]
struct PageName;

impl clap::builder::TypedValueParser for PageName {
    type Value = String;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(command, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            MAN_PAGES.iter().map(clap::builder::PossibleValue::new),
        ))
    }
}

/// A `--reason`: one line of at most 200 characters, for the history.
fn parse_reason(text: &str) -> Result<String, String> {
    if text.chars().count() > 200 {
        return Err("at most 200 characters".into());
    }
    if text.chars().any(char::is_control) {
        return Err("one line, without control characters".into());
    }
    Ok(text.to_owned())
}
