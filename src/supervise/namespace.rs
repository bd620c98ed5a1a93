//! `run --pid-namespace`: the command runs in a PID namespace of its own, under a minimal init
//! of redlock's, so that the death of that init ends every process the command started,
//! daemons and background workers included, even when redlock itself is killed with SIGKILL.
//!
//! Three processes stand between redlock and the command, each the parent of the next:
//!
//! - the *holder* (`redlock pid-namespace-init -- COMMAND...`), started by the supervisor as
//!   any command is (its own process group, the parent-death signal, the caller's signal
//!   state). It is still in redlock's PID namespace: it unshares a new one (with a user
//!   namespace of its own when it is not privileged, mapping the caller's uid and gid to
//!   themselves), which only its children enter, and starts the init there;
//! - the *init* (`... --pid1-of HOLDER`), PID 1 of the new namespace: it starts the command,
//!   reaps every orphan of the namespace, and exits with the command's status as soon as the
//!   command has exited (128+N for a death by signal N). The kernel then SIGKILLs whatever is
//!   left in the namespace, and the init's exit is only seen once all of it is gone;
//! - the command.
//!
//! Each link has the parent-death signal (SIGKILL) and checks that its parent was still alive
//! once it was armed, so that a redlock killed with SIGKILL takes the holder, the holder the
//! init, and the init the whole namespace. All three are in the process group the supervisor
//! created, so the signals redlock passes on and its stop (SIGTERM, grace, SIGKILL) reach the
//! command exactly as without the mode; the holder and the init block those signals, and a
//! PID 1 only receives signals it handles, so neither passes them on a second time. The
//! holder is redlock freshly executed, single-threaded, so that `unshare` with a user
//! namespace is allowed and needs no `unsafe` code between fork and exec.

use std::ffi::OsString;
use std::io;

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Pid, Uid};

use super::child::{self, Change, Spec};
use crate::cli::PidNamespaceInitArgs;
use crate::exit::{ChildStatus, Done, Failure, fail};
use crate::signals::{Inherited, Signals};

/// The flag that keeps the holder's and the init's messages in the caller's format (the
/// environment's REDLOCK_LOG_FORMAT reaches them anyway; a `--log-format` flag would not).
fn log_format() -> Option<OsString> {
    crate::log::json().then(|| "--log-format=json".into())
}

/// The hidden subcommand the supervisor starts in the command's place.
pub(crate) const SUBCOMMAND: &str = "pid-namespace-init";

/// The argv the supervisor starts instead of `argv`: redlock itself (`/proc/self/exe` is the
/// binary this process runs, even if the file was replaced since) as the holder.
pub(crate) fn holder_argv(argv: &[OsString]) -> Vec<OsString> {
    let mut wrapped: Vec<OsString> = vec!["/proc/self/exe".into()];
    wrapped.extend(log_format());
    wrapped.extend([SUBCOMMAND.into(), "--".into()]);
    wrapped.extend_from_slice(argv);
    wrapped
}

/// The holder or the init, as `args` says; exits with the command's status.
pub(crate) fn run(args: &PidNamespaceInitArgs, inherited: Inherited) -> anyhow::Result<Done> {
    // Blocked before anything is started: the signals redlock sends to its command's group
    // reach these two as well, and must end only the command.
    let signals = Signals::block(inherited)?;
    match args.pid1_of {
        None => {
            enter_namespace()?;
            let mut argv: Vec<OsString> = vec!["/proc/self/exe".into()];
            argv.extend(log_format());
            argv.extend([
                SUBCOMMAND.into(),
                "--pid1-of".into(),
                pid_in_proc()?.to_string().into(),
                "--".into(),
            ]);
            argv.extend_from_slice(&args.command);
            supervise_one(&argv, &signals, inherited.closed, true)
        }
        Some(holder) => {
            // The init's parent is outside its namespace, where getppid says 0 whether the
            // holder lives or not: its parent-death signal is checked here, against the pid
            // the holder has in the namespace /proc shows (the caller's, for /proc is not
            // remounted).
            if parent_in_proc()? != Pid::from_raw(holder) {
                return Err(fail(
                    Failure::System,
                    "--pid-namespace: redlock ended before the command started",
                ));
            }
            supervise_one(&args.command, &signals, inherited.closed, false)
        }
    }
}

/// Unshares the PID namespace, alone when privileged, else with a user namespace in which the
/// caller's uid and gid map to themselves (not to root: the command keeps its identity and its
/// file access). Only this process's children enter it.
fn enter_namespace() -> anyhow::Result<()> {
    let privileged = unshare(CloneFlags::CLONE_NEWPID);
    let Err(alone) = privileged else {
        return Ok(());
    };
    let (uid, gid) = (Uid::current(), Gid::current());
    if uid.is_root() {
        // Root without CAP_SYS_ADMIN (a container that drops it): a user namespace would map
        // root alone, and the job would lose root's file access and its setuid, silently.
        return Err(fail(
            Failure::System,
            format!(
                "--pid-namespace: cannot create a PID namespace: refused to root ({}; CAP_SYS_ADMIN missing?), and a user namespace would take root's powers from the command",
                alone.desc()
            ),
        ));
    }
    let refused = |why: String| {
        fail(
            Failure::System,
            format!(
                "--pid-namespace: cannot create a PID namespace: {why}; run redlock as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, a container's seccomp profile that permits unshare)"
            ),
        )
    };
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID).map_err(|with_user| {
        refused(format!(
            "not privileged ({}), and no user namespace either ({})",
            alone.desc(),
            with_user.desc()
        ))
    })?;
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|err| refused(format!("writing /proc/self/{file}: {err}")))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))
}

/// This process's pid as /proc shows it (the namespace /proc was mounted for, which
/// `parent_in_proc` reads too): not `getpid()`, which is the pid in the caller's own
/// namespace, and differs when redlock itself runs in one (a `--pid-namespace` job that takes
/// another lock the same way).
fn pid_in_proc() -> anyhow::Result<Pid> {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_str()?.parse().ok())
        .map(Pid::from_raw)
        .ok_or_else(|| {
            fail(
                Failure::System,
                "--pid-namespace: /proc/self does not name this process",
            )
        })
}

/// The parent pid of this process as /proc shows it.
fn parent_in_proc() -> anyhow::Result<Pid> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|err| {
        fail(
            Failure::System,
            format!("--pid-namespace: /proc/self/stat: {err}"),
        )
    })?;
    // "pid (comm) state ppid ...": comm may hold anything, ')' included.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|ppid| ppid.parse().ok())
        .map(Pid::from_raw)
        .ok_or_else(|| {
            fail(
                Failure::System,
                "--pid-namespace: /proc/self/stat unreadable",
            )
        })
}

/// Starts `argv` (the holder starts the init, the init the command), waits until it has
/// exited, and returns its status to pass on: 128+N for a death by signal N, since the init,
/// as PID 1, cannot die of a signal sent from inside to pass it on as it came. The init reaps
/// every orphan of the namespace on the way; the holder has only the init to wait for.
fn supervise_one(
    argv: &[OsString],
    signals: &Signals,
    closed: u8,
    holder: bool,
) -> anyhow::Result<Done> {
    let spec = Spec {
        argv,
        set_env: &[],
        remove_env: &[],
        foreground: false,
        signals: signals.for_command(),
        closed,
        // The init's parent, the holder, is outside the init's namespace.
        parent_outside: holder,
        new_group: false,
    };
    let started = child::spawn(&spec).map_err(|err| match holder {
        true => fail(
            Failure::System,
            format!("--pid-namespace: cannot start the init: {err}"),
        ),
        false => super::spawn_failure(&argv[0], &err),
    })?;
    loop {
        let Some((pid, change)) = child::wait() else {
            return Err(fail(
                Failure::System,
                format!("--pid-namespace: waiting: {}", io::Error::last_os_error()),
            ));
        };
        if pid != started.pid {
            continue;
        }
        match change {
            Change::Exited(code) => return Ok(Done::Child(ChildStatus::Exited(code))),
            Change::Killed(signal) => return Ok(Done::Child(ChildStatus::Exited(128 + signal))),
            // (Not asked for: the wait reports deaths only.)
            Change::Stopped(_) | Change::Continued => {}
        }
    }
}
