//! What the commands read from a quorum, and what they may do to it by hand: each master's
//! view of a lock and the majority's verdict (`inspect`), the listing (`list`, `metrics`), the
//! merged history (`history`, `check`), the forced release; and the flags quorum mode refuses.

use crate::conn::Session;
use crate::keys::{LockName, Prefix};
use crate::lock::{HistoryEntry, Holder, Lock, LockState, Scope, Unreadable, list};
use crate::log::Log;

use super::{Quorum, WithContextOf as _};
use crate::store::{Masters, Verdict, View};

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

    /// The lock as a majority of masters has it, the majority's verdict and each master's
    /// view; an error when fewer than a majority answered and no verdict can be had.
    pub(crate) fn view(&self, lock: &Lock) -> anyhow::Result<View> {
        let lock = lock.clone();
        let views = self.fan_out(self.request_timeout, move |session| lock.inspect(session));
        let majority = self.majority();
        let states: Vec<LockState> = views
            .iter()
            .filter_map(|view| view.as_ref().ok().cloned())
            .collect();
        // Held and free both need a majority's answers.
        if states.len() < majority {
            return Err(self.too_few(states.len(), &views));
        }
        let free = states
            .iter()
            .filter(|state| state.holder_count == 0)
            .count();
        // The holders a majority has (merged), if any, hold it.
        let (state, _) = merged(states, majority);
        let verdict = if !state.holders.is_empty() {
            Verdict::Held
        } else if free >= majority {
            Verdict::Free
        } else {
            Verdict::Contested
        };
        Ok(View {
            state,
            verdict,
            masters: Some(Masters {
                majority,
                each: self.shown().into_iter().zip(views).collect(),
            }),
        })
    }

    /// The locks under `prefix`, each as a majority of masters has it, with the number of
    /// masters that hold it (`merged`); the keys skipped as foreign data; the locks a master
    /// refused to read (its URL in the reason: the others' reads still count). A master that
    /// did not answer is warned of; fewer than a majority is an error.
    #[allow(clippy::type_complexity)]
    pub(crate) fn list(
        &self,
        prefix: &Prefix,
        scope: Scope,
        log: Log,
    ) -> anyhow::Result<(
        Vec<(LockState, usize)>,
        Vec<(String, anyhow::Error)>,
        Vec<(LockName, anyhow::Error)>,
    )> {
        let replies = self.each_session(|session| list(session, prefix, scope));
        let answered = replies.iter().filter(|reply| reply.is_ok()).count();
        if answered < self.majority() {
            return Err(self.too_few(answered, &replies));
        }
        let mut by_name: Vec<Vec<LockState>> = Vec::new();
        let mut skipped = Vec::new();
        let mut unreadable = Vec::new();
        for (reply, url) in replies.into_iter().zip(self.shown()) {
            let listing = match reply {
                Ok(listing) => listing,
                Err(err) => {
                    log.warn(format_args!("master {url} did not answer ({err:#})"));
                    continue;
                }
            };
            skipped.extend(listing.skipped);
            unreadable.extend(
                listing
                    .unreadable
                    .into_iter()
                    .map(|(name, why)| (name, why.context(format!("master {url}")))),
            );
            for state in listing.locks {
                match by_name.iter_mut().find(|seen| seen[0].name == state.name) {
                    Some(seen) => seen.push(state),
                    None => by_name.push(vec![state]),
                }
            }
        }
        let mut locks: Vec<(LockState, usize)> = by_name
            .into_iter()
            .map(|states| merged(states, self.majority()))
            .collect();
        locks.sort_by(|(a, _), (b, _)| a.name.as_str().cmp(b.name.as_str()));
        Ok((locks, skipped, unreadable))
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

/// Whether two masters' holder records are the same acquisition: one fence and one token
/// (by its digest; two contenders can get one fence, as quorum fences are the clock to a
/// tenth of a second, and can share a process: `acquire` records its caller's).
fn same_hold(a: &Holder, b: &Holder) -> bool {
    a.fence == b.fence && a.token_digest == b.token_digest
}

/// The holders that a majority of masters (`states`, one per master) have live, each once,
/// with how many masters have it; in the order of the first master that has each.
fn majority_holders<'a>(states: &[&'a LockState], majority: usize) -> Vec<(&'a Holder, usize)> {
    let mut counted: Vec<(&Holder, usize)> = Vec::new();
    for state in states {
        let mut mine: Vec<&Holder> = Vec::new();
        for holder in &state.holders {
            if !mine.iter().any(|seen| same_hold(seen, holder)) {
                mine.push(holder);
            }
        }
        for holder in mine {
            match counted.iter_mut().find(|(seen, _)| same_hold(seen, holder)) {
                Some((_, count)) => *count += 1,
                None => counted.push((holder, 1)),
            }
        }
    }
    counted.retain(|(_, count)| *count >= majority);
    counted
}

/// One lock as a majority of masters has it, from the states of the masters that list it (a
/// master that does not list it has no live holder and no history there): the holders a
/// majority has; the latest run and success the masters agree on (`agreed`); the highest
/// fence, the latest clock, the first master's queue. With it, on how many masters its
/// majority's holder holds it, or when no holder has a majority (leftovers of a failed
/// acquisition, or a contested lock), how many have any live holder.
fn merged(states: Vec<LockState>, majority: usize) -> (LockState, usize) {
    let views: Vec<&LockState> = states.iter().collect();
    let held = majority_holders(&views, majority);
    let held_on = held.first().map_or_else(
        || states.iter().filter(|state| state.holder_count > 0).count(),
        |(_, count)| *count,
    );
    let holders: Vec<Holder> = held.iter().map(|(holder, _)| (*holder).clone()).collect();
    // Holders whose records cannot be read (counted by a master, not decoded) cannot be told
    // apart: when a majority of masters has some, the lock counts as held, by as many as that
    // majority has, with the records unshown (not as free: an acquisition would find it busy).
    let mut unreadable_on: Vec<usize> = states
        .iter()
        .filter(|state| state.holder_count > state.holders.len())
        .map(|state| state.holder_count)
        .collect();
    unreadable_on.sort_unstable_by(|a, b| b.cmp(a));
    let holder_count = match unreadable_on.get(majority - 1) {
        Some(&count) if holders.is_empty() => count,
        _ => holders.len(),
    };
    let last_run = agreed(
        states.iter().filter_map(|state| state.last_run.as_ref()),
        majority,
    );
    let last_success = agreed(
        states
            .iter()
            .filter_map(|state| state.last_success.as_ref()),
        majority,
    );
    let now = states.iter().map(|state| state.now).max().unwrap_or(0);
    let last_fence = states.iter().filter_map(|state| state.last_fence).max();
    let mut unreadable = Vec::new();
    for state in &states {
        unreadable.extend(state.unreadable.iter().cloned());
    }
    let mut lock = states
        .into_iter()
        .next()
        .expect("a lock is listed by a master");
    lock.holder_count = holder_count;
    lock.holders = holders;
    lock.last_run = last_run;
    lock.last_success = last_success;
    lock.now = now;
    lock.last_fence = last_fence;
    lock.unreadable = unreadable;
    (lock, held_on)
}

/// Of the masters' entries for one question (each master's latest run, or latest success), the
/// newest that a majority of masters gave, as the master that tells most of its end recorded
/// it; when they differ (a master missed the latest, or recorded one the others never had), the
/// newest any master gave. An acquisition given back (a round that fell short) is no run.
fn agreed<'a>(
    entries: impl Iterator<Item = &'a HistoryEntry>,
    majority: usize,
) -> Option<HistoryEntry> {
    let entries: Vec<&HistoryEntry> = entries
        .filter(|entry| entry.outcome.as_deref() != Some("given back"))
        .collect();
    let best = |fence: u64| {
        entries
            .iter()
            .filter(|entry| entry.fence == fence)
            .max_by_key(|entry| told(entry))
            .map(|entry| (*entry).clone())
    };
    let recorded_by_majority = entries
        .iter()
        .map(|entry| entry.fence)
        .filter(|fence| entries.iter().filter(|other| other.fence == *fence).count() >= majority)
        .max();
    match recorded_by_majority {
        Some(fence) => best(fence),
        None => entries.iter().map(|entry| entry.fence).max().and_then(best),
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
