//! Quorum mode (docs/servers.md, "Several masters"): one lock held on a majority of N
//! independent Redis masters, antirez's Redlock made explicit. Every request goes to all
//! masters at once, a thread per master kept from round to round (`helpers`; the rounds are in
//! `fan_out`), each bounded by the per-master timeout; on each master the same token-checked
//! scripts as in single-master mode do the work, and this module counts the answers. A
//! majority decides; the validity (the lease minus the time the round took minus the clock
//! drift) bounds what a holder may believe; and a second round writes the fence back to a
//! majority, so that fences only grow (`lua/raise.lua`, docs/safety.md "Fences over a
//! quorum"). What the commands read (the view and verdict, listings, the merged history) and
//! the forced release are in `reads`.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::clock::drift;
use crate::conn::Target;
use crate::exit::{Failure, fail, failure_of};
use crate::lock::{
    Acquisition, Ending, Holder, Lease, Lock, Queueing, Release, ReleaseRequest, Request, Waiter,
};
use crate::log::Log;

use super::{ReleaseBound, single};
mod fan_out;
mod helpers;
mod reads;
mod rounds;

use fan_out::{Master, WithContextOf};

pub(crate) use reads::{OneRedisOnly, refusal};
pub(super) use rounds::Rounds;

/// N independent masters (N odd, at least 3).
pub(crate) struct Quorum {
    masters: Vec<Arc<Master>>,
    /// The longest one master's request may take (connecting counts apart).
    request_timeout: Duration,
}

/// The smallest number of masters `Quorum::new` accepts.
pub(crate) const MIN_MASTERS: usize = 3;

/// A request is bounded by the command timeout, and by a tenth of the lease: a slow master
/// must not eat the validity of an acquisition the others granted.
/// Once a majority has answered, how long the other masters' replies are still waited for.
const STRAGGLER_GRACE: Duration = Duration::from_millis(250);

fn per_master_limit(request_timeout: Duration, ttl: Duration) -> Duration {
    request_timeout.min(ttl / 10).max(Duration::from_millis(10))
}

/// What is left of a lease of `ttl` after a round that took `elapsed`: the clocks of the
/// masters may run faster than ours by the drift, so that much less.
fn validity(ttl: Duration, elapsed: Duration) -> Duration {
    ttl.saturating_sub(elapsed + drift(ttl))
}

/// How one acquisition round over the masters ended.
pub(crate) enum Attempt {
    /// Held on a majority, with the fence written back there; `sent`: when the round began,
    /// from which the validity counts.
    Acquired { lease: Lease, sent: BootInstant },
    /// A majority answered and did not grant it. `holder` is one that holds it, `now` that
    /// master's time, `hint` when enough masters may be free without anyone telling us.
    Busy {
        holder: Option<Holder>,
        now: u64,
        hint: Duration,
    },
    /// `reenter`, and the token does not hold the lock on a majority (any more).
    NotHeldByToken,
    /// Fewer than a majority answered; whatever the others granted was given back.
    Unavailable(anyhow::Error),
}

impl Quorum {
    /// The masters at `targets`; the caller checked that there are an odd number, at least 3.
    pub(crate) fn new(targets: Vec<Target>, request_timeout: Duration) -> Self {
        Self {
            masters: targets
                .into_iter()
                .map(|target| Arc::new(Master::new(target)))
                .collect(),
            request_timeout,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// How many masters make a majority.
    pub(crate) fn majority(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// Each master, as shown to people (passwords redacted).
    pub(crate) fn shown(&self) -> Vec<String> {
        self.masters
            .iter()
            .map(|master| master.target.redacted().to_owned())
            .collect()
    }

    /// The targets, for what talks to one master at a time (listening for releases).
    pub(crate) fn targets(&self) -> impl Iterator<Item = &Target> {
        self.masters.iter().map(|master| &master.target)
    }

    /// The error for a request fewer than a majority answered: every master that failed
    /// named, and the outcome of the most telling failure. A refusal that will repeat (a bad
    /// password or ACL: 77; bad configuration or foreign data: 64) outranks unreachable
    /// masters (69), so a wait does not go on retrying what cannot succeed.
    pub(crate) fn too_few<T>(
        &self,
        answered: usize,
        replies: &[anyhow::Result<T>],
    ) -> anyhow::Error {
        let errors: Vec<&anyhow::Error> = replies
            .iter()
            .filter_map(|reply| reply.as_ref().err())
            .collect();
        let outcome = [Failure::Auth, Failure::Usage, Failure::Unsupported]
            .into_iter()
            .find(|wanted| errors.iter().any(|err| failure_of(err) == Some(*wanted)))
            .unwrap_or(Failure::Unavailable);
        fail(
            outcome,
            format!(
                "only {answered} of {} masters answered, {} needed ({})",
                self.len(),
                self.majority(),
                Self::failures(replies)
            ),
        )
    }

    /// Each master that failed, with why, on one line.
    fn failures<T>(replies: &[anyhow::Result<T>]) -> String {
        replies
            .iter()
            .filter_map(|reply| reply.as_ref().err().map(|err| format!("{err:#}")))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One acquisition round: the acquire script on every master, then, when a majority
    /// granted it with validity left, the fence written back to a majority. Anything less is
    /// given back on every master that granted it or did not answer (`lock.leave`: a request
    /// still on its way there takes nothing when it runs). Never queues.
    pub(crate) fn try_acquire(&self, lock: &Lock, request: &Request<'_>) -> Attempt {
        let sent = BootInstant::now();
        let limit = per_master_limit(self.request_timeout, request.ttl);
        let (asked, token, who) = (lock.clone(), request.token.clone(), request.who.clone());
        let owned = *request;
        let (masters, majority) = (self.len(), self.majority());
        let replies = self.fan_out_until(
            limit,
            move |_, session| {
                let request = Request {
                    token: &token,
                    who: &who,
                    ..owned
                };
                asked.acquire(session, &request, Queueing::No)
            },
            |_| true,
            // Decided once a majority granted it, or once enough did not that a majority no
            // longer can: a stopped master then costs the straggler grace, not its limit.
            move |replies| {
                let granted = replies
                    .iter()
                    .filter(|reply| matches!(reply, Some(Ok(Acquisition::Acquired(_)))))
                    .count();
                let refused = replies
                    .iter()
                    .filter(|reply| {
                        reply.is_some() && !matches!(reply, Some(Ok(Acquisition::Acquired(_))))
                    })
                    .count();
                granted >= majority || refused > masters - majority
            },
        );
        let round = Round::of(&replies);
        if let Some(acquired) = self.confirm(lock, request, &round, sent, limit) {
            return acquired;
        }
        self.give_back(lock, request, &replies, limit);
        self.not_acquired(request, round, &replies)
    }

    /// A majority granted the lock within its validity: the fence is the largest issued,
    /// written back to the masters that granted it (a master that did not answer the round is
    /// not waited for again), and the lock is held when a majority has it at that fence,
    /// still within the validity.
    fn confirm(
        &self,
        lock: &Lock,
        request: &Request<'_>,
        round: &Round,
        sent: BootInstant,
        limit: Duration,
    ) -> Option<Attempt> {
        let granted: Vec<u64> = round.granted.iter().map(|&(_, fence)| fence).collect();
        let valid = || validity(request.ttl, BootInstant::now().since(sent));
        let majority = self.majority();
        if granted.len() < majority || valid().is_zero() {
            return None;
        }
        let fence = granted.iter().copied().max().unwrap_or(0);
        let in_step = granted.iter().all(|&issued| issued == fence);
        let raised = if request.reenter || in_step {
            // Re-entry keeps the fence the enclosing invocation was issued. When every master
            // that granted it issued the same fence, each of them (a majority) already has its
            // counter and the holder's record at that fence: the write-back would change
            // nothing (the usual case: every acquisition leaves the masters it held in step).
            granted.len()
        } else {
            let (lock, token) = (lock.clone(), request.token.clone());
            self.fan_out_to_majority_of(
                limit.min(valid()),
                move |session| lock.raise_fence(session, &token, fence),
                |index| round.granted.iter().any(|&(by, _)| by == index),
            )
            .iter()
            .filter(|reply| matches!(reply, Ok(true)))
            .count()
        };
        (raised >= majority && !valid().is_zero()).then(|| Attempt::Acquired {
            lease: Lease {
                token: request.token.clone(),
                fence,
                ttl: request.ttl,
            },
            sent,
        })
    }

    /// Not acquired: gives back what was taken, everywhere it may have been (`lock.leave`): on a
    /// master that granted it (its request is done), and with the token marked on one that did
    /// not answer, so that a request still on its way takes nothing. A re-entry's grants are
    /// counted down instead: the hold is the enclosing invocation's.
    fn give_back(
        &self,
        lock: &Lock,
        request: &Request<'_>,
        replies: &[anyhow::Result<Acquisition>],
        limit: Duration,
    ) {
        let waiter = Waiter {
            token: request.token.clone(),
            ..Waiter::new()
        };
        let give_back: Vec<Option<bool>> = replies
            .iter()
            .map(|reply| match reply {
                Ok(Acquisition::Acquired(_)) => Some(true),
                Ok(Acquisition::Busy { .. } | Acquisition::NotHeldByToken) => None,
                // Re-entry: the enclosing invocation's token is not ours to give up.
                Ok(Acquisition::Gone | Acquisition::Cancelled) | Err(_) if request.reenter => None,
                Ok(Acquisition::Gone | Acquisition::Cancelled) | Err(_) => Some(false),
            })
            .collect();
        let chosen: Vec<bool> = give_back.iter().map(Option::is_some).collect();
        let granted: Vec<bool> = give_back.iter().map(|b| *b == Some(true)).collect();
        let (lock, reenter) = (lock.clone(), request.reenter);
        // Done once every master that granted it has given it back (and the straggler grace):
        // a master that did not answer is sent its leave, with the mark, but not waited for;
        // the mark, not the wait, keeps its late request from taking anything.
        let _ = self.fan_out_until(
            limit,
            // Left, not released: the history records the grant as given back, which is no
            // run (`check`, `metrics`); only where the request may still be on its way is the
            // token marked, so that it takes nothing when it runs.
            move |index, session| match give_back[index] {
                None => Ok(()),
                // Re-entry: the grant is the enclosing invocation's hold counted up once more;
                // a release counts it down (leaving would give back the whole hold).
                Some(true) if reenter => lock
                    .release(session, &waiter.token, Duration::ZERO, &Ending::default())
                    .map(drop),
                Some(granted) => lock.leave(session, &waiter, !granted),
            },
            |index| chosen[index],
            move |replies| {
                replies
                    .iter()
                    .zip(&granted)
                    .all(|(reply, granted)| reply.is_some() || !granted)
            },
        );
    }

    /// What a round that did not take the lock found: a re-entry's token gone, too few masters
    /// answering, or the lock busy (with when a majority can be free).
    fn not_acquired(
        &self,
        request: &Request<'_>,
        round: Round,
        replies: &[anyhow::Result<Acquisition>],
    ) -> Attempt {
        let majority = self.majority();
        let Round {
            granted,
            busy,
            not_held,
            ..
        } = round;
        let answered = granted.len() + busy.len() + not_held;
        if request.reenter && not_held + busy.len() >= majority {
            return Attempt::NotHeldByToken;
        }
        if answered < majority {
            return Attempt::Unavailable(self.too_few(answered, replies));
        }
        // Free when enough busy masters' holders expire to make a majority with the free ones.
        let free = self.len() - busy.len();
        let mut hints: Vec<Duration> = busy.iter().map(|&(_, _, hint)| hint).collect();
        hints.sort();
        let hint = hints
            .get(majority.saturating_sub(free + 1))
            .copied()
            .unwrap_or_default();
        let (holder, now) = busy
            .into_iter()
            .find(|(holder, ..)| holder.is_some())
            .map_or((None, 0), |(holder, now, _)| (holder, now));
        Attempt::Busy { holder, now, hint }
    }

    /// Gives `waiter`'s token up on every master, within `limit` each (see `Lock::leave`).
    pub(crate) fn leave(&self, lock: &Lock, waiter: &Waiter, limit: Duration) {
        let (lock, waiter) = (lock.clone(), waiter.clone());
        let _ = self.fan_out(limit, move |session| lock.leave(session, &waiter, true));
    }

    /// Resets the lease of `token` to `ttl` on every master, within `limit` each, and returns
    /// once the answers decide it (see `fan_out_until`). `Ok(true)`:
    /// a majority confirmed it. `Ok(false)`: too few masters still hold it for a majority
    /// ever to confirm it again (lost). An error: not confirmed, not known to be lost.
    pub(crate) fn extend(
        &self,
        lock: &Lock,
        token: &crate::lock::Token,
        ttl: Duration,
        limit: Duration,
    ) -> anyhow::Result<bool> {
        let (lock, token) = (lock.clone(), token.clone());
        let (masters, majority) = (self.len(), self.majority());
        let replies = self.fan_out_until(
            limit,
            move |_, session| lock.extend(session, &token, ttl, None),
            |_| true,
            // Decided once a majority confirmed it, or once enough no longer hold it that a
            // majority cannot: a stopped master costs a renewal the straggler grace.
            move |replies| {
                let confirmed = replies
                    .iter()
                    .filter(|r| matches!(r, Some(Ok(true))))
                    .count();
                let lost = replies
                    .iter()
                    .filter(|r| matches!(r, Some(Ok(false))))
                    .count();
                confirmed >= majority || lost > masters - majority
            },
        );
        let confirmed = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        let unknown = replies.iter().filter(|r| r.is_err()).count();
        if confirmed >= self.majority() {
            Ok(true)
        } else if confirmed + unknown < self.majority() {
            Ok(false)
        } else {
            Err(fail(
                Failure::Unavailable,
                format!(
                    "the renewal was confirmed by {confirmed} of {} masters, {} needed ({})",
                    self.len(),
                    self.majority(),
                    Self::failures(&replies)
                ),
            ))
        }
    }

    /// Releases the hold on every master at once, each as on one Redis (`single::release`:
    /// over the connection kept to it, each attempt within `bound.answer`, sent again while it
    /// is known not to have run, up to the release timeout), and returns once a majority has
    /// answered: masters that refused it before running it (restarting, LOADING) let the lock
    /// go when they are back within the bound. A master that hangs, or still refuses once a
    /// majority has answered, keeps its part until its lease ends (or runs the release when it
    /// comes back), a minority nobody can assemble a majority with. Returns within
    /// [`Self::release_within`].
    pub(crate) fn release(
        self: &Arc<Self>,
        lock: &Lock,
        request: &ReleaseRequest<'_>,
        bound: ReleaseBound,
        log: Log,
    ) -> anyhow::Result<Release> {
        let (lock, token, ending) = (lock.clone(), request.token.clone(), request.ending.clone());
        let min_hold = request.min_hold;
        let majority = self.majority();
        let replies = self.ask_until(
            self.each_release_within(bound),
            move |_, master| {
                let request = ReleaseRequest {
                    token: &token,
                    min_hold,
                    ending: &ending,
                };
                single::release(
                    &master.target,
                    &lock,
                    master.take_session(),
                    &request,
                    bound,
                    log,
                )
                .with_context_of(&master.target)
            },
            |_| true,
            move |results| results.iter().filter(|r| matches!(r, Some(Ok(_)))).count() >= majority,
        );
        let answered: Vec<Release> = replies
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        let not_held = answered.iter().filter(|r| **r == Release::NotHeld).count();
        if let Some(still) = answered.iter().find_map(|r| match r {
            Release::StillHeld(holds) => Some(*holds),
            _ => None,
        }) {
            return Ok(Release::StillHeld(still));
        }
        if let Some(kept) = answered
            .iter()
            .filter_map(|r| match r {
                Release::Kept(left) => Some(*left),
                _ => None,
            })
            .max()
        {
            return Ok(Release::Kept(kept));
        }
        if not_held >= self.majority() {
            return Ok(Release::NotHeld);
        }
        // Let go on a majority: a master that did not answer keeps its part until its lease
        // ends, a minority, which no one can assemble a majority with. Let go on fewer, the
        // lock is still held where a majority can be had, and the release failed.
        let let_go = answered
            .iter()
            .filter(|r| matches!(r, Release::Released | Release::NotHeld))
            .count();
        if let_go >= self.majority() {
            return Ok(Release::Released);
        }
        Err(self.too_few(answered.len(), &replies))
    }
}

impl Quorum {
    /// The longest [`Self::release`] takes within `bound`: the longest a master's release
    /// takes, sent again up to its release timeout, and the grace the others get once a
    /// majority has answered.
    pub(crate) fn release_within(&self, bound: ReleaseBound) -> Duration {
        self.each_release_within(bound) + STRAGGLER_GRACE
    }

    /// The longest one master's release takes within `bound` (`single::release`).
    fn each_release_within(&self, bound: ReleaseBound) -> Duration {
        self.masters
            .iter()
            .map(|master| bound.answer.max(bound.retry_for(&master.target)))
            .max()
            .unwrap_or(bound.answer)
    }
}

/// Whether an error is one a retry may cure (a master unreachable or slow), as opposed to a
/// refusal that will repeat (bad password, foreign data).
pub(crate) fn transient(err: &anyhow::Error) -> bool {
    matches!(failure_of(err), None | Some(Failure::Unavailable))
}

/// The number of URLs quorum mode needs, or why these are not enough.
pub(crate) fn check_count(count: usize) -> Result<(), String> {
    if count < MIN_MASTERS {
        Err(format!(
            "{count} Redis URLs given; quorum mode needs at least {MIN_MASTERS} independent masters (or give exactly one)"
        ))
    } else if count.is_multiple_of(2) {
        Err(format!(
            "{count} Redis URLs given; quorum mode needs an odd number: with {count}, a majority is {} and one more lost master stops everything, as with {}",
            count / 2 + 1,
            count - 1
        ))
    } else {
        Ok(())
    }
}

/// The answers of one acquisition round, counted.
struct Round {
    /// The masters that granted the lock (by index), and the fence each issued.
    granted: Vec<(usize, u64)>,
    /// Each busy master's holder, server time and advice on when to look again.
    busy: Vec<(Option<Holder>, u64, Duration)>,
    /// Masters where the re-entered token holds nothing.
    not_held: usize,
}

impl Round {
    fn of(replies: &[anyhow::Result<Acquisition>]) -> Self {
        let mut round = Round {
            granted: Vec::new(),
            busy: Vec::new(),
            not_held: 0,
        };
        for (index, reply) in replies.iter().enumerate() {
            match reply {
                Ok(Acquisition::Acquired(lease)) => round.granted.push((index, lease.fence)),
                Ok(Acquisition::Busy {
                    holder, now, hint, ..
                }) => round.busy.push((holder.clone(), *now, *hint)),
                Ok(Acquisition::NotHeldByToken) => round.not_held += 1,
                Ok(Acquisition::Gone | Acquisition::Cancelled) | Err(_) => {}
            }
        }
        round
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_allows_for_the_drift() {
        let ms = Duration::from_millis;
        assert_eq!(validity(ms(10_000), ms(0)), ms(10_000 - 102));
        assert_eq!(validity(ms(10_000), ms(500)), ms(10_000 - 500 - 102));
        // Elapsed below the lease, but the drift eats the rest: nothing is valid.
        assert_eq!(validity(ms(1_000), ms(990)), Duration::ZERO);
        assert_eq!(validity(ms(1_000), ms(2_000)), Duration::ZERO);
    }

    #[test]
    fn the_count_of_masters_is_odd_and_at_least_three() {
        assert!(check_count(2).unwrap_err().contains("at least 3"));
        assert!(check_count(4).unwrap_err().contains("odd"));
        assert!(check_count(3).is_ok() && check_count(5).is_ok() && check_count(7).is_ok());
    }

    #[test]
    fn a_request_is_bounded_well_inside_the_lease() {
        let ms = Duration::from_millis;
        assert_eq!(per_master_limit(ms(5_000), ms(10_000)), ms(1_000));
        assert_eq!(per_master_limit(ms(300), ms(10_000)), ms(300));
        assert_eq!(per_master_limit(ms(300), ms(50)), ms(10));
    }
}
