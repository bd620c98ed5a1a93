//! Where locks live: one Redis (a server, a Sentinel-managed master or a Cluster), or several
//! independent masters in quorum mode (`quorum`). The renewals and the final release of `run`
//! and of `acquire --keep-alive`'s keeper go through here, so they need not know which.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::exit::{Failure, NoReply, failure_of, no_reply};
use crate::lock::{Lock, Release, ReleaseRequest, Replicas, Token};
use crate::log::Log;
use crate::quorum::Quorum;

/// One Redis, or a quorum of masters.
#[derive(Clone)]
pub(crate) enum Store {
    One(Target),
    Quorum(Arc<Quorum>),
}

impl Store {
    /// Resets the lease of `token` to `ttl`, within `timeout` (per master in quorum mode).
    /// Returns whether it was confirmed, and the connection to reuse next time, if any.
    pub(crate) fn extend(
        &self,
        lock: &Lock,
        session: Option<Session>,
        token: &Token,
        ttl: Duration,
        replicas: Option<Replicas>,
        timeout: Duration,
    ) -> anyhow::Result<(bool, Option<Session>)> {
        match self {
            Store::One(target) => {
                let mut session = match session.filter(|_| target.reuses_connections()) {
                    Some(session) => session,
                    None => target.connect_within(timeout)?,
                };
                session.set_command_timeout(timeout)?;
                let extended = lock.extend(&mut session, token, ttl, replicas)?;
                Ok((extended, Some(session)))
            }
            Store::Quorum(quorum) => quorum
                .extend(lock, token, ttl, timeout)
                .map(|extended| (extended, None)),
        }
    }

    /// Token-checked release (or keep for the minimum hold) within `bound`. With one Redis,
    /// over `session` if given; in quorum mode, on every master at once. A release is not
    /// idempotent (a nested hold only counts down), so it is sent a second time, on a fresh
    /// connection, only when the first cannot run any more: the connection was found closed
    /// (a server that dropped it while idle) or could not be made. Any other failure (a
    /// timeout, a TLS error, an error reply from something between) may leave it to run: this
    /// returns its error.
    pub(crate) fn release(
        &self,
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
        let target = match self {
            Store::Quorum(quorum) => return quorum.release(lock, token, min_hold, ending, bound),
            Store::One(target) => target,
        };
        // The whole bound for the first attempt: a renewal's connection still carries the
        // renewals' shorter timeout. `sent`: the request may have reached the server.
        let (released, sent) = match session.filter(|_| target.reuses_connections()) {
            Some(mut session) => {
                let _ = session.set_command_timeout(bound);
                (lock.release(&mut session, token, min_hold, ending), true)
            }
            None => match target.connect_within(bound) {
                Ok(mut fresh) => {
                    let released = fresh
                        .set_command_timeout(bound)
                        .and_then(|()| lock.release(&mut fresh, token, min_hold, ending));
                    (released, true)
                }
                Err(err) => (Err(err), false),
            },
        };
        match released {
            Err(err)
                if failure_of(&err) == Some(Failure::Unavailable)
                    && (!sent || no_reply(&err) == Some(NoReply::Dropped))
                    && !deadline.remaining().is_zero() =>
            {
                log.step(format_args!("releasing failed ({err:#}); reconnecting"));
                target
                    .connect_within(deadline.remaining())
                    .and_then(|mut fresh| {
                        fresh.set_command_timeout(
                            deadline.remaining().max(Duration::from_millis(10)),
                        )?;
                        lock.release(&mut fresh, token, min_hold, ending)
                    })
            }
            result => result,
        }
    }
}
