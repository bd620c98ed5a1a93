//! Which signals redlock handles, and the signal state its command must start with.
//!
//! Every signal whose default action would end redlock is handled, so that redlock always ends
//! by way of its lock: while it waits for the lock, such a signal ends the wait (the queue is
//! left, exit 128+N); while the command runs, it is forwarded, exactly as received, to the
//! command's process group, and redlock releases the lock once the group is gone. The handled
//! signals are blocked in every thread (the main thread blocks them before any other thread
//! exists; threads inherit the mask) and read from a signalfd by the main thread, in the same
//! wait as everything else it listens to (see `inbox`), or in the wait of a request it makes
//! itself (see `interrupt`): no handler ever runs, so no Redis read is cut short with EINTR.
//! `ctrlc` could not do this: it has one handler for INT, TERM and HUP, cannot tell them
//! apart, and never sees the other signals.
//!
//! Not handled: SIGKILL and SIGSTOP (impossible), the job-control stops (SIGTSTP, SIGTTIN: they
//! stop redlock as they stop any program), signals that are ignored by default, SIGPIPE (std
//! ignores it, so that a closed pipe is an error redlock reports rather than death while holding
//! a lock), and the real-time signals the C library keeps for itself. A signal the caller
//! ignored (`nohup`, `trap '' INT`) stays ignored: redlock drops it when it is read.
//!
//! The command starts with the signal state redlock itself was started with, as if the shell
//! had started it: the same blocked mask, and the same dispositions (what the caller ignored
//! stays ignored, and nothing redlock changed for itself leaks through: SIGPIPE, SIGCHLD,
//! handlers of the C library; handlers are reset by exec anyway).

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::exit::system;

/// What redlock's caller handed it, read before std's start-up changed it (see `main.rs`):
/// std ignores SIGPIPE, and opens /dev/null on standard descriptors that were closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inherited {
    /// The signals ignored at start, one bit per signal (bit N-1 for signal N).
    pub ignored: u64,
    /// The standard descriptors closed at start (`>&-`): bit N for descriptor N (0, 1, 2).
    /// std opens /dev/null in their place; the command gets them closed.
    pub closed: u8,
}

impl Inherited {
    /// Whether file descriptor 1 was closed at start.
    pub(crate) fn stdout_closed(self) -> bool {
        self.closed & 0b010 != 0
    }

    fn ignores(self, signal: i32) -> bool {
        (1..=64).contains(&signal) && self.ignored & (1 << (signal - 1)) != 0
    }
}

/// The default-ignored, stopping and unblockable signals, which redlock leaves alone; SIGPIPE
/// (see the module's text). SIGCHLD is handled although its default is to ignore it: the
/// supervisor reaps on it.
const LEFT_ALONE: [Signal; 9] = [
    Signal::SIGKILL,
    Signal::SIGSTOP,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGCONT,
    Signal::SIGURG,
    Signal::SIGWINCH,
    Signal::SIGPIPE,
];

/// Signals a [`Watch`] read while a request waited (see `interrupt`), oldest first: the next
/// ones [`Signals::read`] returns.
static HEARD: Mutex<VecDeque<i32>> = Mutex::new(VecDeque::new());

/// The handled signals, blocked, and the signalfd that reads them.
pub(crate) struct Signals {
    fd: SignalFd,
    watch: Watch,
    inherited: Inherited,
    /// The mask of the thread that blocked them, as it was: the command's mask.
    start_mask: SigSet,
}

impl Signals {
    /// Blocks the handled signals in the calling thread (call it before any other thread
    /// starts), and SIGTTOU too: redlock hands the terminal to its command and takes it back
    /// from the background, which SIGTTOU would otherwise stop it for. SIGCHLD gets its default
    /// disposition back: an ignored SIGCHLD survives exec (a parent may pass one on), and then
    /// the kernel reaps redlock's children itself and their exit status is lost.
    pub(crate) fn block(inherited: Inherited) -> anyhow::Result<Self> {
        let refused = |err: nix::Error| system("a signal descriptor", err.into());
        // SAFETY: SIG_DFL installs no handler code, and no thread but this one exists.
        unsafe { nix::sys::signal::signal(Signal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl) }
            .map_err(refused)?;
        let handled = handled();
        let mut blocked = handled;
        blocked.add(Signal::SIGTTOU);
        let mut start_mask = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), Some(&mut start_mask))
            .map_err(refused)?;
        let fd = SignalFd::with_flags(&handled, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(refused)?;
        let watch = Watch {
            fd: Arc::new(
                fd.as_fd()
                    .try_clone_to_owned()
                    .map_err(|err| system("a signal descriptor", err))?,
            ),
            inherited,
        };
        Ok(Self {
            fd,
            watch,
            inherited,
            start_mask,
        })
    }

    /// The next handled signal that has arrived, if any. Signals the caller ignored are
    /// dropped here, as the kernel would have dropped them had redlock not blocked them.
    pub(crate) fn read(&self) -> Option<i32> {
        let heard = HEARD
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        if heard.is_some() {
            return heard;
        }
        loop {
            let info = self.fd.read_signal().ok()??;
            let signal = info.ssi_signo as i32;
            if !self.inherited.ignores(signal) {
                return Some(signal);
            }
        }
    }

    /// A handle on the same signals for a wait outside the inbox (see `interrupt`).
    pub(crate) fn watch(&self) -> Watch {
        self.watch.clone()
    }

    /// What the command's process must restore between fork and exec.
    pub(crate) fn for_command(&self) -> CommandSignals {
        CommandSignals {
            mask: self.start_mask,
            ignored: self.inherited.ignored,
        }
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The signalfd again (the same queue of signals, through a second descriptor), for a request
/// that waits on the main thread (`interrupt`): what it reads goes to the inbox next.
#[derive(Clone)]
pub(crate) struct Watch {
    fd: Arc<OwnedFd>,
    inherited: Inherited,
}

impl Watch {
    /// Reads the signals that have arrived, keeping them in order for [`Signals::read`], and
    /// returns the first that ends redlock, if any.
    pub(crate) fn terminating(&self) -> Option<i32> {
        let mut ending = None;
        // One `signalfd_siginfo` a read; `ssi_signo` is its first field.
        let mut info = [0_u8; 128];
        while let Ok(128) = nix::unistd::read(&*self.fd, &mut info) {
            let signal = i32::from_ne_bytes([info[0], info[1], info[2], info[3]]);
            if self.inherited.ignores(signal) {
                continue;
            }
            HEARD
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back(signal);
            if terminates(signal) {
                ending = ending.or(Some(signal));
            }
        }
        ending
    }
}

impl AsFd for Watch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The signal state a command must start with (see `child`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommandSignals {
    pub(crate) mask: SigSet,
    /// The signals ignored when redlock started, as [`Inherited::ignored`]. Some no longer are:
    /// std sets SIGPIPE back to the default for commands, redlock sets SIGCHLD back for itself,
    /// and the C library installs handlers for signals it uses internally.
    pub(crate) ignored: u64,
}

/// Every signal whose default action ends a process, but those redlock leaves alone, and
/// SIGCHLD.
fn handled() -> SigSet {
    // sigfillset leaves out the real-time signals the C library reserves for itself.
    let mut set = SigSet::all();
    for signal in LEFT_ALONE {
        set.remove(signal);
    }
    set
}

/// Whether `signal`'s default action ends a process (everything redlock reads but SIGCHLD).
pub(crate) fn terminates(signal: i32) -> bool {
    signal != Signal::SIGCHLD as i32
}

/// `SIGTERM` for 15, `SIGRTMIN+3` for a real-time signal, `signal 99` for others.
pub(crate) fn name(signal: i32) -> String {
    if let Ok(named) = Signal::try_from(signal) {
        return named.as_str().to_owned();
    }
    let (min, max) = (nix::libc::SIGRTMIN(), nix::libc::SIGRTMAX());
    if (min..=max).contains(&signal) {
        return match signal - min {
            0 => "SIGRTMIN".to_owned(),
            offset => format!("SIGRTMIN+{offset}"),
        };
    }
    format!("signal {signal}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_terminating_signal_is_handled_and_the_rest_left_alone() {
        let handled = handled();
        for signal in [
            Signal::SIGHUP,
            Signal::SIGINT,
            Signal::SIGQUIT,
            Signal::SIGABRT,
            Signal::SIGUSR1,
            Signal::SIGUSR2,
            Signal::SIGALRM,
            Signal::SIGTERM,
            Signal::SIGVTALRM,
            Signal::SIGPROF,
            Signal::SIGXCPU,
            Signal::SIGXFSZ,
            Signal::SIGPWR,
            Signal::SIGSYS,
            Signal::SIGCHLD,
        ] {
            assert!(handled.contains(signal), "{signal}");
        }
        for signal in LEFT_ALONE {
            assert!(!handled.contains(signal), "{signal}");
        }
    }

    #[test]
    fn names_cover_real_time_signals() {
        assert_eq!(name(15), "SIGTERM");
        assert_eq!(name(nix::libc::SIGRTMIN()), "SIGRTMIN");
        assert_eq!(name(nix::libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(name(0), "signal 0");
    }

    #[test]
    fn inherited_ignores_are_bits() {
        let inherited = Inherited {
            ignored: 1 << (Signal::SIGHUP as i32 - 1),
            closed: 0,
        };
        assert!(inherited.ignores(Signal::SIGHUP as i32));
        assert!(!inherited.ignores(Signal::SIGINT as i32));
        assert!(!inherited.ignores(0));
        assert!(!inherited.ignores(65));
    }
}
