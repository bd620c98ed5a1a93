//! The requests the queue's state machine sends: the acquire script's call, the block on the
//! wake list, the refresh of a place (each through `inbox::Requests`, the block always on a
//! thread, its reply back through the inbox), and, when the wait ends without the lock, the
//! bounded give-up and the read of who holds it.

use std::time::Duration;

use super::{Acquirer, Call, GIVE_UP_STEP, POLL_EVERY, Reply};
use crate::clock::BootInstant;
use crate::conn::Session;
use crate::duration;
use crate::exit::no_reply;
use crate::inbox::Incoming;
use crate::lock::{Acquisition, Holder, QUEUE_ENTRY_TTL, Queueing};
use crate::log::printable;

/// How long a give-up waits for the reply of a call in flight (see `await_call_in_flight`);
/// with the leave's own bound it stays well within the second a signal allows.
const IN_FLIGHT_GRACE: Duration = Duration::from_millis(100);

impl Acquirer<'_> {
    /// Calls the acquire script, over `session` or a fresh connection.
    pub(super) fn call(&mut self, call: Call, session: Option<Session>) {
        // Until its reply is seen, any call of the waiter's own token may have taken the lock.
        self.unsure = !self.reentering;
        let session = session.filter(|_| self.target.reuses_connections());
        let (target, lock, waiter, log) = (
            self.target.clone(),
            self.lock.clone(),
            self.waiter.clone(),
            self.log,
        );
        let (ask, reenter) = (self.ask.clone(), self.reentering);
        let token = match (&self.ask.reenter, reenter) {
            (Some(token), true) => token.clone(),
            _ => waiter.token.clone(),
        };
        let reply_by = BootInstant::now() + self.target.request_bound();
        self.reply_by = Some(reply_by);
        self.worker
            .request(&self.waiting.inbox.reporter(), reply_by, move || {
                let mut sent = BootInstant::now();
                let request = ask.request(&token, reenter);
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
    pub(super) fn block(&mut self, session: Option<Session>) {
        let Some(reading) = self.reading else {
            return self.call(Call::Stay, session);
        };
        let mut until = self.look_at.min(reading.refresh_at());
        if let Some(deadline) = self.waiting.deadline {
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
        let reporter = self.waiting.inbox.reporter();
        let started = self.worker.on_thread(&reporter, move || {
            let woken = lock.wait_for_wake(&mut session, &waiter, timeout);
            Reply::Woken(woken.map(|woken| (woken, session)))
        });
        if let Err(err) = started {
            // No thread to wait on (the connection went with the wait): looked at again
            // shortly instead, as after a failed wait.
            self.reply_by = None;
            self.on_block_failed(err);
        }
    }

    /// Refreshes the queue entry.
    pub(super) fn refresh(&mut self, mut session: Session) {
        let (lock, waiter) = (self.lock.clone(), self.waiter.clone());
        let reply_by = BootInstant::now() + self.target.request_bound();
        self.reply_by = Some(reply_by);
        self.worker
            .request(&self.waiting.inbox.reporter(), reply_by, move || {
                let sent = BootInstant::now();
                let result = lock
                    .refresh(&mut session, &waiter)
                    .map(|refreshed| (refreshed, session));
                Reply::Refreshed { sent, result }
            });
    }

    /// Who holds the lock now (the live holder whose lease ends first) and the server's time,
    /// read on a fresh connection within the bound a give-up has; `None` if Redis does not
    /// answer in time.
    pub(super) fn holder_now(&self) -> Option<(Option<Holder>, u64)> {
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
    pub(super) fn give_up(&mut self) -> Option<String> {
        self.waiting.status.clear();
        if self.unsure {
            self.await_call_in_flight();
        }
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

    /// A call sent a moment ago is usually answered within milliseconds: its reply, awaited a
    /// short while ([`IN_FLIGHT_GRACE`]), says what the call did (a place taken, the lock), so
    /// that giving up need not leave a cancel mark for a request that has already run.
    fn await_call_in_flight(&mut self) {
        let until = BootInstant::now() + IN_FLIGHT_GRACE;
        while let Some(incoming) = self.waiting.inbox.next(until) {
            let Incoming::Reply(Reply::Called { result, .. }) = incoming else {
                continue;
            };
            match result {
                Ok((acquisition, _)) => {
                    self.unsure = false;
                    match acquisition {
                        Acquisition::Acquired(_) => self.holding = true,
                        Acquisition::Busy { position, .. } if position > 0 => self.queued = true,
                        _ => {}
                    }
                }
                // A refusal or a failure to connect ran nothing; a request without a reply
                // may still run.
                Err(err) => self.unsure = no_reply(&err).is_some(),
            }
            return;
        }
    }
}
