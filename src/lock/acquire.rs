//! Taking a lock: what to ask for, how to queue, and what came of it (`lua/acquire.lua`); and
//! quorum mode's second round, which writes the fence back (`lua/raise.lua`).

use std::time::Duration;

use super::record::decode;
use super::reply::{AcquireCode, RaiseCode, Reply};
use super::{
    CLAIM_GRANT, Ending, GRANT, Holder, Identity, Lock, QUEUE_ENTRY_TTL, Replicas, Retention,
    Token, WAKE_TTL, Waiter, flag, millis, ms, unacknowledged,
};
use crate::conn::Session;
use crate::exit::{Failure, fail};
use crate::scripts::{self, AcquireInputs, RaiseInputs, arg};

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One holder at a time.
    Exclusive,
    /// Any number of shared holders, no exclusive one; queued exclusive requests go first.
    Shared,
    /// At most this many holders at once.
    Semaphore(u32),
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
            Mode::Semaphore(_) => "semaphore",
        }
    }

    fn limit(self) -> u32 {
        match self {
            Mode::Semaphore(limit) => limit,
            Mode::Exclusive | Mode::Shared => 0,
        }
    }
}

/// What to ask for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub token: &'a Token,
    pub ttl: Duration,
    pub mode: Mode,
    pub who: &'a Identity,
    /// The token already holds the lock (a nested invocation): count one more hold.
    pub reenter: bool,
    /// Replicas that must acknowledge an acquisition, or it is given back and fails.
    pub replicas: Option<Replicas>,
    /// What the lock's history keeps from this hold on.
    pub history: Retention,
}

/// Whether and how an acquisition queues.
#[derive(Debug, Clone, Copy)]
pub enum Queueing<'a> {
    /// Fail fast: never join the queue.
    No,
    /// Join the queue (or refresh the entry) if the lock cannot be taken now.
    Join(&'a Waiter),
    /// Only take a lock handed over or reached at the head; never (re-)join. Used after the
    /// first call, so a late call cannot take the lock after the waiter has left.
    Stay(&'a Waiter),
}

/// A successful acquisition.
#[derive(Debug)]
pub struct Lease {
    pub token: Token,
    pub fence: u64,
    pub ttl: Duration,
}

/// What `acquire` found.
#[derive(Debug)]
pub enum Acquisition {
    Acquired(Lease),
    /// Not acquired. `holder` is who holds it (None for a lock being handed over), `now` the
    /// server's time; `position` in the queue (0 = not queued) of `length`; `hint`: when the
    /// lock may change without anyone telling us (the holder's expiry, or the entry refresh).
    Busy {
        holder: Option<Holder>,
        now: u64,
        position: usize,
        length: usize,
        hint: Duration,
    },
    /// `Queueing::Stay`, and the waiter is neither queued nor handed the lock any more.
    Gone,
    /// `reenter`, and the token does not hold the lock (any more).
    NotHeldByToken,
    /// The token was given up (see [`Lock::leave`]): nothing was taken.
    Cancelled,
}

impl Lock {
    /// Quorum mode: writes `fence` back where `token` holds the lock (the counter rises to it,
    /// the record and the history entry carry it). `false`: the token holds nothing here.
    pub fn raise_fence(
        &self,
        session: &mut Session,
        token: &Token,
        fence: u64,
    ) -> anyhow::Result<bool> {
        let keys = &self.keys;
        let reply = session.run(|con| {
            scripts::RAISE.call(
                con,
                RaiseInputs {
                    holders: arg(&keys.holders),
                    leases: arg(&keys.leases),
                    fence: arg(&keys.fence),
                    history: arg(&keys.history),
                    token: arg(token.as_str()),
                    issued: arg(fence),
                },
            )
        })?;
        let (code, mut reply) = Reply::open::<RaiseCode>(scripts::RAISE.file(), reply)?;
        let _now: u64 = reply.field()?;
        Ok(match code {
            RaiseCode::Raised => true,
            RaiseCode::NotHeld => false,
        })
    }

    /// Takes the lock as `request` says, or reports who holds it, queueing as `queueing` says.
    pub fn acquire(
        &self,
        session: &mut Session,
        request: &Request<'_>,
        queueing: Queueing<'_>,
    ) -> anyhow::Result<Acquisition> {
        let ttl_ms = millis(request.ttl)?;
        if let Some(replicas) = request.replicas {
            enough_replicas_connected(session, replicas)?;
        }
        let (reply, acknowledged) = session.run(|con| {
            let inputs = self.acquire_inputs(request, queueing, ttl_ms);
            match request.replicas {
                Some(replicas) => scripts::ACQUIRE
                    .call_and_wait(con, inputs, replicas.count, ms(replicas.timeout))
                    .map(|(reply, acknowledged)| (reply, Some(acknowledged))),
                None => scripts::ACQUIRE
                    .call(con, inputs)
                    .map(|reply| (reply, None)),
            }
        })?;
        let (code, mut reply) = Reply::open::<AcquireCode>(scripts::ACQUIRE.file(), reply)?;
        match code {
            AcquireCode::Acquired => {
                let fence: String = reply.field()?;
                let lease = Lease {
                    token: request.token.clone(),
                    fence: fence.parse().map_err(|_| reply.unexpected())?,
                    ttl: request.ttl,
                };
                match (request.replicas, acknowledged) {
                    (Some(replicas), Some(acknowledged)) => {
                        self.unless_unacknowledged(session, lease, replicas, acknowledged)
                    }
                    _ => Ok(Acquisition::Acquired(lease)),
                }
            }
            AcquireCode::Busy => {
                let now = reply.field()?;
                let holder: Option<String> = reply.field()?;
                Ok(Acquisition::Busy {
                    // A record this version cannot read names nobody; the lock is busy all
                    // the same.
                    holder: holder.as_deref().and_then(|json| decode(json).ok()),
                    now,
                    position: reply.field()?,
                    length: reply.field()?,
                    hint: Duration::from_millis(reply.field()?),
                })
            }
            AcquireCode::Gone => Ok(Acquisition::Gone),
            AcquireCode::NotHeld => Ok(Acquisition::NotHeldByToken),
            AcquireCode::Cancelled => Ok(Acquisition::Cancelled),
        }
    }

    /// The inputs of `lua/acquire.lua` for `request`, queueing as `queueing` says.
    fn acquire_inputs(
        &self,
        request: &Request<'_>,
        queueing: Queueing<'_>,
        ttl_ms: u64,
    ) -> AcquireInputs {
        let Request {
            token,
            mode,
            who,
            reenter,
            history,
            ..
        } = *request;
        let (waiter_id, queued_only, claims) = match queueing {
            Queueing::No => ("", false, false),
            Queueing::Join(waiter) => (waiter.id.as_str(), false, waiter.claims),
            Queueing::Stay(waiter) => (waiter.id.as_str(), true, waiter.claims),
        };
        let keys = &self.keys;
        AcquireInputs {
            holders: arg(&keys.holders),
            leases: arg(&keys.leases),
            fence: arg(&keys.fence),
            queue: arg(&keys.queue),
            waiters: arg(&keys.waiters),
            wake: arg(keys.wake(waiter_id)),
            cancel: arg(keys.cancel(token.as_str())),
            history: arg(&keys.history),
            token: arg(token.as_str()),
            ttl_ms: arg(ttl_ms),
            mode: arg(mode.name()),
            limit: arg(mode.limit()),
            host: arg(&who.host),
            pid: arg(who.pid),
            user: arg(&who.user),
            command: arg(&who.command),
            note: arg(who.note.as_deref().unwrap_or("")),
            waiter: arg(waiter_id),
            stay: arg(flag(queued_only)),
            entry_ttl_ms: arg(ms(QUEUE_ENTRY_TTL)),
            grant_ms: arg(ms(GRANT)),
            wake_ttl_ms: arg(ms(WAKE_TTL)),
            reenter: arg(flag(reenter)),
            claim_ms: arg(if claims { ms(CLAIM_GRANT) } else { 0 }),
            history_keep: arg(history
                .holds
                .map(|holds| holds.to_string())
                .unwrap_or_default()),
            history_keep_ms: arg(history
                .ttl
                .map(|ttl| ms(ttl).to_string())
                .unwrap_or_default()),
        }
    }

    /// The lock just taken as `lease`, if enough replicas acknowledged it (`acknowledged`: the
    /// WAIT's answer). Not (known to be) on enough replicas, a failover could lose it: it is
    /// given back at once, and that is an error.
    fn unless_unacknowledged(
        &self,
        session: &mut Session,
        lease: Lease,
        replicas: Replicas,
        acknowledged: redis::RedisResult<u32>,
    ) -> anyhow::Result<Acquisition> {
        let err = match acknowledged {
            Ok(count) if count >= replicas.count => return Ok(Acquisition::Acquired(lease)),
            Ok(count) => unacknowledged("the lock", count, replicas),
            Err(err) => session.explain(&err).context("WAIT for replicas failed"),
        };
        // Never recorded as a run that ended.
        let ending = Ending {
            why: Some("given back: too few replicas acknowledged it".to_owned()),
            ..Ending::default()
        };
        self.release(session, &lease.token, Duration::ZERO, &ending)?;
        Err(err.context("the lock was taken and given back"))
    }
}

/// With too few replicas connected to acknowledge it, taking the lock would only give it back:
/// nothing is taken (no fence burned, no hold in the history, no contender blocked), and a wait
/// tries again after a pause. `WAIT 0 0` answers at once with the replicas that acknowledge
/// this connection's writes: all connected ones. (Not on a Cluster, where this connection may
/// be on another master than the lock's slot: the WAIT after the script still gives an
/// unacknowledged lock back. Nor on a connection that has written: WAIT then counts the
/// replicas that acknowledged that write.)
fn enough_replicas_connected(session: &mut Session, replicas: Replicas) -> anyhow::Result<()> {
    if session.is_cluster() || !session.is_fresh() {
        return Ok(());
    }
    let connected: u32 = session.run(|con| redis::cmd("WAIT").arg(0).arg(0).query(con))?;
    if connected < replicas.count {
        return Err(fail(
            Failure::Unavailable,
            format!(
                "only {connected} of the {} replicas asked for are connected; nothing was taken",
                replicas.count
            ),
        ));
    }
    Ok(())
}
