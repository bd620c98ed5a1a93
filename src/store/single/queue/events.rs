//! The queue's state machine reacting to replies: the acquire script's answer (taken, busy,
//! place lost), a wake-up or a failed block, a refresh. Each handler changes the machine's
//! state and sends at most the next request (see `requests`).

use std::time::Duration;

use super::{Acquirer, Call, POLL_EVERY, Reply, ServerReading};
use crate::acquire::Confirmed;
use crate::acquire::{Ended, Kept, Missed, Place, Wait, backoff};
use crate::clock::BootInstant;
use crate::conn::Session;
use crate::duration;
use crate::exit::{Failure, Refusal, failure_of, no_reply, refusal_of};
use crate::lock::{Acquisition, GRANT, Lease, Refreshed, Waiter, Wake};
use crate::log::printable;

/// How soon a waiter told it moved into the head lease's places calls, at the latest:
/// `HEAR_MS` in `lua/prelude/60-queue.lua`, as the script's `h:` says.
const HEAD_LOOK: Duration = Duration::from_millis(600);

impl Acquirer<'_> {
    pub(super) fn on_answer(&mut self, reply: Reply) -> anyhow::Result<Option<Ended>> {
        self.reply_by = None;
        match reply {
            Reply::Called { sent, result } => match result {
                Ok((acquisition, session)) => {
                    self.failures = None;
                    self.waiting.status.reachable();
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
            Reply::Refreshed { sent, result } => self.on_refreshed(sent, result),
            Reply::Woken(Err(err)) => {
                self.on_block_failed(err);
                Ok(None)
            }
        }
    }

    /// A place refreshed: blocks again; handed the lock or dropped: the acquire script tells
    /// which, and claims.
    pub(super) fn on_refreshed(
        &mut self,
        sent: BootInstant,
        result: anyhow::Result<(Refreshed, Session)>,
    ) -> anyhow::Result<Option<Ended>> {
        match result {
            Ok((
                Refreshed::Queued {
                    now,
                    position,
                    length,
                },
                session,
            )) => {
                self.failures = None;
                self.reading = Some(ServerReading { sent, now });
                self.waiting.status.moved(position, length);
                self.block(Some(session));
            }
            Ok((Refreshed::NotQueued { .. }, session)) => self.call(Call::Stay, Some(session)),
            Err(err) => return self.on_failure(err),
        }
        Ok(None)
    }

    /// A block on the wake list failed.
    pub(super) fn on_block_failed(&mut self, err: anyhow::Error) {
        // The Redis user may not block, or the server does not know BLPOP (renamed away):
        // look at the lock now and then instead, never in a loop. (Other error replies,
        // UNBLOCKED in a failover or LOADING, pass: they go the way of a failed block.)
        if failure_of(&err) == Some(Failure::Auth)
            || refusal_of(&err) == Some(Refusal::UnknownCommand)
        {
            self.waiting.status.clear();
            self.log.warn(format_args!(
                "{err:#}; looking at the lock every {} instead of waiting for a wake-up (allow BLPOP for prompt hand-overs)",
                duration::display(POLL_EVERY)
            ));
            self.polling = true;
            self.call_at = Some(BootInstant::now() + POLL_EVERY);
            return;
        }
        // The connection failed under the block: a stop and continue (Ctrl-Z and `fg`) ends
        // it with EINTR, or the server went away. A wake-up may be lost with it; a fresh
        // connection and a look at the lock tell what was missed.
        // Again and again (a server or proxy that closes every blocked connection, or an
        // error reply that passes): the next look waits a little.
        self.woken_failures += 1;
        if self.woken_failures == 1 {
            self.call(Call::Stay, None);
        } else {
            self.log
                .step(format_args!("{err:#}; looking at the lock again shortly"));
            // Never longer than a poll: a grant handed over meanwhile must be claimed before
            // it lapses.
            let pause = backoff(self.woken_failures - 1).min(POLL_EVERY);
            self.call_at = Some(BootInstant::now() + pause);
        }
    }

    pub(super) fn on_called(
        &mut self,
        sent: BootInstant,
        acquisition: Acquisition,
        session: Session,
    ) -> anyhow::Result<Option<Ended>> {
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
            Acquisition::Acquired(lease) => Ok(Some(Ended::Took {
                lease,
                confirmed: Confirmed::Sent(sent),
                kept: Kept::new(Some(session)),
            })),
            Acquisition::Busy {
                holder,
                now,
                position,
                length,
                hint,
            } => {
                let place = Place {
                    holder,
                    now,
                    position,
                    length,
                    received: BootInstant::now(),
                };
                Ok(self.on_busy(sent, session, place, hint))
            }
            // Our own token given up: never by this process while it waits; treated as a
            // place lost.
            Acquisition::Gone | Acquisition::Cancelled => {
                self.queue_again(session);
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

    /// Our entry expired (this process was suspended, or Redis lost the queue): join again,
    /// at the back, under a new place.
    fn queue_again(&mut self, session: Session) {
        self.log.warn(format_args!(
            "dropped from the queue of lock '{}' (its entry expired); queueing again",
            printable(self.lock.name.as_str())
        ));
        self.waiter = Waiter {
            claims: !self.ask.renews,
            ..Waiter::new()
        };
        self.call(Call::Join, Some(session));
    }

    /// Busy: the end when not waiting (or the wait is over), else the place in the queue
    /// shown and a block until the next thing to look at (`hint`: the script's advice).
    pub(super) fn on_busy(
        &mut self,
        sent: BootInstant,
        session: Session,
        place: Place,
        hint: Duration,
    ) -> Option<Ended> {
        self.last_busy = Some((place.holder.clone(), place.now, sent));
        if self.ask.wait == Wait::No || self.past_deadline() {
            return Some(Ended::Missed(Missed::Busy {
                holder: place.holder,
                now: place.now,
                stale: false,
            }));
        }
        self.reading = Some(ServerReading {
            sent,
            now: place.now,
        });
        self.look_at = sent + hint + Duration::from_millis(10);
        self.waiting.status.update(place);
        crate::failpoint::hit("queued");
        self.block(Some(session));
        None
    }

    pub(super) fn on_woken(&mut self, woken: Option<Wake>, session: Session) -> Option<Ended> {
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
                    return Some(Ended::Took {
                        lease: Lease {
                            token: self.waiter.token.clone(),
                            fence,
                            ttl: grant,
                        },
                        confirmed: Confirmed::Grant {
                            length: grant,
                            until,
                        },
                        kept: Kept::new(Some(session)),
                    });
                }
                self.call(Call::Stay, Some(session));
            }
            Some(Wake::Watch {
                expires,
                length,
                holder,
            }) if BootInstant::now() < reading.refresh_at() => {
                let holder = holder.map(|holder| *holder);
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
                self.waiting.status.update(Place {
                    holder,
                    now,
                    position: 1,
                    length,
                    received: BootInstant::now(),
                });
                crate::failpoint::hit("queued");
                self.block(Some(session));
            }
            Some(Wake::Head { by }) if BootInstant::now() < reading.refresh_at() => {
                // Moved up into the head lease's places: keep calling within it from now on,
                // the first call HEAD_LOOK from the move (a queue that drains faster hands
                // this waiter the lock before that, and it makes no call for the move). Never
                // later than that from now: `by` is read on the server's clock as of the last
                // reply, which a clock stepped forward since would put too late.
                self.look_at = self
                    .look_at
                    .min(reading.about(by))
                    .min(BootInstant::now() + HEAD_LOOK);
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
}
