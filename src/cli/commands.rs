//! The arguments of the commands that work on locks: `run` and `acquire` (which lock, how, and
//! what to do when it is busy), `release`, `extend`, `inspect`, `history`, `check`, `list`,
//! `metrics`, `doctor`, and the hidden keeper of `acquire --keep-alive`.

use std::time::Duration;

use clap::{ArgGroup, Args};

use crate::duration;
use crate::lock::{Retention, Token};

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
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: Option<u32>,

    /// Inside a command run under this same lock, take it anew instead of re-entering it
    ///
    /// By default a nested `run` or `acquire` of the key in REDLOCK_KEY re-enters the lock held
    /// with REDLOCK_TOKEN: the hold count goes up, and only the outermost release frees it.
    #[arg(long)]
    pub no_reenter: bool,

    /// Exit with CODE instead of 75 when the lock is busy (-E 0 -q: skip quietly)
    #[arg(short = 'E', long, value_name = "CODE", allow_negative_numbers = true, default_value_t = crate::exit::BUSY)]
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
    /// failed. WAIT narrows the window, it does not close it: see docs/servers.md on failover.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub replicas: Option<u32>,

    /// Why this holds the lock, shown by inspect, list, history and to waiters [default: the CI
    /// job's URL]
    ///
    /// At most 500 bytes, no control characters. Under GitHub Actions, GitLab CI, Jenkins or
    /// Buildkite the default is the URL of the job (run) from the environment they set.
    #[arg(long, value_name = "TEXT", env = "REDLOCK_NOTE")]
    pub note: Option<String>,

    /// Keep the lock's last N holds in its history (1 to 1000) [default: the lock's own, else
    /// 100]
    ///
    /// Stored with the lock: every later hold of it (and every release, renewal or forced
    /// release) keeps to the lock's retention unless it asks for another, until the history
    /// expires. `check --succeeded-within` can only see as far back as the history keeps.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=i64::from(Retention::MAX_HOLDS)))]
    pub history: Option<u32>,

    /// Keep the lock's history this long after its last change (1m to 366d) [default: the
    /// lock's own, else 30d]
    ///
    /// Stored with the lock, as --history is.
    #[arg(long, value_name = "DURATION", value_parser = parse_history_span, allow_hyphen_values = true)]
    pub history_ttl: Option<Duration>,
}

/// A span of the lock's history (`--history-ttl`, `check`'s windows): from a minute to what a
/// history can live, beyond the 30 days a lease can last.
fn parse_history_span(text: &str) -> Result<Duration, String> {
    duration::parse_within(text, Retention::MIN_TTL, Retention::MAX_TTL, "")
}

/// A limit `check` compares with the history (`--succeeded-within`, `--max-held`): up to what
/// a history can span.
fn parse_check_span(text: &str) -> Result<Duration, String> {
    duration::parse_within(text, Duration::from_millis(1), Retention::MAX_TTL, "")
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
/// REDLOCK_TTL_MS and REDLOCK_HELD=1; every variable redlock read a secret from is removed from
/// its environment (REDLOCK_PASSWORD, REDLOCK_SENTINEL_PASSWORD, and REDLOCK_URL, or the
/// REDIS_URL redlock read, when it holds a password).
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
    /// where every Redis user with access to the lock's keys can read it for 30 days (or the
    /// lock's --history-ttl). Use this
    /// when arguments carry something private; better still, pass secrets in the environment.
    #[arg(long, help_heading = "Command")]
    pub hide_arguments: bool,

    /// Run the command in a PID namespace of its own: all it starts dies with it, and with
    /// redlock, even on kill -9
    ///
    /// Without it, a redlock killed with SIGKILL takes only its command along (parent-death
    /// signal); what the command started in the background lives on while the lease lapses and
    /// another host runs the job. With it, the command runs under a small init of redlock's,
    /// PID 1 of a new PID namespace, and when the command exits or redlock dies, every process
    /// in that namespace is killed. Unprivileged users get it through a user namespace (the
    /// same uid and gid); where the system allows neither, redlock exits 71. A command killed
    /// by signal N exits 128+N.
    #[arg(long, help_heading = "Command")]
    pub pid_namespace: bool,

    /// Run STRING with `sh -c` instead of a command given as arguments
    #[arg(
        short = 'c',
        long = "shell-command",
        value_name = "STRING",
        help_heading = "Command"
    )]
    pub shell_command: Option<String>,

    /// Name of the lock, instead of --key; with --key and no `--`, the command's first word
    #[arg(value_name = "NAME", value_parser = clap::value_parser!(std::ffi::OsString), help_heading = "Arguments", display_order = 1)]
    pub name: Option<std::ffi::OsString>,

    /// The command without `--`, as flock takes it: `redlock run NAME COMMAND...`
    ///
    /// It starts at the first word after the name that is not one of redlock's options; from
    /// there every word is the command's, `-` or not. A word that starts with `-` and is no
    /// option of redlock's is a usage error, not the command.
    #[arg(
        value_name = "COMMAND",
        num_args = 1..,
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(std::ffi::OsString),
        help_heading = "Arguments",
        display_order = 2
    )]
    pub words: Vec<std::ffi::OsString>,

    /// The command and its arguments after `--`, run directly without a shell
    ///
    /// After `--` every word is the command's: the lock's name is never taken from there. Give
    /// it before `--` (`redlock run NAME -- COMMAND...`, options between the two as anywhere)
    /// or with --key.
    #[arg(
        value_name = "COMMAND",
        last = true,
        value_hint = clap::ValueHint::CommandWithArguments,
        value_parser = clap::value_parser!(std::ffi::OsString),
        help_heading = "Arguments",
        display_order = 3
    )]
    pub command: Vec<std::ffi::OsString>,
}

/// Take a lock and print its token; exit 75 if someone else holds it
///
/// On success the token is printed on stdout (with --json: key, token, fence and ttl_ms; on
/// a lock that stays busy, --json prints key, busy and the holder). Keep the token: `release` and `extend` need it. The lock expires after --ttl unless extended.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present_any = ["key", "after_dashes"])]
    pub name: Option<String>,

    #[command(flatten)]
    pub lock: LockArgs,

    /// Lease: the lock expires this long after acquisition unless extended (e.g. 30s, 10m, 90)
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Print a JSON object instead of the bare token (also when the lock is busy)
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

    /// Words after `--`, which are refused: a lock's name is never taken from there
    #[arg(last = true, hide = true, value_name = "WORD", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub after_dashes: Vec<std::ffi::OsString>,
}

/// The init of `run --pid-namespace` (not for direct use): with --pid1-of, PID 1 of the new
/// namespace; without, the process that creates the namespace and starts it there
#[derive(Debug, Args)]
pub struct PidNamespaceInitArgs {
    /// The pid of the process that created the namespace, this init's parent
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid1_of: Option<i32>,

    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub command: Vec<std::ffi::OsString>,
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
    #[command(flatten)]
    pub lock: NameArgs,

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
    #[arg(long, value_name = "CODE", conflicts_with = "force", allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(0..=255))]
    pub exit_status: Option<i32>,
}

/// Renew the lease of a lock you hold; exit 1 if the token no longer holds it
///
/// Sets the remaining lease to --ttl. Never re-creates a lock that has expired or been taken:
/// a holder that lost its lock must find out, not silently get it back.
#[derive(Debug, Args)]
pub struct ExtendArgs {
    #[command(flatten)]
    pub lock: NameArgs,

    /// Token printed by `acquire`
    #[arg(short, long, value_name = "TOKEN", env = "REDLOCK_TOKEN", hide_env_values = true, value_parser = Token::parse)]
    pub token: Token,

    /// New lease, counted from now
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Count the renewal as done only once N replicas acknowledged it (exit 69 otherwise)
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub replicas: Option<u32>,
}

/// Show who holds a lock, since when, and for how much longer; exit 1 if it is free
///
/// Lists each holder's host, pid, user, command, acquisition time (server clock), time left
/// and fencing token, and the last fencing token issued for the name.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub lock: NameArgs,

    #[command(flatten)]
    pub table: TableArgs,
}

/// Show a lock's last holds: who, when, how long, and how each ended
///
/// The history keeps the last 100 holds of each lock for 30 days after the last one (unless
/// run/acquire --history and --history-ttl asked for another retention): fence,
/// holder (host, pid, user, command, note), start, end, and the outcome: released (with the
/// command's exit status under `run`, or `release --exit-status`), expired (the lease ran out
/// first: the holder crashed or was cut off), forced (release --force), lost (`run` found its
/// lease gone) or given back. Newest first; exit 1 if the lock has no history.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub lock: NameArgs,

    #[command(flatten)]
    pub table: TableArgs,
}

/// Tell whether a job succeeded within a window; exit 80-83 if not
///
/// Reads each lock's history (see `history`). A lock is OK when one of its holds ended with exit
/// status 0 (released by `run` after the command exited 0, or by `release --exit-status 0`)
/// within --succeeded-within, and no hold has lasted longer than --max-held. Otherwise: exit 80
/// when the last success is older or none is in the history (saying how old, where it ran, and
/// how the latest holds ended), 81 when a hold is in progress and none succeeded within the
/// window, 82 when a hold has lasted longer than --max-held, 83 when the lock has no history.
/// One line per lock (-q: none for the locks that are OK); with several locks the exit status
/// is the worst one's (82, 80, 83, 81). --nagios prints the one line of a monitoring plugin and
/// exits 0 OK, 1 WARNING (81), 2 CRITICAL (80, 82, 83) or 3 UNKNOWN (an error). The history
/// keeps the last 100 holds for 30 days unless run/acquire --history and --history-ttl say
/// otherwise: a window longer than that sees only what is kept.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("limits")
        .args(["succeeded_within", "max_held"])
        .required(true)
        .multiple(true)
))]
pub struct CheckArgs {
    /// Names of the locks (and/or --key)
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    /// Name of a lock; repeat for several
    #[arg(short, long, value_name = "NAME")]
    pub key: Vec<String>,

    /// OK only if a hold ended with exit status 0 within this long (e.g. 26h for a daily job)
    #[arg(long, value_name = "DURATION", value_parser = parse_check_span, allow_hyphen_values = true)]
    pub succeeded_within: Option<std::time::Duration>,

    /// Not OK while a hold has lasted longer than this (a job stuck holding the lock)
    #[arg(long, value_name = "DURATION", value_parser = parse_check_span, allow_hyphen_values = true)]
    pub max_held: Option<std::time::Duration>,

    /// Print a JSON array, one object per lock, instead of lines
    #[arg(long, conflicts_with = "nagios")]
    pub json: bool,

    /// Print one line for Nagios, Icinga and compatible monitoring (status, text, performance
    /// data) and exit with the plugin's code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
    #[arg(long)]
    pub nagios: bool,

    /// Words after `--`, which are refused: a lock's name is never taken from there
    #[arg(last = true, hide = true, value_name = "WORD", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub after_dashes: Vec<std::ffi::OsString>,
}

/// Print the locks under the prefix as Prometheus metrics
///
/// The Prometheus text format, for node_exporter's textfile collector or a scrape wrapper: every
/// held lock, and every free one that has a history (a job that last ran 3 h ago is the point),
/// with HELP and TYPE lines. Walks the keyspace with SCAN, as `list` does.
#[derive(Debug, Args)]
pub struct MetricsArgs {}

/// List the held locks under the prefix, with their holders
///
/// Walks the keyspace with SCAN (never KEYS), so it is safe on a busy server.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub table: TableArgs,
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

/// The lock a command acts on: its name as the first word or as --key (never from after
/// `--`: the words there are refused). `release`, `extend`, `inspect`, `history`.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// Name of the lock, instead of --key
    #[arg(value_name = "NAME", required_unless_present_any = ["key", "after_dashes"])]
    pub name: Option<String>,

    /// Name of the lock
    #[arg(short, long, value_name = "NAME")]
    pub key: Option<String>,

    /// Words after `--`, which are refused: a lock's name is never taken from there
    #[arg(last = true, hide = true, value_name = "WORD", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub after_dashes: Vec<std::ffi::OsString>,
}

/// How a command prints what it read: a table (fitted to the terminal unless --wide) or JSON.
/// `inspect`, `history`, `list`.
#[derive(Debug, Args)]
pub struct TableArgs {
    /// Print JSON (documented in docs/reference.md) instead of a table
    #[arg(long)]
    pub json: bool,

    /// On a terminal, show every column, whole (by default: the columns read first, fitted to
    /// its width; a pipe or a file always gets every column)
    #[arg(long)]
    pub wide: bool,
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
