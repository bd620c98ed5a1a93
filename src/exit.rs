//! Outcomes that need their own exit code, and the one table that maps them to codes.
//!
//! Every fallible function returns `anyhow::Result`; an error that must end with a specific
//! code carries a [`Failure`] somewhere in its chain. [`exit_code`] is the only place where
//! outcomes become numbers, so the README, the man page and the tests have one table to match.

use std::fmt;

/// An outcome with its own exit code. Anything without one is an internal error (70).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `release` / `extend`: the lock is not held by the given token (expired, released, taken).
    NotHeld,
    /// `inspect`: the lock is free; `history`: the lock has none.
    Free,
    /// Bad flags, keys, durations, tokens, or a key name that collides with non-redlock data.
    Usage,
    /// Redis cannot be reached or did not answer in time, or is not a master.
    Unavailable,
    /// The server is a Redis older than redlock supports (6.0): as unavailable, but waiting
    /// for it is pointless.
    Unsupported,
    /// The lock is held by someone else.
    Busy,
    /// Authentication or ACL permission denied.
    Auth,
    /// `run`: `--max-runtime` elapsed and the command was stopped.
    MaxRuntime,
    /// `run`: the lock was lost (or could not be confirmed) while the command ran.
    Lost,
    /// `run`: the command exists but cannot be executed.
    NotExecutable,
    /// `run`: the command was not found.
    NotFound,
    /// The system refused a resource redlock needs (a thread, a pipe, a process, the PID
    /// namespace of `run --pid-namespace`).
    System,
    /// The output could not be written (stdout closed, or a pipe whose reader is gone).
    Output,
    /// `doctor`: something about the server makes locks unsafe.
    Unsafe,
    /// `doctor`: nothing unsafe seen, but a safety subject could not be read (the user may
    /// not ask): not an all-clear.
    Unchecked,
    /// `check`: no hold ended with exit 0 within the window (the last success is older, or
    /// the history has none).
    Stale,
    /// `check`: a hold is in progress, and none succeeded within the window.
    Running,
    /// `check`: a hold has lasted longer than `--max-held`.
    HeldTooLong,
    /// `check`: the lock has no history (never taken, or not while its history lives).
    NoHistory,
}

impl Failure {
    /// Expected outcomes a script branches on; `-q` silences their messages.
    pub fn is_expected(self) -> bool {
        matches!(
            self,
            Failure::NotHeld
                | Failure::Free
                | Failure::Busy
                | Failure::Unsafe
                | Failure::Unchecked
                | Failure::Stale
                | Failure::Running
                | Failure::HeldTooLong
                | Failure::NoHistory
        )
    }
}

/// A monitoring plugin's state (Nagios, Icinga, Sensu, ...: `check --nagios`), each with the
/// plugin convention's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PluginState {
    Ok,
    Warning,
    Critical,
    Unknown,
}

impl PluginState {
    /// The state of a `check` outcome: `None` is OK; a hold in progress is a warning (the job
    /// may still succeed); no success, a hold past its limit and no history are critical.
    pub fn of_check(outcome: Option<Failure>) -> Self {
        match outcome {
            None => PluginState::Ok,
            Some(Failure::Running) => PluginState::Warning,
            Some(Failure::Stale | Failure::HeldTooLong | Failure::NoHistory) => {
                PluginState::Critical
            }
            Some(_) => PluginState::Unknown,
        }
    }

    /// The word the plugin line shows: `OK`, `WARNING`, `CRITICAL` or `UNKNOWN`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginState::Ok => "OK",
            PluginState::Warning => "WARNING",
            PluginState::Critical => "CRITICAL",
            PluginState::Unknown => "UNKNOWN",
        }
    }

    /// The plugin convention's exit code: 0, 1, 2, 3.
    pub fn code(self) -> u8 {
        match self {
            PluginState::Ok => OK,
            PluginState::Warning => PLUGIN_WARNING,
            PluginState::Critical => PLUGIN_CRITICAL,
            PluginState::Unknown => PLUGIN_UNKNOWN,
        }
    }
}

/// Exit codes; `busy_code` arguments carry the `-E/--conflict-exit-code` override of [`BUSY`].
pub const OK: u8 = 0;
pub const NOT_HELD: u8 = 1;
pub const UNCHECKED: u8 = 3;
pub const USAGE: u8 = 64;
pub const UNAVAILABLE: u8 = 69;
pub const INTERNAL: u8 = 70;
pub const SYSTEM: u8 = 71;
pub const OUTPUT: u8 = 74;
pub const BUSY: u8 = 75;
pub const AUTH: u8 = 77;
pub const PLUGIN_WARNING: u8 = 1;
pub const PLUGIN_CRITICAL: u8 = 2;
pub const PLUGIN_UNKNOWN: u8 = 3;
pub const STALE: u8 = 80;
pub const RUNNING: u8 = 81;
pub const HELD_TOO_LONG: u8 = 82;
pub const NO_HISTORY: u8 = 83;
pub const MAX_RUNTIME: u8 = 124;
pub const LOST: u8 = 125;
pub const NOT_EXECUTABLE: u8 = 126;
pub const NOT_FOUND: u8 = 127;

/// Every exit code and its meaning: the source of `--help`, the man page and the README table.
pub const TABLE: &[(&str, &str)] = &[
    (
        "0",
        "success (acquire: acquired; inspect: held; check: every lock OK); run: the command's own exit status",
    ),
    (
        "1",
        "release, extend: not held by that token (nothing changed); inspect: free; history: none; doctor: something is unsafe; check --nagios: WARNING",
    ),
    ("2", "check --nagios: CRITICAL"),
    (
        "3",
        "doctor: nothing unsafe seen, but the memory policy, persistence or replication could not be read (the user may not run INFO or CONFIG GET); check --nagios: UNKNOWN (an error)",
    ),
    (
        "64",
        "usage error: bad flag, key, duration, token or URL; or the key holds foreign data",
    ),
    (
        "69",
        "Redis unavailable: connection refused or timed out, the server is not a master or is older than Redis 6.0, or too few replicas acknowledged (--replicas)",
    ),
    ("70", "internal error: a bug in redlock (please report it)"),
    (
        "71",
        "the system refused a thread, pipe, process or PID namespace redlock needs",
    ),
    (
        "74",
        "the output could not be written (acquire gives the lock back)",
    ),
    (
        "75",
        "lock busy (-E/--conflict-exit-code changes this code); run: also granted too late to start the command, with no --wait left",
    ),
    ("77", "authentication failed or ACL permission denied"),
    (
        "80",
        "check: no hold ended with exit 0 within --succeeded-within (the last success is older, or none is in the history)",
    ),
    (
        "81",
        "check: a hold is in progress, and none ended with exit 0 within --succeeded-within",
    ),
    ("82", "check: a hold has lasted longer than --max-held"),
    (
        "83",
        "check: the lock has no history (never taken, or not while its history lives)",
    ),
    ("124", "run: --max-runtime elapsed; the command was stopped"),
    (
        "125",
        "run: the lock was lost while the command ran; the command was stopped (or had already ended: redlock says with which status)",
    ),
    ("126", "run: the command is not executable"),
    ("127", "run: the command was not found"),
    (
        "128+N",
        "run: the command died of signal N (130 = SIGINT, 137 = SIGKILL, 143 = SIGTERM)",
    ),
];

/// The exit code of each outcome: the one table (README, man page and tests follow it).
pub fn failure_code(failure: Failure, busy_code: u8) -> u8 {
    match failure {
        Failure::NotHeld | Failure::Free | Failure::Unsafe => NOT_HELD,
        Failure::Unchecked => UNCHECKED,
        Failure::Usage => USAGE,
        Failure::Unavailable | Failure::Unsupported => UNAVAILABLE,
        Failure::Busy => busy_code,
        Failure::Auth => AUTH,
        Failure::MaxRuntime => MAX_RUNTIME,
        Failure::Lost => LOST,
        Failure::NotExecutable => NOT_EXECUTABLE,
        Failure::NotFound => NOT_FOUND,
        Failure::System => SYSTEM,
        Failure::Output => OUTPUT,
        Failure::Stale => STALE,
        Failure::Running => RUNNING,
        Failure::HeldTooLong => HELD_TOO_LONG,
        Failure::NoHistory => NO_HISTORY,
    }
}

/// Maps an error to its exit code: the first [`Failure`] in the chain decides, otherwise 70.
pub fn exit_code(err: &anyhow::Error, busy_code: u8) -> u8 {
    failure_of(err).map_or(INTERNAL, |failure| failure_code(failure, busy_code))
}

/// How a command that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    Success,
    /// An expected outcome the command already reported (e.g. `inspect` of a free lock).
    Reported(Failure),
    /// `run`: the command ran to its end; its status passes through.
    Child(ChildStatus),
    /// Signal N ended the wait for the lock: 128 + N, as a shell reports it.
    Interrupted(i32),
    /// `check --nagios`: the plugin convention's code, whatever the outcome.
    Plugin(PluginState),
}

/// How the supervised command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStatus {
    Exited(i32),
    Signaled(i32),
}

impl ChildStatus {
    /// The shell's convention: the exit code, or 128 + N for death by signal N.
    pub fn code(self) -> u8 {
        match self {
            ChildStatus::Exited(code) => (code & 0xff) as u8,
            ChildStatus::Signaled(signal) => 128u8.wrapping_add((signal & 0x7f) as u8),
        }
    }
}

impl Done {
    pub fn code(self, busy_code: u8) -> u8 {
        match self {
            Done::Success => OK,
            Done::Reported(failure) => failure_code(failure, busy_code),
            Done::Child(status) => status.code(),
            Done::Interrupted(signal) => ChildStatus::Signaled(signal).code(),
            Done::Plugin(state) => state.code(),
        }
    }
}

/// The first [`Failure`] attached anywhere in the error chain.
pub fn failure_of(err: &anyhow::Error) -> Option<Failure> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failed>())
        .map(|failed| failed.failure)
}

/// The first [`Hint`] attached anywhere in the error chain.
pub fn hint_of(err: &anyhow::Error) -> Option<Hint> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failed>())
        .and_then(|failed| failed.hint)
}

/// An error message tagged with the outcome it stands for, and what the user can do about it.
#[derive(Debug)]
pub struct Failed {
    pub failure: Failure,
    pub message: String,
    pub hint: Option<Hint>,
    /// What became of the request, when redlock can tell: whether it may still run.
    pub fate: Option<Fate>,
    /// What the server refused, where a caller decides by it (never by the message's text).
    pub refusal: Option<Refusal>,
}

/// What a server refused, named for the callers that act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The user's ACL does not let it run a command redlock sent (NOPERM).
    NotPermitted,
    /// It does not know a command redlock sent (renamed away, or a server without it).
    UnknownCommand,
    /// A script refused to take a lock in another mode or limit than its holders'.
    OtherMode,
}

/// What became of a request that failed: known not to have run, or sent and never answered.
/// The one classification that decides whether a request that is not idempotent (a release)
/// may be sent again: see `store::single::release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It did not run, and an answer said so: sending it again is safe.
    NotRun(NotRun),
    /// It was sent and no reply came: it may still run.
    NoReply(NoReply),
}

/// How a request is known not to have run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRun {
    /// The server answered that it cannot serve it now, before running it: the Cluster is down
    /// (CLUSTERDOWN), the slot is moving (TRYAGAIN), the master is down (MASTERDOWN), the data
    /// set is loading (LOADING), it takes no more clients, or it is a replica (READONLY: after a
    /// failover, the old master demoted). A script's writes all fail on a replica, and each of
    /// redlock's scripts checks everything before its first write, so none of it ran.
    Refused,
    /// It never reached a server that could run it: the connection was refused or the host is
    /// unreachable, the sentinels name no master that is one (a failover under way), a
    /// redirection named a node that cannot be reached.
    Unreached,
}

/// How a request went unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoReply {
    /// The connection stayed open and no reply came in time: the server may be busy or
    /// stalled, with the request waiting to run.
    TimedOut,
    /// The connection was closed or reset (a server that dropped an idle connection, a
    /// restart): a request it had read would have been answered before that, unless it died.
    Dropped,
}

/// What a user can do about an error; the command-line layer words it (naming its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// The server needs a password and got none.
    GivePassword,
    /// The server is a replica: point redlock at the master.
    UseMaster,
    /// A lock key holds data redlock did not write: choose another name or prefix.
    OtherName,
    /// TLS options were given for a plaintext URL.
    UseTls,
    /// The server's certificate comes from a CA that is not trusted: name the CA bundle.
    TrustCa,
    /// The server's certificate does not carry the host's name: name the one it carries.
    ServerName,
    /// The server requires a client certificate.
    ClientCert,
    /// The server's certificate is a CA's (self-signed with the CA flag): it needs one a CA
    /// issued.
    ServerCertFromCa,
    /// The sentinels refused the credentials: they have their own.
    SentinelPassword,
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failed {}

/// The error for a resource the system refused (a thread, a pipe, a signal descriptor).
pub(crate) fn system(what: &str, err: std::io::Error) -> anyhow::Error {
    fail(Failure::System, format!("could not create {what}: {err}"))
}

/// Builds an `anyhow::Error` that exits with the code of `failure`.
pub fn fail(failure: Failure, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failed {
        failure,
        message: message.into(),
        hint: None,
        fate: None,
        refusal: None,
    })
}

/// Unavailable (69): a request was sent and no reply came, so it may still take effect.
pub(crate) fn fail_no_reply(how: NoReply, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failed {
        failure: Failure::Unavailable,
        message: message.into(),
        hint: None,
        fate: Some(Fate::NoReply(how)),
        refusal: None,
    })
}

/// Unavailable (69): the request did not run, and may be sent again (see [`NotRun`]).
pub(crate) fn fail_not_run(how: NotRun, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failed {
        failure: Failure::Unavailable,
        message: message.into(),
        hint: None,
        fate: Some(Fate::NotRun(how)),
        refusal: None,
    })
}

/// `err` marked as a request that did not run, `how`, when it is a failure to reach a server
/// (unavailable, and not a request that may still run): a request redirected to a node that
/// could not be reached, a master the sentinels named that turned out not to be one. Other
/// outcomes stay as they are.
pub(crate) fn mark_not_run(mut err: anyhow::Error, how: NotRun) -> anyhow::Error {
    if let Some(failed) = err.downcast_mut::<Failed>()
        && failed.failure == Failure::Unavailable
        && !matches!(failed.fate, Some(Fate::NoReply(_)))
    {
        failed.fate = Some(Fate::NotRun(how));
    }
    err
}

/// What became of `err`'s request, if redlock can tell (see [`Fate`]).
pub(crate) fn fate(err: &anyhow::Error) -> Option<Fate> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failed>())
        .and_then(|failed| failed.fate)
}

/// How `err`'s request went unanswered, if it is one that was sent and never answered (see
/// [`fail_no_reply`]).
pub(crate) fn no_reply(err: &anyhow::Error) -> Option<NoReply> {
    match fate(err) {
        Some(Fate::NoReply(how)) => Some(how),
        _ => None,
    }
}

/// The message of the outcome `err` stands for, without the context around it (the server's
/// URL): `connection refused`, `the server cannot serve requests now: CLUSTERDOWN ...`.
pub(crate) fn reason(err: &anyhow::Error) -> String {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failed>())
        .map_or_else(|| format!("{err:#}"), |failed| failed.message.clone())
}

/// Like [`fail`], with a hint the command line words for the user.
pub fn fail_with(failure: Failure, message: impl Into<String>, hint: Hint) -> anyhow::Error {
    anyhow::Error::new(Failed {
        failure,
        message: message.into(),
        hint: Some(hint),
        fate: None,
        refusal: None,
    })
}

/// Like [`fail`], naming what the server refused (see [`Refusal`]).
pub(crate) fn fail_refused(
    failure: Failure,
    message: impl Into<String>,
    refusal: Refusal,
) -> anyhow::Error {
    anyhow::Error::new(Failed {
        failure,
        message: message.into(),
        hint: None,
        fate: None,
        refusal: Some(refusal),
    })
}

/// What the server refused, if `err` says (see [`Refusal`]).
pub(crate) fn refusal_of(err: &anyhow::Error) -> Option<Refusal> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failed>())
        .and_then(|failed| failed.refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_documents_every_code() {
        for code in [
            OK,
            NOT_HELD,
            USAGE,
            UNAVAILABLE,
            INTERNAL,
            SYSTEM,
            OUTPUT,
            BUSY,
            AUTH,
            MAX_RUNTIME,
            LOST,
            NOT_EXECUTABLE,
            NOT_FOUND,
            PLUGIN_WARNING,
            PLUGIN_CRITICAL,
            PLUGIN_UNKNOWN,
            STALE,
            RUNNING,
            HELD_TOO_LONG,
            NO_HISTORY,
        ] {
            assert!(
                TABLE.iter().any(|(listed, _)| *listed == code.to_string()),
                "{code} is missing from TABLE"
            );
        }
    }

    /// A new code never takes one an existing outcome has: each failure maps to its own code
    /// (but the outcomes that share one on purpose: not held, free and unsafe are 1).
    #[test]
    fn check_codes_are_their_own() {
        let all = [
            Failure::NotHeld,
            Failure::Usage,
            Failure::Unavailable,
            Failure::Busy,
            Failure::Auth,
            Failure::MaxRuntime,
            Failure::Lost,
            Failure::NotExecutable,
            Failure::NotFound,
            Failure::System,
            Failure::Output,
            Failure::Unchecked,
        ];
        for check in [
            Failure::Stale,
            Failure::Running,
            Failure::HeldTooLong,
            Failure::NoHistory,
        ] {
            let code = failure_code(check, BUSY);
            assert!(
                all.iter().all(|other| failure_code(*other, BUSY) != code),
                "{check:?} shares {code}"
            );
            assert!(code != INTERNAL && !(124..=255).contains(&code));
        }
        assert_eq!(PluginState::of_check(None).code(), 0);
        assert_eq!(PluginState::of_check(Some(Failure::Running)).code(), 1);
        assert_eq!(PluginState::of_check(Some(Failure::Stale)).code(), 2);
        assert_eq!(PluginState::of_check(Some(Failure::Usage)).code(), 3);
    }

    /// Only a failure to reach a server becomes a request known not to have run: a request
    /// that may still run stays one, and other outcomes keep theirs.
    #[test]
    fn only_an_unreached_server_is_marked_as_not_run() {
        let marked = mark_not_run(
            fail(Failure::Unavailable, "no master").context("redis+sentinel://s/m"),
            NotRun::Unreached,
        );
        assert_eq!(fate(&marked), Some(Fate::NotRun(NotRun::Unreached)));
        assert_eq!(reason(&marked), "no master");
        let unanswered = mark_not_run(
            fail_no_reply(NoReply::TimedOut, "no answer"),
            NotRun::Refused,
        );
        assert_eq!(fate(&unanswered), Some(Fate::NoReply(NoReply::TimedOut)));
        let denied = mark_not_run(fail(Failure::Auth, "denied"), NotRun::Refused);
        assert_eq!(fate(&denied), None);
    }

    #[test]
    fn child_status_follows_the_shell() {
        assert_eq!(ChildStatus::Exited(3).code(), 3);
        assert_eq!(ChildStatus::Exited(255).code(), 255);
        assert_eq!(ChildStatus::Signaled(9).code(), 137);
        assert_eq!(ChildStatus::Signaled(2).code(), 130);
    }
}
