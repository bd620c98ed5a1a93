//! Keeping a lease: its timing (this file), the renewals ([`renewer`]), and the keeper of
//! `acquire --keep-alive` ([`keep`]). `run`'s supervisor renews through the same [`Renewer`].
//!
//! The timing of a lease: when to renew, how long each renewal may take, and when to stop the
//! command if renewals go unconfirmed, so that it is dead before the lease can lapse in Redis.
//!
//! Deadlines are local, on `CLOCK_BOOTTIME`, and start from the moment a request was *sent*: a
//! renewal confirmed at `sent` guarantees the lease until `sent + ttl` on the server, of which
//! only `sent + ttl - drift` is counted ([`drift`], for the two clocks' rates). A request that
//! times out, fails, or is answered late confirms nothing.
//!
//! A waiter handed the lock starts on its short grant (see `lua/README.md`) instead of spending
//! a round trip on turning it into a full lease: the grant gets a schedule of its own, scaled to
//! its length, and the first renewal (a third of the way in) extends it to the full `ttl`.

pub(crate) mod keep;
mod renewer;

pub(crate) use renewer::{Lease, Renewed, Renewer, Verdict};

use std::time::Duration;

use crate::clock::BootInstant;

/// Shortest lease a supervised command accepts.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);

use crate::acquire::Confirmed;
pub(crate) use crate::store::HASTY_RELEASE;

pub(crate) use crate::clock::drift;

/// The timing of one supervised lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) ttl: Duration,
    pub(crate) renew_every: Duration,
    /// Bound on each renewal request (connect included).
    pub(crate) request_timeout: Duration,
    /// Pause between attempts after a failed renewal.
    pub(crate) retry_every: Duration,
    /// Allowance for the client's and server's clocks running at different rates.
    pub(crate) drift: Duration,
    /// Kept between the command's death and the earliest moment the lease can lapse.
    pub(crate) margin: Duration,
    /// SIGTERM → SIGKILL grace when stopping for a signal or the runtime limit.
    pub(crate) kill_after: Duration,
    /// SIGTERM → SIGKILL grace when renewals go unconfirmed (may be shorter than `kill_after`).
    pub(crate) loss_grace: Duration,
}

/// Why no plan fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unfit {
    /// The lease is shorter than [`MIN_TTL`].
    LeaseTooShort,
    /// Renewals this far apart leave no time to retry a failed one: renew at most this often.
    RenewalsTooFarApart { at_most: Duration },
}

impl Plan {
    /// Derives the schedule. Renewals every ttl/3 unless `renew_every` is given. The grace on
    /// loss gets at most half of the slack left after one renewal attempt, so that a failed
    /// renewal is retried before the command is stopped. Also says whether `kill_after` had to
    /// be shortened for the loss path.
    pub(crate) fn new(
        ttl: Duration,
        renew_every: Option<Duration>,
        kill_after: Duration,
        command_timeout: Duration,
    ) -> Result<(Self, bool), Unfit> {
        if ttl < MIN_TTL {
            return Err(Unfit::LeaseTooShort);
        }
        let drift = drift(ttl);
        let margin = (ttl / 20).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let renew_every = renew_every.unwrap_or(ttl / 3);
        let request_timeout = command_timeout.min(renew_every / 2);
        let slack = ttl
            .checked_sub(drift + margin + renew_every + request_timeout)
            .filter(|slack| *slack >= Duration::from_millis(20))
            .ok_or(Unfit::RenewalsTooFarApart { at_most: ttl / 2 })?;
        let loss_grace = kill_after.min(slack / 2);
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
            loss_grace < kill_after,
        ))
    }

    /// The deadlines of a lease confirmed as `confirmed`.
    pub(crate) fn window(&self, confirmed: Confirmed) -> Window {
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
                // The schedule a lease of `length` would have; a grant is never shorter than
                // MIN_TTL, so this plan always exists (else: no time left, the full plan's
                // margins refuse to start on it).
                let grant = Plan::new(length, None, self.kill_after, self.request_timeout)
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

/// The deadlines of the lease as last confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// The earliest moment the lease can lapse in Redis.
    pub(crate) valid_until: BootInstant,
    /// When the next renewal is due.
    pub(crate) renew_at: BootInstant,
    /// Bound on each renewal request.
    pub(crate) request_timeout: Duration,
    /// Pause between attempts after a failed renewal.
    pub(crate) retry_every: Duration,
    /// SIGTERM the group if nothing is confirmed by then.
    pub(crate) term_at: BootInstant,
    /// SIGKILL the group by then at the latest, so it is dead before the lease can lapse.
    pub(crate) kill_at: BootInstant,
    /// SIGTERM → SIGKILL grace when the lock is lost.
    pub(crate) loss_grace: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn plan_for_the_test_defaults() {
        let (plan, shortened) = Plan::new(6 * S, None, 10 * S, 5 * S).unwrap();
        assert_eq!(plan.renew_every, 2 * S);
        assert_eq!(plan.request_timeout, S);
        assert_eq!(plan.margin, Duration::from_millis(300));
        assert_eq!(plan.drift, Duration::from_millis(62));
        assert_eq!(plan.loss_grace, Duration::from_millis(1319));
        assert!(shortened);
        // The group is dead before the lease can lapse, and a failed renewal is retried first.
        let sent = BootInstant::now();
        let window = plan.window(Confirmed::Sent(sent));
        assert!(window.kill_at < sent + plan.ttl);
        assert!(window.term_at > sent + plan.renew_every + plan.request_timeout);
    }

    /// The numbers docs/reference.md quotes for the default `--ttl 30s`.
    #[test]
    fn plan_for_the_default_ttl() {
        let (plan, _) = Plan::new(30 * S, None, 10 * S, 5 * S).unwrap();
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
        let (plan, _) = Plan::new(30 * S, None, 10 * S, 5 * S).unwrap();
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
    fn long_leases_keep_the_full_grace_and_short_ones_shorten_it() {
        let (plan, shortened) = Plan::new(600 * S, None, 10 * S, 5 * S).unwrap();
        assert_eq!(plan.loss_grace, 10 * S);
        assert_eq!(plan.margin, S);
        assert!(!shortened);
        let (plan, shortened) = Plan::new(3 * S, None, 10 * S, 5 * S).unwrap();
        assert!(plan.loss_grace < S);
        assert_eq!(plan.kill_after, 10 * S);
        assert!(shortened);
    }

    #[test]
    fn impossible_plans_are_refused() {
        assert_eq!(
            Plan::new(Duration::from_millis(500), None, S, S),
            Err(Unfit::LeaseTooShort)
        );
        assert_eq!(
            Plan::new(3 * S, Some(3 * S), S, S),
            Err(Unfit::RenewalsTooFarApart { at_most: 3 * S / 2 })
        );
    }
}
