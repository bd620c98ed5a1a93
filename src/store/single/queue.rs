//! Taking a lock: at once, by re-entering it, or after waiting in its FIFO queue without polling.
//!
//! The first attempt takes the lock, or joins the queue (one script call). The waiter then
//! blocks on its own wake list (BLPOP), which scripts push to when the lock is handed to it,
//! when it has become first in line and must watch new holders' grants that end before its
//! next call is due, or when it moved into the head lease's places (`h:`); each block
//! lasts at most until the holder's expiry (for the first two in line), the queue entry's
//! refresh, or the end of the wait. A block that ends without a wake-up, and a hand-over to a
//! caller that does not renew by itself (`acquire`), lead to one script call that claims the
//! lock or refreshes the place; that call may only claim (never re-join), so nothing it does
//! after the waiter gave up can take the lock. `run` starts on the grant itself (its first
//! renewal makes it a full lease), so a hand-over costs the next holder no round trip after
//! the wake-up.
//!
//! Grant expiries are server times. They become local deadlines through the last script call
//! of this waiter: the server read its clock (`now`) after the call was sent, so a server time
//! `t` cannot come before `sent + (t - now)`, less 1% + 2 ms for the clocks' rates.
//!
//! [`Acquirer`] is a state machine on the main thread, driven by the one wait loop
//! (`acquire::wait`): every request runs on a worker (one connection, see `inbox`), and the
//! loop meanwhile listens for signals, the end of the wait and the status line's redraws. A terminating signal or the end of the wait leaves the
//! queue (giving back a lock handed over in the meantime) at once, whatever Redis is doing.
//! While waiting, a failed request is retried, with a growing pause, until the wait runs out.
//! This file holds the machine and its clock; `events` its reactions to replies, `requests`
//! what it sends.

use std::time::Duration;

use crate::acquire::{Ask, Ended, Machine, Missed, Outcome, Wait, Waiting, backoff};
use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::duration;
use crate::exit::{Failure, fail, failure_of};
use crate::inbox::Requests;
use crate::lock::{Acquisition, Holder, Lock, QUEUE_ENTRY_TTL, Refreshed, Waiter, Wake};
use crate::log::Log;

mod events;
mod requests;

/// A worker's reply.
// (One per round trip, moved once through a channel: its size does not matter.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reply {
    /// A call of the acquire script, sent at `sent`.
    Called {
        sent: BootInstant,
        result: anyhow::Result<(Acquisition, Session)>,
    },
    /// A block on the wake list ended (`None`: nothing came).
    Woken(anyhow::Result<(Option<Wake>, Session)>),
    /// The queue entry was refreshed (a call that reads nothing else), sent at `sent`.
    Refreshed {
        sent: BootInstant,
        result: anyhow::Result<(Refreshed, Session)>,
    },
}

/// Which call of the acquire script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Take the lock now or fail: never queue.
    Fail,
    /// Take it, or join the queue (refresh the entry if already queued).
    Join,
    /// Only claim a lock handed over or reached at the head, or refresh the place: never
    /// (re-)join, so that a late call cannot take the lock after the waiter has left.
    Stay,
}

/// A reading of the server's clock (`now`, Unix ms) taken after `sent`.
#[derive(Debug, Clone, Copy)]
struct ServerReading {
    sent: BootInstant,
    now: u64,
}

impl ServerReading {
    /// The earliest local instant at which the server's clock can read `server_ms`.
    fn earliest(self, server_ms: u64) -> BootInstant {
        let span = Duration::from_millis(server_ms.saturating_sub(self.now));
        self.sent + span.saturating_sub(crate::clock::drift(span))
    }

    /// About when the server's clock reads `server_ms`, for waking up just after it.
    fn about(self, server_ms: u64) -> BootInstant {
        self.sent + Duration::from_millis(server_ms.saturating_sub(self.now))
    }

    /// When the queue entry is due for a refresh.
    fn refresh_at(self) -> BootInstant {
        self.sent + QUEUE_ENTRY_TTL / 3
    }
}

/// Requests failing in a row, while waiting.
struct Failures {
    count: u32,
    last: anyhow::Error,
}

/// How often a waiter whose Redis user may not block (BLPOP) looks at the lock instead.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// The bound of each of a give-up's two requests (leave the queue, then read who holds the
/// lock for the message): a signal must end redlock within a second whatever state Redis is
/// in.
const GIVE_UP_STEP: Duration = Duration::from_millis(400);

/// One waiter's way through the lock's queue (see the top of this file).
pub(crate) struct Acquirer<'a> {
    waiting: Waiting<'a, Reply>,
    worker: Requests,
    target: &'a Target,
    lock: &'a Lock,
    ask: &'a Ask,
    log: Log,
    waiter: Waiter,
    /// The first call re-enters the lock of the enclosing invocation.
    reentering: bool,
    /// The waiter's token has a place in the queue (or was handed the lock meanwhile).
    queued: bool,
    /// A call of the waiter's token went out and its outcome is unknown (in flight, or no
    /// reply came): it may have queued or taken the lock.
    unsure: bool,
    /// The server's clock as read by the last script call.
    reading: Option<ServerReading>,
    /// When the lock may change without a wake-up (the holder's expiry).
    look_at: BootInstant,
    /// Who held the lock when Redis last answered, the server's time then, and when the
    /// request was sent (to carry that time forward).
    last_busy: Option<(Option<Holder>, u64, BootInstant)>,
    failures: Option<Failures>,
    /// The next script call is due then (after a failure, or when polling).
    call_at: Option<BootInstant>,
    /// BLPOP is denied to this Redis user: look at the lock every [`POLL_EVERY`] instead.
    polling: bool,
    /// Blocks in a row that ended with a failed connection.
    woken_failures: u32,
    /// A call of the waiter's token once went without a reply: it may still reach Redis, so
    /// giving up must mark the token cancelled. Never cleared (a later answer to another call
    /// says nothing of that one).
    unanswered: bool,
    /// The token holds the lock while the machine goes on (a late answer being confirmed):
    /// giving up must give it back.
    holding: bool,
    /// The connection, while no request is in flight and the next call waits for `call_at`.
    session: Option<Session>,
    /// A request is in flight, and its reply is due by then at the latest.
    reply_by: Option<BootInstant>,
}

impl<'a> Acquirer<'a> {
    /// A waiter for `lock` on `target`, taking it as `ask` says within `waiting`.
    pub(crate) fn new(
        waiting: Waiting<'a, Reply>,
        target: &'a Target,
        lock: &'a Lock,
        ask: &'a Ask,
        log: Log,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            // An acquisition that waits keeps its deadline and status line on the main thread
            // between requests: its requests go to a thread.
            worker: Requests::new(
                target.pollable() && ask.wait == Wait::No,
                waiting.inbox.watch(),
            )?,
            target,
            lock,
            ask,
            log,
            waiter: Waiter {
                claims: !ask.renews,
                ..Waiter::new()
            },
            reentering: ask.reenter.is_some(),
            queued: false,
            unsure: false,
            reading: None,
            look_at: BootInstant::now(),
            last_busy: None,
            failures: None,
            call_at: None,
            polling: false,
            woken_failures: 0,
            unanswered: false,
            holding: false,
            session: None,
            reply_by: None,
            waiting,
        })
    }

    fn first_call(&self) -> Call {
        if self.ask.wait == Wait::No {
            Call::Fail
        } else {
            Call::Join
        }
    }

    /// A request failed. Failing fast, or for any reason but an unreachable Redis, that is the
    /// end; while waiting, it is tried again until the wait runs out.
    fn on_failure(&mut self, err: anyhow::Error) -> anyhow::Result<Option<Ended>> {
        let unreachable = failure_of(&err) == Some(Failure::Unavailable);
        if self.ask.wait == Wait::No || !unreachable || self.past_deadline() {
            return Err(err);
        }
        let count = self.failures.as_ref().map_or(0, |failures| failures.count) + 1;
        let pause = backoff(count);
        if count == 1 {
            self.waiting.status.clear();
            self.log.warn(format_args!(
                "{err:#}; retrying while the wait lasts (next in {})",
                duration::display(pause)
            ));
        }
        // Said at every progress interval (every second on a terminal) until Redis answers.
        self.waiting.status.unreachable(format!("{err:#}"));
        if count > 1 {
            self.log.step(format_args!(
                "{err:#}; retrying in {}",
                duration::display(pause)
            ));
        }
        self.failures = Some(Failures { count, last: err });
        self.call_at = Some(BootInstant::now() + pause);
        Ok(None)
    }

    fn past_deadline(&self) -> bool {
        self.waiting.past_deadline()
    }
}

impl<'a> Machine<'a> for Acquirer<'a> {
    type Reply = Reply;

    fn waiting(&mut self) -> &mut Waiting<'a, Reply> {
        &mut self.waiting
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let call = if self.reentering {
            Call::Fail
        } else {
            self.first_call()
        };
        self.call(call, None);
        Ok(())
    }

    /// A reply: see `events`.
    fn on_reply(&mut self, reply: Reply) -> anyhow::Result<Option<Ended>> {
        self.on_answer(reply)
    }

    fn on_time(&mut self) -> anyhow::Result<Option<Ended>> {
        if self.reply_by.is_some_and(|by| BootInstant::now() >= by) {
            // The worker went quiet beyond every timeout it has (a Unix socket's connect that
            // hangs): abandon it with its request, and carry on with a fresh one.
            self.reply_by = None;
            self.unanswered |= self.unsure;
            self.worker = self.worker.fresh()?;
            let err = fail(
                Failure::Unavailable,
                format!(
                    "no answer within {}",
                    duration::display(self.target.request_bound())
                ),
            )
            .context(self.target.redacted().to_owned());
            if let Some(end) = self.on_failure(err)? {
                return Ok(Some(end));
            }
        }
        if self.past_deadline() {
            if let Some(failures) = self.failures.take() {
                // Redis has not answered since.
                return Err(failures.last);
            }
            // The last answer may be minutes old (a blocked wait reads nothing): it is read
            // again (see `acquire`); if that fails, its server time carried forward to now
            // keeps "held for" and "expires in" current.
            let (holder, now) = match self.last_busy.take() {
                Some((holder, now, sent)) => {
                    let since = u64::try_from(BootInstant::now().since(sent).as_millis())
                        .unwrap_or(u64::MAX);
                    (holder, now.saturating_add(since))
                }
                None => (None, 0),
            };
            return Ok(Some(Ended::Missed(Missed::Busy {
                holder,
                now,
                stale: true,
            })));
        }
        if self
            .call_at
            .take_if(|at| BootInstant::now() >= *at)
            .is_some()
        {
            // Never (re-)join once joined: a place the queue kept is claimed or refreshed, and
            // a lost one is reported as `Gone` and joined again.
            let call = if self.reading.is_some() {
                Call::Stay
            } else {
                self.first_call()
            };
            let session = self.session.take();
            self.call(call, session);
        }
        Ok(None)
    }

    /// The next instant the machine must look at the clock (the loop adds the end of the wait
    /// and the status line's redraws).
    fn wake_at(&self) -> Option<BootInstant> {
        match (self.call_at, self.reply_by) {
            (Some(call_at), Some(reply_by)) => Some(call_at.min(reply_by)),
            (at, None) | (None, at) => at,
        }
    }

    fn into_worker(self) -> Requests {
        self.worker
    }

    /// The outcome of a machine that ended without the lock: the queue left (bounded), and who
    /// holds the lock.
    fn conclude(mut self, missed: Missed) -> Outcome {
        match missed {
            Missed::Busy { holder, now, stale } => {
                if let Some(left) = self.give_up() {
                    self.log.warn(format_args!("{left}"));
                }
                // The last answer may be long past (a blocked wait reads nothing): who holds
                // the lock is read again, after leaving the queue.
                let (holder, now) = match stale {
                    true => self.holder_now().unwrap_or((holder, now)),
                    false => (holder, now),
                };
                Outcome::Busy { holder, now }
            }
            Missed::Interrupted(signal) => {
                if let Some(left) = self.give_up() {
                    self.log.warn(format_args!("{left}"));
                }
                Outcome::Interrupted(signal)
            }
        }
    }

    /// The error of a machine that failed, with what could not be cleaned up in its one line.
    fn failed(&mut self, err: anyhow::Error) -> anyhow::Error {
        match (self.give_up(), failure_of(&err)) {
            (Some(left), Some(failure)) => fail(failure, format!("{err:#}; {left}")),
            (Some(left), None) => {
                self.log.warn(format_args!("{left}"));
                err
            }
            (None, _) => err,
        }
    }
}
