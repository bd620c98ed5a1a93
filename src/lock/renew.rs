//! Keeping what one has: a holder's lease (`lua/extend.lua`) and a waiter's place in the queue
//! (`lua/refresh.lua`).

use std::time::Duration;

use super::reply::{ExtendCode, RefreshCode, Reply};
use super::{Lock, QUEUE_ENTRY_TTL, Replicas, Token, Waiter, millis, ms, unacknowledged};
use crate::conn::Session;
use crate::scripts::{self, ExtendInputs, RefreshInputs, arg};

/// A waiter's place after [`Lock::refresh`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// Still queued, at `position` (from 1) of `length`; `now` is the server's time (Unix ms).
    Queued {
        now: u64,
        position: usize,
        length: usize,
    },
    /// Not queued any more: the lock was handed over (the grant is on the wake list; an
    /// `acquire` with [`Queueing::Stay`](super::Queueing::Stay) claims it) or the entry expired (that call says
    /// [`Acquisition::Gone`](super::Acquisition::Gone)).
    NotQueued { now: u64 },
}

impl Lock {
    /// Resets the lease of `token` to `ttl`. `false`: the token holds nothing (nothing changed).
    /// With `replicas`, a renewal fewer replicas acknowledged is an error (unavailable): it
    /// confirms nothing.
    pub fn extend(
        &self,
        session: &mut Session,
        token: &Token,
        ttl: Duration,
        replicas: Option<Replicas>,
    ) -> anyhow::Result<bool> {
        let ttl_ms = millis(ttl)?;
        let keys = &self.keys;
        let (reply, acknowledged) = session.run(|con| {
            let inputs = ExtendInputs {
                holders: arg(&keys.holders),
                leases: arg(&keys.leases),
                history: arg(&keys.history),
                token: arg(token.as_str()),
                ttl_ms: arg(ttl_ms),
                keeper: arg(self.keeper.map_or(String::new(), |pid| pid.to_string())),
            };
            match replicas {
                Some(replicas) => scripts::EXTEND
                    .call_and_wait(con, inputs, replicas.count, ms(replicas.timeout))
                    .map(|(reply, acknowledged)| (reply, Some(acknowledged))),
                None => scripts::EXTEND.call(con, inputs).map(|reply| (reply, None)),
            }
        })?;
        let (code, mut reply) = Reply::open::<ExtendCode>(scripts::EXTEND.file(), reply)?;
        let _now: u64 = reply.field()?;
        match (code, replicas, acknowledged) {
            (ExtendCode::NotHeld, ..) => Ok(false),
            (ExtendCode::Extended, Some(replicas), Some(acknowledged)) => match acknowledged {
                Ok(count) if count >= replicas.count => Ok(true),
                Ok(count) => Err(unacknowledged("the renewal", count, replicas)),
                Err(err) => Err(session.explain(&err).context("WAIT for replicas failed")),
            },
            (ExtendCode::Extended, ..) => Ok(true),
        }
    }

    /// Keeps `waiter`'s queue entry alive for another [`QUEUE_ENTRY_TTL`], without reading the
    /// rest of the queue or the holders: the cheap call for a waiter that has nothing to look
    /// at, only a place to keep.
    pub fn refresh(&self, session: &mut Session, waiter: &Waiter) -> anyhow::Result<Refreshed> {
        let keys = &self.keys;
        let reply = session.run(|con| {
            scripts::REFRESH.call(
                con,
                RefreshInputs {
                    queue: arg(&keys.queue),
                    waiters: arg(&keys.waiters),
                    waiter: arg(&waiter.id),
                    entry_ttl_ms: arg(ms(QUEUE_ENTRY_TTL)),
                },
            )
        })?;
        let (code, mut reply) = Reply::open::<RefreshCode>(scripts::REFRESH.file(), reply)?;
        let now = reply.field()?;
        let mut size = || {
            reply
                .field()
                .map(|n: u64| usize::try_from(n).unwrap_or(usize::MAX))
        };
        Ok(match code {
            RefreshCode::Queued => Refreshed::Queued {
                now,
                position: size()?,
                length: size()?,
            },
            RefreshCode::NotQueued => Refreshed::NotQueued { now },
        })
    }
}
