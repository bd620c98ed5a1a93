//! Keeping the lease of a lock whose holder lives elsewhere: the background process that
//! `acquire --keep-alive` leaves behind, for steps that run in separate shells.
//!
//! It renews the lease on the schedule `run` uses (every ttl/3, each request bounded inside
//! the lease) until one of: the lock was released with its token (a renewal finds it gone);
//! the process it watches exits (it releases the lock); the time limit (it stops renewing and
//! the lease runs out); a terminating signal (it releases the lock); the lease lapsed because
//! no renewal got through in time. If the keeper dies, the lease runs out as usual.

use std::time::Duration;

use nix::unistd::Pid;

use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::Session;
use crate::duration;
use crate::exit::{Failure, failure_of};
use crate::inbox::{Inbox, Incoming, Worker};
use crate::lock::{Ending, Lock, ReleaseRequest, Replicas, Token};
use crate::log::{Log, printable};
use crate::schedule::{Confirmed, Plan};
use crate::signals::{self, Signals};
use crate::store::Store;

/// How often `--while-pid` looks whether its process is still there.
const PID_POLL: Duration = Duration::from_millis(250);

/// What to keep, and until when.
pub(crate) struct Keep {
    pub(crate) plan: Plan,
    /// Stop renewing then.
    pub(crate) until: BootInstant,
    /// Release the lock when this process is gone.
    pub(crate) while_pid: Option<Pid>,
    /// Replicas that must acknowledge each renewal.
    pub(crate) replicas: Option<u32>,
}

/// Why keeping ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Released with its token (or taken from it): nothing left to keep.
    Released,
    /// The watched process exited; the lock was released.
    PidGone,
    /// The time limit came; the lease runs out by itself.
    TimeUp,
    /// No renewal got through before the lease could lapse.
    Lapsed,
    /// A terminating signal; the lock was released.
    Signal(i32),
}

struct Renewed {
    sent: BootInstant,
    result: anyhow::Result<(bool, Option<Session>)>,
}

/// Renews the lease of `token` until one of the ends above.
pub(crate) fn keep(
    signals: &Signals,
    store: &Store,
    lock: &Lock,
    token: &Token,
    keep: &Keep,
    log: Log,
) -> anyhow::Result<Ended> {
    let inbox: Inbox<'_, Renewed> = Inbox::new(signals)?;
    let worker = Worker::start("renewal")?;
    let key = printable(lock.name.as_str());
    // The lease as last confirmed. Until the first renewal (which goes out at once) confirms
    // it, the acquisition's lease, which began before this process did: if no renewal gets
    // through by its end, keeping is over, not retried until --max-hold.
    let started = BootInstant::now();
    let mut window = keep.plan.window(Confirmed::Sent(started));
    let mut renew_at = started;
    let mut in_flight = false;
    let mut session: Option<Session> = None;
    loop {
        let now = BootInstant::now();
        if now >= keep.until {
            log.step(format_args!(
                "kept lock '{key}' as long as allowed; it now runs out"
            ));
            return Ok(Ended::TimeUp);
        }
        if keep
            .while_pid
            .is_some_and(|pid| nix::sys::signal::kill(pid, None) == Err(nix::errno::Errno::ESRCH))
        {
            release(store, lock, token, log);
            return Ok(Ended::PidGone);
        }
        if now >= window.valid_until {
            return Ok(Ended::Lapsed);
        }
        if !in_flight && now >= renew_at {
            in_flight = true;
            let timeout = window
                .request_timeout
                .min(window.valid_until.since(now))
                .max(Duration::from_millis(10));
            let (store, lock, token, ttl) =
                (store.clone(), lock.clone(), token.clone(), keep.plan.ttl);
            let replicas = keep.replicas.map(|count| Replicas::within(count, timeout));
            let reuse = session.take();
            worker.run(&inbox.reporter(), move || {
                let sent = BootInstant::now();
                let result = store.extend(&lock, reuse, &token, ttl, replicas, timeout);
                Renewed { sent, result }
            });
        }
        let mut wake = (now + MAX_NAP).min(keep.until);
        if !in_flight {
            wake = wake.min(renew_at);
        }
        wake = wake.min(window.valid_until);
        if keep.while_pid.is_some() {
            wake = wake.min(now + PID_POLL);
        }
        match inbox.next(wake) {
            Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                release(store, lock, token, log);
                return Ok(Ended::Signal(signal));
            }
            Some(Incoming::Reply(Renewed { sent, result })) => {
                in_flight = false;
                match result {
                    Ok((true, renewed)) => {
                        window = keep.plan.window(Confirmed::Sent(sent));
                        renew_at = window.renew_at;
                        session = renewed;
                        log.step(format_args!("renewed lock '{key}'"));
                    }
                    Ok((false, _)) => return Ok(Ended::Released),
                    // Bad data or a refused login will not mend by trying again.
                    Err(err)
                        if matches!(failure_of(&err), Some(Failure::Usage | Failure::Auth)) =>
                    {
                        return Err(err);
                    }
                    Err(err) => {
                        log.warn(format_args!(
                            "renewing lock '{key}' failed ({err:#}); retrying in {}",
                            duration::display(keep.plan.retry_every)
                        ));
                        renew_at = BootInstant::now() + keep.plan.retry_every;
                    }
                }
            }
            Some(Incoming::Panicked(panic)) => anyhow::bail!("the renewal panicked: {panic}"),
            Some(Incoming::Signal(_)) | None => {}
        }
    }
}

/// Token-checked release, bounded: the keeper is on its way out.
fn release(store: &Store, lock: &Lock, token: &Token, log: Log) {
    let bound = Duration::from_millis(500);
    let request = ReleaseRequest {
        token,
        min_hold: Duration::ZERO,
        ending: &Ending::default(),
    };
    let released = store.release(lock, None, &request, bound, log);
    if let Err(err) = released {
        log.warn(format_args!(
            "could not release lock '{}' ({err:#}); its lease runs out by itself",
            printable(lock.name.as_str())
        ));
    }
}
