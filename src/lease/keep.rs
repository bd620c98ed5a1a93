//! Keeping the lease of a lock whose holder lives elsewhere: the background process that
//! `acquire --keep-alive` leaves behind, for steps that run in separate shells.
//!
//! It renews the lease through the [`Renewer`] `run` uses (every ttl/3, each request bounded
//! inside the lease) until one of: the lock was released with its token (a renewal finds it gone);
//! the process it watches exits (it releases the lock); the time limit (it stops renewing and
//! the lease runs out); a terminating signal (it releases the lock); the lease lapsed because
//! no renewal got through in time. If the keeper dies, the lease runs out as usual.

use std::time::Duration;

use nix::unistd::Pid;

use crate::acquire::Confirmed;
use crate::acquire::Kept;
use crate::clock::{BootInstant, MAX_NAP};
use crate::duration;
use crate::inbox::{Inbox, Incoming};
use crate::lease::{HASTY_RELEASE, Lease, Plan, Renewed, Renewer, Verdict};
use crate::lock::{Lock, Token};
use crate::log::{Log, printable};
use crate::signals::{self, Signals};
use crate::store::{ReleaseBound, Store};

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
    let key = printable(lock.name.as_str());
    let lease = Lease {
        store,
        lock,
        token,
        plan: keep.plan,
        replicas: keep.replicas,
    };
    // The lease as last confirmed. Until the first renewal (which goes out at once) confirms
    // it, the acquisition's lease, which began before this process did: if no renewal gets
    // through by its end, keeping is over, not retried until --max-hold.
    let mut renewer =
        Renewer::new(lease, Confirmed::Sent(BootInstant::now()), Kept::default()).renew_at_once();
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
            release(store, lock, token, renewer.window().valid_until, log);
            return Ok(Ended::PidGone);
        }
        if now >= renewer.window().valid_until {
            return Ok(Ended::Lapsed);
        }
        let mut verdict = renewer.renew_if_due(&inbox.reporter(), |renewed| renewed);
        if verdict.is_none() {
            let mut wake = (now + MAX_NAP)
                .min(keep.until)
                .min(renewer.window().valid_until);
            if let Some(due) = renewer.due_at() {
                wake = wake.min(due);
            }
            if keep.while_pid.is_some() {
                wake = wake.min(now + PID_POLL);
            }
            verdict = match inbox.next(wake) {
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    release(store, lock, token, renewer.window().valid_until, log);
                    return Ok(Ended::Signal(signal));
                }
                Some(Incoming::Reply(renewed)) => Some(renewer.on_reply(renewed)),
                Some(Incoming::Panicked(panic)) => {
                    anyhow::bail!("the renewal panicked: {panic}")
                }
                Some(Incoming::Signal(_)) | None => None,
            };
        }
        match verdict {
            Some(Verdict::Confirmed { .. }) => log.step(format_args!("renewed lock '{key}'")),
            Some(Verdict::Lost) => return Ok(Ended::Released),
            Some(Verdict::Refused(err)) => return Err(err),
            Some(Verdict::Troubled { why, .. }) => log.warn(format_args!(
                "renewing lock '{key}' failed ({why}); retrying in {}",
                duration::display(renewer.window().retry_every)
            )),
            None => {}
        }
    }
}

/// Token-checked release, bounded: the keeper is on its way out. One known not to have run is
/// sent again until the lease, which ends at `lease_ends` at the earliest, would be gone anyway.
fn release(store: &Store, lock: &Lock, token: &Token, lease_ends: BootInstant, log: Log) {
    let bound = ReleaseBound {
        answer: HASTY_RELEASE,
        lease_ends: Some(lease_ends),
    };
    if let Err(err) = store.give_back(lock, Kept::default(), token, bound, log) {
        log.warn(format_args!(
            "could not release lock '{}' ({err:#}); its lease runs out by itself",
            printable(lock.name.as_str())
        ));
    }
}
