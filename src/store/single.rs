//! One Redis (a server, a Sentinel-managed master or a Cluster): a lease renewed and released
//! over the connection the caller kept, or a fresh one, within the caller's bound.

use std::time::Duration;

use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::exit::{Failure, NoReply, failure_of, no_reply, unserved};
use crate::lock::{Lock, Release, ReleaseRequest, Replicas, Token};
use crate::log::Log;

/// Attempts at one release at most (see [`release`]): its bound ends them first.
const MAX_RELEASES: u32 = 40;

/// The pause before a release is sent again after a refusal: doubled each time, up to 200 ms
/// (a Cluster answers CLUSTERDOWN for about a second while a master fails over).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Resets the lease of `token` to `ttl` within `timeout`, over `session` when the target
/// reuses connections; returns whether it was confirmed, and the connection.
pub(super) fn extend(
    target: &Target,
    lock: &Lock,
    session: Option<Session>,
    token: &Token,
    ttl: Duration,
    replicas: Option<Replicas>,
    timeout: Duration,
) -> anyhow::Result<(bool, Option<Session>)> {
    let mut session = match session.filter(|_| target.reuses_connections()) {
        Some(session) => session,
        None => target.connect_within(timeout)?,
    };
    session.set_command_timeout(timeout)?;
    let extended = lock.extend(&mut session, token, ttl, replicas)?;
    Ok((extended, Some(session)))
}

/// Token-checked release (or keep for the minimum hold) within `bound`, over `session` if
/// given. A release is not idempotent (a nested hold only counts down), so it is sent again,
/// on a fresh connection, only when it cannot have run: the connection was found closed (a
/// server that dropped it while idle) or could not be made, or the server refused it before
/// running it (a Cluster down while a master fails over, its slot moving, a redirection to a
/// node that is gone). Those are tried again, after a pause from the second time on, until
/// `bound` (at most [`MAX_RELEASES`] attempts). Any other failure (a timeout, a TLS error, an
/// error reply from something between) may leave it to run: this returns its error.
pub(super) fn release(
    target: &Target,
    lock: &Lock,
    session: Option<Session>,
    request: &ReleaseRequest<'_>,
    bound: Duration,
    log: Log,
) -> anyhow::Result<Release> {
    let deadline = BootInstant::now() + bound;
    let &ReleaseRequest {
        token,
        min_hold,
        ending,
    } = request;
    // A renewal's connection still carries the renewals' shorter timeout: the first attempt
    // gets the whole bound, each later one what is left of it. `sent`: the request may have
    // reached the server.
    let mut session = session.filter(|_| target.reuses_connections());
    let mut attempt = 0;
    loop {
        let remaining = if attempt == 0 {
            bound
        } else {
            deadline.remaining().max(Duration::from_millis(10))
        };
        let mut sent = false;
        let released = match session.take() {
            Some(session) => Ok(session),
            None => target.connect_within(remaining),
        }
        .and_then(|mut session| {
            sent = true;
            session.set_command_timeout(remaining)?;
            lock.release(&mut session, token, min_hold, ending)
        });
        attempt += 1;
        let err = match released {
            Err(err)
                if failure_of(&err) == Some(Failure::Unavailable)
                    && (!sent || unserved(&err) || no_reply(&err) == Some(NoReply::Dropped))
                    && attempt < MAX_RELEASES
                    && !deadline.remaining().is_zero() =>
            {
                err
            }
            result => return result,
        };
        // A closed connection is replaced at once; a server that refused the release or could
        // not be reached is asked again after a pause.
        if !sent || unserved(&err) {
            let pause = RETRY_PAUSE * (1 << (attempt - 1).min(2));
            std::thread::sleep(pause.min(deadline.remaining()));
        }
        log.step(format_args!("releasing failed ({err:#}); trying again"));
    }
}
