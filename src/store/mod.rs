//! Where locks live: one Redis (a server, a Sentinel-managed master or a Cluster), or several
//! independent masters in quorum mode (`quorum`: the fan-out, the validity of a lease, the
//! majority's verdict). Everything the commands do to a lock goes through [`Store`]: taking
//! it (`take`: the store builds its acquisition, the queue's machine or a quorum's rounds,
//! and the one wait loop of `acquire` drives it), renewals and releases,
//! `inspect` (a [`View`]), `list` and `metrics` (one [`Listed`] however many masters),
//! `history` and `check` (one history however many masters), `release --force`, the servers
//! `doctor` examines, and the flags one kind refuses. The commands never ask which kind it is.

mod quorum;
mod single;

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{self, Ask, Kept, Outcome, Waiting};
use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::exit::{Failure, fail};
use crate::keys::{LockName, Prefix};
use crate::lock::{Ending, Lock, Release, ReleaseRequest, Replicas, Scope, Token, list};
use crate::lock::{HistoryEntry, Holder, LockState, Unreadable};
use crate::log::Log;
use crate::signals::Signals;
pub(crate) use quorum::{OneRedisOnly, Quorum, check_count, transient};

/// A renewal: reset the lease of `token` to `ttl`, confirmed by `replicas` if asked, each
/// request within `timeout`.
pub(crate) struct Renewal<'a> {
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
    pub(crate) replicas: Option<Replicas>,
    pub(crate) timeout: Duration,
}

/// The longest a release (or a give-up) waits for an answer once redlock is on its way out
/// after a signal, a lost lock or a failed start: Redis was probably unreachable a moment ago,
/// and a signal must end redlock within a second whatever state a server that does not answer
/// is in. A release that cannot be made in time leaves the lock to its lease. (One a server
/// refused before running it is sent again up to the release timeout: `Store::release`.)
pub(crate) const HASTY_RELEASE: Duration = Duration::from_millis(500);

/// How long a release may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseBound {
    /// The longest each attempt waits for an answer: a server that does not answer at all
    /// ends the release then (the release may still run when it gets to it).
    pub(crate) answer: Duration,
    /// When the lease ends at the earliest, if the caller knows: a release known not to have
    /// run is sent again for up to the release timeout, but not past that, when Redis lets the
    /// lock go by itself.
    pub(crate) lease_ends: Option<BootInstant>,
}

impl ReleaseBound {
    /// Each attempt waits `answer` at most; the lease's end unknown.
    pub(crate) fn answer_within(answer: Duration) -> Self {
        Self {
            answer,
            lease_ends: None,
        }
    }

    /// How long a release to `target` known not to have run is sent again.
    fn retry_for(self, target: &Target) -> Duration {
        let timeout = target.release_timeout();
        self.lease_ends
            .map_or(timeout, |ends| timeout.min(ends.remaining()))
    }
}

/// One Redis, or a quorum of masters.
#[derive(Clone)]
pub(crate) enum Store {
    One(Target),
    Quorum(Arc<Quorum>),
}

/// One lock as `inspect` reads it, whatever the store: the lock as its Redis has it, or as a
/// majority of masters has it (the reading `list` shows: the holders a majority has, the
/// highest fence, the run the masters agree on), how it stands, and over a quorum what each
/// master said. A command renders the parts there are; it never asks which store read them.
pub(crate) struct View {
    pub(crate) state: LockState,
    pub(crate) verdict: Verdict,
    /// Over a quorum: how many masters make a majority, and each master's own view.
    pub(crate) masters: Option<Masters>,
}

/// What each master of a quorum said of one lock.
pub(crate) struct Masters {
    pub(crate) majority: usize,
    /// Each master as shown to people, and its view (or why it did not answer).
    pub(crate) each: Vec<(String, anyhow::Result<LockState>)>,
}

/// How a lock stands: on one Redis held or free; over a quorum what a majority of masters
/// says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Held (over a quorum: one holder's fence on a majority).
    Held,
    /// No live holder (over a quorum: on a majority).
    Free,
    /// Over a quorum, neither: nobody can take it until leases run out.
    Contested,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Free => "free",
            Verdict::Contested => "contested",
        }
    }
}

/// The locks under a prefix (held, or with a history too: [`Scope`]), each once.
pub(crate) struct Listed {
    /// Each lock, and (quorum mode) on how many masters its majority's holder holds it (or,
    /// held by no majority, how many have any live holder).
    pub(crate) locks: Vec<(LockState, usize)>,
    /// Quorum mode: how many masters there are.
    pub(crate) masters: Option<usize>,
    /// Keys matching the layout whose content redlock did not write, and why.
    pub(crate) skipped: Vec<(String, anyhow::Error)>,
    /// Locks whose read was refused before it ran (`Listing::unreadable`), and why; in quorum
    /// mode, on some master (its URL in the reason).
    pub(crate) unreadable: Vec<(LockName, anyhow::Error)>,
}

/// A lock's history: a server's time (Unix ms) at the reading, the holds oldest first, and
/// the entries that cannot be read.
pub(crate) struct History {
    pub(crate) now: u64,
    pub(crate) entries: Vec<HistoryEntry>,
    pub(crate) unreadable: Vec<Unreadable>,
}

/// What a forced release evicted.
pub(crate) struct Forced {
    /// A server's time (Unix ms) when it was done.
    pub(crate) now: u64,
    pub(crate) evicted: Vec<Holder>,
    pub(crate) unreadable: Vec<Unreadable>,
}

impl Store {
    /// Takes `lock` as `ask` says: at once, re-entering it, or waiting (the one wait loop,
    /// `acquire::wait`, driving this store's acquisition).
    pub(crate) fn take(
        &self,
        signals: &Signals,
        lock: &Lock,
        ask: &Ask,
        log: Log,
    ) -> anyhow::Result<Outcome> {
        let name = lock.name.as_str();
        match self {
            Store::One(target) => {
                let waiting = Waiting::new(signals, name, ask, log)?;
                acquire::wait(single::Acquirer::new(waiting, target, lock, ask, log)?)
            }
            Store::Quorum(quorum) => {
                let waiting = Waiting::new(signals, name, ask, log)?;
                acquire::wait(quorum::Rounds::new(waiting, quorum, lock, ask, log)?)
            }
        }
    }

    /// One Redis for one target, a quorum for several (each request bounded by
    /// `command_timeout` per master).
    pub(crate) fn new(mut targets: Vec<Target>, command_timeout: Duration) -> Self {
        if targets.len() == 1 {
            Store::One(targets.remove(0))
        } else {
            Store::Quorum(Arc::new(Quorum::new(targets, command_timeout)))
        }
    }

    /// The lock named `name`; in quorum mode its releases tell the waiters (there is no queue
    /// to wake them).
    pub(crate) fn lock(&self, prefix: &Prefix, name: LockName) -> Lock {
        let lock = Lock::new(prefix, name);
        match self {
            Store::One(_) => lock,
            Store::Quorum(_) => lock.notifying(),
        }
    }

    /// The servers that hold locks: the one, or each master.
    pub(crate) fn servers(&self) -> Vec<&Target> {
        match self {
            Store::One(target) => vec![target],
            Store::Quorum(quorum) => quorum.targets().collect(),
        }
    }

    /// Each server examined by `examine` (`doctor`: given a server's connection, its target,
    /// and whether it is a quorum's master), in the store's order. A quorum works while a
    /// majority of its masters answer: a master that cannot be reached is its `Err` in its
    /// place, unless too few answered (then that is the error); on one Redis any failure is.
    pub(crate) fn examine<T>(
        &self,
        log: Log,
        mut examine: impl FnMut(&mut Session, &Target, bool) -> anyhow::Result<T>,
    ) -> anyhow::Result<Vec<(&Target, anyhow::Result<T>)>> {
        let in_quorum = matches!(self, Store::Quorum(_));
        let mut examined = Vec::new();
        for target in self.servers() {
            let found = connect(target, log)
                .and_then(|mut session| examine(&mut session, target, in_quorum));
            match found {
                Err(err) if !in_quorum || !transient(&err) => return Err(err),
                found => examined.push((target, found)),
            }
        }
        let answered = examined.iter().filter(|(_, found)| found.is_ok()).count();
        if in_quorum && answered <= examined.len() / 2 {
            let masters = examined.len();
            let first = examined
                .into_iter()
                .find_map(|(_, found)| found.err())
                .unwrap_or_else(|| anyhow::anyhow!("no master answered"));
            return Err(first.context(format!("only {answered} of {masters} masters answered")));
        }
        Ok(examined)
    }

    /// Where locks are looked for, for a message: "on URL, database N", or "on N masters".
    pub(crate) fn place(&self) -> String {
        match self {
            Store::One(target) => format!("on {}, database {}", target.redacted(), target.db()),
            Store::Quorum(quorum) => format!("on {} masters", quorum.len()),
        }
    }

    /// The history of `lock` (`history`, `check`). In quorum mode every master's, merged: a
    /// hold each master recorded under the same fence once, as told by the master that knows
    /// most of how it ended; a master that did not answer is warned of, fewer than a majority
    /// is an error.
    pub(crate) fn history(&self, lock: &Lock, log: Log) -> anyhow::Result<History> {
        let (now, entries, unreadable) = match self {
            Store::One(target) => lock.history(&mut connect(target, log)?)?,
            Store::Quorum(quorum) => quorum.history(lock, log)?,
        };
        Ok(History {
            now,
            entries,
            unreadable,
        })
    }

    /// Refuses a flag that only one Redis takes, in quorum mode.
    pub(crate) fn refuse_in_quorum(&self, flag: OneRedisOnly) -> anyhow::Result<()> {
        if let Store::One(_) = self {
            return Ok(());
        }
        Err(fail(Failure::Usage, quorum::refusal(flag)))
    }

    /// What `inspect` shows of `lock`: the state on one Redis (connected with a step logged),
    /// or each master's and the verdict.
    pub(crate) fn inspect(&self, lock: &Lock, log: Log) -> anyhow::Result<View> {
        match self {
            Store::One(target) => {
                let state = lock.inspect(&mut connect(target, log)?)?;
                Ok(View {
                    verdict: match state.holder_count {
                        0 => Verdict::Free,
                        _ => Verdict::Held,
                    },
                    state,
                    masters: None,
                })
            }
            Store::Quorum(quorum) => quorum.view(lock),
        }
    }

    /// Every lock under `prefix` in `scope`, each once. In quorum mode each lock as a majority
    /// of masters has it, with the number of masters that hold it (`Listed::locks`); a master
    /// that did not answer is warned of, fewer than a majority is an error.
    pub(crate) fn list(&self, prefix: &Prefix, scope: Scope, log: Log) -> anyhow::Result<Listed> {
        match self {
            Store::One(target) => {
                let listing = list(connect(target, log)?, prefix, scope)?;
                Ok(Listed {
                    locks: listing
                        .locks
                        .into_iter()
                        .map(|state| {
                            let held = usize::from(state.holder_count > 0);
                            (state, held)
                        })
                        .collect(),
                    masters: None,
                    skipped: listing.skipped,
                    unreadable: listing.unreadable,
                })
            }
            Store::Quorum(quorum) => {
                let (locks, skipped, unreadable) = quorum.list(prefix, scope, log)?;
                Ok(Listed {
                    locks,
                    masters: Some(quorum.len()),
                    skipped,
                    unreadable,
                })
            }
        }
    }

    /// Removes every holder of `lock` (`why` goes into its history). In quorum mode on every
    /// master; one that did not answer is warned of.
    pub(crate) fn force_release(&self, lock: &Lock, why: &str, log: Log) -> anyhow::Result<Forced> {
        let (now, evicted, unreadable) = match self {
            Store::One(target) => lock.force_release(&mut connect(target, log)?, why)?,
            Store::Quorum(quorum) => {
                let (now, evicted, unreadable, failures) = quorum.force_release(lock, why)?;
                if !failures.is_empty() {
                    log.warn(format_args!(
                        "not every master answered ({failures}); what they hold expires with its lease, and a majority no longer has it"
                    ));
                }
                (now, evicted, unreadable)
            }
        };
        Ok(Forced {
            now,
            evicted,
            unreadable,
        })
    }

    /// Resets a lease as `renewal` says, within its timeout (per master in quorum mode), over
    /// what the store kept. Returns whether it was confirmed, and what to keep for next time.
    pub(crate) fn extend(
        &self,
        lock: &Lock,
        kept: Kept,
        renewal: &Renewal<'_>,
    ) -> anyhow::Result<(bool, Kept)> {
        match self {
            Store::One(target) => single::extend(target, lock, kept.into_session(), renewal)
                .map(|(extended, session)| (extended, Kept::new(session))),
            Store::Quorum(quorum) => quorum
                .extend(lock, renewal.token, renewal.ttl, renewal.timeout)
                .map(|extended| (extended, Kept::default())),
        }
    }

    /// Token-checked release (or keep for the minimum hold) within `bound`: with one Redis,
    /// over what it kept if anything, and sent again while it is known not to have run (see
    /// `single::release`); in quorum mode, on every master at once, each as on one Redis, until
    /// a majority has answered.
    /// It returns within [`Self::release_within`].
    pub(crate) fn release(
        &self,
        lock: &Lock,
        kept: Kept,
        request: &ReleaseRequest<'_>,
        bound: ReleaseBound,
        log: Log,
    ) -> anyhow::Result<Release> {
        match self {
            Store::One(target) => {
                single::release(target, lock, kept.into_session(), request, bound, log)
            }
            Store::Quorum(quorum) => quorum.release(lock, request, bound, log),
        }
    }

    /// Gives back at once what `token` holds, within `bound`: no minimum hold, no ending to
    /// record (a lock taken that cannot be used: its token could not be printed, its keeper
    /// not started, or the keeper is on its way out), over what the store kept.
    pub(crate) fn give_back(
        &self,
        lock: &Lock,
        kept: Kept,
        token: &Token,
        bound: ReleaseBound,
        log: Log,
    ) -> anyhow::Result<()> {
        let request = ReleaseRequest {
            token,
            min_hold: Duration::ZERO,
            ending: &Ending::default(),
        };
        self.release(lock, kept, &request, bound, log).map(drop)
    }

    /// The longest [`Self::release`] takes within `bound`.
    pub(crate) fn release_within(&self, bound: ReleaseBound) -> Duration {
        match self {
            Store::One(target) => bound.answer.max(bound.retry_for(target)),
            Store::Quorum(quorum) => quorum.release_within(bound),
        }
    }
}

/// A connection to `target` for a command's one request.
pub(crate) fn connect(target: &Target, log: Log) -> anyhow::Result<Session> {
    let session = target.connect()?;
    log.step(format_args!("connected to {}", target.redacted()));
    Ok(session)
}
