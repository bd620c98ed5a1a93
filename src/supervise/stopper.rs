//! The command's side of `run`: its process group from spawn to reaped. It forwards signals as
//! received, stops the group (SIGTERM, a grace, SIGKILL), follows job control when the command
//! owns the terminal, and says when the whole group is gone. It knows nothing of the lock: the
//! supervisor decides when to stop, and by when the group must be dead.

use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, pthread_sigmask};
use nix::unistd::getpgrp;

use super::child::{self, Change, Child};
use crate::clock::BootInstant;
use crate::exit::ChildStatus;
use crate::log::Log;

/// Processes that outlive SIGKILL this long (uninterruptible I/O) are given up on.
pub(super) const SURVIVAL_LIMIT: Duration = Duration::from_secs(5);

/// Where stopping the command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    No,
    /// SIGTERM (or the signal received) sent; SIGKILL due at `kill_at`.
    Term {
        kill_at: BootInstant,
    },
    /// SIGKILL sent at `at`.
    Killed {
        at: BootInstant,
    },
}

/// How the command's group ended.
pub(super) enum Ended {
    /// The command's whole group is gone.
    Gone,
    /// Processes of the group outlived SIGKILL by [`SURVIVAL_LIMIT`].
    Survivors,
}

/// The command's process group, and where stopping it stands.
pub(super) struct Stopper {
    child: Child,
    /// The command owns redlock's terminal (job control is redlock's to follow).
    foreground: bool,
    /// SIGTERM → SIGKILL grace when the command is stopped for a signal, the runtime limit,
    /// or processes left behind.
    kill_after: Duration,
    stopping: Stopping,
    /// The command is stopped (SIGSTOP, SIGTSTP, ...): a signal sent to end it stays pending
    /// until it is continued.
    stopped: bool,
    exited: Option<ChildStatus>,
}

impl Stopper {
    pub(super) fn new(child: Child, foreground: bool, kill_after: Duration) -> Self {
        Self {
            child,
            foreground,
            kill_after,
            stopping: Stopping::No,
            stopped: false,
            exited: None,
        }
    }

    /// How the command itself ended, once it has.
    pub(super) fn exited(&self) -> Option<ChildStatus> {
        self.exited
    }

    /// The command has exited and nothing of its group is left: nothing to stop.
    pub(super) fn gone(&self) -> bool {
        self.exited.is_some() && !self.child.group_alive()
    }

    /// A terminating signal received by redlock: passed on to the group exactly as received.
    /// After INT or TERM, SIGKILL follows after the grace, or at once on a second one.
    pub(super) fn forward(&mut self, signal: i32) {
        self.signal(signal);
        if signal == Signal::SIGINT as i32 || signal == Signal::SIGTERM as i32 {
            let now = BootInstant::now();
            self.stopping = match self.stopping {
                Stopping::No => Stopping::Term {
                    kill_at: now + self.kill_after,
                },
                // A second INT or TERM: no more grace.
                Stopping::Term { .. } => Stopping::Term { kill_at: now },
                killed @ Stopping::Killed { .. } => killed,
            };
        }
    }

    /// Sends SIGTERM (unless already stopping) and makes SIGKILL due by `kill_by`.
    pub(super) fn stop(&mut self, kill_by: BootInstant) {
        self.stopping = match self.stopping {
            Stopping::No => {
                self.signal(Signal::SIGTERM as i32);
                Stopping::Term { kill_at: kill_by }
            }
            Stopping::Term { kill_at } => Stopping::Term {
                kill_at: kill_at.min(kill_by),
            },
            killed @ Stopping::Killed { .. } => killed,
        };
    }

    /// Like [`Self::stop`], unless nothing is left to stop ([`Self::gone`]).
    pub(super) fn stop_unless_gone(&mut self, kill_by: BootInstant) {
        if !self.gone() {
            self.stop(kill_by);
        }
    }

    /// Stops the group with the usual grace.
    pub(super) fn stop_with_grace(&mut self) {
        self.stop(BootInstant::now() + self.kill_after);
    }

    /// SIGKILL has been sent.
    pub(super) fn killed(&self) -> bool {
        matches!(self.stopping, Stopping::Killed { .. })
    }

    /// Sends `signal` to the command's group, and SIGCONT after it if the command is stopped,
    /// as a shell's `kill` does: a stopped process would not act on it until continued.
    fn signal(&self, signal: i32) {
        self.child.signal_group(signal);
        if self.stopped {
            self.child.signal_group(Signal::SIGCONT as i32);
        }
    }

    /// Collects the children that changed state: the command, and orphans handed to redlock as
    /// subreaper (only collected).
    pub(super) fn reap(&mut self) {
        while let Some((pid, change)) = child::reap() {
            if pid != self.child.pid {
                continue;
            }
            match change {
                Change::Exited(code) => self.exited = Some(ChildStatus::Exited(code)),
                Change::Killed(signal) => self.exited = Some(ChildStatus::Signaled(signal)),
                Change::Continued => self.stopped = false,
                Change::Stopped(signal) => {
                    self.stopped = true;
                    // Not on redlock's terminal: the job control is someone else's.
                    if self.foreground {
                        self.on_stopped_in_foreground(signal);
                    }
                }
            }
        }
    }

    /// The command, owning the terminal, stopped. Having read or written the terminal before
    /// redlock handed it over (SIGTTIN, SIGTTOU), it gets the terminal and is continued. On
    /// Ctrl-Z, redlock takes the terminal back and stops its own process group, as the Ctrl-Z
    /// would have had the command stayed in it (the script that called redlock, the rest of a
    /// pipeline: a shell sees a job stopped only when all of it is); on `fg` it continues the
    /// command in the foreground again. While stopped nothing renews the lease; the
    /// supervisor's deadlines catch a lapse on wake-up. The stop is SIGTSTP, a job-control
    /// stop, which the kernel discards for an orphaned process group, one no shell could
    /// continue (its shell gone, or redlock leading the terminal's session): SIGSTOP stopped
    /// redlock there for good, the lock held until its lease lapsed. (Unblocked for the
    /// moment: a caller that blocked it would leave it pending; one that ignored it keeps
    /// redlock from stopping, as it keeps any program.)
    fn on_stopped_in_foreground(&self, signal: i32) {
        if signal != Signal::SIGTTIN as i32 && signal != Signal::SIGTTOU as i32 {
            child::reclaim_terminal();
            let stop = SigSet::from(Signal::SIGTSTP);
            let mut mask = SigSet::empty();
            if pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stop), Some(&mut mask)).is_ok() {
                // (Taken before the mask is restored: the kernel delivers an unblocked
                // signal on the way back from the system call that sent it.)
                let _ = killpg(getpgrp(), Signal::SIGTSTP);
                let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&mask), None);
            }
        }
        child::hand_terminal_to(self.child.pid);
        self.child.signal_group(Signal::SIGCONT as i32);
    }

    /// The next instant stopping needs attention, if any.
    pub(super) fn due_at(&self) -> Option<BootInstant> {
        match self.stopping {
            Stopping::No => None,
            Stopping::Term { kill_at } => Some(kill_at),
            Stopping::Killed { at } => Some(at + SURVIVAL_LIMIT),
        }
    }

    /// Acts on what is due: SIGKILL after the grace, processes left behind by a command that
    /// exited. Says when the group is gone, or given up on.
    pub(super) fn on_time(&mut self, now: BootInstant, log: Log) -> Option<Ended> {
        match self.stopping {
            Stopping::Term { kill_at } if now >= kill_at => {
                self.child.signal_group(Signal::SIGKILL as i32);
                self.stopping = Stopping::Killed { at: now };
                log.step("sent SIGKILL to the command's process group");
            }
            Stopping::Killed { at }
                if now.since(at) >= SURVIVAL_LIMIT && self.child.group_alive() =>
            {
                return Some(Ended::Survivors);
            }
            _ => {}
        }
        if self.exited.is_some() {
            if !self.child.group_alive() {
                return Some(Ended::Gone);
            }
            if self.stopping == Stopping::No {
                log.notice("the command exited but left processes in its group; stopping them");
                self.stop(now + self.kill_after);
            }
        }
        None
    }

    /// Takes the terminal back from the command, if it had it.
    pub(super) fn reclaim_terminal(&self) {
        if self.foreground {
            child::reclaim_terminal();
        }
    }
}
