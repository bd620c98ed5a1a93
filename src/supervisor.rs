//! `run`'s supervisor: holds the lock while the command runs, and guarantees the order
//! "command's whole process group dead, then lock released".
//!
//! One loop owns all decisions. It reads signals itself (to forward, and SIGCHLD, on which it
//! reaps the command and any orphan handed to us as subreaper); the keeper thread only reports
//! renewals into it (see `events`). Deadlines live on `CLOCK_BOOTTIME`:
//!
//! - renewals unconfirmed: SIGTERM the group at the window's `term_at` (`valid_until − margin −
//!   grace`), SIGKILL at its `kill_at` (`valid_until − margin`), so it is dead before the lease
//!   can lapse in Redis; exit 125;
//! - lock gone or taken: the same, starting at once;
//! - INT/TERM received: forwarded; SIGKILL after `--kill-after`, or at once on a second one;
//! - `--max-runtime`: SIGTERM, SIGKILL after `--kill-after`; exit 124;
//! - command exited but others of its group live on: SIGTERM them, SIGKILL after the grace.

use std::ffi::OsString;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::child;
use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::duration;
use crate::events::{Event, Events};
use crate::exit::{ChildStatus, Done, Failure, fail, failure_of};
use crate::keeper::{Confirmed, Keeper, Plan, Report, Window};
use crate::lock::{Lease, Lock, Release};
use crate::log::Log;
use crate::signals;

/// What to run under the lock.
pub struct Job {
    pub argv: Vec<OsString>,
    pub set_env: Vec<(String, String)>,
    pub remove_env: Vec<String>,
    pub plan: Plan,
    pub max_runtime: Option<Duration>,
    pub min_hold: Duration,
    pub foreground: bool,
}

/// Runs `job` under a lease just confirmed as `confirmed`; releases the lock after the
/// command's group is gone and returns how the run ended.
#[allow(clippy::too_many_arguments)]
pub fn supervise(
    events: Events,
    session: Session,
    target: &Target,
    lock: &Lock,
    lease: &Lease,
    confirmed: Confirmed,
    job: &Job,
    log: Log,
) -> anyhow::Result<Done> {
    let key = lock.name.as_str().to_owned();
    let plan = job.plan;
    let mut window = plan.window(confirmed);
    // When the window was last confirmed, for the message if renewals stop working.
    let mut confirmed_at = BootInstant::now();
    let release = |session: Session, min_hold: Duration| {
        release_lock(session, target, lock, lease, min_hold, None, log)
    };

    if let Some(signal) = events.pending_signal() {
        release(session, Duration::ZERO)?;
        log.notice(format_args!(
            "{} received before the command started; lock '{key}' released",
            signals::name(signal)
        ));
        return Ok(Done::Interrupted(signal));
    }
    // No spawn on a lease that is about to lapse (a slow or stalled acquisition).
    if BootInstant::now() >= window.term_at {
        release(session, Duration::ZERO)?;
        return Err(fail(
            Failure::Unavailable,
            format!("lock '{key}' was granted too late to start the command safely; released"),
        ));
    }

    child::report_children()?;
    child::become_subreaper()?;
    let spec = child::Spec {
        argv: &job.argv,
        set_env: &job.set_env,
        remove_env: &job.remove_env,
        foreground: job.foreground,
    };
    let child = match child::spawn(&spec) {
        Ok(child) => child,
        Err(err) => {
            release(session, Duration::ZERO)?;
            let program = job.argv[0].to_string_lossy();
            let (failure, why) = match err.kind() {
                std::io::ErrorKind::NotFound => (Failure::NotFound, "command not found".into()),
                std::io::ErrorKind::PermissionDenied => {
                    (Failure::NotExecutable, "permission denied".into())
                }
                _ => (Failure::NotExecutable, err.to_string()),
            };
            return Err(fail(failure, format!("cannot run '{program}': {why}")));
        }
    };
    let started = BootInstant::now();
    log.step(format_args!("started pid {}", child.pid));
    // Started shortly before the first renewal is due (see `Keeper`).
    let keeper_from = window.renew_at.minus(window.renew_at.since(started) / 2);
    let mut keeper: Option<Keeper> = None;
    let start_keeper = |window: Window| {
        let keeper_events = events.reporter();
        Keeper::start(
            target.clone(),
            lock.clone(),
            lease.token.clone(),
            plan,
            window,
            move |report| {
                keeper_events.send(Event::Keeper(report));
            },
        )
    };

    let max_runtime_at = job.max_runtime.map(|limit| started + limit);
    let mut exited: Option<ChildStatus> = None;
    // SIGTERM sent (for whatever reason); SIGKILL is due at `kill_at`.
    let mut stopping = false;
    let mut lost = false;
    let mut timed_out = false;
    let mut kill_at: Option<BootInstant> = None;
    let mut killed_at: Option<BootInstant> = None;
    // Processes that outlive SIGKILL this long (uninterruptible I/O) are given up on.
    const SURVIVAL_LIMIT: Duration = Duration::from_secs(5);
    let mut survivors = false;
    let mut trouble: Option<String> = None;

    // Sends SIGTERM (unless already stopping) and schedules SIGKILL no later than `deadline`.
    let stop = |deadline: BootInstant, stopping: &mut bool, kill_at: &mut Option<BootInstant>| {
        if !*stopping {
            child.signal_group(Signal::SIGTERM);
            *stopping = true;
        }
        *kill_at = Some(kill_at.map_or(deadline, |at| at.min(deadline)));
    };

    loop {
        let mut wake = BootInstant::now() + crate::clock::MAX_NAP;
        if !lost {
            wake = wake.min(window.term_at);
        }
        // Only deadlines still ahead: one that has passed and been acted on would make this a
        // busy loop (a command that takes its time to die after SIGTERM, say).
        if keeper.is_none() && !lost {
            wake = wake.min(keeper_from);
        }
        if let Some(at) = kill_at
            && killed_at.is_none()
        {
            wake = wake.min(at);
        }
        if let Some(at) = max_runtime_at
            && !timed_out
            && exited.is_none()
        {
            wake = wake.min(at);
        }
        match events.recv_timeout(wake.nap()) {
            // Reaped below, as on every turn of the loop.
            Ok(Event::Signal(signal)) if signal == Signal::SIGCHLD as i32 => {}
            Ok(Event::Signal(signal)) => {
                let Ok(sig) = Signal::try_from(signal) else {
                    continue;
                };
                log.step(format_args!("forwarding {} to the command", sig.as_str()));
                child.signal_group(sig);
                if matches!(sig, Signal::SIGINT | Signal::SIGTERM) {
                    if stopping {
                        // A second INT/TERM: no more grace.
                        kill_at = Some(BootInstant::now());
                    } else {
                        stopping = true;
                        kill_at = Some(BootInstant::now() + plan.kill_after);
                    }
                }
            }
            Ok(Event::Keeper(Report::Renewed(renewed))) => {
                window = renewed;
                confirmed_at = BootInstant::now();
                if trouble.take().is_some() {
                    log.notice(format_args!("renewing lock '{key}' works again"));
                }
                log.step(format_args!(
                    "renewed lock '{key}' ({} of lease left)",
                    duration::display(window.valid_until.remaining())
                ));
            }
            Ok(Event::Keeper(Report::Lost(why))) => {
                if !lost {
                    lost = true;
                    log.notice(format_args!(
                        "lost lock '{key}': {why}; stopping the command"
                    ));
                    let deadline = (BootInstant::now() + window.loss_grace).min(window.kill_at);
                    stop(deadline, &mut stopping, &mut kill_at);
                }
            }
            Ok(Event::Keeper(Report::Trouble(why))) => {
                if trouble.is_none() {
                    log.warn(format_args!(
                        "renewing lock '{key}' failed: {why}; retrying (the command is stopped at {} if this goes on)",
                        duration::display(window.term_at.remaining())
                    ));
                }
                trouble = Some(why);
            }
            Ok(Event::Waiter(_))
            | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }

        while let Some(state) = reap(child.pid, job.foreground) {
            match state {
                Reaped::Exited(status) => exited = Some(status),
                Reaped::Stopped => {
                    // Ctrl-Z: give the terminal back and stop ourselves, as the shell expects;
                    // on `fg` continue the command in the foreground again. While stopped
                    // nothing renews the lease; the deadline checks below catch a lapse on
                    // wake-up.
                    child::reclaim_terminal();
                    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
                    child::hand_terminal_to(child.pid);
                    child.signal_group(Signal::SIGCONT);
                }
            }
        }

        let now = BootInstant::now();
        if keeper.is_none() && now >= keeper_from && !lost {
            keeper = Some(start_keeper(window)?);
        }
        let keeper_ended = keeper.as_ref().is_some_and(Keeper::is_finished);
        if !lost && (now >= window.term_at || keeper_ended) {
            lost = true;
            let why = if keeper_ended {
                "the renewal thread stopped".to_owned()
            } else {
                format!(
                    "renewals not confirmed for {} ({})",
                    duration::display(now.since(confirmed_at)),
                    trouble.as_deref().unwrap_or("no reply")
                )
            };
            log.notice(format_args!(
                "lost lock '{key}': {why}; stopping the command before the lease can lapse"
            ));
            stop(window.kill_at, &mut stopping, &mut kill_at);
        }
        if let Some(at) = max_runtime_at
            && now >= at
            && !timed_out
            && exited.is_none()
        {
            timed_out = true;
            log.notice(format_args!(
                "--max-runtime {} elapsed; stopping the command",
                duration::display(job.max_runtime.unwrap_or_default())
            ));
            stop(now + plan.kill_after, &mut stopping, &mut kill_at);
        }
        if lost && killed_at.is_none() && now >= window.kill_at {
            kill_at = Some(now);
        }
        if let Some(at) = kill_at
            && now >= at
            && killed_at.is_none()
        {
            child.signal_group(Signal::SIGKILL);
            killed_at = Some(now);
            log.step("sent SIGKILL to the command's process group");
        }
        if killed_at.is_some_and(|at| now.since(at) >= SURVIVAL_LIMIT) && child.group_alive() {
            survivors = true;
            break;
        }
        if exited.is_some() {
            if !child.group_alive() {
                break;
            }
            if !stopping {
                log.notice("the command exited but left processes in its group; stopping them");
                stop(now + plan.kill_after, &mut stopping, &mut kill_at);
            }
        }
    }

    if job.foreground {
        child::reclaim_terminal();
    }
    // Release first (the next holder is waiting), then stop renewing: a renewal that lands after
    // the release finds the token gone and changes nothing.
    let status = exited.unwrap_or(ChildStatus::Signaled(Signal::SIGKILL as i32));
    if survivors {
        drop(keeper);
        // Releasing now would let the next holder run beside them: let the lease run out.
        log.warn(format_args!(
            "processes of the command's group outlived SIGKILL by {}; lock '{key}' is left to expire instead of being released",
            duration::display(SURVIVAL_LIMIT)
        ));
        return Ok(if lost {
            Done::Reported(Failure::Lost)
        } else if timed_out {
            Done::Reported(Failure::MaxRuntime)
        } else {
            Done::Child(status)
        });
    }
    if lost {
        // Token-checked, so harmless if the lock is someone else's by now; bounded tightly,
        // since Redis was probably unreachable a moment ago.
        let _ = release_lock(
            session,
            target,
            lock,
            lease,
            Duration::ZERO,
            Some(plan.request_timeout),
            log,
        );
        drop(keeper);
        return Ok(Done::Reported(Failure::Lost));
    }
    let released = release(session, job.min_hold);
    drop(keeper);
    match released {
        Ok(Release::NotHeld) => {
            log.notice(format_args!(
                "lock '{key}' was no longer held when the command ended (expired or taken)"
            ));
            return Ok(Done::Reported(Failure::Lost));
        }
        Ok(_) => {}
        Err(err) => log.warn(format_args!(
            "could not release lock '{key}' ({err:#}); it expires by itself"
        )),
    }
    if timed_out {
        return Ok(Done::Reported(Failure::MaxRuntime));
    }
    if let ChildStatus::Signaled(signal) = status {
        log.notice(format_args!(
            "the command was killed by {}",
            signals::name(signal)
        ));
    }
    Ok(Done::Child(status))
}

/// Token-checked release (or keep for the minimum hold). The supervisor's connection may have
/// sat idle for the whole run: if it fails, one fresh connection is tried. `bound` caps the
/// connect and command timeouts.
fn release_lock(
    mut session: Session,
    target: &Target,
    lock: &Lock,
    lease: &Lease,
    min_hold: Duration,
    bound: Option<Duration>,
    log: Log,
) -> anyhow::Result<Release> {
    if let Some(bound) = bound {
        session.set_command_timeout(bound)?;
    }
    let released = match lock.release(&mut session, &lease.token, min_hold) {
        Err(err) if failure_of(&err) == Some(Failure::Unavailable) => {
            log.step(format_args!("releasing failed ({err:#}); reconnecting"));
            let mut fresh = match bound {
                Some(bound) => target.connect_within(bound)?,
                None => target.connect()?,
            };
            lock.release(&mut fresh, &lease.token, min_hold)?
        }
        result => result?,
    };
    match released {
        Release::Released => log.step(format_args!("released lock '{}'", lock.name.as_str())),
        Release::Kept(left) => log.step(format_args!(
            "keeping lock '{}' for {} more (--min-hold)",
            lock.name.as_str(),
            duration::display(left)
        )),
        Release::StillHeld(holds) => log.step(format_args!(
            "released one hold of lock '{}'; the enclosing invocation keeps it ({holds} left)",
            lock.name.as_str()
        )),
        Release::NotHeld => {}
    }
    Ok(released)
}

/// What became of the command.
enum Reaped {
    Exited(ChildStatus),
    /// Stopped (Ctrl-Z) while it owned the terminal.
    Stopped,
}

/// Reaps children that have changed state (the command, and orphans handed to us as
/// subreaper, which are only collected) until one tells something about the command or none
/// is left. Never blocks.
fn reap(command: Pid, foreground: bool) -> Option<Reaped> {
    let mut flags = WaitPidFlag::WNOHANG;
    if foreground {
        flags |= WaitPidFlag::WUNTRACED;
    }
    loop {
        match waitpid(None::<Pid>, Some(flags)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                return Some(Reaped::Exited(ChildStatus::Exited(code)));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                return Some(Reaped::Exited(ChildStatus::Signaled(signal as i32)));
            }
            Ok(WaitStatus::Stopped(pid, _)) if pid == command => return Some(Reaped::Stopped),
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}
