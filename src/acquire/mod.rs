//! Taking a lock: at once, by re-entering it, or after waiting. [`take`] is the one entry:
//! on one Redis the lock's FIFO queue (`queue`, a state machine that blocks on its wake list),
//! over a quorum of masters rounds of acquisition with release notices (`quorum`, no queue:
//! there is no order across independent masters). Both end in an [`Outcome`]; a lock taken is
//! [`Held`], ready for `run`'s supervisor or for printing its token. `status` draws where the
//! wait stands.

mod queue;
mod quorum;
mod status;

use std::time::Duration;

use crate::clock::BootInstant;
use crate::conn::Session;
use crate::duration;
use crate::inbox::Worker;
use crate::lease::Confirmed;
use crate::lock::{Holder, Identity, Lease, Lock, Mode, Replicas, Retention, Token};
use crate::log::Log;
use crate::signals::Signals;
use crate::store::Store;

/// Takes `lock` as `ask` says, on whichever store the lock lives.
pub(crate) fn take(
    signals: &Signals,
    store: &Store,
    lock: &Lock,
    ask: &Ask,
    log: Log,
) -> anyhow::Result<Outcome> {
    match store {
        Store::One(target) => queue::acquire(signals, target, lock, ask, log),
        Store::Quorum(masters) => quorum::acquire(signals, masters, lock, ask, log),
    }
}

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Fail at once (the default: a waiting cron host would run the job a second time).
    No,
    UpTo(Duration),
    Forever,
}

impl Wait {
    /// `0`, a duration, or `forever` / `inf`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "0" | "0s" => Ok(Wait::No),
            "forever" | "inf" | "infinity" => Ok(Wait::Forever),
            other => duration::parse(other).map(Wait::UpTo),
        }
    }

    /// When a wait that starts now ends; `None` for no wait or one without end.
    pub(crate) fn deadline(self) -> Option<BootInstant> {
        match self {
            Wait::UpTo(limit) => Some(BootInstant::now() + limit),
            Wait::No | Wait::Forever => None,
        }
    }
}

/// What to acquire, and how long to wait for it.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) ttl: Duration,
    pub(crate) mode: Mode,
    pub(crate) who: Identity,
    pub(crate) wait: Wait,
    /// The token of an enclosing invocation that holds this lock: re-enter it if it still does.
    pub(crate) reenter: Option<Token>,
    /// The caller renews the lease itself (`run`): a lock handed over is taken on its grant.
    pub(crate) renews: bool,
    /// Without a terminal, say where the wait stands this often (`None`: only when it starts).
    pub(crate) progress_every: Option<Duration>,
    /// Replicas that must acknowledge the acquisition.
    pub(crate) replicas: Option<Replicas>,
    /// What the lock's history keeps from this hold on.
    pub(crate) history: Retention,
}

/// How an acquisition ended.
pub(crate) enum Outcome {
    Acquired(Held),
    /// Busy, and not waiting (or the wait ran out): who held it, at server time `now`.
    Busy {
        holder: Option<Holder>,
        now: u64,
    },
    /// A terminating signal arrived while waiting; the queue was left.
    Interrupted(i32),
}

/// A lock just acquired, with the connection and worker that took it (the release uses them).
pub(crate) struct Held {
    pub(crate) lease: Lease,
    pub(crate) confirmed: Confirmed,
    /// When the answer that took it was read: a lease that is nearly over by then was
    /// answered late (Redis stalled), one that is over only later was kept waiting by redlock.
    pub(crate) answered: BootInstant,
    /// The connection that took it (none in quorum mode).
    pub(crate) session: Option<Session>,
    pub(crate) worker: Worker,
}

/// Pause before the next attempt after `failures` failed ones: 100 ms doubling to 2 s, less up
/// to a quarter at random, so waiters that lost the same server do not come back in step.
pub(crate) fn backoff(failures: u32) -> Duration {
    let full = Duration::from_millis(100)
        .saturating_mul(1 << failures.min(5))
        .min(Duration::from_secs(2));
    let jitter = u32::try_from(uuid::Uuid::new_v4().as_u128() % 250).unwrap_or(0);
    full - full * jitter / 1000
}
