//! What the commands read from a quorum, and what they may do to it by hand: each master's
//! view of a lock and the majority's verdict (`inspect`), the listing (`list`, `metrics`), the
//! merged history (`history`, `check`), the forced release; and the flags quorum mode refuses.

use crate::conn::Session;
use crate::keys::Prefix;
use crate::lock::{HistoryEntry, Holder, Listing, Lock, LockState, Scope, Unreadable, list};
use crate::log::Log;

use super::{Quorum, WithContextOf as _};

impl Quorum {
    /// Removes every holder on every master; the holders evicted (each once) and a master's
    /// time. Fails when fewer than a majority answered (the lock may still be held).
    #[allow(clippy::type_complexity)]
    pub(crate) fn force_release(
        &self,
        lock: &Lock,
        why: &str,
    ) -> anyhow::Result<(u64, Vec<Holder>, Vec<Unreadable>, String)> {
        let (lock, why) = (lock.clone(), why.to_owned());
        let replies = self.fan_out(self.request_timeout, move |session| {
            lock.force_release(session, &why)
        });
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        if answered < self.majority() {
            return Err(self.too_few(answered, &replies));
        }
        let mut now = 0;
        let mut evicted: Vec<Holder> = Vec::new();
        let mut unreadable = Vec::new();
        for (at, holders, skipped) in replies.iter().filter_map(|r| r.as_ref().ok()) {
            now = now.max(*at);
            unreadable.extend(skipped.iter().cloned());
            for holder in holders {
                let seen = evicted.iter().any(|other| {
                    other.fence == holder.fence
                        && other.who.pid == holder.who.pid
                        && other.who.host == holder.who.host
                });
                if !seen {
                    evicted.push(holder.clone());
                }
            }
        }
        Ok((now, evicted, unreadable, Self::failures(&replies)))
    }

    /// Each master's view of the lock and the majority's verdict; an error when fewer than a
    /// majority answered and no verdict can be had.
    pub(crate) fn view(&self, lock: &Lock) -> anyhow::Result<QuorumView> {
        let lock = lock.clone();
        let views = self.fan_out(self.request_timeout, move |session| lock.inspect(session));
        let majority = self.majority();
        let states: Vec<&LockState> = views.iter().filter_map(|v| v.as_ref().ok()).collect();
        let free = states
            .iter()
            .filter(|state| state.holder_count == 0)
            .count();
        let mut fences: Vec<u64> = states
            .iter()
            .flat_map(|state| state.holders.iter().map(|holder| holder.fence))
            .collect();
        fences.sort_unstable();
        let fence = fences
            .iter()
            .copied()
            .find(|fence| fences.iter().filter(|other| *other == fence).count() >= majority);
        let verdict = if fence.is_some() {
            Verdict::Held
        } else if free >= majority {
            Verdict::Free
        } else if states.len() < majority {
            return Err(self.too_few(states.len(), &views));
        } else {
            Verdict::Contested
        };
        Ok(QuorumView {
            verdict,
            fence,
            majority,
            masters: self.shown().into_iter().zip(views).collect(),
        })
    }

    /// Each master's listing of the locks under `prefix` (a master that did not answer is
    /// warned of); an error when fewer than a majority answered.
    pub(crate) fn list(
        &self,
        prefix: &Prefix,
        scope: Scope,
        log: Log,
    ) -> anyhow::Result<Vec<Listing>> {
        let replies = self.each_session(|session| list(session, prefix, scope));
        let answered = replies.iter().filter(|reply| reply.is_ok()).count();
        if answered < self.majority() {
            return Err(self.too_few(answered, &replies));
        }
        let mut listings = Vec::new();
        for (reply, url) in replies.into_iter().zip(self.shown()) {
            match reply {
                Ok(listing) => listings.push(listing),
                Err(err) => log.warn(format_args!("master {url} did not answer ({err:#})")),
            }
        }
        Ok(listings)
    }

    /// Every master's history of `lock`, merged (see `Store::history`): the latest time a
    /// master answered with, the holds oldest first, the entries that cannot be read.
    #[allow(clippy::type_complexity)]
    pub(crate) fn history(
        &self,
        lock: &Lock,
        log: Log,
    ) -> anyhow::Result<(u64, Vec<HistoryEntry>, Vec<Unreadable>)> {
        let lock = lock.clone();
        let replies = self.fan_out(self.request_timeout, move |session| lock.history(session));
        let answered = replies.iter().filter(|reply| reply.is_ok()).count();
        if answered < self.majority() {
            return Err(self.too_few(answered, &replies));
        }
        let (mut now, mut merged, mut unreadable) = (0, Vec::<HistoryEntry>::new(), Vec::new());
        for (reply, url) in replies.into_iter().zip(self.shown()) {
            let (at, entries, skipped) = match reply {
                Ok(read) => read,
                Err(err) => {
                    log.warn(format_args!("master {url} did not answer ({err:#})"));
                    continue;
                }
            };
            now = now.max(at);
            unreadable.extend(skipped);
            for entry in entries {
                match merged.iter_mut().find(|seen| seen.fence == entry.fence) {
                    Some(seen) if told(&entry) > told(seen) => *seen = entry,
                    Some(_) => {}
                    None => merged.push(entry),
                }
            }
        }
        merged.sort_by_key(|entry| entry.fence);
        Ok((now, merged, unreadable))
    }

    /// Each master's sessions for reading every key (`SCAN`), in the masters' order.
    pub(crate) fn each_session<T: Send>(
        &self,
        read: impl Fn(Session) -> anyhow::Result<T> + Sync,
    ) -> Vec<anyhow::Result<T>> {
        let read = &read;
        std::thread::scope(|scope| {
            let running: Vec<_> = self
                .masters
                .iter()
                .map(|master| {
                    scope.spawn(move || {
                        master
                            .target
                            .connect()
                            .and_then(read)
                            .with_context_of(&master.target)
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a request panicked")))
                })
                .collect()
        })
    }
}

/// How much an entry tells of how its hold ended, to choose among the masters' entries of one
/// fence: an acquisition given back (a round that fell short there) least, then a hold with
/// no end, one that ended, one that ended with the command's status.
fn told(entry: &HistoryEntry) -> u8 {
    let status = entry.exit.is_some() || entry.signal.is_some();
    match entry.outcome.as_deref() {
        Some("given back") => 0,
        _ if entry.ended.is_none() => 1,
        _ if !status => 2,
        _ => 3,
    }
}

/// A flag that one Redis takes and a quorum refuses.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OneRedisOnly {
    Replicas,
    Limit,
}

/// The lock over a quorum: each master's view and the majority's verdict.
pub(crate) struct QuorumView {
    pub(crate) verdict: Verdict,
    /// The fence held on a majority, when held.
    pub(crate) fence: Option<u64>,
    pub(crate) majority: usize,
    /// Each master as shown to people, and its view (or why it did not answer).
    pub(crate) masters: Vec<(String, anyhow::Result<LockState>)>,
}

/// What a majority of masters says of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// One holder's fence on a majority.
    Held,
    /// No live holder on a majority.
    Free,
    /// Neither: nobody can take it until leases run out.
    Contested,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Free => "free",
            Verdict::Contested => "contested",
        }
    }
}

/// Why quorum mode refuses `flag`.
pub(crate) fn refusal(flag: OneRedisOnly) -> &'static str {
    match flag {
        OneRedisOnly::Replicas => {
            "--replicas: not in quorum mode (the majority of independent masters is the redundancy)"
        }
        OneRedisOnly::Limit => {
            "--limit: not in quorum mode: with every master admitting N holders, N+1 holders can each win a majority"
        }
    }
}
