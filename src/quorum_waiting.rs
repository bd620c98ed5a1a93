//! Taking a lock in quorum mode (`quorum`), waiting as `--wait` says. There is no queue across
//! independent masters, so no FIFO order: a waiter makes one acquisition round, and when the
//! lock is busy it blocks until a release is published on any master (a Pub/Sub listener per
//! master) or until the holders' leases can have ended, whichever comes first, then tries
//! again after a random pause that doubles while rounds keep failing, so that waiters that
//! split the vote between them stop colliding. Like `waiting`, the main thread never blocks on
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
use crate::lock::{Lock, Mode, Request, Token, Waiter};
use crate::log::{Log, printable};
use crate::quorum::{Attempt, Quorum, transient};
use crate::signals::{self, Signals};
use crate::waiting::{Ask, Held, Outcome, Wait};

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
            "--limit: not in quorum mode (each master could admit a different set of holders)",
        ));
    }
    let inbox: Inbox<'_, Event> = Inbox::new(signals)?;
    let worker = Worker::start("quorum")?;
    let deadline = match ask.wait {
        Wait::UpTo(limit) => Some(BootInstant::now() + limit),
        Wait::No | Wait::Forever => None,
    };
    let key = printable(lock.name.as_str());
    let mut reenter = ask.reenter.clone();
    let mut listeners: Option<Listeners> = None;
    let mut failed_rounds = 0u32;
    let mut busy_rounds = 0u32;
    loop {
        let token = reenter.clone().unwrap_or_else(Token::generate);
        {
            let (quorum, lock, token, ask) =
                (Arc::clone(quorum), lock.clone(), token.clone(), ask.clone());
            let reentering = reenter.is_some();
            worker.run(&inbox.reporter(), move || {
                Event::Round(Box::new(quorum.try_acquire(
                    &lock,
                    &Request {
                        token: &token,
                        ttl: ask.ttl,
                        mode: ask.mode,
                        who: &ask.who,
                        reenter: reentering,
                        replicas: ask.replicas,
                    },
                )))
            });
        }
        // A release announced while the round is out may be one the round did not see.
        let mut announced = false;
        let attempt = loop {
            match inbox.next(BootInstant::now() + MAX_NAP) {
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    if reenter.is_none() {
                        give_up(quorum, lock, token);
                    }
                    return Ok(Outcome::Interrupted(signal));
                }
                Some(Incoming::Reply(Event::Round(attempt))) => break *attempt,
                Some(Incoming::Panicked(panic)) => {
                    anyhow::bail!("an acquisition round panicked: {panic}")
                }
                Some(Incoming::Reply(Event::Released)) => announced = true,
                Some(Incoming::Signal(_)) | None => {}
            }
        };
        let past_deadline = deadline.is_some_and(|deadline| BootInstant::now() >= deadline);
        let pause = match attempt {
            Attempt::Acquired { lease, sent } => {
                drop(listeners);
                return Ok(Outcome::Acquired(Held {
                    lease,
                    confirmed: Confirmed::Sent(sent),
                    session: None,
                    worker,
                }));
            }
            Attempt::NotHeldByToken => {
                if reenter.take().is_some() {
                    log.step(format_args!(
                        "REDLOCK_TOKEN no longer holds lock '{key}'; acquiring it anew"
                    ));
                }
                continue;
            }
            Attempt::Unavailable(err) => {
                if !transient(&err) || ask.wait == Wait::No || past_deadline {
                    return Err(err);
                }
                failed_rounds += 1;
                log.warn(format_args!("{err:#}; trying again"));
                crate::waiting::backoff(failed_rounds)
            }
            Attempt::Busy { holder, now, hint } => {
                failed_rounds = 0;
                busy_rounds += 1;
                if ask.wait == Wait::No || past_deadline {
                    return Ok(Outcome::Busy { holder, now });
                }
                if busy_rounds == 1 {
                    log.step(format_args!(
                        "lock '{key}' is busy; waiting for a release on any of {} masters",
                        quorum.len()
                    ));
                }
                let cap = match &listeners {
                    Some(listening) if listening.all_subscribed() => LOOK_AT_LEAST_EVERY,
                    Some(_) => LOOK_EVERY_WITHOUT_NOTICES,
                    None => {
                        // A release between this round and the subscriptions would go
                        // unheard: one more round once they are (about to be) in place.
                        listeners = Some(Listeners::start(
                            quorum,
                            &lock.released_channel(),
                            &inbox.reporter(),
                        ));
                        FIRST_LOOK_AFTER_LISTENING
                    }
                };
                if announced {
                    spread(busy_rounds)
                } else {
                    hint.min(cap) + spread(busy_rounds)
                }
            }
        };
        // Sleep until the pause ends, a release is published, a signal comes, or the wait is
        // over; after a release, a short random pause first.
        let mut until = BootInstant::now() + pause;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        loop {
            match inbox.next(until) {
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    return Ok(Outcome::Interrupted(signal));
                }
                Some(Incoming::Reply(Event::Released)) => {
                    until = until.min(BootInstant::now() + spread(busy_rounds));
                }
                Some(Incoming::Panicked(panic)) => {
                    anyhow::bail!("a release listener panicked: {panic}")
                }
                Some(Incoming::Reply(Event::Round(_)) | Incoming::Signal(_)) | None => {}
            }
            if BootInstant::now() >= until {
                break;
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
