//! Taking a lock in quorum mode (`quorum`), waiting as `--wait` says. There is no queue across
//! independent masters, so no FIFO order: a waiter makes one acquisition round, and when the
//! lock is busy it waits until a release is published on any master (a Pub/Sub listener per
//! master) or until the holders' leases can have ended, whichever comes first, then tries
//! again after a random pause that doubles while rounds keep failing, so that waiters that
//! split the vote between them stop colliding. [`Rounds`] is the state machine the one wait
//! loop (`acquire::wait`) drives: rounds run on a worker, and a signal ends the wait at once
//! (the round in flight is given up on every master, within a bound).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::acquire::Confirmed;
use crate::acquire::{Ask, Ended, Kept, Machine, Missed, Outcome, Place, Wait, Waiting, backoff};
use crate::clock::BootInstant;
use crate::conn::Closer;
use crate::exit::{Failure, fail, failure_of};
use crate::inbox::{Reporter, Requests, Worker};
use crate::lock::{Lease, Lock, Mode, Token, Waiter};
use crate::log::{Log, printable};

use super::{Attempt, OneRedisOnly, Quorum, refusal, transient};
use crate::store::HASTY_RELEASE;

/// What the wait loop hears while waiting.
pub(crate) enum Event {
    /// An acquisition round ended.
    Round(Box<Attempt>),
    /// A release was published on one of the masters.
    Released,
}

/// The longest a waiter sleeps without looking at the lock, in case a release notice was lost
/// (a listener reconnecting, or a user that may not subscribe).
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(5);

/// The same while a listener is not subscribed.
const LOOK_EVERY_WITHOUT_NOTICES: Duration = Duration::from_secs(1);

/// The pause before the round that follows the start of the listeners.
const FIRST_LOOK_AFTER_LISTENING: Duration = Duration::from_millis(100);

/// A random pause of up to `5 ms × 2^rounds`, at most 500 ms: the first retry after a release
/// is prompt; waiters that keep colliding spread out.
fn spread(rounds: u32) -> Duration {
    let cap = Duration::from_millis(5)
        .saturating_mul(1 << rounds.min(7))
        .min(Duration::from_millis(500));
    let random = uuid::Uuid::new_v4().as_u128() % 1000;
    cap * u32::try_from(random).unwrap_or(0) / 1000
}

/// The rounds of one quorum acquisition (a state machine on the main thread; the rounds run
/// on a worker).
pub(crate) struct Rounds<'a> {
    waiting: Waiting<'a, Event>,
    worker: Worker,
    quorum: &'a Arc<Quorum>,
    lock: &'a Lock,
    ask: &'a Ask,
    log: Log,
    /// The token of an enclosing invocation, while it may still hold the lock.
    reenter: Option<Token>,
    /// Started at the first busy round.
    listeners: Option<Listeners>,
    failed_rounds: u32,
    busy_rounds: u32,
    /// The token of the round out, if one is.
    out: Option<Token>,
    /// A release was announced while the round was out: one the round may not have seen.
    announced: bool,
    /// The next round goes out then (a pause after a busy or failed round).
    next_round_at: Option<BootInstant>,
}

impl<'a> Rounds<'a> {
    /// Rounds for `lock` on `quorum`'s masters, as `ask` says, within `waiting`.
    pub(crate) fn new(
        waiting: Waiting<'a, Event>,
        quorum: &'a Arc<Quorum>,
        lock: &'a Lock,
        ask: &'a Ask,
        log: Log,
    ) -> anyhow::Result<Self> {
        if let Mode::Semaphore(_) = ask.mode {
            return Err(fail(Failure::Usage, refusal(OneRedisOnly::Limit)));
        }
        Ok(Self {
            waiting,
            worker: Worker::start("quorum")?,
            quorum,
            lock,
            ask,
            log,
            reenter: ask.reenter.clone(),
            listeners: None,
            failed_rounds: 0,
            busy_rounds: 0,
            out: None,
            announced: false,
            next_round_at: None,
        })
    }
}

impl<'a> Machine<'a> for Rounds<'a> {
    type Reply = Event;

    fn waiting(&mut self) -> &mut Waiting<'a, Event> {
        &mut self.waiting
    }

    fn start(&mut self) -> anyhow::Result<()> {
        self.send();
        Ok(())
    }

    fn on_reply(&mut self, event: Event) -> anyhow::Result<Option<Ended>> {
        match event {
            Event::Round(attempt) => {
                self.out = None;
                let announced = std::mem::take(&mut self.announced);
                match self.on_attempt(*attempt, announced)? {
                    Next::Took { lease, sent } => Ok(Some(Ended::Took {
                        lease,
                        confirmed: Confirmed::Sent(sent),
                        kept: Kept::default(),
                    })),
                    Next::Done(ended) => Ok(Some(ended)),
                    Next::Again => {
                        self.send();
                        Ok(None)
                    }
                    Next::After(pause) => {
                        let mut at = BootInstant::now() + pause;
                        if let Some(deadline) = self.waiting.deadline {
                            at = at.min(deadline);
                        }
                        self.next_round_at = Some(at);
                        Ok(None)
                    }
                }
            }
            Event::Released => {
                // Out: the round may not have seen it. Pausing: a short random pause first.
                if self.out.is_some() {
                    self.announced = true;
                } else if let Some(at) = self.next_round_at {
                    self.next_round_at =
                        Some(at.min(BootInstant::now() + spread(self.busy_rounds)));
                }
                Ok(None)
            }
        }
    }

    fn on_time(&mut self) -> anyhow::Result<Option<Ended>> {
        // (A round that ends past the wait's end reports it busy: the last round goes out at
        // the end of the wait at the latest.)
        if self
            .next_round_at
            .take_if(|at| BootInstant::now() >= *at)
            .is_some()
        {
            self.send();
        }
        Ok(None)
    }

    fn wake_at(&self) -> Option<BootInstant> {
        self.next_round_at
    }

    fn into_worker(self) -> Requests {
        Requests::Thread(self.worker)
    }

    fn conclude(mut self, missed: Missed) -> Outcome {
        self.listeners = None;
        match missed {
            Missed::Busy { holder, now, .. } => {
                self.waiting.status.clear();
                Outcome::Busy { holder, now }
            }
            Missed::Interrupted(signal) => {
                self.waiting.status.clear();
                // The round out may have taken the lock (a re-entry takes nothing new).
                if let Some(token) = self.out.take()
                    && self.reenter.is_none()
                {
                    give_up(self.quorum, self.lock, token);
                }
                Outcome::Interrupted(signal)
            }
        }
    }

    fn failed(&mut self, err: anyhow::Error) -> anyhow::Error {
        self.waiting.status.clear();
        err
    }
}

/// What follows a round.
enum Next {
    /// Taken by the round sent at `sent`.
    Took {
        lease: Lease,
        sent: BootInstant,
    },
    Done(Ended),
    /// Another round at once.
    Again,
    /// Another round after this pause (or a release notice).
    After(Duration),
}

impl Rounds<'_> {
    /// Sends one acquisition round to the worker: of the enclosing invocation's token, while
    /// it may hold the lock, else of a new one.
    fn send(&mut self) {
        let token = self.reenter.clone().unwrap_or_else(Token::generate);
        self.out = Some(token.clone());
        let (quorum, lock, ask) = (Arc::clone(self.quorum), self.lock.clone(), self.ask.clone());
        let reentering = self.reenter.is_some();
        self.worker.run(&self.waiting.inbox.reporter(), move || {
            Event::Round(Box::new(
                quorum.try_acquire(&lock, &ask.request(&token, reentering)),
            ))
        });
    }

    fn on_attempt(&mut self, attempt: Attempt, announced: bool) -> anyhow::Result<Next> {
        let past_deadline = self.waiting.past_deadline();
        match attempt {
            Attempt::Acquired { lease, sent } => {
                self.listeners = None;
                Ok(Next::Took { lease, sent })
            }
            Attempt::NotHeldByToken => {
                if self.reenter.take().is_some() {
                    self.log.step(format_args!(
                        "REDLOCK_TOKEN no longer holds lock '{}'; acquiring it anew",
                        printable(self.lock.name.as_str())
                    ));
                }
                Ok(Next::Again)
            }
            Attempt::Unavailable(err) => {
                if !transient(&err) || self.ask.wait == Wait::No || past_deadline {
                    return Err(err);
                }
                self.failed_rounds += 1;
                self.waiting.status.clear();
                self.log.warn(format_args!("{err:#}; trying again"));
                self.waiting.status.unreachable(format!("{err:#}"));
                Ok(Next::After(backoff(self.failed_rounds)))
            }
            Attempt::Busy { holder, now, hint } => {
                self.failed_rounds = 0;
                self.busy_rounds += 1;
                if self.ask.wait == Wait::No || past_deadline {
                    return Ok(Next::Done(Ended::Missed(Missed::Busy {
                        holder,
                        now,
                        stale: false,
                    })));
                }
                let pause = self.pause_when_busy(hint, announced);
                // No queue, no place in it: who holds the lock, and how long the wait lasts.
                self.waiting.status.update(Place {
                    holder,
                    now,
                    position: 0,
                    length: 0,
                    received: BootInstant::now(),
                });
                Ok(Next::After(pause))
            }
        }
    }

    /// The pause after a busy round: until the holders' leases can have ended, a release notice,
    /// or the look every few seconds in case a notice was lost; a random spread on top.
    fn pause_when_busy(&mut self, hint: Duration, announced: bool) -> Duration {
        if self.busy_rounds == 1 {
            self.log.step(format_args!(
                "lock '{}' is busy; waiting for a release on any of {} masters",
                printable(self.lock.name.as_str()),
                self.quorum.len()
            ));
        }
        let cap = match &self.listeners {
            Some(listening) if listening.all_subscribed() => LOOK_AT_LEAST_EVERY,
            Some(_) => LOOK_EVERY_WITHOUT_NOTICES,
            None => {
                // A release between this round and the subscriptions would go unheard: one
                // more round once they are (about to be) in place.
                self.listeners = Some(Listeners::start(
                    self.quorum,
                    &self.lock.released_channel(),
                    &self.waiting.inbox.reporter(),
                ));
                FIRST_LOOK_AFTER_LISTENING
            }
        };
        if announced {
            spread(self.busy_rounds)
        } else {
            hint.min(cap) + spread(self.busy_rounds)
        }
    }
}

/// Gives `token` up on every master (a round in flight may have taken the lock, or still
/// take it when its request arrives), within [`HASTY_RELEASE`].
fn give_up(quorum: &Arc<Quorum>, lock: &Lock, token: Token) {
    let (done, finished) = std::sync::mpsc::channel();
    let (quorum, lock) = (Arc::clone(quorum), lock.clone());
    let spawned = std::thread::Builder::new()
        .name("give-up".into())
        .spawn(move || {
            let waiter = Waiter {
                token,
                ..Waiter::new()
            };
            quorum.leave(&lock, &waiter, HASTY_RELEASE);
            let _ = done.send(());
        });
    if spawned.is_ok() {
        let _ = finished.recv_timeout(HASTY_RELEASE + Duration::from_millis(100));
    }
}

/// One thread per master, subscribed to the lock's release channel; each notice wakes the
/// waiter. Dropping it ends the subscriptions at once.
struct Listeners {
    stop: Arc<AtomicBool>,
    /// The subscribed connections, to close them from here.
    open: Arc<Mutex<Vec<Option<Closer>>>>,
}

impl Listeners {
    fn start(quorum: &Arc<Quorum>, channel: &str, reporter: &Reporter<Event>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new((0..quorum.len()).map(|_| None).collect()));
        for (index, target) in quorum.targets().enumerate() {
            let (target, channel, reporter) =
                (target.clone(), channel.to_owned(), reporter.clone());
            let (stop, open) = (Arc::clone(&stop), Arc::clone(&open));
            // A listener that cannot start only costs notices: the waiter looks every second.
            let _ = std::thread::Builder::new()
                .name("listener".into())
                .spawn(move || listen(&target, &channel, &reporter, &stop, &open, index));
        }
        Self { stop, open }
    }

    fn all_subscribed(&self) -> bool {
        self.open
            .lock()
            .map(|open| open.iter().all(Option::is_some))
            .unwrap_or(false)
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(open) = self.open.lock() {
            for closer in open.iter().flatten() {
                closer.close();
            }
        }
    }
}

/// Subscribes to `channel` on `target` and posts a notice for each message, reconnecting
/// (at most every second) until `stop`.
fn listen(
    target: &crate::conn::Target,
    channel: &str,
    reporter: &Reporter<Event>,
    stop: &AtomicBool,
    open: &Mutex<Vec<Option<Closer>>>,
    index: usize,
) {
    let set = |closer: Option<Closer>| {
        if let Ok(mut open) = open.lock() {
            open[index] = closer;
        }
    };
    while !stop.load(Ordering::SeqCst) {
        let started = BootInstant::now();
        let subscribed = target.connect().and_then(|mut session| {
            let closer = session.subscribe(channel)?;
            // No bound on waiting for a message; the connection is closed to stop.
            session.set_command_timeout(Duration::from_secs(24 * 3600))?;
            Ok((session, closer))
        });
        match subscribed {
            Ok((mut session, closer)) => {
                set(Some(closer));
                // Registered before this check: a stop from now on closes the connection.
                while !stop.load(Ordering::SeqCst) && session.next_message().is_ok() {
                    reporter.post_reply(Event::Released);
                }
                set(None);
            }
            // A user that may not subscribe will not be allowed the next time either.
            Err(err) if failure_of(&err) == Some(Failure::Auth) => return,
            Err(_) => {}
        }
        std::thread::sleep(
            Duration::from_secs(1).saturating_sub(BootInstant::now().since(started)),
        );
    }
}
