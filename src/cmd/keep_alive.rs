//! The hidden `redlock keep-alive`: the background keeper that `acquire --keep-alive` starts,
//! and the code in `acquire` that starts it. The token comes in REDLOCK_TOKEN and the
//! passwords in their variables, never in arguments.

#![allow(unsafe_code)]

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use nix::unistd::Pid;

use super::{Context, lock_name};
use crate::cli::KeepAliveArgs;
use crate::clock::BootInstant;
use crate::exit::{Done, Failure, fail};
use crate::lease::Plan;
use crate::lease::keep::{self, Ended, Keep};
use crate::lock::Token;
use crate::signals::Signals;

pub(super) fn run(context: &Context, args: &KeepAliveArgs) -> anyhow::Result<Done> {
    let name = lock_name(&args.key)?;
    let token = std::env::var("REDLOCK_TOKEN")
        .ok()
        .and_then(|token| Token::parse(&token).ok())
        .ok_or_else(|| {
            fail(
                Failure::Usage,
                "keep-alive needs the token in REDLOCK_TOKEN",
            )
        })?;
    let (plan, _) = Plan::new(args.ttl, None, args.ttl, context.command_timeout)
        .map_err(|_| fail(Failure::Usage, "the lease is too short to keep alive"))?;
    let keep = Keep {
        plan,
        until: BootInstant::now() + args.max_hold,
        while_pid: args
            .while_pid
            .map(|pid| Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))),
        replicas: args.replicas,
    };
    let signals = Signals::block(context.inherited)?;
    let lock = context.lock(name).kept_by(std::process::id());
    match keep::keep(&signals, &context.store, &lock, &token, &keep, context.log)? {
        Ended::Signal(signal) => Ok(Done::Interrupted(signal)),
        Ended::Released | Ended::PidGone | Ended::TimeUp => Ok(Done::Success),
        Ended::Lapsed => Ok(Done::Reported(Failure::Lost)),
    }
}

/// Starts the keeper of `token`, detached: its own process group, no terminal, standard
/// descriptors on /dev/null (a `$(redlock acquire ...)` must not wait for it). Returns its pid.
pub(super) fn start(
    context: &Context,
    key: &str,
    token: &Token,
    ttl: std::time::Duration,
    max_hold: std::time::Duration,
    while_pid: Option<u32>,
    replicas: Option<u32>,
) -> anyhow::Result<u32> {
    let exe = std::env::current_exe().map_err(|err| {
        fail(
            Failure::System,
            format!("cannot find redlock's own program: {err}"),
        )
    })?;
    let (args, env) = &context.relaunch;
    let mut command = Command::new(exe);
    command
        .args(args)
        .arg("keep-alive")
        // (Values joined to their flags: a name that starts with `-` is not a flag.)
        .arg(super::config::with_value("--key", key.as_ref()))
        .arg(format!("--ttl={}ms", ttl.as_millis()))
        .arg(format!("--max-hold={}ms", max_hold.as_millis()));
    if let Some(pid) = while_pid {
        command.arg(format!("--while-pid={pid}"));
    }
    if let Some(count) = replicas {
        command.arg(format!("--replicas={count}"));
    }
    command
        .envs(env.iter().map(|(name, value)| (name, value)))
        .env("REDLOCK_TOKEN", token.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    close_on_exec_above_standard();
    let keeper = command
        .spawn()
        .map_err(|err| fail(Failure::System, format!("cannot start the keeper: {err}")))?;
    Ok(keeper.id())
}

/// Marks every open descriptor above the standard three close-on-exec, so that the keeper
/// starts without the ones redlock's caller handed down (`3>&1 | cat`: a pipe whose reader
/// waits until every writer is gone, which would be when the keeper ends, an hour later).
/// Done here, just before the exec that drops them, rather than in the keeper: the kernel
/// drops them at one point, and no descriptor a running process may be using is closed under
/// it. `acquire` itself has no use for them (it execs nothing else) and ends soon after.
fn close_on_exec_above_standard() {
    let mut open: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        // Without /proc: the descriptors a process usually has (a closed one is skipped).
        Err(_) => (0..1024).collect(),
    };
    open.retain(|fd| *fd > 2);
    for fd in open {
        // SAFETY: F_SETFD only sets the descriptor's flags, and FD_CLOEXEC only affects a
        // later exec; a number that is not open (the directory's own, closed since) fails
        // with EBADF and changes nothing.
        unsafe {
            nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC);
        }
    }
}
