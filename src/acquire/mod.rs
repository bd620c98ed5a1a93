//! Taking a lock: at once, by re-entering it, or after waiting. [`wait`] is the one wait loop:
//! it owns the signals, the deadline of `--wait` and the status line, and drives whichever
//! store's acquisition `Store::take` built, a [`Machine`]: on one Redis the lock's FIFO
//! queue (a state machine that blocks on its wake list, `store/single/queue`), over a quorum
//! of masters rounds of acquisition with release notices (`store/quorum/rounds`: no queue,
//! there is no order across independent masters). The store decides what to send and what a
//! reply means; every acquisition ends in an [`Outcome`]; a lock taken is [`Held`], ready for
//! `run`'s supervisor or for printing its token. `status` draws where the wait stands.

mod status;

use std::time::Duration;

use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::Session;
use crate::duration;
use crate::inbox::{Inbox, Incoming, Requests};
use crate::lock::{Holder, Identity, Lease, Mode, Replicas, Request, Retention, Token};
use crate::signals::{self, Signals};

pub(crate) use status::{Place, Status};

/// One store's acquisition of one lock, as a state machine on the main thread: its requests
/// (`inbox::Requests`) answer through the inbox the wait loop listens on ([`wait`]). The loop
/// calls it with each reply and whenever the clock reaches [`Machine::wake_at`] (or the
/// status line's redraw), and ends it at a terminating signal.
pub(crate) trait Machine<'a> {
    /// What its requests answer with.
    type Reply: Send + 'static;
    /// The wait it is part of: the inbox its requests answer through (the one the loop
    /// listens on), the status line it feeds with what Redis said, the wait's end.
    fn waiting(&mut self) -> &mut Waiting<'a, Self::Reply>;
    /// Sends the first request.
    fn start(&mut self) -> anyhow::Result<()>;
    /// A reply came: the end, or `None` to go on.
    fn on_reply(&mut self, reply: Self::Reply) -> anyhow::Result<Option<Ended>>;
    /// The clock reached the machine's next instant (a pause over, a request overdue) or the
    /// end of the wait: what ends a wait that ran out is the store's to say (the queue leaves
    /// it, a quorum makes its last round).
    fn on_time(&mut self) -> anyhow::Result<Option<Ended>>;
    /// The next instant the machine must look at the clock, if any.
    fn wake_at(&self) -> Option<BootInstant>;
    /// The lock taken: the worker its hold's requests go on (the rest of the machine ends).
    fn into_worker(self) -> Requests;
    /// The outcome of a machine that ended without the lock: what was given up (bounded), and
    /// who holds the lock.
    fn conclude(self, missed: Missed) -> Outcome;
    /// The error of a machine that failed, with what could not be cleaned up.
    fn failed(&mut self, err: anyhow::Error) -> anyhow::Error;
}

/// How the lease a command starts on was confirmed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Confirmed {
    /// A full lease, by a request sent at this instant.
    Sent(BootInstant),
    /// A hand-over grant of `length`, ours until `until` at the earliest.
    Grant {
        length: Duration,
        until: BootInstant,
    },
}

/// What a store keeps between the requests of one hold: on one Redis the connection that took
/// the lock (its renewals and its release reuse it: one connection per run), over a quorum
/// nothing (each master's connection is the quorum's own). The commands only pass it on.
#[derive(Default)]
pub(crate) struct Kept(Option<Session>);

impl Kept {
    /// What a store keeps: `session`, if any (only stores open it).
    pub(crate) fn new(session: Option<Session>) -> Self {
        Self(session)
    }

    /// The connection kept, if any (only stores open it).
    pub(crate) fn into_session(self) -> Option<Session> {
        self.0
    }
}

/// How a machine ended.
pub(crate) enum Ended {
    /// Taken; `kept`: what the store keeps for the hold's renewals and release.
    Took {
        lease: Lease,
        confirmed: Confirmed,
        kept: Kept,
    },
    /// Not taken: the store concludes what it gives up ([`Machine::conclude`]).
    Missed(Missed),
}

/// Why a machine ended without the lock.
// (One per acquisition, moved twice: boxing the holder would only add an allocation.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Missed {
    /// Busy, not waiting or the wait is over: who held it at server time `now`. `stale`: from
    /// an answer older than the wait's last moment (read again after giving up).
    Busy {
        holder: Option<Holder>,
        now: u64,
        stale: bool,
    },
    /// A terminating signal arrived while waiting.
    Interrupted(i32),
}

/// The one wait loop: drives `machine` until it ends, a terminating signal ends it, or a
/// worker panics; wakes it at its own instants and at the end of the wait, and redraws the
/// status line when due.
pub(crate) fn wait<'a, M: Machine<'a>>(mut machine: M) -> anyhow::Result<Outcome> {
    if let Err(err) = machine.start() {
        return Err(machine.failed(err));
    }
    loop {
        let waiting = machine.waiting();
        let mut at = BootInstant::now() + MAX_NAP;
        for candidate in [waiting.deadline, waiting.status.redraw_at()]
            .into_iter()
            .flatten()
            .chain(machine.wake_at())
        {
            at = at.min(candidate);
        }
        let step = match machine.waiting().inbox.next(at) {
            Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                Ok(Some(Ended::Missed(Missed::Interrupted(signal))))
            }
            Some(Incoming::Reply(reply)) => machine.on_reply(reply),
            Some(Incoming::Panicked(panic)) => Err(anyhow::anyhow!("a worker panicked: {panic}")),
            Some(Incoming::Signal(_)) | None => machine.on_time(),
        };
        machine.waiting().status.redraw_if_due();
        match step {
            Ok(None) => {}
            Ok(Some(Ended::Took {
                lease,
                confirmed,
                kept,
            })) => {
                let answered = BootInstant::now();
                machine.waiting().status.acquired();
                return Ok(Outcome::Acquired(Held {
                    lease,
                    confirmed,
                    answered,
                    kept,
                    worker: machine.into_worker(),
                }));
            }
            Ok(Some(Ended::Missed(missed))) => return Ok(machine.conclude(missed)),
            Err(err) => return Err(machine.failed(err)),
        }
    }
}

/// What a wait for one lock is made of, kept by the store's machine that the loop drives.
pub(crate) struct Waiting<'a, R> {
    /// Where the machine's requests answer, and signals arrive.
    pub(crate) inbox: Inbox<'a, R>,
    /// Where the wait stands, on stderr.
    pub(crate) status: Status<'a>,
    /// When `--wait` runs out (`None`: no wait, or one without end).
    pub(crate) deadline: Option<BootInstant>,
}

impl<'a, R> Waiting<'a, R> {
    /// A wait for lock `name` as `ask` says, starting now.
    pub(crate) fn new(
        signals: &'a Signals,
        name: &'a str,
        ask: &Ask,
        log: crate::log::Log,
    ) -> anyhow::Result<Self> {
        let deadline = ask.wait.deadline();
        Ok(Self {
            inbox: Inbox::new(signals)?,
            status: Status::new(name, log, deadline, ask.progress_every),
            deadline,
        })
    }

    /// Whether the wait has run out.
    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|at| BootInstant::now() >= at)
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

impl Ask {
    /// The request one acquire call makes for `token`; `reenter`: the call re-enters the lock
    /// that token holds.
    pub(crate) fn request<'r>(&'r self, token: &'r Token, reenter: bool) -> Request<'r> {
        Request {
            token,
            ttl: self.ttl,
            mode: self.mode,
            who: &self.who,
            reenter,
            replicas: self.replicas,
            history: self.history,
        }
    }
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
    /// What the store keeps for its renewals and release (the connection that took it).
    pub(crate) kept: Kept,
    pub(crate) worker: Requests,
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
