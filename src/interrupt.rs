//! Requests made on the main thread, cut short by a signal. A request runs on the main thread
//! (see `inbox::Requests`) only inside [`within`]: there, every wait of a connection (for the
//! socket to connect, to take a write, to have a reply to read) and every pause between
//! attempts is a `poll` on the socket and on the signalfd together ([`ready`], [`pause`]),
//! so that a signal that ends redlock ends the request at once, whatever Redis does, as it
//! would end the wait for a worker thread's reply. The signal is kept for the inbox, which
//! hears it before the request's failure; every later wait of the same request fails at once.
//! The request's own timeouts still bound each wait, and `within`'s deadline all of them.
//!
//! Outside `within` (on a worker thread, or a call not made through one) the waits are the
//! socket's own: [`ready`] returns at once and [`pause`] sleeps.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::clock::BootInstant;
use crate::signals::{self, Watch};

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// The request running on this thread, inside [`within`].
struct Scope {
    watch: Watch,
    until: BootInstant,
    /// The signal that cut the request short, once one has.
    cut: Option<i32>,
}

/// Runs `request` on this thread with its waits cut short by a signal that ends redlock or by
/// `until`.
pub(crate) fn within<R>(watch: &Watch, until: BootInstant, request: impl FnOnce() -> R) -> R {
    /// Leaves the scope however `request` ends (a panic included).
    struct Leave(Option<Scope>);
    impl Drop for Leave {
        fn drop(&mut self) {
            let outer = self.0.take();
            SCOPE.with(|scope| *scope.borrow_mut() = outer);
        }
    }
    let outer = SCOPE.with(|scope| {
        scope.replace(Some(Scope {
            watch: watch.clone(),
            until,
            cut: None,
        }))
    });
    let _leave = Leave(outer);
    request()
}

/// Whether this thread runs a request inside [`within`].
pub(crate) fn inside() -> bool {
    SCOPE.with(|scope| scope.borrow().is_some())
}

/// The error that ends the request inside [`within`] before its next step (a signal cut it
/// short, or its deadline has passed), if any; none outside.
pub(crate) fn ended() -> io::Result<()> {
    SCOPE.with(|scope| match scope.borrow().as_ref() {
        Some(scope) => scope.left(None).map(drop),
        None => Ok(()),
    })
}

/// Waits until `fd` is ready for `events` (or has an error to report), for `timeout` at most
/// (`None`: no bound of its own). Inside [`within`] the wait is cut short by a signal that
/// ends redlock (an error that names it) or by the scope's deadline (`WouldBlock`, as a socket
/// timeout says it); outside, it returns at once.
pub(crate) fn ready(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    timeout: Option<Duration>,
) -> io::Result<()> {
    SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        let Some(scope) = scope.as_mut() else {
            return Ok(());
        };
        let end = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            let left = scope.left(end)?;
            let mut fds = [
                PollFd::new(fd, events),
                PollFd::new(scope.watch.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, poll_timeout(left)) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(err) => return Err(err.into()),
            }
            let [socket, signalled] = fds.map(|fd| fd.any().unwrap_or(false));
            if signalled {
                scope.hear()?;
            }
            if socket {
                return Ok(());
            }
        }
    })
}

/// Sleeps for `pause`; inside [`within`], cut short as [`ready`] is.
pub(crate) fn pause(pause: Duration) -> io::Result<()> {
    let inside = SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        let Some(scope) = scope.as_mut() else {
            return Ok(false);
        };
        let end = Instant::now() + pause;
        loop {
            let left = match scope.left(Some(end)) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                left => left?,
            };
            let mut fds = [PollFd::new(scope.watch.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, poll_timeout(left)) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(err) => return Err(io::Error::from(err)),
            }
            let [signalled] = fds.map(|fd| fd.any().unwrap_or(false));
            if signalled {
                scope.hear()?;
            }
        }
    })?;
    if !inside {
        std::thread::sleep(pause);
    }
    Ok(())
}

impl Scope {
    /// What is left of the wait ending at `end` and of the scope, or the error that ends it.
    fn left(&self, end: Option<Instant>) -> io::Result<Duration> {
        if let Some(signal) = self.cut {
            return Err(cut(signal));
        }
        let mut left = self.until.remaining();
        if let Some(end) = end {
            left = left.min(end.saturating_duration_since(Instant::now()));
        }
        if left.is_zero() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(left)
    }

    /// Reads the signals that arrived: one that ends redlock cuts the request short.
    fn hear(&mut self) -> io::Result<()> {
        if let Some(signal) = self.watch.terminating() {
            self.cut = Some(signal);
            return Err(cut(signal));
        }
        Ok(())
    }
}

/// The failure of a request a signal cut short: a timeout, as the request may have reached
/// Redis and may still run (never sent again: see `Scope::cut`). Not `Interrupted`: std's
/// loops retry that.
fn cut(signal: i32) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{} received", signals::name(signal)),
    )
}

/// `left`, rounded up to the millisecond (a wait for less than one must not return at once).
fn poll_timeout(left: Duration) -> PollTimeout {
    let millis = left.as_micros().div_ceil(1000);
    PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
}
