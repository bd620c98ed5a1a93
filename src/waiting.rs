//! Waiting for a lock in its FIFO queue, without polling.
//!
//! The first attempt joins the queue (one script call). A waiter thread then blocks on the
//! waiter's own wake list (BLPOP), which scripts push to when the lock is handed to it, or when
//! it has become first in line and must watch the new holders' short grants; each block lasts
//! at most until the holder's expiry (for the first two in line), the queue entry's refresh,
//! or the end of `--wait`. A block that ends without a wake-up, and a hand-over to a caller that
//! does not renew by itself (`acquire`), lead to one script call that claims the lock or
//! refreshes the place; that call may only claim (never re-join), so nothing it does after the
//! waiter gave up can take the lock. `run` starts on the grant itself (its first renewal makes
//! it a full lease), so a hand-over costs the next holder no round trip after the wake-up.
//!
//! Grant expiries are server times. They become local deadlines through the last script call
//! of this waiter: the server read its clock (`now`) after the call was sent, so a server time
//! `t` cannot come before `sent + (t - now)`, less 1% + 2 ms for the clocks' rates.
//!
//! The calling thread meanwhile listens for signals and the `--wait` deadline: either makes it
//! leave the queue (giving back a lock handed over in the meantime) at once, and it keeps the
//! live status line on stderr.

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::{Session, Target};
use crate::duration;
use crate::events::{Event, Events, Reporter};
use crate::keeper::Confirmed;
use crate::lock::{
    Acquisition, GRANT, Holder, Identity, Lease, Lock, Mode, QUEUE_ENTRY_TTL, Queueing, Request,
    Token, Waiter, Wake,
};
use crate::log::Log;

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
}

/// What the waiter thread reports.
pub enum WaiterReport {
    Acquired {
        lease: Lease,
        confirmed: Confirmed,
        session: Session,
    },
    Queued(Place),
    /// The queue entry is gone (it expired while this process was suspended); the connection
    /// comes back for joining again.
    Gone(Session),
    Failed(anyhow::Error),
}

/// Where a waiter stands, as last reported by Redis.
#[derive(Debug, Clone)]
pub struct Place {
    pub holder: Option<Holder>,
    /// Server time of the report (Unix ms).
    pub now: u64,
    pub position: usize,
    pub length: usize,
    received: BootInstant,
}

/// What to acquire, and how long to wait for it.
#[derive(Debug, Clone)]
pub struct Ask {
    pub ttl: Duration,
    pub mode: Mode,
    pub who: Identity,
    pub wait: Wait,
    /// The token of an enclosing invocation that holds this lock: re-enter it if it still does.
    pub reenter: Option<Token>,
    /// The caller renews the lease itself (`run`): a lock handed over is taken on its grant.
    pub renews: bool,
}

/// How an acquisition ended.
pub enum Outcome {
    Acquired {
        lease: Lease,
        confirmed: Confirmed,
        session: Session,
    },
    /// Busy, and not waiting (or the wait ran out): who held it, at server time `now`.
    Busy { holder: Option<Holder>, now: u64 },
    /// A terminating signal arrived while waiting; the queue was left.
    Interrupted(i32),
}

/// Takes the lock, re-entering it or waiting in its queue as `ask` says.
pub fn acquire(
    events: &Events,
    mut session: Session,
    target: &Target,
    lock: &Lock,
    ask: &Ask,
    log: Log,
) -> anyhow::Result<Outcome> {
    let Ask {
        ttl,
        mode,
        ref who,
        wait,
        ref reenter,
        renews: _,
    } = *ask;
    if let Some(token) = reenter {
        let sent = BootInstant::now();
        let request = Request {
            token,
            ttl,
            mode,
            who,
            reenter: true,
        };
        match lock.acquire(&mut session, &request, Queueing::No)? {
            Acquisition::Acquired(lease) => {
                log.step(format_args!(
                    "re-entered lock '{}' held by the enclosing invocation",
                    lock.name.as_str()
                ));
                return Ok(Outcome::Acquired {
                    lease,
                    confirmed: Confirmed::Sent(sent),
                    session,
                });
            }
            _ => log.step(format_args!(
                "REDLOCK_TOKEN no longer holds lock '{}'; acquiring it anew",
                lock.name.as_str()
            )),
        }
    }
    let waiter = Waiter::new();
    let started = BootInstant::now();
    let deadline = match wait {
        Wait::UpTo(limit) => Some(started + limit),
        Wait::No | Wait::Forever => None,
    };
    let mut status = Status::new(lock.name.as_str(), log, started);
    loop {
        let queueing = if wait == Wait::No {
            Queueing::No
        } else {
            Queueing::Join(&waiter)
        };
        let sent = BootInstant::now();
        let request = Request {
            token: &waiter.token,
            ttl,
            mode,
            who,
            reenter: false,
        };
        let (holder, now, position, length, hint) =
            match lock.acquire(&mut session, &request, queueing)? {
                Acquisition::Acquired(lease) => {
                    return Ok(Outcome::Acquired {
                        lease,
                        confirmed: Confirmed::Sent(sent),
                        session,
                    });
                }
                Acquisition::Busy {
                    holder,
                    now,
                    position,
                    length,
                    hint,
                } => (holder, now, position, length, hint),
                Acquisition::Gone | Acquisition::NotHeldByToken => {
                    anyhow::bail!("the lock's queue answered for a stranger")
                }
            };
        if wait == Wait::No || deadline.is_some_and(|at| BootInstant::now() >= at) {
            return Ok(Outcome::Busy { holder, now });
        }
        status.update(Place {
            holder,
            now,
            position,
            length,
            received: BootInstant::now(),
        });

        // The waiter thread takes the connection (one per waiting process); leaving the queue
        // from here, which is rare, opens a fresh one.
        let abandoned = Arc::new(AtomicBool::new(false));
        start_waiter(
            session,
            target.clone(),
            lock.clone(),
            waiter.clone(),
            Ask {
                reenter: None,
                ..ask.clone()
            },
            ServerReading { sent, now },
            hint,
            deadline,
            Arc::clone(&abandoned),
            events.reporter(),
        )?;
        // Leaves the queue. If Redis cannot be told, the entry expires by itself (30 s) and
        // any lock handed over meanwhile at its short grant: worth a warning, not a failure.
        let give_up = |status: &Status| {
            abandoned.store(true, Ordering::SeqCst);
            status.clear();
            let left = target
                .connect()
                .and_then(|mut fresh| lock.leave(&mut fresh, &waiter));
            if let Err(err) = left {
                log.warn(format_args!(
                    "could not leave the queue of lock '{}' ({err:#}); the entry expires by itself",
                    lock.name.as_str()
                ));
            }
        };
        loop {
            let nap = deadline.map_or(MAX_NAP, BootInstant::nap);
            match events.recv_timeout(nap) {
                Ok(Event::Signal(signal)) if terminates(signal) => {
                    give_up(&status);
                    return Ok(Outcome::Interrupted(signal));
                }
                Ok(Event::Waiter(WaiterReport::Acquired {
                    lease,
                    confirmed,
                    session,
                })) => {
                    status.acquired();
                    return Ok(Outcome::Acquired {
                        lease,
                        confirmed,
                        session,
                    });
                }
                Ok(Event::Waiter(WaiterReport::Queued(place))) => status.update(place),
                Ok(Event::Waiter(WaiterReport::Gone(back))) => {
                    session = back;
                    break;
                }
                Ok(Event::Waiter(WaiterReport::Failed(err))) => {
                    give_up(&status);
                    return Err(err);
                }
                Ok(_) | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
            if deadline.is_some_and(|at| BootInstant::now() >= at) {
                give_up(&status);
                let (holder, now) = status
                    .place
                    .as_ref()
                    .map_or((None, 0), |place| (place.holder.clone(), place.now));
                return Ok(Outcome::Busy { holder, now });
            }
            status.redraw_if_due();
        }
        // Our entry expired (this process was suspended): join again, at the back.
        log.warn(format_args!(
            "dropped from the queue of lock '{}' (its entry expired); queueing again",
            lock.name.as_str()
        ));
    }
}

/// INT, TERM, HUP and QUIT end a wait; USR1/USR2 have no command to go to yet.
fn terminates(signal: i32) -> bool {
    use nix::sys::signal::Signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
        .map(|s| s as i32)
        .contains(&signal)
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
        self.sent + span.saturating_sub(span / 100 + Duration::from_millis(2))
    }

    /// About when the server's clock reads `server_ms`, for waking up just after it.
    fn about(self, server_ms: u64) -> BootInstant {
        self.sent + Duration::from_millis(server_ms.saturating_sub(self.now))
    }
}

#[allow(clippy::too_many_arguments)]
fn start_waiter(
    mut session: Session,
    target: Target,
    lock: Lock,
    waiter: Waiter,
    ask: Ask,
    joined: ServerReading,
    first_hint: Duration,
    deadline: Option<BootInstant>,
    abandoned: Arc<AtomicBool>,
    events: Reporter,
) -> std::io::Result<()> {
    let report = move |report| {
        events.send(Event::Waiter(report));
    };
    std::thread::Builder::new()
        .name("waiter".into())
        .spawn(move || {
            let mut reading = joined;
            // When something may change without a wake-up: just past the holder's expiry, so
            // a crashed holder is taken over promptly.
            let mut look_at = reading.sent + first_hint + Duration::from_millis(10);
            loop {
                let refresh_at = reading.sent + QUEUE_ENTRY_TTL / 3;
                let mut until = look_at.min(refresh_at);
                if let Some(deadline) = deadline {
                    if deadline.remaining().is_zero() {
                        return;
                    }
                    until = until.min(deadline);
                }
                if abandoned.load(Ordering::SeqCst) {
                    return;
                }
                let block = until.remaining();
                let woken = if block.is_zero() {
                    None
                } else {
                    match lock.wait_for_wake(&mut session, &waiter, block) {
                        Ok(woken) => woken,
                        // The connection failed under the block: a stop and continue (Ctrl-Z
                        // and `fg`) ends it with EINTR, or the server went away. A wake-up
                        // may be lost with it; a fresh connection and a look at the lock
                        // tell what was missed.
                        Err(err) => match target.connect() {
                            Ok(fresh) => {
                                session = fresh;
                                None
                            }
                            Err(_) => return report(WaiterReport::Failed(err)),
                        },
                    }
                };
                if abandoned.load(Ordering::SeqCst) {
                    return;
                }
                match woken {
                    // A grant from before the last script call (left in the list while this
                    // process was suspended) is stale: that call would have claimed it.
                    Some(Wake::Granted { fence, expires })
                        if ask.renews && expires > reading.now =>
                    {
                        let until = reading.earliest(expires);
                        // With less than half of it left (this process was stopped or slow),
                        // the script call below claims it, or finds it lapsed and re-queues.
                        if until > BootInstant::now() + GRANT / 2 {
                            let lease = Lease {
                                token: waiter.token.clone(),
                                fence,
                                ttl: GRANT,
                            };
                            let confirmed = Confirmed::Grant {
                                length: GRANT,
                                until,
                            };
                            return report(WaiterReport::Acquired {
                                lease,
                                confirmed,
                                session,
                            });
                        }
                    }
                    Some(Wake::Watch {
                        expires,
                        length,
                        holder,
                    }) if BootInstant::now() < refresh_at => {
                        look_at = reading.about(expires) + Duration::from_millis(10);
                        report(WaiterReport::Queued(Place {
                            holder,
                            now: expires.saturating_sub(GRANT.as_millis() as u64),
                            position: 1,
                            length,
                            received: BootInstant::now(),
                        }));
                        continue;
                    }
                    _ => {}
                }
                let sent = BootInstant::now();
                let request = Request {
                    token: &waiter.token,
                    ttl: ask.ttl,
                    mode: ask.mode,
                    who: &ask.who,
                    reenter: false,
                };
                match lock.acquire(&mut session, &request, Queueing::Stay(&waiter)) {
                    Ok(Acquisition::Acquired(lease)) => {
                        return report(WaiterReport::Acquired {
                            lease,
                            confirmed: Confirmed::Sent(sent),
                            session,
                        });
                    }
                    Ok(Acquisition::Busy {
                        holder,
                        now,
                        position,
                        length,
                        hint,
                    }) => {
                        reading = ServerReading { sent, now };
                        look_at = sent + hint + Duration::from_millis(10);
                        report(WaiterReport::Queued(Place {
                            holder,
                            now,
                            position,
                            length,
                            received: BootInstant::now(),
                        }));
                    }
                    Ok(Acquisition::Gone | Acquisition::NotHeldByToken) => {
                        return report(WaiterReport::Gone(session));
                    }
                    Err(err) => return report(WaiterReport::Failed(err)),
                }
            }
        })?;
    Ok(())
}

/// The "waiting for ..." line: redrawn in place on a terminal, else printed once when waiting
/// starts and once when the lock is acquired. Silenced by `-q`.
struct Status<'a> {
    key: &'a str,
    log: Log,
    terminal: bool,
    started: BootInstant,
    place: Option<Place>,
    drawn_at: Option<BootInstant>,
}

impl<'a> Status<'a> {
    fn new(key: &'a str, log: Log, started: BootInstant) -> Self {
        Self {
            key,
            log,
            terminal: !log.quiet && std::io::stderr().is_terminal(),
            started,
            place: None,
            drawn_at: None,
        }
    }

    fn line(&self) -> String {
        let waited = duration::display(BootInstant::now().since(self.started));
        let Some(place) = &self.place else {
            return format!("waiting for lock '{}'; waited {waited}", self.key);
        };
        let holder = match &place.holder {
            Some(holder) => {
                let held = Duration::from_millis(place.now.saturating_sub(holder.since))
                    + BootInstant::now().since(place.received);
                format!(
                    "held by {} pid {} ({}) for {}",
                    holder.who.host,
                    holder.who.pid,
                    holder.who.command,
                    duration::display(held)
                )
            }
            None => "being handed over".to_owned(),
        };
        format!(
            "waiting for lock '{}': {holder}; position {} of {}; waited {waited}",
            self.key, place.position, place.length
        )
    }

    fn update(&mut self, place: Place) {
        let first = self.place.is_none();
        self.place = Some(place);
        if self.terminal {
            self.draw();
        } else if first {
            self.log.notice(self.line());
        }
    }

    fn redraw_if_due(&mut self) {
        if self.terminal
            && self
                .drawn_at
                .is_none_or(|at| BootInstant::now().since(at) >= Duration::from_secs(1))
        {
            self.draw();
        }
    }

    fn draw(&mut self) {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[Kredlock: {}", self.line());
        let _ = stderr.flush();
        self.drawn_at = Some(BootInstant::now());
    }

    fn clear(&self) {
        if self.terminal && self.drawn_at.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }

    fn acquired(&self) {
        self.clear();
        self.log.notice(format_args!(
            "acquired lock '{}' after waiting {}",
            self.key,
            duration::display(BootInstant::now().since(self.started))
        ));
    }
}
