//! `redlock acquire`: take a lock (waiting in its queue with --wait) and print its token.

use serde::Serialize;

use super::{Context, ask, keep_alive, lock_name, named, print_json, print_line};
use crate::cli::AcquireArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::lock::{Holder, Identity, Lease, Lock};
use crate::log::printable;
use crate::signals::Signals;
use crate::store::ReleaseBound;

/// The command recorded for a lock taken by `acquire`; the pid recorded is its caller's.
pub(super) const ACQUIRED_BY_CALLER: &str = "acquire (pid: its caller)";

#[derive(Serialize)]
struct Acquired<'a> {
    key: &'a str,
    token: &'a str,
    fence: u64,
    ttl_ms: u128,
    /// The background keeper's pid, with --keep-alive.
    #[serde(skip_serializing_if = "Option::is_none")]
    keeper_pid: Option<u32>,
}

pub(super) fn run(context: &Context, args: &AcquireArgs) -> anyhow::Result<Done> {
    let name = lock_name(named(
        args.lock.key.as_deref(),
        args.name.as_deref(),
        &args.after_dashes,
    )?)?;
    if context.inherited.stdout_closed() {
        // The token is the only way to release the lock: nobody could ever read it.
        return Err(fail(
            Failure::Output,
            "stdout is closed: the token could not be printed, so the lock was not taken",
        ));
    }
    if let Some(pid) = args.while_pid {
        check_watched_pid(pid)?;
    }
    let signals = Signals::block(context.inherited)?;
    let lock = context.lock(name);
    let key = printable(lock.name.as_str());
    // The process that will release the lock is the caller (a shell script), not this one,
    // which exits in a moment: its pid is the one worth showing.
    let mut ask = ask(
        context,
        &args.lock,
        &lock.name,
        args.ttl,
        ACQUIRED_BY_CALLER,
    )?;
    ask.who.pid = nix::unistd::getppid().as_raw().unsigned_abs();
    let taken = context.take(&signals, &lock, &ask, args.lock.wait, |holder, now| {
        if args.json {
            // A script that asked for JSON reads it whatever happened; the error line (and
            // the exit status) still say busy. If stdout fails, that is secondary.
            let _ = print_busy(&lock, holder, now);
        }
    })?;
    let held = match taken {
        Ok(held) => held,
        Err(done) => return Ok(done),
    };
    crate::failpoint::hit("acquired");
    let (lease, session) = (held.lease, held.kept);
    // A lock taken that cannot be used is given back at once, over the connection that took it.
    let give_back = |session| {
        let bound = ReleaseBound::answer_within(context.command_timeout);
        context
            .store
            .give_back(&lock, session, &lease.token, bound, context.log)
    };
    let keeper_pid = if args.keep_alive {
        let started = keep_alive::start(
            context,
            lock.name.as_str(),
            &lease.token,
            args.ttl,
            args.max_hold,
            args.while_pid,
            args.lock.replicas,
        );
        match started {
            Ok(pid) => Some(pid),
            Err(err) => {
                give_back(session)?;
                return Err(err.context(format!("lock '{key}' released again")));
            }
        }
    } else {
        None
    };
    // A token nobody can read is a lock nobody can release: give it back.
    if let Err(err) = print_token(&lock, &lease, keeper_pid, args.json) {
        give_back(session)?;
        return Err(err.context(format!("lock '{key}' released again")));
    }
    // A signal that came with the grant: the caller is gone, so is the lock.
    if let Some(signal) = signals
        .read()
        .filter(|signal| crate::signals::terminates(*signal))
    {
        give_back(session)?;
        return Ok(Done::Interrupted(signal));
    }
    context.log.step(format_args!(
        "acquired '{key}' (fence {}, ttl {})",
        lease.fence,
        duration::display(lease.ttl)
    ));
    Ok(Done::Success)
}

/// The token on stdout (with `json`: the key, token, fence, lease and keeper's pid).
fn print_token(
    lock: &Lock,
    lease: &Lease,
    keeper_pid: Option<u32>,
    json: bool,
) -> anyhow::Result<()> {
    if !json {
        return print_line(lease.token.as_str());
    }
    print_json(&serde_json::to_string(&Acquired {
        key: lock.name.as_str(),
        token: lease.token.as_str(),
        fence: lease.fence,
        ttl_ms: lease.ttl.as_millis(),
        keeper_pid,
    })?)
}

/// `acquire --json` on a lock that stayed busy: the lock, and who holds it (null while it is
/// being handed to the next waiter).
#[derive(Serialize)]
struct Busy<'a> {
    key: &'a str,
    /// Always true: the object a busy acquisition prints.
    busy: bool,
    holder: Option<BusyHolder<'a>>,
}

#[derive(Serialize)]
struct BusyHolder<'a> {
    mode: &'a str,
    #[serde(flatten)]
    who: &'a Identity,
    fence: u64,
    since_ms: u64,
    held_ms: u64,
    ttl_left_ms: u64,
}

fn print_busy(lock: &Lock, holder: Option<&Holder>, now: u64) -> anyhow::Result<()> {
    print_json(&serde_json::to_string(&Busy {
        key: lock.name.as_str(),
        busy: true,
        holder: holder.map(|holder| BusyHolder {
            mode: &holder.mode,
            who: &holder.who,
            fence: holder.fence,
            since_ms: holder.since,
            held_ms: now.saturating_sub(holder.since),
            ttl_left_ms: holder.exp.saturating_sub(now),
        }),
    })?)
}

/// `--while-pid`: the process must exist now, or the keeper would release the lock at once
/// and the printed token hold nothing.
fn check_watched_pid(pid: u32) -> anyhow::Result<()> {
    let exists = i32::try_from(pid)
        .ok()
        .filter(|pid| *pid > 0)
        .is_some_and(|pid| {
            // EPERM: it exists, owned by another user.
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                != Err(nix::errno::Errno::ESRCH)
        });
    if exists {
        Ok(())
    } else {
        Err(fail(
            Failure::Usage,
            format!("--while-pid {pid}: no such process; the lock was not taken"),
        ))
    }
}
