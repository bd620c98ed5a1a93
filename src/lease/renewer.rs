//! One lease kept alive: when each renewal is sent, over which connection, how long it may
//! take, and what its reply means. `run`'s supervisor and the keeper of `acquire --keep-alive`
//! both renew through a [`Renewer`]; they differ only in what they do with its [`Verdict`]s
//! (the supervisor stops its command, the keeper ends).
//!
//! The requests run on a worker thread, started at the first renewal (a `run` shorter than a
//! renewal period never pays for it); their replies come back through the caller's inbox,
//! wrapped in the caller's own reply type.

use std::time::Duration;

use crate::acquire::{Confirmed, Kept};
use crate::clock::BootInstant;
use crate::exit::{Failure, failure_of};
use crate::inbox::{Reporter, Worker};
use crate::lease::{Plan, Window};
use crate::lock::{Lock, Replicas, Token};
use crate::store::{Renewal, Store};

/// A renewal's reply: sent at `sent`; whether the token still held the lock, and the connection
/// to reuse.
pub(crate) struct Renewed {
    pub(crate) sent: BootInstant,
    pub(crate) result: anyhow::Result<(bool, Kept)>,
}

/// What a renewal's reply means for the lease.
pub(crate) enum Verdict {
    /// Confirmed until the new window; `mended` when the renewals before it had failed.
    Confirmed { mended: bool },
    /// The renewal failed; the next is sent after the window's retry pause, over a fresh
    /// connection. `first` on the first failure in a row.
    Troubled { why: String, first: bool },
    /// The lock was deleted, expired, or taken by another holder.
    Lost,
    /// Trying again cannot help: the lock's data was refused (`Failure::Usage`) or the login
    /// or a permission was (`Failure::Auth`).
    Refused(anyhow::Error),
}

/// The next renewal.
enum Next {
    /// Due at the window's `renew_at`, over this connection (or a fresh one).
    Due(Kept),
    /// Due again at this instant after a failure, over a fresh connection.
    Retry(BootInstant),
    InFlight,
}

/// What a [`Renewer`] renews, and how.
pub(crate) struct Lease<'a> {
    pub(crate) store: &'a Store,
    pub(crate) lock: &'a Lock,
    pub(crate) token: &'a Token,
    pub(crate) plan: Plan,
    /// Replicas that must acknowledge each renewal, or it confirms nothing.
    pub(crate) replicas: Option<u32>,
}

/// Renews one lease on its plan's schedule, one request at a time.
pub(crate) struct Renewer<'a> {
    lease: Lease<'a>,
    window: Window,
    confirmed_at: BootInstant,
    /// The last renewal's failure, while renewals fail.
    trouble: Option<String>,
    next: Next,
    worker: Option<Worker>,
}

impl<'a> Renewer<'a> {
    /// A lease `confirmed` as given; the first renewal is due at its window's `renew_at`, over
    /// `session` when there is one.
    pub(crate) fn new(lease: Lease<'a>, confirmed: Confirmed, session: Kept) -> Self {
        Self {
            window: lease.plan.window(confirmed),
            lease,
            confirmed_at: BootInstant::now(),
            trouble: None,
            next: Next::Due(session),
            worker: None,
        }
    }

    /// Makes the first renewal due now (a lease whose confirmation is older than this process).
    pub(crate) fn renew_at_once(mut self) -> Self {
        self.window.renew_at = BootInstant::now();
        self
    }

    /// The deadlines of the lease as last confirmed.
    pub(crate) fn window(&self) -> Window {
        self.window
    }

    /// When the lease was last confirmed, and the last renewal's failure while they fail.
    pub(crate) fn confirmed(&self) -> (BootInstant, Option<&str>) {
        (self.confirmed_at, self.trouble.as_deref())
    }

    /// When the next renewal is to be sent; `None` while one is in flight.
    pub(crate) fn due_at(&self) -> Option<BootInstant> {
        match self.next {
            Next::Due(_) => Some(self.window.renew_at),
            Next::Retry(at) => Some(at),
            Next::InFlight => None,
        }
    }

    /// Sends the renewal when it is due; its reply reaches `reporter` as `wrap(Renewed)`. Each
    /// request is bounded inside the lease: a reply after the lease could have lapsed proves
    /// nothing. When no thread can be started for it (a process or memory limit), the verdict
    /// is that of a failed renewal: retried while the lease lasts, never left unrenewed.
    pub(crate) fn renew_if_due<R: Send + 'static>(
        &mut self,
        reporter: &Reporter<R>,
        wrap: fn(Renewed) -> R,
    ) -> Option<Verdict> {
        let now = BootInstant::now();
        let session = match std::mem::replace(&mut self.next, Next::InFlight) {
            Next::Due(session) if now >= self.window.renew_at => session,
            Next::Retry(at) if now >= at => Kept::default(),
            not_due => {
                self.next = not_due;
                return None;
            }
        };
        let worker = match self.worker.take() {
            Some(worker) => worker,
            None => match start_worker() {
                Ok(worker) => worker,
                Err(err) => {
                    return Some(self.on_reply(Renewed {
                        sent: now,
                        result: Err(err),
                    }));
                }
            },
        };
        let timeout = self
            .window
            .request_timeout
            .min(self.window.valid_until.since(now))
            .max(Duration::from_millis(10));
        let (store, lock, token, ttl) = (
            self.lease.store.clone(),
            self.lease.lock.clone(),
            self.lease.token.clone(),
            self.lease.plan.ttl,
        );
        let replicas = self
            .lease
            .replicas
            .map(|count| Replicas::within(count, timeout));
        worker.run(reporter, move || {
            let sent = BootInstant::now();
            let renewal = Renewal {
                token: &token,
                ttl,
                replicas,
                timeout,
            };
            let result = store.extend(&lock, session, &renewal);
            wrap(Renewed { sent, result })
        });
        self.worker = Some(worker);
        None
    }

    /// Takes a renewal's reply into account.
    pub(crate) fn on_reply(&mut self, renewed: Renewed) -> Verdict {
        let Renewed { sent, result } = renewed;
        match result {
            Ok((true, session)) => {
                self.window = self.lease.plan.window(Confirmed::Sent(sent));
                self.confirmed_at = BootInstant::now();
                self.next = Next::Due(session);
                Verdict::Confirmed {
                    mended: self.trouble.take().is_some(),
                }
            }
            Ok((false, _)) => Verdict::Lost,
            // Bad data or a refused login will not mend by trying again.
            Err(err) if matches!(failure_of(&err), Some(Failure::Usage | Failure::Auth)) => {
                Verdict::Refused(err)
            }
            Err(err) => {
                let why = format!("{err:#}");
                let first = self.trouble.replace(why.clone()).is_none();
                // After a failure a late reply may still come on that connection: a fresh one.
                self.next = Next::Retry(BootInstant::now() + self.window.retry_every);
                Verdict::Troubled { why, first }
            }
        }
    }

    /// Stops renewing: the worker ends once a renewal in flight is answered (one that lands
    /// after a release finds the token gone and changes nothing). Returns the connection the
    /// renewals used when none is in flight on it, for the release.
    pub(crate) fn stop(self) -> Kept {
        drop(self.worker);
        match self.next {
            Next::Due(session) => session,
            Next::Retry(_) | Next::InFlight => Kept::default(),
        }
    }
}

/// The thread that sends the renewals. The `no-renewal-thread` failpoint refuses it.
fn start_worker() -> anyhow::Result<Worker> {
    if crate::failpoint::fails("no-renewal-thread") {
        return Err(crate::exit::system(
            "a thread",
            std::io::ErrorKind::WouldBlock.into(),
        ));
    }
    Worker::start("renewal")
}
