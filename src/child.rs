//! The supervised command: spawned from argv (never through a shell unless asked), in a process
//! group of its own so that signals and the final kill reach everything it started, with a
//! parent-death signal so it cannot outlive a redlock that was killed with SIGKILL, and, when
//! redlock owns the terminal, as the terminal's foreground group so it can read stdin and
//! receives Ctrl-C itself.
//!
//! This is the only module with `unsafe`: the code that runs between fork and exec.

#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::{self, IsTerminal as _};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, killpg, signal, sigprocmask};
use nix::unistd::{Pid, getpgrp, getpid, getppid, setpgid, tcgetpgrp, tcsetpgrp};

/// What to run and with which environment changes.
pub(crate) struct Spec<'a> {
    pub(crate) argv: &'a [OsString],
    pub(crate) set_env: &'a [(String, String)],
    pub(crate) remove_env: &'a [String],
    /// Make the child the terminal's foreground process group (see [`owns_terminal`]).
    pub(crate) foreground: bool,
}

/// A running command, identified by its process group (its pid is the group id).
pub(crate) struct Child {
    pub(crate) pid: Pid,
}

/// Whether stdin is a terminal whose foreground group is ours: then the child must take the
/// terminal over, or it would be stopped by SIGTTIN when it reads and never see Ctrl-C.
pub(crate) fn owns_terminal() -> bool {
    let stdin = io::stdin();
    stdin.is_terminal() && tcgetpgrp(stdin.as_fd()).is_ok_and(|group| group == getpgrp())
}

/// Starts the command. Call from a thread that lives as long as the child: the parent-death
/// signal fires when the forking *thread* exits, not the process.
pub(crate) fn spawn(spec: &Spec<'_>) -> io::Result<Child> {
    let (program, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut command = Command::new(program);
    command.args(args);
    for name in spec.remove_env {
        command.env_remove(name);
    }
    for (name, value) in spec.set_env {
        command.env(name, value);
    }
    let parent = getpid();
    let foreground = spec.foreground;
    // SAFETY: fd 0 stays open for redlock's whole life; the child only passes it to tcsetpgrp.
    // Borrowed here because `io::stdin()` may allocate, which is not allowed after fork.
    let stdin_fd = unsafe { BorrowedFd::borrow_raw(0) };
    if foreground {
        // Taking the terminal back later happens from the background group: without this,
        // tcsetpgrp would stop redlock with SIGTTOU.
        // SAFETY: setting a signal to SIG_IGN installs no handler code; no other thread
        // changes SIGTTOU's disposition.
        unsafe { signal(Signal::SIGTTOU, SigHandler::SigIgn) }.map_err(io::Error::from)?;
    }
    let unblocked = SigSet::empty();
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // system calls (sigprocmask, setpgid, signal, tcsetpgrp, prctl, getppid, getpid); it
    // allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            // redlock's threads block the signals it handles (see `signals`); the command
            // must start with none blocked, as if run from a shell.
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&unblocked), None)?;
            setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            if foreground {
                // Ignored dispositions survive exec: SIGTTOU is ignored only for this call.
                signal(Signal::SIGTTOU, SigHandler::SigIgn)?;
                tcsetpgrp(stdin_fd, getpid())?;
                signal(Signal::SIGTTOU, SigHandler::SigDfl)?;
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // redlock may have died before the parent-death signal was armed.
            if getppid() != parent {
                return Err(io::Error::other(
                    "redlock exited before the command started",
                ));
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
    // Also from the parent, so a signal sent right after spawn cannot miss the new group.
    // EACCES after the child's exec is expected and harmless.
    let _ = setpgid(pid, pid);
    if foreground {
        let _ = tcsetpgrp(io::stdin().as_fd(), pid);
    }
    // The supervisor reaps with waitpid(-1) (orphans too); std's handle would race with it.
    drop(child);
    Ok(Child { pid })
}

impl Child {
    /// Sends `signal` to the whole group. `false` when the group is already empty.
    pub(crate) fn signal_group(&self, signal: Signal) -> bool {
        killpg(self.pid, signal) != Err(Errno::ESRCH)
    }

    /// Whether any process of the group is still alive.
    pub(crate) fn group_alive(&self) -> bool {
        killpg(self.pid, None) != Err(Errno::ESRCH)
    }
}

/// Makes `group` the terminal's foreground process group (after a Ctrl-Z and `fg`).
pub(crate) fn hand_terminal_to(group: Pid) {
    let _ = tcsetpgrp(io::stdin().as_fd(), group);
}

/// Gives the terminal back to redlock's own group after a foreground child is done.
pub(crate) fn reclaim_terminal() {
    let _ = tcsetpgrp(io::stdin().as_fd(), getpgrp());
}

/// Restores SIGCHLD's default disposition. An ignored SIGCHLD survives exec (a parent may
/// pass one on); then the kernel reaps our children itself, their exit status is lost and the
/// supervisor would wait for it forever.
pub(crate) fn report_children() -> io::Result<()> {
    // SAFETY: SIG_DFL installs no handler code; no other thread changes SIGCHLD's disposition.
    unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) }
        .map(drop)
        .map_err(io::Error::from)
}

/// Makes orphaned descendants of the child ours to reap, so their exit is seen and no zombie
/// stays in the child's group.
pub(crate) fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}
