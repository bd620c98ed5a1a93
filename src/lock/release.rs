//! Giving a lock up (`lua/release.lua`): by token, by force, or giving up a waiter's token
//! altogether (`leave`); and what a holder reports for the history as it goes.

use std::time::Duration;

use super::record::{HOLDER_RECORD, time_and_records};
use super::reply::{LeaveCode, ReleaseCode, Reply};
use super::{CANCEL_MARK_TTL, GRANT, Holder, Lock, Token, Unreadable, WAKE_TTL, Waiter, ms};
use crate::conn::Session;
use crate::scripts::{self, ReleaseInputs, arg};

/// What a holder reports when it gives the lock up, for the history: the fence it held (so a
/// lock it lost is marked as such), and how its command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ending {
    pub held_fence: Option<u64>,
    pub exit: Option<i32>,
    pub signal: Option<i32>,
    /// Why it ended, for people: a limit that stopped the command, who forced the lock.
    pub why: Option<String>,
}

/// A token's release, as [`Lock::release`] takes it, for the callers that pass one on (the
/// store, in quorum mode to every master).
#[derive(Debug, Clone, Copy)]
pub struct ReleaseRequest<'a> {
    pub token: &'a Token,
    /// A lock held for less than this since its acquisition is kept until then instead.
    pub min_hold: Duration,
    /// What goes into the history.
    pub ending: &'a Ending,
}

/// What `release` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Released,
    /// Kept for the rest of the minimum hold; expires by itself after this long.
    Kept(Duration),
    /// One hold of a re-entered lock ended; this many remain.
    StillHeld(u32),
    /// The token holds nothing; nothing changed.
    NotHeld,
}

/// What `lua/release.lua` is asked to do (its `op`), with the inputs that go with it.
#[derive(Debug, Clone, Copy)]
enum ReleaseOp<'a> {
    /// `token`: end one hold of a token, or keep the lock for the rest of its minimum hold.
    Token(ReleaseRequest<'a>),
    /// `force`: evict every holder; the ending goes into each evicted hold's history.
    Force(&'a Ending),
    /// `leave`: give a waiter's token up; `mark`: set the token's cancel mark.
    Leave { waiter: &'a Waiter, mark: bool },
}

impl ReleaseOp<'_> {
    /// The script's name for it.
    fn name(self) -> &'static str {
        match self {
            ReleaseOp::Token(_) => "token",
            ReleaseOp::Force(_) => "force",
            ReleaseOp::Leave { .. } => "leave",
        }
    }

    /// Sent whole (EVAL), not by its SHA (EVALSHA), because it must take effect even if its
    /// reply is never read: a token is given up as redlock stops waiting (a signal, a timeout),
    /// often on a server that stalled, and a server that lost its script cache meanwhile would
    /// answer EVALSHA with a NOSCRIPT that nobody reads, and run nothing.
    fn sent_whole(self) -> bool {
        matches!(self, ReleaseOp::Leave { .. })
    }
}

impl Lock {
    /// Gives up `waiter`'s token: leaves the queue, gives back whatever the token holds (a lock
    /// handed over meanwhile, or taken by a request whose reply never came), and marks the token
    /// so that a request of it still on its way to Redis takes nothing when it runs, whichever
    /// comes first. The mark lives [`CANCEL_MARK_TTL`].
    /// `mark`: a request of the token may still be on its way; without one, leaving leaves
    /// nothing behind.
    pub fn leave(&self, session: &mut Session, waiter: &Waiter, mark: bool) -> anyhow::Result<()> {
        let reply = self.release_script(session, ReleaseOp::Leave { waiter, mark })?;
        match Reply::open::<LeaveCode>(scripts::RELEASE.file(), reply)?.0 {
            LeaveCode::Left => Ok(()),
        }
    }

    /// Releases the hold of `token`; with a non-zero `min_hold`, a lock held for less than that
    /// since its acquisition is kept until then instead (and expires by itself). A released
    /// lock goes to the head of the queue. `ending` goes into the history.
    pub fn release(
        &self,
        session: &mut Session,
        token: &Token,
        min_hold: Duration,
        ending: &Ending,
    ) -> anyhow::Result<Release> {
        let request = ReleaseRequest {
            token,
            min_hold,
            ending,
        };
        let reply = self.release_script(session, ReleaseOp::Token(request))?;
        let (code, mut reply) = Reply::open::<ReleaseCode>(scripts::RELEASE.file(), reply)?;
        Ok(match code {
            ReleaseCode::Released => Release::Released,
            ReleaseCode::NotHeld => Release::NotHeld,
            ReleaseCode::Kept => Release::Kept(Duration::from_millis(reply.field()?)),
            ReleaseCode::StillHeld => {
                let holds: u64 = reply.field()?;
                Release::StillHeld(u32::try_from(holds).map_err(|_| reply.unexpected())?)
            }
        })
    }

    /// Removes every holder; returns the server time, the holders evicted, and the records of
    /// evicted holders that cannot be read. `why` (who forced it, and their reason) goes into
    /// each evicted hold's history.
    pub fn force_release(
        &self,
        session: &mut Session,
        why: &str,
    ) -> anyhow::Result<(u64, Vec<Holder>, Vec<Unreadable>)> {
        let ending = Ending {
            why: Some(why.to_owned()),
            ..Ending::default()
        };
        let reply = self.release_script(session, ReleaseOp::Force(&ending))?;
        time_and_records(
            reply,
            scripts::RELEASE.file(),
            &self.keys.holders,
            HOLDER_RECORD,
        )
    }

    /// Runs `lua/release.lua`.
    fn release_script(
        &self,
        session: &mut Session,
        op: ReleaseOp<'_>,
    ) -> anyhow::Result<redis::Value> {
        let nothing = Ending::default();
        let (token, waiter_id, min_hold, ending, mark) = match op {
            ReleaseOp::Token(request) => (
                Some(request.token),
                "",
                request.min_hold,
                request.ending,
                false,
            ),
            ReleaseOp::Force(ending) => (None, "", Duration::ZERO, ending, false),
            ReleaseOp::Leave { waiter, mark } => (
                Some(&waiter.token),
                waiter.id.as_str(),
                Duration::ZERO,
                &nothing,
                mark,
            ),
        };
        let keys = &self.keys;
        session.run(|con| {
            let inputs = ReleaseInputs {
                holders: arg(&keys.holders),
                leases: arg(&keys.leases),
                fence: arg(&keys.fence),
                queue: arg(&keys.queue),
                waiters: arg(&keys.waiters),
                wake: arg(keys.wake(waiter_id)),
                cancel: arg(keys.cancel(token.map_or("", Token::as_str))),
                history: arg(&keys.history),
                op: arg(op.name()),
                token: arg(token.map_or("", Token::as_str)),
                min_hold_ms: arg(ms(min_hold)),
                waiter: arg(waiter_id),
                grant_ms: arg(ms(GRANT)),
                wake_ttl_ms: arg(ms(WAKE_TTL)),
                mark_ttl_ms: arg(if mark { ms(CANCEL_MARK_TTL) } else { 0 }),
                held_fence: arg(ending
                    .held_fence
                    .map_or(String::new(), |fence| fence.to_string())),
                exit: arg(ending.exit.map_or(String::new(), |code| code.to_string())),
                signal: arg(ending
                    .signal
                    .map_or(String::new(), |signal| signal.to_string())),
                why: arg(ending.why.as_deref().unwrap_or_default()),
                notify: arg(if self.notify {
                    keys.released_channel()
                } else {
                    String::new()
                }),
            };
            if op.sent_whole() {
                scripts::RELEASE.call_whole(con, inputs)
            } else {
                scripts::RELEASE.call(con, inputs)
            }
        })
    }
}
