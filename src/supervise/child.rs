//! The supervised command: started from argv (never through a shell unless asked) with
//! `std::process::Command`, in a process group of its own so that signals and the final kill
//! reach everything it started, with a parent-death signal so that it cannot outlive a redlock
//! killed with SIGKILL, with the signal state redlock was started with, and, when redlock owns
//! the terminal, as the terminal's foreground group, so that it can read stdin and Ctrl-C
//! reaches it.
//!
//! The terminal is handed over by redlock after the command has started (exec done), never by
//! the child before exec: a Ctrl-Z in that window would stop a child that is not running the
//! command yet, while redlock waits in `spawn` for its exec, and the terminal would hang. A
//! command that reads the terminal before it is handed over is stopped by SIGTTIN; the
//! supervisor then hands it over and continues it.
//!
//! Three system calls have no safe wrapper that covers what redlock needs, each in an
//! `unsafe` block with its reason: the `pre_exec` hook, `kill` of a process group with any
//! signal (nix's `Signal` has no real-time signals), and `waitpid` with the raw status (nix
//! fails on a death by a real-time signal).

#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::io::{self, IsTerminal as _};
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, getpid, getppid, tcgetpgrp, tcsetpgrp};

use crate::signals::CommandSignals;

/// What to run and with which environment changes.
pub(crate) struct Spec<'a> {
    pub(crate) argv: &'a [OsString],
    pub(crate) set_env: &'a [(String, String)],
    pub(crate) remove_env: &'a [String],
    /// Make the command the terminal's foreground process group (see [`owns_terminal`]).
    pub(crate) foreground: bool,
    pub(crate) signals: CommandSignals,
    /// Standard descriptors to close in the command (bit N for descriptor N): those
    /// redlock's caller closed, where std has put /dev/null for redlock itself.
    pub(crate) closed: u8,
    /// The command starts in a PID namespace its parent is not in (`--pid-namespace`'s
    /// init): there getppid says 0 whatever becomes of the parent, and the command itself
    /// checks that its parent lived on once the parent-death signal was armed.
    pub(crate) parent_outside: bool,
    /// Start the command in a process group of its own (the supervisor's command), or in the
    /// caller's (`--pid-namespace`'s links, so that the group redlock signals holds them all).
    pub(crate) new_group: bool,
}

/// A running command, identified by its process group (its pid is the group id).
pub(crate) struct Child {
    pub(crate) pid: Pid,
}

/// Whether stdin is a terminal whose foreground group is ours: then the command must take the
/// terminal over, or it would be stopped by SIGTTIN when it reads and never see Ctrl-C.
pub(crate) fn owns_terminal() -> bool {
    let stdin = io::stdin();
    stdin.is_terminal() && tcgetpgrp(stdin.as_fd()).is_ok_and(|group| group == getpgrp())
}

/// Starts the command. Call it from the thread that lives as long as the command (the main
/// thread): the parent-death signal fires when the *thread* that forked exits.
pub(crate) fn spawn(spec: &Spec<'_>) -> io::Result<Child> {
    let program = spec
        .argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let child = match command(spec, program, &spec.argv[1..]).spawn() {
        // glibc's execvp runs an executable file without `#!` under /bin/sh, as shells do;
        // musl's returns ENOEXEC. Do what glibc does.
        Err(err) if err.raw_os_error() == Some(libc::ENOEXEC) => {
            let script = resolve(program).ok_or(err)?;
            let mut args = vec![script.into_os_string()];
            args.extend_from_slice(&spec.argv[1..]);
            command(spec, OsStr::new("/bin/sh"), &args).spawn()?
        }
        started => started?,
    };
    // The command's exit is collected by the supervisor (`reap`), not through std's handle.
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
    if spec.foreground {
        // SIGTTOU is blocked (see `signals`), so this works from the background group.
        let _ = tcsetpgrp(io::stdin().as_fd(), pid);
    }
    Ok(Child { pid })
}

fn command(spec: &Spec<'_>, program: &OsStr, args: &[OsString]) -> Command {
    let mut command = Command::new(program);
    command.args(args);
    if spec.new_group {
        command.process_group(0);
    }
    for name in spec.remove_env {
        command.env_remove(name);
    }
    for (name, value) in spec.set_env {
        command.env(name, value);
    }
    let parent = getpid();
    let (signals, closed, outside) = (spec.signals, spec.closed, spec.parent_outside);
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: it makes system calls only (signal, prctl, getppid, sigprocmask,
    // close), allocates nothing and takes no lock. What it reads was copied in before the
    // fork.
    unsafe {
        command.pre_exec(move || prepare(parent, outside, signals, closed));
    }
    command
}

/// In the child, between fork and exec: the signal state redlock was started with (std has
/// set SIGPIPE to the default, redlock SIGCHLD, the C library has handlers of its own, and
/// redlock blocks what it handles), the standard descriptors its caller had closed closed
/// again (std has no `Stdio` for "closed": it opened /dev/null there for redlock, and a
/// command writing to a closed stdout must fail as it would without redlock, not write to
/// /dev/null and succeed), and the parent-death signal, checked against the race with
/// redlock's own death.
fn prepare(parent: Pid, outside: bool, signals: CommandSignals, closed: u8) -> io::Result<()> {
    for fd in 0..3 {
        if closed & (1 << fd) != 0 {
            // (std has set up the command's descriptors before this hook runs: with
            // inherited stdio these are redlock's /dev/null, which only this child loses.)
            nix::unistd::close(fd)?;
        }
    }
    for signal in 1..=64 {
        if signals.ignored & (1 << (signal - 1)) != 0 {
            // SAFETY: SIG_IGN installs no handler code; signal() is async-signal-safe.
            unsafe { libc::signal(signal, libc::SIG_IGN) };
        }
    }
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    // redlock may have died before the parent-death signal was armed: then nothing would kill
    // the command when it should, and it must not start. (A parent outside the command's PID
    // namespace shows as 0: the command checks for itself, see `namespace`.)
    let ppid = getppid();
    if ppid != parent && !(outside && ppid.as_raw() == 0) {
        return Err(Errno::ESRCH.into());
    }
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&signals.mask), None)?;
    Ok(())
}

/// Where execvp would find `program`: itself if it names a path, else the first executable
/// file of that name in PATH (`/bin:/usr/bin` if unset; an empty entry is the current
/// directory).
fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    path.as_bytes()
        .split(|&byte| byte == b':')
        .map(|dir| Path::new(OsStr::from_bytes(if dir.is_empty() { b"." } else { dir })))
        .map(|dir| dir.join(program))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

impl Child {
    /// Sends signal number `signal` to the whole group. `false` when the group is empty.
    pub(crate) fn signal_group(&self, signal: i32) -> bool {
        // SAFETY: kill takes no pointers; a negative pid names the process group.
        let sent = unsafe { libc::kill(-self.pid.as_raw(), signal) };
        sent == 0 || Errno::last() != Errno::ESRCH
    }

    /// Whether any process of the group is still alive (or a zombie not yet reaped).
    pub(crate) fn group_alive(&self) -> bool {
        self.signal_group(0)
    }
}

/// What a reaped child did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Exited(i32),
    Killed(i32),
    /// Stopped by this signal.
    Stopped(i32),
    Continued,
}

/// Collects one child that has changed state, without blocking: the command, or an orphan
/// handed to redlock as subreaper. `None` when no child has anything to report.
pub(crate) fn reap() -> Option<(Pid, Change)> {
    wait_for(libc::WNOHANG | libc::WUNTRACED | libc::WCONTINUED)
}

/// Waits for any child to end (the init of `--pid-namespace` reaps its namespace's orphans
/// with it). `None` when there is no child left to wait for.
pub(crate) fn wait() -> Option<(Pid, Change)> {
    loop {
        match wait_for(0) {
            None if Errno::last() == Errno::EINTR => {}
            waited => return waited,
        }
    }
}

fn wait_for(flags: i32) -> Option<(Pid, Change)> {
    let mut status = 0;
    // SAFETY: `status` is a valid place for the kernel to write the status to.
    let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
    if pid <= 0 {
        return None;
    }
    let change = if libc::WIFEXITED(status) {
        Change::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Change::Killed(libc::WTERMSIG(status))
    } else if libc::WIFSTOPPED(status) {
        Change::Stopped(libc::WSTOPSIG(status))
    } else {
        Change::Continued
    };
    Some((Pid::from_raw(pid), change))
}

/// Makes `group` the terminal's foreground process group (after a Ctrl-Z and `fg`, or when
/// the command read the terminal before it was handed over).
pub(crate) fn hand_terminal_to(group: Pid) {
    let _ = tcsetpgrp(io::stdin().as_fd(), group);
}

/// Gives the terminal back to redlock's own group after a foreground command is done.
pub(crate) fn reclaim_terminal() {
    let _ = tcsetpgrp(io::stdin().as_fd(), getpgrp());
}

/// Makes orphaned descendants of the command redlock's to reap, so that their exit is seen
/// and no zombie stays in the command's group.
pub(crate) fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}
