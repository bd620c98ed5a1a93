//! One Redis (a server, a Sentinel-managed master or a Cluster): a lease renewed and released
//! over the connection the caller kept, or a fresh one, within the caller's bound.

use std::time::Duration;

use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::duration;
use crate::exit::{Failure, Fate, NoReply, failure_of, fate, reason};
use crate::lock::{Lock, Release, ReleaseRequest};
use crate::log::{Log, printable};

use super::{ReleaseBound, Renewal};

mod queue;

pub(super) use queue::Acquirer;

/// The pause before a release is sent again: 50 ms, doubled each time up to 200 ms (a
/// Cluster answers CLUSTERDOWN for a second or more while a master fails over; the sentinels
/// name a new master a few seconds after the old one died). A connection found closed is
/// replaced at once the first time.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Resets a lease as `renewal` says, over `session` when the target reuses connections;
/// returns whether it was confirmed, and the connection.
pub(super) fn extend(
    target: &Target,
    lock: &Lock,
    session: Option<Session>,
    renewal: &Renewal<'_>,
) -> anyhow::Result<(bool, Option<Session>)> {
    let mut session = match session.filter(|_| target.reuses_connections()) {
        Some(session) => session,
        None => target.connect_within(renewal.timeout)?,
    };
    session.set_command_timeout(renewal.timeout)?;
    let extended = lock.extend(&mut session, renewal.token, renewal.ttl, renewal.replicas)?;
    Ok((extended, Some(session)))
}

/// Token-checked release (or keep for the minimum hold), over `session` if given. `bound.answer`
/// bounds each attempt: a server that does not answer at all (silence: the release may still
/// run when it gets to it) ends the release then, with its error, as does any failure that
/// may have let it run or that another attempt will not mend.
///
/// A release is not idempotent (a nested hold only counts down), so it is sent again only
/// when it is known not to have run, by an answer that says so ([`NotRun`]): the server refused
/// it before running it (CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING, READONLY from a master
/// demoted by a failover), or it never reached a server (connection refused, a master the
/// sentinels no longer name, a redirection to a node that is gone); or when its connection was
/// found closed (a server that dropped it while idle, a restart: [`NoReply::Dropped`]). Each
/// time on a fresh connection, which finds the master (Sentinel) or the slot's node (Cluster)
/// anew, after a pause, until the target's release timeout has passed since the first attempt
/// (or the lease has ended, when that comes first: see [`ReleaseBound`]). A release that runs
/// after being sent again says so in the history (`why`) and in the log.
pub(super) fn release(
    target: &Target,
    lock: &Lock,
    session: Option<Session>,
    request: &ReleaseRequest<'_>,
    bound: ReleaseBound,
    log: Log,
) -> anyhow::Result<Release> {
    let started = BootInstant::now();
    let answer = bound.answer;
    let retry_for = bound.retry_for(target);
    let retry_until = started + retry_for;
    let deadline = started + answer.max(retry_for);
    // Bounded by the time already; a count as well, in case the clock is stuck.
    let max_attempts = 2 + retry_for.as_millis() / RETRY_PAUSE.as_millis();
    let &ReleaseRequest {
        token,
        min_hold,
        ending,
    } = request;
    // A renewal's connection still carries the renewals' shorter timeout: the first attempt
    // gets the whole of `answer`, each later one what is left of the bound, `answer` at most.
    let mut session = session.filter(|_| target.reuses_connections());
    let mut ending = ending.clone();
    // What the first attempt known not to have run was told, once one was.
    let mut first_failure: Option<String> = None;
    let mut attempt: u128 = 0;
    loop {
        let limit = if attempt == 0 {
            answer
        } else {
            answer
                .min(deadline.remaining())
                .max(Duration::from_millis(10))
        };
        let released = match session.take() {
            Some(session) => Ok(session),
            None => target.connect_within(limit),
        }
        .and_then(|mut session| {
            session.set_command_timeout(limit)?;
            lock.release(&mut session, token, min_hold, &ending)
        });
        attempt += 1;
        let (err, fate) = match released {
            Ok(released) => {
                if let Some(first) = &first_failure {
                    log.notice(format_args!(
                        "lock '{}' released after {} attempts in {} on {} (the first: {first})",
                        printable(lock.name.as_str()),
                        attempt,
                        duration::display(BootInstant::now().since(started)),
                        target.redacted()
                    ));
                }
                return Ok(released);
            }
            Err(err) => {
                let fate = fate(&err);
                (err, fate)
            }
        };
        let again = failure_of(&err) == Some(Failure::Unavailable)
            && matches!(
                fate,
                Some(Fate::NotRun(_) | Fate::NoReply(NoReply::Dropped))
            );
        if !again || attempt >= max_attempts || retry_until.remaining().is_zero() {
            return Err(err);
        }
        // The history says why this hold's release took more than one attempt (not for a
        // connection that was closed while idle, a routine matter).
        if matches!(fate, Some(Fate::NotRun(_))) && first_failure.is_none() {
            let first = reason(&err);
            let note = format!("release sent again (the first attempt: {first})");
            ending.why = Some(match &request.ending.why {
                Some(why) => format!("{why}; {note}"),
                None => note,
            });
            first_failure = Some(first);
        }
        log.step(format_args!("releasing failed ({err:#}); trying again"));
        // A closed connection is replaced at once, the first time.
        if attempt > 1 || fate != Some(Fate::NoReply(NoReply::Dropped)) {
            let pause = RETRY_PAUSE * (1 << (attempt - 1).min(2));
            if crate::interrupt::pause(pause.min(retry_until.remaining())).is_err() {
                // A signal cut it short (`interrupt`).
                return Err(err);
            }
        }
    }
}
