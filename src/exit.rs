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
    /// `inspect`: the lock is free.
    Free,
    /// Bad flags, keys, durations, tokens, or a key name that collides with non-redlock data.
    Usage,
    /// Redis cannot be reached or did not answer in time, or is not a master.
    Unavailable,
    /// The lock is held by someone else.
    Busy,
    /// Authentication or ACL permission denied.
    Auth,
}

impl Failure {
    /// Expected outcomes a script branches on; `-q` silences their messages.
    pub fn is_expected(self) -> bool {
        matches!(self, Failure::NotHeld | Failure::Free | Failure::Busy)
    }
}

/// Exit codes; `busy_code` arguments carry the `-E/--conflict-exit-code` override of [`BUSY`].
pub const OK: u8 = 0;
pub const NOT_HELD: u8 = 1;
pub const USAGE: u8 = 64;
pub const UNAVAILABLE: u8 = 69;
pub const INTERNAL: u8 = 70;
pub const BUSY: u8 = 75;
pub const AUTH: u8 = 77;

/// Every exit code and its meaning: the source of `--help`, the man page and the README table.
pub const TABLE: &[(u8, &str)] = &[
    (OK, "success (acquire: acquired; inspect: held)"),
    (
        NOT_HELD,
        "release, extend: not held by that token (nothing changed); inspect: free",
    ),
    (
        USAGE,
        "usage error: bad flag, key, duration, token or URL; or the key holds foreign data",
    ),
    (
        UNAVAILABLE,
        "Redis unavailable: connection refused or timed out, or the server is not a master",
    ),
    (INTERNAL, "internal error"),
    (
        BUSY,
        "lock busy (-E/--conflict-exit-code changes this code)",
    ),
    (AUTH, "authentication failed or ACL permission denied"),
];

/// The exit code of each outcome: the one table (README, man page and tests follow it).
pub fn failure_code(failure: Failure, busy_code: u8) -> u8 {
    match failure {
        Failure::NotHeld | Failure::Free => NOT_HELD,
        Failure::Usage => USAGE,
        Failure::Unavailable => UNAVAILABLE,
        Failure::Busy => busy_code,
        Failure::Auth => AUTH,
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
    /// An expected outcome the command already reported on stdout (e.g. `inspect` of a free lock).
    Reported(Failure),
}

impl Done {
    pub fn code(self, busy_code: u8) -> u8 {
        match self {
            Done::Success => OK,
            Done::Reported(failure) => failure_code(failure, busy_code),
        }
    }
}

/// The first [`Failure`] attached anywhere in the error chain.
pub fn failure_of(err: &anyhow::Error) -> Option<Failure> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failed>())
        .map(|failed| failed.failure)
}

/// An error message tagged with the outcome it stands for.
#[derive(Debug)]
pub struct Failed {
    pub failure: Failure,
    pub message: String,
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failed {}

/// Builds an `anyhow::Error` that exits with the code of `failure`.
pub fn fail(failure: Failure, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failed {
        failure,
        message: message.into(),
    })
}
