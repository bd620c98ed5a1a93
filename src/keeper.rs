//! Lease renewal for `run`: the timing plan, and the thread that extends the lock every
//! `renew_every` and reports what Redis confirmed.
//!
//! Deadlines are local, on `CLOCK_BOOTTIME`, and start from the moment a request was *sent*:
//! a renewal confirmed at `sent` guarantees the lease until `sent + ttl` on the server, of which
//! we count only `sent + ttl - drift` (drift = 1% of ttl + 2 ms, for the two clocks' rates).
//! A request that times out, fails, or is answered late confirms nothing.
//!
//! A waiter handed the lock starts on its short grant (see `lua/README.md`) instead of spending
//! a round trip on turning it into a full lease: the grant gets a schedule of its own, scaled to
//! its length, and the first renewal (a third of the way in) extends it to the full `ttl`.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::exit::{Failure, failure_of};
use crate::lock::{Lock, Token};

/// The timing of one supervised lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub ttl: Duration,
    pub renew_every: Duration,
    /// Bound on each renewal request (connect included).
    pub request_timeout: Duration,
    /// Pause between attempts after a failed renewal.
    pub retry_every: Duration,
    /// Allowance for the client's and server's clocks running at different rates.
    pub drift: Duration,
    /// Kept between the command's death and the earliest moment the lease can lapse.
    pub margin: Duration,
    /// SIGTERM → SIGKILL grace when stopping for a signal or --max-runtime.
    pub kill_after: Duration,
    /// SIGTERM → SIGKILL grace when renewals go unconfirmed (may be shorter than `kill_after`).
    pub loss_grace: Duration,
}

/// Shortest lease `run` accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);

impl Plan {
    /// Derives the schedule. Renewals every ttl/3 unless `renew_every` is given. The grace
    /// on loss gets at most half of the slack left after one renewal attempt, so that a failed
    /// renewal is retried before the command is stopped. Returns a warning when an explicit
    /// `kill_after` had to be shortened for the loss path.
    pub fn new(
        ttl: Duration,
        renew_every: Option<Duration>,
        kill_after: Duration,
        kill_after_explicit: bool,
        command_timeout: Duration,
    ) -> Result<(Self, Option<String>), String> {
        if ttl < MIN_TTL {
            return Err(format!(
                "--ttl {}: run needs a lease of at least {} (renewals and the kill schedule must fit in it)",
                crate::duration::display(ttl),
                crate::duration::display(MIN_TTL)
            ));
        }
        let drift = ttl / 100 + Duration::from_millis(2);
        let margin = (ttl / 20).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let renew_every = renew_every.unwrap_or(ttl / 3);
        let request_timeout = command_timeout.min(renew_every / 2);
        let slack = ttl
            .checked_sub(drift + margin + renew_every + request_timeout)
            .filter(|slack| *slack >= Duration::from_millis(20))
            .ok_or_else(|| {
                format!(
                    "--renew-every {} is too long for --ttl {}: renew at most every {}",
                    crate::duration::display(renew_every),
                    crate::duration::display(ttl),
                    crate::duration::display(ttl / 2)
                )
            })?;
        let loss_grace = kill_after.min(slack / 2);
        let warning = (kill_after_explicit && loss_grace < kill_after).then(|| {
            format!(
                "--kill-after {} shortened to {} when the lock is lost, so the command is dead before the {} lease can lapse",
                crate::duration::display(kill_after),
                crate::duration::display(loss_grace),
                crate::duration::display(ttl)
            )
        });
        Ok((
            Self {
                ttl,
                renew_every,
                request_timeout,
                retry_every: (renew_every / 4).min(Duration::from_millis(500)),
                drift,
                margin,
                kill_after,
                loss_grace,
            },
            warning,
        ))
    }

    /// The deadlines of a lease confirmed as `confirmed`.
    pub fn window(&self, confirmed: Confirmed) -> Window {
        match confirmed {
            Confirmed::Sent(sent) => {
                let valid_until = sent + (self.ttl - self.drift);
                Window {
                    valid_until,
                    renew_at: sent + self.renew_every,
                    request_timeout: self.request_timeout,
                    retry_every: self.retry_every,
                    term_at: valid_until.minus(self.margin + self.loss_grace),
                    kill_at: valid_until.minus(self.margin),
                    loss_grace: self.loss_grace,
                }
            }
            Confirmed::Grant { length, until } => {
                // The schedule `--ttl <length>` would have; a grant is never shorter than
                // MIN_TTL, so this plan always exists (else: no time left, the full plan's
                // margins refuse to start on it).
                let grant = Plan::new(length, None, self.kill_after, false, self.request_timeout)
                    .map_or(*self, |(plan, _)| plan);
                Window {
                    valid_until: until,
                    renew_at: until.minus(length.saturating_sub(grant.renew_every)),
                    request_timeout: grant.request_timeout,
                    retry_every: grant.retry_every,
                    term_at: until.minus(grant.margin + grant.loss_grace),
                    kill_at: until.minus(grant.margin),
                    loss_grace: grant.loss_grace,
                }
            }
        }
    }
}

/// How the lease `run` starts on was confirmed.
#[derive(Debug, Clone, Copy)]
pub enum Confirmed {
    /// A full lease, by a request sent at this instant.
    Sent(BootInstant),
    /// A hand-over grant of `length`, ours until `until` at the earliest.
    Grant {
        length: Duration,
        until: BootInstant,
    },
}

/// The deadlines of the lease as last confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The earliest moment the lease can lapse in Redis.
    pub valid_until: BootInstant,
    /// When the next renewal is due.
    pub renew_at: BootInstant,
    /// Bound on each renewal request.
    pub request_timeout: Duration,
    /// Pause between attempts after a failed renewal.
    pub retry_every: Duration,
    /// SIGTERM the group if nothing is confirmed by then.
    pub term_at: BootInstant,
    /// SIGKILL the group by then at the latest, so it is dead before the lease can lapse.
    pub kill_at: BootInstant,
    /// SIGTERM → SIGKILL grace when the lock is lost.
    pub loss_grace: Duration,
}

/// What the keeper reports.
#[derive(Debug)]
pub enum Report {
    /// Redis confirmed the lease for a full `ttl`.
    Renewed(Window),
    /// The lock is gone or someone else's: stop at once.
    Lost(String),
    /// A renewal failed; the keeper retries until told to stop.
    Trouble(String),
}

/// The renewal thread. It has a connection of its own, opened when the first renewal is due,
/// so the supervisor's connection stays free for the release. The supervisor starts it only
/// when that renewal approaches: a short command never pays for the thread.
pub struct Keeper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Starts renewing a lease whose deadlines are `window`.
    pub fn start(
        target: Target,
        lock: Lock,
        token: Token,
        plan: Plan,
        window: Window,
        report: impl Fn(Report) + Send + 'static,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("keeper".into())
            .spawn(move || renew(&target, &lock, &token, plan, window, &stopped, &report))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Whether the thread has ended (lost, or died): either way nothing renews the lease.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

/// Dropping the keeper stops renewing (after any renewal in flight).
impl Drop for Keeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn renew(
    target: &Target,
    lock: &Lock,
    token: &Token,
    plan: Plan,
    mut window: Window,
    stopped: &Receiver<()>,
    report: &impl Fn(Report),
) {
    let mut session: Option<Session> = None;
    let mut next = window.renew_at;
    loop {
        while BootInstant::now() < next {
            match stopped.recv_timeout(next.nap()) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let attempt = BootInstant::now();
        // A reply after the lease could have lapsed proves nothing: never wait past it.
        let timeout = window
            .request_timeout
            .min(window.valid_until.since(attempt))
            .max(Duration::from_millis(10));
        let result = match session.take() {
            Some(open) => Ok(open),
            None => target.connect_within(timeout),
        }
        .and_then(|mut open| {
            open.set_command_timeout(timeout)?;
            let extended = lock.extend(&mut open, token, plan.ttl);
            session = Some(open);
            extended
        });
        match result {
            Ok(true) => {
                window = plan.window(Confirmed::Sent(attempt));
                next = window.renew_at;
                report(Report::Renewed(window));
            }
            Ok(false) => {
                report(Report::Lost(
                    "the key was deleted, expired, or taken by another holder".into(),
                ));
                return;
            }
            Err(err) if failure_of(&err) == Some(Failure::Usage) => {
                report(Report::Lost(format!("{err:#}")));
                return;
            }
            Err(err) => {
                // After a timeout a late reply may still arrive on this connection: start afresh.
                session = None;
                report(Report::Trouble(format!("{err:#}")));
                next = BootInstant::now() + window.retry_every;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn plan_for_the_test_defaults() {
        let (plan, warning) = Plan::new(6 * S, None, 10 * S, false, 5 * S).unwrap();
        assert_eq!(plan.renew_every, 2 * S);
        assert_eq!(plan.request_timeout, S);
        assert_eq!(plan.margin, Duration::from_millis(300));
        assert_eq!(plan.drift, Duration::from_millis(62));
        assert_eq!(plan.loss_grace, Duration::from_millis(1319));
        assert_eq!(warning, None);
        // The group is dead before the lease can lapse, and a failed renewal is retried first.
        let sent = BootInstant::now();
        let window = plan.window(Confirmed::Sent(sent));
        assert!(window.kill_at < sent + plan.ttl);
        assert!(window.term_at > sent + plan.renew_every + plan.request_timeout);
    }

    /// The numbers the README quotes for the default `--ttl 30s`.
    #[test]
    fn plan_for_the_default_ttl() {
        let (plan, _) = Plan::new(30 * S, None, 10 * S, false, 5 * S).unwrap();
        let sent = BootInstant::now();
        let window = plan.window(Confirmed::Sent(sent));
        assert_eq!(plan.renew_every, 10 * S);
        assert_eq!(plan.request_timeout, 5 * S);
        assert_eq!(plan.loss_grace, Duration::from_millis(6849));
        assert_eq!(window.term_at.since(sent), Duration::from_millis(21_849));
        assert_eq!(window.kill_at.since(sent), Duration::from_millis(28_698));
    }

    /// Started on a 2 s grant under the default plan: renew a third of the way in, and be
    /// dead before the grant can lapse if that renewal never comes.
    #[test]
    fn a_grant_gets_a_schedule_of_its_own() {
        let (plan, _) = Plan::new(30 * S, None, 10 * S, false, 5 * S).unwrap();
        let now = BootInstant::now();
        let until = now + 2 * S;
        let window = plan.window(Confirmed::Grant {
            length: 2 * S,
            until,
        });
        assert_eq!(window.valid_until, until);
        assert_eq!(window.renew_at.since(now), 2 * S / 3);
        assert_eq!(window.request_timeout, S / 3);
        assert_eq!(window.kill_at.since(now), Duration::from_millis(1900));
        assert!(window.term_at > window.renew_at + window.request_timeout + window.retry_every);
        assert!(window.term_at < window.kill_at);
        // A grant that arrives with little time left is due for renewal at once.
        let late = plan.window(Confirmed::Grant {
            length: 2 * S,
            until: now + Duration::from_millis(300),
        });
        assert!(late.renew_at <= now);
    }

    #[test]
    fn long_leases_keep_the_full_grace_and_explicit_graces_warn_when_cut() {
        let (plan, _) = Plan::new(600 * S, None, 10 * S, false, 5 * S).unwrap();
        assert_eq!(plan.loss_grace, 10 * S);
        assert_eq!(plan.margin, S);
        let (plan, warning) = Plan::new(3 * S, None, 10 * S, true, 5 * S).unwrap();
        assert!(plan.loss_grace < S);
        assert_eq!(plan.kill_after, 10 * S);
        assert!(warning.unwrap().contains("shortened"));
    }

    #[test]
    fn impossible_plans_are_refused() {
        assert!(Plan::new(Duration::from_millis(500), None, S, false, S).is_err());
        assert!(Plan::new(3 * S, Some(3 * S), S, false, S).is_err());
    }
}
