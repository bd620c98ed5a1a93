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

/// Each lock of the masters' listings once, as a quorum has it (`list`, `metrics`), with the
/// number of masters where it is held: its holders are the fences held on a `majority` of the
/// masters (each with the lease that ends when a majority no longer has it), as `inspect`'s
/// verdict reads them; its last fence the highest; its latest hold that is over the highest
/// fence any master recorded as over, that is not held on a majority now (a master that missed
/// the end, or gave an acquisition back, keeps an older or a lesser record: see `told`); its
/// latest success the highest fence any master recorded as one.
pub(crate) fn merge_listed(states: Vec<LockState>, majority: usize) -> Vec<(LockState, usize)> {
    let mut by_name: Vec<Vec<LockState>> = Vec::new();
    for state in states {
        match by_name.iter_mut().find(|seen| seen[0].name == state.name) {
            Some(seen) => seen.push(state),
            None => by_name.push(vec![state]),
        }
    }
    by_name
        .into_iter()
        .map(|seen| merge_lock(seen, majority))
        .collect()
}

/// One lock as a quorum has it, from each answering master's view (see `merge_listed`).
fn merge_lock(seen: Vec<LockState>, majority: usize) -> (LockState, usize) {
    let held_on = seen.iter().filter(|state| state.holder_count > 0).count();
    let mut by_fence: Vec<Vec<&Holder>> = Vec::new();
    for holder in seen.iter().flat_map(|state| &state.holders) {
        match by_fence
            .iter_mut()
            .find(|records| records[0].fence == holder.fence)
        {
            Some(records) => records.push(holder),
            None => by_fence.push(vec![holder]),
        }
    }
    let mut holders: Vec<Holder> = by_fence
        .into_iter()
        .filter(|records| records.len() >= majority)
        .map(|mut records| {
            // A majority holds it until the majority-th latest of its leases ends.
            records.sort_by_key(|holder| std::cmp::Reverse(holder.exp));
            records[majority - 1].clone()
        })
        .collect();
    holders.sort_by_key(|holder| (holder.since, holder.fence));
    let held = |fence: u64| holders.iter().any(|holder| holder.fence == fence);
    let last_run = seen
        .iter()
        .filter_map(|state| state.last_run.as_ref())
        .filter(|entry| !held(entry.fence))
        .max_by_key(|entry| (entry.fence, told(entry)))
        .cloned();
    let last_success = seen
        .iter()
        .filter_map(|state| state.last_success.as_ref())
        .max_by_key(|entry| entry.fence)
        .cloned();
    let queued = seen
        .iter()
        .max_by_key(|state| state.queue_length)
        .map(|state| (state.waiters.clone(), state.queue_length))
        .unwrap_or_default();
    let mut merged = LockState {
        name: seen[0].name.clone(),
        now: seen.iter().map(|state| state.now).max().unwrap_or(0),
        last_fence: seen.iter().filter_map(|state| state.last_fence).max(),
        holder_count: holders.len(),
        holders,
        waiters: queued.0,
        queue_length: queued.1,
        last_run,
        last_success,
        unreadable: Vec::new(),
    };
    for state in seen {
        merged.unreadable.extend(state.unreadable);
    }
    (merged, held_on)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::LockName;

    fn holder(fence: u64, exp: u64) -> Holder {
        serde_json::from_str(&format!(
            r#"{{"mode":"exclusive","fence":"{fence}","host":"h","pid":1,"user":"u","cmd":"c","since":1,"ttl":9,"exp":{exp}}}"#
        ))
        .unwrap()
    }

    fn over(fence: u64, outcome: &str, exit: Option<i32>) -> HistoryEntry {
        let exit = exit.map_or(String::new(), |code| format!(r#","exit":{code}"#));
        serde_json::from_str(&format!(
            r#"{{"mode":"exclusive","fence":"{fence}","host":"h","pid":1,"user":"u","cmd":"c","since":1,"exp":5,"ended":5,"outcome":"{outcome}"{exit}}}"#
        ))
        .unwrap()
    }

    fn state(holders: Vec<Holder>, last_run: Option<HistoryEntry>) -> LockState {
        LockState {
            name: LockName::new("q").unwrap(),
            now: 2,
            last_fence: holders.iter().map(|holder| holder.fence).max(),
            holder_count: holders.len(),
            holders,
            waiters: Vec::new(),
            queue_length: 0,
            last_run,
            last_success: None,
            unreadable: Vec::new(),
        }
    }

    /// Held means one fence on a majority, with the lease a majority still has; a leftover on
    /// one master, or two fences on two, is not held; the latest hold over is the highest
    /// fence over, a give-back ranked below the hold's real end and a fence still held left
    /// out.
    #[test]
    fn a_listed_lock_is_what_a_majority_of_masters_holds() {
        let merged = |states: Vec<LockState>| {
            let mut merged = merge_listed(states, 2);
            assert_eq!(merged.len(), 1);
            merged.remove(0)
        };
        let (lock, held_on) = merged(vec![
            state(vec![holder(7, 30)], Some(over(6, "given back", None))),
            state(vec![holder(7, 20)], Some(over(6, "released", Some(0)))),
            state(vec![holder(7, 10)], Some(over(7, "given back", None))),
        ]);
        assert_eq!((lock.holder_count, held_on), (1, 3));
        assert_eq!(lock.holders[0].exp, 20);
        let last = lock.last_run.unwrap();
        assert_eq!((last.fence, last.exit), (6, Some(0)));

        let (lock, held_on) = merged(vec![
            state(vec![holder(8, 30)], None),
            state(vec![holder(9, 30)], None),
            state(Vec::new(), Some(over(6, "released", Some(3)))),
        ]);
        assert_eq!((lock.holder_count, held_on), (0, 2));
        assert_eq!(lock.last_fence, Some(9));
        assert_eq!(lock.last_run.unwrap().exit, Some(3));
    }
}
