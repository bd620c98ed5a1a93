//! Taking a lock in quorum mode (`quorum`), waiting as `--wait` says. There is no queue across
//! independent masters, so no FIFO order: a waiter makes one acquisition round, and when the
//! lock is busy it blocks until a release is published on any master (a Pub/Sub listener per
//! master) or until the holders' leases can have ended, whichever comes first, then tries
//! again after a random pause that doubles while rounds keep failing, so that waiters that
//! split the vote between them stop colliding. Like the queue, the main thread never blocks on
//! Redis: rounds run on a worker, and a signal ends the wait at once (the round in flight is
//! given up on every master, within a bound).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::Closer;
use crate::exit::{Failure, fail, failure_of};
use crate::inbox::{Inbox, Incoming, Reporter, Worker};
use crate::lease::{Confirmed, HASTY_RELEASE};
use crate::lock::{Lease, Lock, Mode, Request, Token, Waiter};
use crate::log::{Log, printable};
use crate::signals::{self, Signals};
use crate::store::{Attempt, OneRedisOnly, Quorum, transient};

use super::{Ask, Held, Outcome, Wait, backoff};

/// What the main thread hears while waiting.
enum Event {
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

/// Takes the lock on a majority of `quorum`'s masters, waiting as `ask` says.
pub(crate) fn acquire(
    signals: &Signals,
    quorum: &Arc<Quorum>,
    lock: &Lock,
    ask: &Ask,
    log: Log,
) -> anyhow::Result<Outcome> {
    if let Mode::Semaphore(_) = ask.mode {
        return Err(fail(
            Failure::Usage,
            crate::store::refusal(OneRedisOnly::Limit),
        ));
    }
    let mut rounds = Rounds {
        inbox: Inbox::new(signals)?,
        worker: Worker::start("quorum")?,
        quorum,
        lock,
        ask,
        log,
        deadline: ask.wait.deadline(),
        reenter: ask.reenter.clone(),
        listeners: None,
        failed_rounds: 0,
        busy_rounds: 0,
    };
    loop {
        let token = rounds.reenter.clone().unwrap_or_else(Token::generate);
        rounds.send(&token);
        let (attempt, announced) = match rounds.answer(token)? {
            Heard::Answer(attempt, announced) => (attempt, announced),
            Heard::Signal(signal) => return Ok(Outcome::Interrupted(signal)),
        };
        let pause = match rounds.on_attempt(*attempt, announced)? {
            Next::Took { lease, sent } => {
                return Ok(Outcome::Acquired(Held {
                    lease,
                    confirmed: Confirmed::Sent(sent),
                    answered: BootInstant::now(),
                    session: None,
                    worker: rounds.worker,
                }));
            }
            Next::Done(outcome) => return Ok(outcome),
            Next::Again => continue,
            Next::After(pause) => pause,
        };
        if let Some(signal) = rounds.sleep(pause)? {
            return Ok(Outcome::Interrupted(signal));
        }
    }
}

/// The rounds of one quorum acquisition (a state machine on the main thread; the rounds run
/// on a worker).
struct Rounds<'a> {
    inbox: Inbox<'a, Event>,
    worker: Worker,
    quorum: &'a Arc<Quorum>,
    lock: &'a Lock,
    ask: &'a Ask,
    log: Log,
    deadline: Option<BootInstant>,
    /// The token of an enclosing invocation, while it may still hold the lock.
    reenter: Option<Token>,
    /// Started at the first busy round.
    listeners: Option<Listeners>,
    failed_rounds: u32,
    busy_rounds: u32,
}

/// What the main thread heard while a round was out.
enum Heard {
    /// The round's answer, and whether a release was announced meanwhile.
    Answer(Box<Attempt>, bool),
    Signal(i32),
}

/// What follows a round.
enum Next {
    /// Taken by the round sent at `sent`.
    Took {
        lease: Lease,
        sent: BootInstant,
    },
    Done(Outcome),
    /// Another round at once.
    Again,
    /// Another round after this pause (or a release notice).
    After(Duration),
}

impl Rounds<'_> {
    /// Sends one acquisition round for `token` to the worker.
    fn send(&self, token: &Token) {
        let (quorum, lock, token, ask) = (
            Arc::clone(self.quorum),
            self.lock.clone(),
            token.clone(),
            self.ask.clone(),
        );
        let reentering = self.reenter.is_some();
        self.worker.run(&self.inbox.reporter(), move || {
            Event::Round(Box::new(quorum.try_acquire(
                &lock,
                &Request {
                    token: &token,
                    ttl: ask.ttl,
                    mode: ask.mode,
                    who: &ask.who,
                    reenter: reentering,
                    replicas: ask.replicas,
                    history: ask.history,
                },
            )))
        });
    }

    /// Waits for the round's answer. On a terminating signal the round is given up on every
    /// master (it may have taken the lock), unless it was a re-entry.
    fn answer(&self, token: Token) -> anyhow::Result<Heard> {
        // A release announced while the round is out may be one the round did not see.
        let mut announced = false;
        loop {
            match self.inbox.next(BootInstant::now() + MAX_NAP) {
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    if self.reenter.is_none() {
                        give_up(self.quorum, self.lock, token);
                    }
                    return Ok(Heard::Signal(signal));
                }
                Some(Incoming::Reply(Event::Round(attempt))) => {
                    return Ok(Heard::Answer(attempt, announced));
                }
                Some(Incoming::Panicked(panic)) => {
                    anyhow::bail!("an acquisition round panicked: {panic}")
                }
                Some(Incoming::Reply(Event::Released)) => announced = true,
                Some(Incoming::Signal(_)) | None => {}
            }
        }
    }

    fn on_attempt(&mut self, attempt: Attempt, announced: bool) -> anyhow::Result<Next> {
        let past_deadline = self
            .deadline
            .is_some_and(|deadline| BootInstant::now() >= deadline);
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
                self.log.warn(format_args!("{err:#}; trying again"));
                Ok(Next::After(backoff(self.failed_rounds)))
            }
            Attempt::Busy { holder, now, hint } => {
                self.failed_rounds = 0;
                self.busy_rounds += 1;
                if self.ask.wait == Wait::No || past_deadline {
                    return Ok(Next::Done(Outcome::Busy { holder, now }));
                }
                Ok(Next::After(self.pause_when_busy(hint, announced)))
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
                    &self.inbox.reporter(),
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

    /// Sleeps until the pause ends, a release is published, a signal comes, or the wait is
    /// over; after a release, a short random pause first. Returns a terminating signal.
    fn sleep(&self, pause: Duration) -> anyhow::Result<Option<i32>> {
        let mut until = BootInstant::now() + pause;
        if let Some(deadline) = self.deadline {
            until = until.min(deadline);
        }
        loop {
            match self.inbox.next(until) {
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    return Ok(Some(signal));
                }
                Some(Incoming::Reply(Event::Released)) => {
                    until = until.min(BootInstant::now() + spread(self.busy_rounds));
                }
                Some(Incoming::Panicked(panic)) => {
                    anyhow::bail!("a release listener panicked: {panic}")
                }
                Some(Incoming::Reply(Event::Round(_)) | Incoming::Signal(_)) | None => {}
            }
            if BootInstant::now() >= until {
                return Ok(None);
            }
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
