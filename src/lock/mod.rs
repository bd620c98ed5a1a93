//! The lock engine: acquire, extend, release, force-release, inspect and list one lock on one
//! Redis server. Each state change is a single token-checked Lua script (see `lua/README.md`);
//! this module only builds the arguments and decodes the replies. It knows nothing of the
//! command line and prints nothing.
//!
//! - `token`: the token a holder proves itself with.
//! - `record`: the records in Redis (holders, queue entries, history) as they are read.
//! - `wake`: a waiter's place in the queue and the wake-ups scripts send it.
//! - `acquire`, `release`, `renew`: the operations that change a lock.
//! - `state`: the reads (inspect, history, the doctor's ACL check); `list`: the locks under
//!   a prefix.
//! - `reply`: the status codes that open the scripts' replies, by name, as the scripts name
//!   them; a reply that is none of them is an error.

mod acquire;
mod list;
mod record;
mod release;
mod renew;
mod reply;
mod state;
mod token;
mod wake;

use std::time::Duration;

pub use self::acquire::{Acquisition, Lease, Mode, Queueing, Request};
pub use self::list::{Listing, Scope, list};
pub use self::record::{AHEAD_OF_CLOCK_MS, HistoryEntry, Holder, Queued, Retention, Unreadable};
pub use self::release::{Ending, Release, ReleaseRequest};
pub use self::renew::Refreshed;
pub use self::state::{Denied, INSPECT_HOLDERS, INSPECT_WAITERS, LockState};
pub use self::token::Token;
pub use self::wake::{WAKE_TTL, Waiter, Wake};
use crate::exit::{Failure, fail};
pub use crate::identity::Identity;
use crate::keys::{LockKeys, LockName, Prefix};

/// How long a queue entry lives unless its waiter refreshes it: a waiter calls (`refresh`, or
/// `acquire` with [`Queueing::Stay`]) within a third of this after its last call, and sooner
/// when an `acquire` reply's `hint` says so. A waiter that died stays in the queue this long at
/// most; in the first places of the queue, 3 s (the head lease, `lua/prelude/60-queue.lua`). Handed the
/// lock before its entry lapsed, it costs the queue one [`GRANT`].
///
/// Each refresh costs Redis a script call and a BLPOP ended and begun again: every 40 s,
/// 10,000 idle waiters cost it 3.0–3.5 % of a core with [`Lock::refresh`], 3.4–4.8 % with
/// `acquire` (two runs of benches/queue_scale.py --idle-simulation; docs/queue-scale.md).
pub const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(120);

/// The lease a waiter is handed the lock with: `run` starts on it and its first renewal
/// extends it, `acquire` claims the full lease at once (and is handed a [`CLAIM_GRANT`]). A
/// `run` waiter that died before its turn never takes the grant's wake-up off its list, and
/// the first look after 600 ms takes the grant back (`HEAR_MS` in `lua/prelude/60-queue.lua`); one that
/// died just after taking it costs the queue this long at most. Long enough for a host that
/// stalls the new holder for a second or two as its command starts (1.2 s was seen while 1,000
/// holders exited at once on 2 CPUs: with a 2 s grant the command was stopped as soon as it
/// started, exit 125; docs/queue-scale.md).
pub const GRANT: Duration = Duration::from_secs(5);

/// The grant of a waiter that claims a lock handed over with a call of its own ([`Waiter`]'s
/// `claims`): it makes that call as soon as it is woken (a round trip), so a grant it has not
/// claimed within this is a dead waiter's, and lapses for the next in line. Woken to claimed
/// took at most 5.6 ms (p90 4.1 ms) with both CPUs busy four times over (docs/queue-scale.md);
/// a live waiter slower than this loses its turn and queues again, a dead one costs the queue
/// this long, under the second per dead waiter the queue promises.
pub const CLAIM_GRANT: Duration = Duration::from_millis(600);

/// How long the mark of a token given up lives: far longer than a request can sit in a stalled
/// server's buffers before it runs, and short enough to leave nothing behind for long.
pub const CANCEL_MARK_TTL: Duration = Duration::from_secs(300);

/// How many replicas must acknowledge a write (`WAIT`), and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    pub count: u32,
    pub timeout: Duration,
}

impl Replicas {
    /// `count` replicas, waited for at most half of `request_timeout` and at most a second:
    /// the rest of the request's time is for its round trip. `WAIT 0` would wait forever.
    pub fn within(count: u32, request_timeout: Duration) -> Self {
        Self {
            count,
            timeout: (request_timeout / 2).clamp(Duration::from_millis(1), Duration::from_secs(1)),
        }
    }
}

/// One lock under a prefix.
#[derive(Debug, Clone)]
pub struct Lock {
    pub name: LockName,
    keys: LockKeys,
    /// Releases publish on [`LockKeys::released_channel`] (quorum mode: its waiters listen).
    notify: bool,
    /// Renewals come from the keeper of `acquire --keep-alive`, this pid: the holder record
    /// names it beside the caller's.
    keeper: Option<u32>,
}

impl Lock {
    pub fn new(prefix: &Prefix, name: LockName) -> Self {
        let keys = prefix.keys(&name);
        Self {
            name,
            keys,
            notify: false,
            keeper: None,
        }
    }

    /// The same lock, whose releases tell the waiters listening on its channel.
    pub fn notifying(self) -> Self {
        Self {
            notify: true,
            ..self
        }
    }

    /// The same lock, renewed by the keeper process `pid` (`acquire --keep-alive`).
    pub fn kept_by(self, pid: u32) -> Self {
        Self {
            keeper: Some(pid),
            ..self
        }
    }

    /// The channel releases publish on when [`Self::notifying`].
    pub fn released_channel(&self) -> String {
        self.keys.released_channel()
    }

    /// The ACL channel pattern that covers the release channels of every lock under this
    /// lock's prefix.
    pub fn released_channels_pattern(&self) -> String {
        self.keys.released_channels_pattern()
    }
}

/// A duration in whole ms, for a script (at most `u64::MAX`).
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A yes/no script argument.
fn flag(set: bool) -> &'static str {
    if set { "1" } else { "0" }
}

/// The error for a write too few replicas acknowledged.
fn unacknowledged(what: &str, acknowledged: u32, replicas: Replicas) -> anyhow::Error {
    fail(
        Failure::Unavailable,
        format!(
            "only {acknowledged} of the {} replicas asked for acknowledged {what} within {}",
            replicas.count,
            crate::duration::display(replicas.timeout)
        ),
    )
}

fn millis(duration: Duration) -> anyhow::Result<u64> {
    match u64::try_from(duration.as_millis()) {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(fail(Failure::Usage, "lease must be at least 1ms")),
    }
}
