//! The signals a waiting or supervising redlock reacts to: those `run` forwards, exactly as
//! received, to the command's process group, and SIGCHLD, on which the supervisor reaps.
//!
//! They are blocked in every thread (the main thread blocks them before any other thread
//! exists, and threads inherit the mask) and read from a signalfd (see `events`). No handler
//! ever runs, so no Redis read anywhere is cut short with EINTR, and no thread is spent on
//! them. `ctrlc` was not an option: one handler for INT/TERM/HUP cannot tell them apart and
//! never sees QUIT, USR1 or USR2.

use std::io;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Signals passed on to the command.
pub(crate) const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Blocks [`FORWARDED`] and SIGCHLD in the calling thread (call it before any other thread
/// starts) and returns a non-blocking signalfd that reads them.
pub(crate) fn block() -> io::Result<SignalFd> {
    let mut mask = SigSet::empty();
    for signal in FORWARDED.into_iter().chain([Signal::SIGCHLD]) {
        mask.add(signal);
    }
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), None).map_err(io::Error::from)?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(io::Error::from)
}

/// `SIGTERM` for 15, `signal 99` for numbers without a name.
pub(crate) fn name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
}
