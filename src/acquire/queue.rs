//! Taking a lock: at once, by re-entering it, or after waiting in its FIFO queue without polling.
//!
//! The first attempt takes the lock, or joins the queue (one script call). The waiter then
//! blocks on its own wake list (BLPOP), which scripts push to when the lock is handed to it, or
//! when it has become first in line and must watch the new holders' short grants; each block
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
//! [`acquire`] is a state machine on the main thread: every request runs on a worker (one
//! connection, see `inbox`), and the main thread meanwhile listens for signals, the end of the
//! wait and the status line's redraws. A terminating signal or the end of the wait leaves the
//! queue (giving back a lock handed over in the meantime) at once, whatever Redis is doing.
//! While waiting, a failed request is retried, with a growing pause, until the wait runs out.

use std::time::Duration;

use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::{Session, Target};
use crate::duration;
use crate::exit::{Failure, fail, failure_of, no_reply};
use crate::inbox::{Inbox, Incoming, Worker};
use crate::lease::Confirmed;
use crate::lock::{
    Acquisition, GRANT, Holder, Lease, Lock, QUEUE_ENTRY_TTL, Queueing, Refreshed, Request, Waiter,
    Wake,
};
use crate::log::{Log, printable};
use crate::signals::{self, Signals};

use super::status::{Place, Status};
use super::{Ask, Held, Outcome, Wait, backoff};

/// Takes the lock, re-entering it or waiting in its queue as `ask` says.
pub(crate) fn acquire(
    signals: &Signals,
    target: &Target,
    lock: &Lock,
    ask: &Ask,
    log: Log,
) -> anyhow::Result<Outcome> {
    let inbox = Inbox::new(signals)?;
    let deadline = ask.wait.deadline();
    let mut acquirer = Acquirer {
        worker: Worker::start("redis")?,
        target,
        lock,
        ask,
        log,
        waiter: Waiter {
            claims: !ask.renews,
            ..Waiter::new()
        },
        deadline,
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
        status: Status::new(lock.name.as_str(), log, deadline, ask.progress_every),
        inbox,
    };
    acquirer.start();
    loop {
        let step = match acquirer.inbox.next(acquirer.wake_at()) {
            Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                Ok(Some(End::Interrupted(signal)))
            }
            Some(Incoming::Reply(reply)) => acquirer.on_reply(reply),
            Some(Incoming::Panicked(panic)) => Err(anyhow::anyhow!("a worker panicked: {panic}")),
            Some(Incoming::Signal(_)) | None => acquirer.on_time(),
        };
        match step {
            Ok(None) => {}
            Ok(Some(End::Took {
                lease,
                confirmed,
                session,
            })) => {
                acquirer.status.acquired();
                return Ok(Outcome::Acquired(Held {
                    lease,
                    confirmed,
                    session: Some(session),
                    worker: acquirer.worker,
                }));
            }
            Ok(Some(End::Busy { holder, now, stale })) => {
                if let Some(left) = acquirer.give_up() {
                    acquirer.log.warn(format_args!("{left}"));
                }
                // The last answer may be long past (a blocked wait reads nothing): who holds
                // the lock is read again, after leaving the queue.
                let (holder, now) = match stale {
                    true => acquirer.holder_now().unwrap_or((holder, now)),
                    false => (holder, now),
                };
                return Ok(Outcome::Busy { holder, now });
            }
            Ok(Some(End::Interrupted(signal))) => {
                if let Some(left) = acquirer.give_up() {
                    acquirer.log.warn(format_args!("{left}"));
                }
                return Ok(Outcome::Interrupted(signal));
            }
            Err(err) => {
                // What could not be cleaned up goes into the one error line.
                return Err(match (acquirer.give_up(), failure_of(&err)) {
                    (Some(left), Some(failure)) => fail(failure, format!("{err:#}; {left}")),
                    (Some(left), None) => {
                        acquirer.log.warn(format_args!("{left}"));
                        err
                    }
                    (None, _) => err,
                });
            }
        }
    }
}

/// How the state machine ended.
enum End {
    Took {
        lease: Lease,
        confirmed: Confirmed,
        session: Session,
    },
    Busy {
        holder: Option<Holder>,
        now: u64,
        /// From an earlier answer than the last moment of the wait.
        stale: bool,
    },
    Interrupted(i32),
}

/// A worker's reply.
enum Reply {
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
        self.sent + span.saturating_sub(crate::lease::drift(span))
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

struct Acquirer<'a> {
    inbox: Inbox<'a, Reply>,
    worker: Worker,
    target: &'a Target,
    lock: &'a Lock,
    ask: &'a Ask,
    log: Log,
    waiter: Waiter,
    deadline: Option<BootInstant>,
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
    status: Status<'a>,
}

impl Acquirer<'_> {
    fn start(&mut self) {
        let call = if self.reentering {
            Call::Fail
        } else {
            self.first_call()
        };
        self.call(call, None);
    }

    fn first_call(&self) -> Call {
        if self.ask.wait == Wait::No {
            Call::Fail
        } else {
            Call::Join
        }
    }

    /// Calls the acquire script on the worker, over `session` or a fresh connection.
    fn call(&mut self, call: Call, session: Option<Session>) {
        // Until its reply is seen, any call of the waiter's own token may have taken the lock.
        self.unsure = !self.reentering;
        let session = session.filter(|_| self.target.reuses_connections());
        let (target, lock, waiter, log) = (
            self.target.clone(),
            self.lock.clone(),
            self.waiter.clone(),
            self.log,
        );
        let (ttl, mode, who, reenter, replicas) = (
            self.ask.ttl,
            self.ask.mode,
            self.ask.who.clone(),
            self.reentering,
            self.ask.replicas,
        );
        let token = match (&self.ask.reenter, reenter) {
            (Some(token), true) => token.clone(),
            _ => waiter.token.clone(),
        };
        self.reply_by = Some(BootInstant::now() + self.target.request_bound());
        self.worker.run(&self.inbox.reporter(), move || {
            let mut sent = BootInstant::now();
            let request = Request {
                token: &token,
                ttl,
                mode,
                who: &who,
                reenter,
                replicas,
            };
            let queueing = match call {
                Call::Fail => Queueing::No,
                Call::Join => Queueing::Join(&waiter),
                Call::Stay => Queueing::Stay(&waiter),
            };
            let result = match session {
                Some(session) => Ok(session),
                None => target.connect().inspect(|_| {
                    log.step(format_args!("connected to {}", target.redacted()));
                }),
            }
            .and_then(|mut session| {
                // The lease counts from the request, not from connecting (a Sentinel target
                // asks the sentinels first): still before the server can run it.
                sent = BootInstant::now();
                // After a failure a late reply may still come on this connection: it is
                // dropped with the error.
                let acquisition = lock.acquire(&mut session, &request, queueing)?;
                Ok((acquisition, session))
            });
            Reply::Called { sent, result }
        });
    }

    /// Blocks on the wake list until the next thing to look at, or calls at once if that is
    /// now.
    fn block(&mut self, session: Option<Session>) {
        let Some(reading) = self.reading else {
            return self.call(Call::Stay, session);
        };
        let mut until = self.look_at.min(reading.refresh_at());
        if let Some(deadline) = self.deadline {
            until = until.min(deadline);
        }
        if self.polling {
            self.session = session;
            self.call_at = Some(until.min(BootInstant::now() + POLL_EVERY));
            return;
        }
        let timeout = until.remaining();
        let mut session = match session {
            Some(session) if !timeout.is_zero() => session,
            session => return self.call(Call::Stay, session),
        };
        let (lock, waiter) = (self.lock.clone(), self.waiter.clone());
        self.reply_by = Some(BootInstant::now() + timeout + self.target.request_bound());
        self.worker.run(&self.inbox.reporter(), move || {
            let woken = lock.wait_for_wake(&mut session, &waiter, timeout);
            Reply::Woken(woken.map(|woken| (woken, session)))
        });
    }

    /// The next instant the machine must look at the clock.
    fn wake_at(&self) -> BootInstant {
        let mut at = BootInstant::now() + MAX_NAP;
        if let Some(deadline) = self.deadline {
            at = at.min(deadline);
        }
        if let Some(call_at) = self.call_at {
            at = at.min(call_at);
        }
        if let Some(reply_by) = self.reply_by {
            at = at.min(reply_by);
        }
        if let Some(redraw_at) = self.status.redraw_at() {
            at = at.min(redraw_at);
        }
        at
    }

    fn on_reply(&mut self, reply: Reply) -> anyhow::Result<Option<End>> {
        self.reply_by = None;
        match reply {
            Reply::Called { sent, result } => match result {
                Ok((acquisition, session)) => {
                    self.failures = None;
                    self.unsure = false;
                    self.queued =
                        matches!(acquisition, Acquisition::Busy { position, .. } if position > 0);
                    self.on_called(sent, acquisition, session)
                }
                Err(err) => {
                    // A refusal or a failure to connect changed nothing; a request without a
                    // reply may have.
                    self.unsure = self.unsure && no_reply(&err).is_some();
                    self.unanswered |= self.unsure;
                    self.on_failure(err)
                }
            },
            Reply::Woken(Ok((woken, session))) => {
                self.woken_failures = 0;
                Ok(self.on_woken(woken, session))
            }
            Reply::Refreshed {
                sent,
                result:
                    Ok((
                        Refreshed::Queued {
                            now,
                            position,
                            length,
                        },
                        session,
                    )),
            } => {
                self.failures = None;
                self.reading = Some(ServerReading { sent, now });
                self.status.moved(position, length);
                self.block(Some(session));
                Ok(None)
            }
            // Handed the lock, or dropped: the acquire script tells which, and claims.
            Reply::Refreshed {
                result: Ok((Refreshed::NotQueued { .. }, session)),
                ..
            } => {
                self.call(Call::Stay, Some(session));
                Ok(None)
            }
            Reply::Refreshed {
                result: Err(err), ..
            } => self.on_failure(err),
            // The Redis user may not block, or the server does not know BLPOP (renamed away):
            // look at the lock now and then instead, never in a loop. (Other error replies,
            // UNBLOCKED in a failover or LOADING, pass: they go the way of a failed block.)
            Reply::Woken(Err(err))
                if failure_of(&err) == Some(Failure::Auth)
                    || format!("{err:#}").contains("unknown command") =>
            {
                self.status.clear();
                self.log.warn(format_args!(
                    "{err:#}; looking at the lock every {} instead of waiting for a wake-up (allow BLPOP for prompt hand-overs)",
                    duration::display(POLL_EVERY)
                ));
                self.polling = true;
                self.call_at = Some(BootInstant::now() + POLL_EVERY);
                Ok(None)
            }
            // The connection failed under the block: a stop and continue (Ctrl-Z and `fg`) ends
            // it with EINTR, or the server went away. A wake-up may be lost with it; a fresh
            // connection and a look at the lock tell what was missed.
            // Again and again (a server or proxy that closes every blocked connection, or an
            // error reply that passes): the next look waits a little.
            Reply::Woken(Err(err)) => {
                self.woken_failures += 1;
                if self.woken_failures == 1 {
                    self.call(Call::Stay, None);
                } else {
                    self.log
                        .step(format_args!("{err:#}; looking at the lock again shortly"));
                    // Never longer than a poll: a grant handed over meanwhile must be claimed
                    // before it lapses.
                    let pause = backoff(self.woken_failures - 1).min(POLL_EVERY);
                    self.call_at = Some(BootInstant::now() + pause);
                }
                Ok(None)
            }
        }
    }

    fn on_called(
        &mut self,
        sent: BootInstant,
        acquisition: Acquisition,
        session: Session,
    ) -> anyhow::Result<Option<End>> {
        match acquisition {
            // Answered so late (a stall) that a good part of the lease may be gone before it
            // is used: `run` would refuse to start on it. While the wait lasts, one more call
            // renews it from a fresh send time (the token holds the lock: the call only
            // resets its lease), instead of giving it up.
            // Once only: a link so slow that every answer is late would otherwise hold the
            // lock confirming it forever.
            Acquisition::Acquired(_)
                if !self.reentering
                    && !self.holding
                    && self.ask.wait != Wait::No
                    && !self.past_deadline()
                    && BootInstant::now().since(sent) > self.ask.ttl / 3 =>
            {
                self.holding = true;
                self.log.step(format_args!(
                    "lock '{}' taken, but the answer took {}: confirming its lease again",
                    printable(self.lock.name.as_str()),
                    duration::display(BootInstant::now().since(sent))
                ));
                self.call(Call::Stay, Some(session));
                Ok(None)
            }
            Acquisition::Acquired(lease) => Ok(Some(End::Took {
                lease,
                confirmed: Confirmed::Sent(sent),
                session,
            })),
            Acquisition::Busy {
                holder,
                now,
                position,
                length,
                hint,
            } => {
                self.last_busy = Some((holder.clone(), now, sent));
                if self.ask.wait == Wait::No || self.past_deadline() {
                    return Ok(Some(End::Busy {
                        holder,
                        now,
                        stale: false,
                    }));
                }
                self.reading = Some(ServerReading { sent, now });
                self.look_at = sent + hint + Duration::from_millis(10);
                self.status.update(Place {
                    holder,
                    now,
                    position,
                    length,
                    received: BootInstant::now(),
                });
                crate::failpoint::hit("queued");
                self.block(Some(session));
                Ok(None)
            }
            // Our own token given up: never by this process while it waits; treated as a
            // place lost.
            Acquisition::Gone | Acquisition::Cancelled => {
                // Our entry expired (this process was suspended, or Redis lost the queue):
                // join again, at the back.
                self.log.warn(format_args!(
                    "dropped from the queue of lock '{}' (its entry expired); queueing again",
                    printable(self.lock.name.as_str())
                ));
                self.waiter = Waiter {
                    claims: !self.ask.renews,
                    ..Waiter::new()
                };
                self.call(Call::Join, Some(session));
                Ok(None)
            }
            Acquisition::NotHeldByToken if self.reentering => {
                self.log.step(format_args!(
                    "REDLOCK_TOKEN no longer holds lock '{}'; acquiring it anew",
                    printable(self.lock.name.as_str())
                ));
                self.reentering = false;
                let call = self.first_call();
                self.call(call, Some(session));
                Ok(None)
            }
            Acquisition::NotHeldByToken => {
                anyhow::bail!("the lock's queue answered for a stranger")
            }
        }
    }

    fn on_woken(&mut self, woken: Option<Wake>, session: Session) -> Option<End> {
        let Some(reading) = self.reading else {
            self.call(Call::Stay, Some(session));
            return None;
        };
        match woken {
            // A grant from before the last script call (left in the list while this process
            // was suspended) is stale: that call would have claimed it.
            Some(Wake::Granted { fence, expires }) if self.ask.renews && expires > reading.now => {
                let until = reading.earliest(expires);
                // The hand-off grants no longer than the lease asked for.
                let grant = GRANT.min(self.ask.ttl);
                // With less than half of it left (this process was stopped or slow), the script
                // call below claims it, or finds it lapsed and re-queues.
                if until > BootInstant::now() + grant / 2 {
                    return Some(End::Took {
                        lease: Lease {
                            token: self.waiter.token.clone(),
                            fence,
                            ttl: grant,
                        },
                        confirmed: Confirmed::Grant {
                            length: grant,
                            until,
                        },
                        session,
                    });
                }
                self.call(Call::Stay, Some(session));
            }
            Some(Wake::Watch {
                expires,
                length,
                holder,
            }) if BootInstant::now() < reading.refresh_at() => {
                // Never later than the last reply said: near the head that is a third of the
                // head lease, which the waiter must keep calling within.
                self.look_at = self
                    .look_at
                    .min(reading.about(expires) + Duration::from_millis(10));
                // The message carries no clock: the holder's lease was last set then (a grant
                // just made, the usual case, was made at the server's now).
                let now = holder
                    .as_ref()
                    .map_or(expires, |holder| holder.exp.saturating_sub(holder.ttl));
                self.status.update(Place {
                    holder,
                    now,
                    position: 1,
                    length,
                    received: BootInstant::now(),
                });
                crate::failpoint::hit("queued");
                self.block(Some(session));
            }
            // Nothing came, and only the entry is due, not a look at the lock: refresh it,
            // which reads nothing else of the queue.
            None if BootInstant::now() >= reading.refresh_at()
                && BootInstant::now() < self.look_at =>
            {
                self.refresh(session);
            }
            _ => self.call(Call::Stay, Some(session)),
        }
        None
    }

    /// Refreshes the queue entry on the worker.
    fn refresh(&mut self, mut session: Session) {
        let (lock, waiter) = (self.lock.clone(), self.waiter.clone());
        self.reply_by = Some(BootInstant::now() + self.target.request_bound());
        self.worker.run(&self.inbox.reporter(), move || {
            let sent = BootInstant::now();
            let result = lock
                .refresh(&mut session, &waiter)
                .map(|refreshed| (refreshed, session));
            Reply::Refreshed { sent, result }
        });
    }

    /// A request failed. Failing fast, or for any reason but an unreachable Redis, that is the
    /// end; while waiting, it is tried again until the wait runs out.
    fn on_failure(&mut self, err: anyhow::Error) -> anyhow::Result<Option<End>> {
        let unreachable = failure_of(&err) == Some(Failure::Unavailable);
        if self.ask.wait == Wait::No || !unreachable || self.past_deadline() {
            return Err(err);
        }
        let count = self.failures.as_ref().map_or(0, |failures| failures.count) + 1;
        let pause = backoff(count);
        if count == 1 {
            self.status.clear();
            self.log.warn(format_args!(
                "{err:#}; retrying while the wait lasts (next in {})",
                duration::display(pause)
            ));
        } else {
            self.log.step(format_args!(
                "{err:#}; retrying in {}",
                duration::display(pause)
            ));
        }
        self.failures = Some(Failures { count, last: err });
        self.call_at = Some(BootInstant::now() + pause);
        Ok(None)
    }

    fn on_time(&mut self) -> anyhow::Result<Option<End>> {
        if self.reply_by.is_some_and(|by| BootInstant::now() >= by) {
            // The worker went quiet beyond every timeout it has (a name lookup that hangs):
            // abandon it with its request, and carry on with a fresh one.
            self.reply_by = None;
            self.unanswered |= self.unsure;
            self.worker = Worker::start("redis")?;
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
            return Ok(Some(End::Busy {
                holder,
                now,
                stale: true,
            }));
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
        self.status.redraw_if_due();
        Ok(None)
    }

    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|at| BootInstant::now() >= at)
    }

    /// Who holds the lock now (the live holder whose lease ends first) and the server's time,
    /// read on a fresh connection within the bound a give-up has; `None` if Redis does not
    /// answer in time.
    fn holder_now(&self) -> Option<(Option<Holder>, u64)> {
        let bound = GIVE_UP_STEP;
        let mut fresh = self.target.connect_within(bound).ok()?;
        fresh.set_command_timeout(bound).ok()?;
        let state = self.lock.inspect(&mut fresh).ok()?;
        let first = state.holders.into_iter().min_by_key(|holder| holder.exp);
        Some((first, state.now))
    }

    /// Gives the waiter's token up if a call of it may have queued or taken the lock: leaves the
    /// queue, gives back what the token holds, and marks it so that a request still on its way
    /// (the one in flight is abandoned) takes nothing when it runs. Bounded tightly: a signal
    /// must end redlock within a second whatever state Redis is in. If Redis cannot be told, a
    /// queue entry expires by itself, a lock handed over meanwhile at its short grant, and a
    /// lock the abandoned request took at its lease, which is said.
    /// Returns what could not be cleaned up, for the caller to say once.
    fn give_up(&mut self) -> Option<String> {
        self.status.clear();
        if !self.queued && !self.unsure && !self.unanswered && !self.holding {
            return None;
        }
        let bound = GIVE_UP_STEP;
        // The cancel mark only while a request of the token may still arrive: otherwise
        // leaving the queue leaves nothing behind.
        let mark = self.unsure || self.unanswered;
        let left = self.target.connect_within(bound).and_then(|mut fresh| {
            fresh.set_command_timeout(bound)?;
            self.lock.leave(&mut fresh, &self.waiter, mark)
        });
        let err = left.err()?;
        let key = printable(self.lock.name.as_str());
        let ttl = duration::display(self.ask.ttl);
        Some(if self.queued {
            format!(
                "could not leave the queue of lock '{key}' or cancel the request in flight ({err:#}); a place expires within {}, a lock it may have taken within {ttl}",
                duration::display(QUEUE_ENTRY_TTL),
            )
        } else {
            // Never queued (no --wait): only the request may still run.
            format!(
                "the request may still run when the server answers: a lock it takes then expires within {ttl}"
            )
        })
    }
}
