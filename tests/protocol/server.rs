//! The server side of the protocol: one lock's state in Redis, and each script path of `lua/`
//! as one atomic transition on it, as Redis runs a script. docs/protocol.md names the same
//! states and transitions in words.
//!
//! The state is what the scripts keep (holder records, the queue and its entries, wake lists,
//! cancel marks, the fence counter, the history's entries) and the physical expiry of each key.
//! It leaves out what only an operator's hand can put there (records that are not redlock's,
//! an index out of step with its hash: tests/script_fuzz.rs covers those), the costs' bounds
//! (at most 100 grants or purges, 1,000 entries scanned a call), and the places beyond the
//! head's 8 (`AHEAD_PLACES`, `lease_through`): queues here are shorter. Fences are a counter:
//! redlock's are the server's clock where that is higher, which only makes them rise faster;
//! the conformance test compares their order, not their values.
//!
//! Times are in one unit: ms when the conformance test holds the model against the real
//! scripts ([`Timing::REAL`]), ticks in the checker (small timings, for a state space that
//! can be searched whole).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};

/// A time on the server's clock (or a length of time), in the unit of the [`Timing`].
pub type Time = i64;
/// A token, by index: the conformance test names it `{index+1:032x}`, so that the order of
/// names (ties in Redis's sorted sets are broken by name) is the order of indexes.
pub type Tok = u8;
/// A waiter id, by index (named `{index+1:016x}`).
pub type Wid = u8;

/// How a lock is held or waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    Exclusive,
    Shared,
    Semaphore(u8),
}

impl Mode {
    /// The lock's kind: a read/write lock or a semaphore of N (the scripts' `kind`).
    fn kind(self) -> Option<u8> {
        match self {
            Mode::Semaphore(limit) => Some(limit),
            Mode::Exclusive | Mode::Shared => None,
        }
    }
}

/// The lengths of time the scripts and redlock's calls use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timing {
    /// `HEAD_TTL_MS`: an entry in the first places lives this long past its waiter's call.
    pub head_ttl: Time,
    /// `HEAR_MS`: a run grant's wake-up still in its list this long after is unheard.
    pub hear: Time,
    /// `REAP_GRACE_MS`: anyone drops an entry lapsed this long.
    pub reap_grace: Time,
    /// `GRANT` (redlock's argument): a waiter is handed the lock for this long.
    pub grant: Time,
    /// `CLAIM_GRANT`: the grant of a waiter that claims with a call (`acquire`).
    pub claim: Time,
    /// `QUEUE_ENTRY_TTL`: an entry lives this long past its waiter's call.
    pub entry_ttl: Time,
    /// `WAKE_TTL`: a wake list lives this long past its last push.
    pub wake_ttl: Time,
    /// `CANCEL_MARK_TTL`: a give-up's cancel mark lives this long.
    pub mark_ttl: Time,
    /// `QUEUE_SLACK_MS`: the queue's keys live this much past their latest entry.
    pub queue_slack: Time,
    /// The margin after a head lease given to the places ahead of a reaping waiter, at which
    /// it looks again (the `+ 100` of `hint_at`).
    pub lapse_margin: Time,
}

impl Timing {
    /// The scripts' and redlock's own values, in ms.
    pub const REAL: Timing = Timing {
        head_ttl: 3000,
        hear: 600,
        reap_grace: 60_000,
        grant: 5000,
        claim: 600,
        entry_ttl: 120_000,
        wake_ttl: 5000,
        mark_ttl: 300_000,
        queue_slack: 1000,
        lapse_margin: 100,
    };
}

/// `HEAD_PLACES`: the places that hold the head lease.
pub const HEAD_PLACES: usize = 8;
/// `AHEAD_PLACES`: a reaping waiter gives the head lease to this many places ahead of it.
pub const AHEAD_PLACES: usize = 64;

/// A holder record (`P{T}:holders`, with its lease in `P{T}:leases`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    pub tok: Tok,
    pub mode: Mode,
    pub count: u8,
    pub fence: u32,
    pub since: Time,
    pub ttl: Time,
    pub exp: Time,
    /// A hand-over its waiter has not claimed or renewed yet.
    pub granted: bool,
    /// The waiter of a grant that starts on it (`run`): heard of by its wake list.
    pub wid: Option<Wid>,
    /// Kept only for the minimum hold.
    pub over: bool,
}

/// A queue entry (`P{T}:waiters`, its place in `P{T}:queue`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub id: Wid,
    pub tok: Tok,
    pub mode: Mode,
    pub since: Time,
    pub exp: Time,
    /// The lease the waiter asks for: its grant is never longer.
    pub ttl: Time,
    pub steady: Time,
    /// It claims its grant with a call (`acquire`): the grant is `Timing::claim` long.
    pub claims: bool,
    pub due: Time,
}

/// What a script pushes onto a waiter's wake list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Msg {
    /// `g:<fence>:<exp>`: the lock handed over.
    Granted { fence: u32, exp: Time },
    /// `w:<exp>:<length>:<record>`: watch the holder whose lease ends first.
    Watch { exp: Time, length: usize },
    /// `h:<due>`: moved into the head places; call by then.
    Head { due: Time },
}

/// A waiter's wake list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WakeList {
    pub id: Wid,
    pub msgs: VecDeque<Msg>,
    pub exp: Time,
}

/// How a hold ended, in its history entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ending {
    Released,
    GivenBack,
    Forced,
    Lost,
}

/// One hold's history entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hold {
    pub fence: u32,
    pub exp: Time,
    pub ended: Option<(Time, Ending)>,
}

/// One lock's keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Server {
    pub timing: Timing,
    pub now: Time,
    pub holders: Vec<Holder>,
    /// The expiry of the holders' keys (`holders`, `leases`), while they exist.
    pub holders_exp: Option<Time>,
    pub queue: Vec<Entry>,
    /// The expiry of the queue's keys (`queue`, `waiters`), while they exist.
    pub queue_exp: Option<Time>,
    pub wake: Vec<WakeList>,
    pub cancel: Vec<(Tok, Time)>,
    /// The last fence issued (0: none yet).
    pub fence: u32,
    pub history: Vec<Hold>,
    /// Deliberate protocol bugs, for the mutation tests (see `mutants.rs`).
    pub mutant: Option<Mutant>,
}

/// A deliberate protocol bug, made in the model as in a copy of lua/ (`mutants.rs`): each must
/// be caught, by the checker's properties or by the conformance test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// Take a grant back even when its waiter heard of it (its wake list is empty).
    TakeBackHeardGrant,
    /// Admit a request behind others: no head check.
    SkipHeadCheck,
    /// Take for a token past its cancel mark: a request given up on takes the lock when it
    /// runs late.
    GrantPastCancelMark,
    /// Hand over without a new fence: the take-over reuses the last one.
    ReuseFence,
    /// Release without the token check: a token that holds nothing releases the holder whose
    /// lease ends first.
    ReleaseWithoutToken,
    /// Admit a shared request beside a queued writer (readers barge).
    SharedBesideQueuedWriter,
    /// Never shorten an entry's life as it moves into the head places (no head lease).
    NoHeadLease,
    /// Drop lapsed entries at the head on any call, not only a steady waiter's.
    ReapWithoutSteady,
    // Mechanisms taken out (the model only: which property needs each, see `check.rs`).
    /// Never take back a grant its waiter did not hear of.
    WithoutUnheardTakeBack,
    /// Grant a waiter that claims with a call as long as one that starts on the wake-up.
    WithoutClaimGrant,
}

thread_local! {
    /// How often each mechanism ran on this thread (see [`seen`]).
    static SEEN: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts one run of a mechanism (a grant taken back, a head lease given, ...), so that a test
/// can show it exercised each.
fn saw(what: &'static str) {
    SEEN.with(|seen| *seen.borrow_mut().entry(what).or_default() += 1);
}

/// The mechanisms run on this thread since the last call, and how often.
pub fn seen() -> BTreeMap<&'static str, u64> {
    SEEN.with(|seen| std::mem::take(&mut *seen.borrow_mut()))
}

/// What the acquire script is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Acquire {
    pub tok: Tok,
    pub ttl: Time,
    pub mode: Mode,
    /// The caller's waiter id (None: fail fast, never queue).
    pub waiter: Option<Wid>,
    /// Only if still queued or handed the lock: never (re-)join.
    pub stay: bool,
    pub reenter: bool,
    /// The waiter claims its grant with a call (`acquire`): `claim_ms` > 0.
    pub claims: bool,
}

/// What a script answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reply {
    Acquired {
        fence: u32,
    },
    Busy {
        /// The live holder whose lease ends first (its token), if any.
        holder: Option<Tok>,
        position: usize,
        length: usize,
        hint: Time,
    },
    Gone,
    NotHeld,
    Cancelled,
    /// An error reply (the lock is of another kind): nothing changed.
    Mode,
    /// The script failed part-way (a deliberate bug's doing).
    Failed,
    Released,
    Kept(Time),
    StillHeld(u8),
    Left,
    Extended,
    Queued {
        position: usize,
        length: usize,
    },
    NotQueued,
    Forced(Vec<Tok>),
}

/// The scratch state of one script call (the Lua `lock` table).
struct Call {
    /// Dead entries found at the head, dropped at the call's first writes.
    dead: Vec<Wid>,
    /// A steady waiter's call: lapsed entries at the head are dead now.
    reaps: bool,
    /// The queue's keys were written, and live at least until then (a `put_entry`).
    queue_until: Option<Time>,
    queue_written: bool,
    holders_changed: bool,
    /// A reaping waiter's call gives the head lease to the places ahead of it, this many.
    lease_through: usize,
}

impl Call {
    fn new() -> Self {
        Self {
            dead: Vec::new(),
            reaps: false,
            queue_until: None,
            queue_written: false,
            holders_changed: false,
            lease_through: 0,
        }
    }
}

impl Server {
    /// A lock nobody has used, at time `now`.
    pub fn new(timing: Timing, now: Time, mutant: Option<Mutant>) -> Self {
        Self {
            timing,
            now,
            holders: Vec::new(),
            holders_exp: None,
            queue: Vec::new(),
            queue_exp: None,
            wake: Vec::new(),
            cancel: Vec::new(),
            fence: 0,
            history: Vec::new(),
            mutant,
        }
    }

    /// Keys whose expiry has passed are gone (as Redis has them for every command).
    pub fn expire_keys(&mut self) {
        let now = self.now;
        if self.holders_exp.is_some_and(|exp| exp <= now) {
            saw("the holders' keys expired");
            self.holders.clear();
            self.holders_exp = None;
        }
        if self.queue_exp.is_some_and(|exp| exp <= now) {
            saw("the queue's keys expired");
            self.queue.clear();
            self.queue_exp = None;
        }
        self.wake.retain(|list| list.exp > now);
        self.cancel.retain(|(_, exp)| *exp > now);
    }

    /// The live holders, the one whose lease ends first first (ties by token, as Redis's
    /// sorted set orders them).
    pub fn live(&self) -> Vec<&Holder> {
        let mut live: Vec<&Holder> = self.holders.iter().filter(|h| h.exp > self.now).collect();
        live.sort_by_key(|holder| (holder.exp, holder.tok));
        live
    }

    fn live_count(&self) -> usize {
        self.holders.iter().filter(|h| h.exp > self.now).count()
    }

    fn first_holder(&self) -> Option<Holder> {
        self.live().first().map(|holder| (*holder).clone())
    }

    fn holder_of(&self, tok: Tok) -> Option<Holder> {
        self.holders
            .iter()
            .find(|holder| holder.tok == tok && holder.exp > self.now)
            .cloned()
    }

    fn held_exclusive(&self) -> bool {
        self.live()
            .iter()
            .any(|holder| holder.mode == Mode::Exclusive)
    }

    /// Whether a request in `mode` at the head (or with nobody queued) is admitted now.
    fn admitted(&self, mode: Mode) -> bool {
        let live = self.live_count();
        match mode {
            Mode::Exclusive => live == 0,
            Mode::Semaphore(limit) => live < usize::from(limit),
            Mode::Shared => live == 0 || !self.held_exclusive(),
        }
    }

    /// The first live entry of the queue; dead ones before it are noted for dropping.
    fn peek_head(&self, call: &mut Call) -> Option<Entry> {
        for entry in &self.queue {
            if call.dead.contains(&entry.id) {
                continue;
            }
            let dead = entry.exp <= self.now
                && (call.reaps || entry.exp + self.timing().reap_grace <= self.now);
            if !dead {
                return Some(entry.clone());
            }
            saw(if entry.exp + self.timing().reap_grace <= self.now {
                "a long-lapsed entry dropped"
            } else {
                "a lapsed entry dropped by a steady waiter"
            });
            call.dead.push(entry.id);
        }
        None
    }

    fn timing(&self) -> Timing {
        self.timing
    }

    fn remove_entry(&mut self, call: &mut Call, id: Wid) {
        self.queue.retain(|entry| entry.id != id);
        call.queue_written = true;
    }

    fn drop_dead(&mut self, call: &mut Call) {
        if !call.dead.is_empty() {
            let dead = std::mem::take(&mut call.dead);
            self.queue.retain(|entry| !dead.contains(&entry.id));
            call.queue_written = true;
        }
    }

    /// The first writes: expired holders purged, dead entries at the head dropped.
    fn begin_writes(&mut self, call: &mut Call, queue_keys: bool) {
        if queue_keys {
            let before = self.holders.len();
            let now = self.now;
            self.holders.retain(|holder| holder.exp > now);
            if self.holders.len() != before {
                call.holders_changed = true;
            }
            self.drop_dead(call);
        }
    }

    fn put_entry(&mut self, call: &mut Call, entry: Entry) {
        match self.queue.iter_mut().find(|e| e.id == entry.id) {
            Some(place) => *place = entry,
            None => self.queue.push(entry),
        }
        call.queue_written = true;
        let until = self.now + self.timing().entry_ttl;
        call.queue_until = Some(call.queue_until.map_or(until, |at: Time| at.max(until)));
    }

    fn wake(&mut self, id: Wid, msg: Msg) {
        let exp = self.now + self.timing().wake_ttl;
        match self.wake.iter_mut().find(|list| list.id == id) {
            Some(list) => {
                list.msgs.push_back(msg);
                list.exp = exp;
            }
            None => self.wake.push(WakeList {
                id,
                msgs: VecDeque::from([msg]),
                exp,
            }),
        }
    }

    fn delete_wake(&mut self, id: Wid) {
        self.wake.retain(|list| list.id != id);
    }

    fn next_fence(&mut self) -> u32 {
        if self.mutant != Some(Mutant::ReuseFence) || self.fence == 0 {
            self.fence += 1;
        }
        self.fence
    }

    fn put_holder(&mut self, call: &mut Call, holder: Holder, new: bool) {
        if new {
            self.history.push(Hold {
                fence: holder.fence,
                exp: holder.exp,
                ended: None,
            });
        }
        match self.holders.iter_mut().find(|h| h.tok == holder.tok) {
            Some(place) => *place = holder,
            None => self.holders.push(holder),
        }
        call.holders_changed = true;
    }

    fn remove_holder(&mut self, call: &mut Call, tok: Tok) {
        self.holders.retain(|holder| holder.tok != tok);
        call.holders_changed = true;
    }

    fn history_lease(&mut self, fence: u32, exp: Time) {
        if let Some(hold) = self.history.iter_mut().find(|hold| hold.fence == fence) {
            hold.exp = exp;
        }
    }

    fn history_end(&mut self, fence: u32, how: Ending, only_if_open: bool) {
        let now = self.now;
        if let Some(hold) = self.history.iter_mut().find(|hold| hold.fence == fence)
            && !(only_if_open && hold.ended.is_some())
        {
            hold.ended = Some((now, how));
        }
    }

    fn entry_life(&self, position: usize) -> Time {
        let timing = self.timing();
        if position <= HEAD_PLACES {
            timing.head_ttl.min(timing.entry_ttl)
        } else {
            timing.entry_ttl
        }
    }

    /// When it can be known whether the waiter of a grant heard of it.
    fn hear_by(&self, holder: &Holder) -> Option<Time> {
        if holder.granted && holder.wid.is_some() {
            Some(holder.since + self.timing().hear)
        } else {
            None
        }
    }

    /// The holder whose lease ends first, when it is a grant its waiter has not heard of.
    fn unheard_grant(&self, caller: Tok) -> Option<Holder> {
        let first = self.first_holder()?;
        if first.tok == caller {
            return None;
        }
        let known_at = self.hear_by(&first)?;
        if self.now < known_at {
            return None;
        }
        // (A list that is there holds the wake-up: Redis deletes a list its pop emptied.)
        let listed = self.wake.iter().any(|list| Some(list.id) == first.wid);
        if self.mutant == Some(Mutant::WithoutUnheardTakeBack) {
            return None;
        }
        (listed || self.mutant == Some(Mutant::TakeBackHeardGrant)).then_some(first)
    }

    /// The head lease: entries in the head places with a longer life are shortened, their
    /// waiters told (`h:`) unless they are due to call soon anyway.
    fn lease_head(&mut self, call: &mut Call) {
        if self.mutant == Some(Mutant::NoHeadLease) {
            return;
        }
        let timing = self.timing();
        let now = self.now;
        let short = now + timing.head_ttl;
        let mut told = Vec::new();
        let places = HEAD_PLACES.max(call.lease_through);
        for entry in self.queue.iter_mut().take(places) {
            if entry.exp > short {
                saw("an entry given the head lease");
                entry.exp = short;
                // (Twice over: the script's half a head lease is not whole in ticks.)
                if 2 * entry.due > 2 * now + timing.head_ttl {
                    entry.due = now + timing.hear;
                    told.push((entry.id, entry.due));
                }
                call.queue_written = true;
            }
        }
        for (id, due) in told {
            saw("h: sent");
            self.wake(id, Msg::Head { due });
        }
    }

    /// Hands room to the queue's head and to as many behind it as are admitted too, each with
    /// a grant and a fence of its own; stops at `stop_at`. The first left waiting is told to
    /// watch the first lease to end unless it is due to call before then.
    fn hand_off(&mut self, call: &mut Call, stop_at: Option<Wid>) {
        let timing = self.timing();
        let mut granted = 0;
        let mut first: Option<Holder> = None;
        let mut head;
        loop {
            head = self.peek_head(call);
            self.drop_dead(call);
            let Some(entry) = head.clone() else { break };
            if Some(entry.id) == stop_at || !self.admitted(entry.mode) {
                break;
            }
            let mut length = timing.grant;
            if entry.ttl > 0 && entry.ttl < length {
                length = entry.ttl;
            }
            if entry.claims
                && timing.claim < length
                && self.mutant != Some(Mutant::WithoutClaimGrant)
            {
                length = timing.claim;
            }
            let fence = self.next_fence();
            let holder = Holder {
                tok: entry.tok,
                mode: entry.mode,
                count: 1,
                fence,
                since: self.now,
                ttl: length,
                exp: self.now + length,
                granted: true,
                wid: (!entry.claims).then_some(entry.id),
                over: false,
            };
            if first.as_ref().is_none_or(|f| holder.exp < f.exp) {
                first = Some(holder.clone());
            }
            self.put_holder(call, holder, true);
            self.remove_entry(call, entry.id);
            self.wake(
                entry.id,
                Msg::Granted {
                    fence,
                    exp: self.now + length,
                },
            );
            granted += 1;
            saw(if entry.claims {
                "a claim grant"
            } else {
                "a run grant"
            });
        }
        if granted > 0
            && let Some(entry) = head
            && Some(entry.id) != stop_at
        {
            if self.live_count() != granted {
                first = self.first_holder();
            }
            if let Some(first) = first
                && entry.due >= first.exp
            {
                let length = self.queue.len();
                saw("w: sent");
                self.wake(
                    entry.id,
                    Msg::Watch {
                        exp: first.exp,
                        length,
                    },
                );
            }
        }
    }

    /// The keys' expiry after a script's writes.
    fn settle(&mut self, call: &Call) {
        if call.holders_changed {
            self.holders_exp = self.holders.iter().map(|holder| holder.exp).max();
        }
        if self.holders.is_empty() {
            self.holders_exp = None;
        }
        if self.queue.is_empty() {
            self.queue_exp = None;
        } else if call.queue_written {
            let slack = self.timing().queue_slack;
            match (self.queue_exp, call.queue_until) {
                (None, until) => {
                    self.queue_exp =
                        Some(until.unwrap_or(self.now + self.timing().entry_ttl) + slack);
                }
                (Some(exp), Some(until)) if exp < until => self.queue_exp = Some(until + slack),
                _ => {}
            }
        }
    }

    /// The hint of an acquire reply: when to call again at the latest.
    fn hint_at(&self, call: &Call, position: usize, ttl: Time) -> Time {
        let timing = self.timing();
        let earliest = self.first_holder();
        let mut hint = timing.entry_ttl / 3;
        let look = timing.head_ttl.min(timing.entry_ttl) / 3;
        if position > 0 {
            let behind = position.saturating_sub(HEAD_PLACES).max(1);
            hint = hint.min(look * Time::try_from(behind).unwrap());
        }
        if position > 0 && position <= AHEAD_PLACES {
            hint = hint.min((ttl / 3).max(look));
        }
        if call.lease_through > 0 {
            hint = hint.min(timing.head_ttl + timing.lapse_margin);
        }
        if position > 0 && position <= 2 {
            hint = hint.min(timing.hear);
            if let Some(earliest) = earliest {
                let mut look_at = earliest.exp;
                if let Some(known_at) = self.hear_by(&earliest)
                    && known_at > self.now
                {
                    look_at = look_at.min(known_at);
                }
                hint = hint.min(look_at - self.now);
            }
        }
        hint
    }

    /// `acquire.lua`.
    pub fn acquire(&mut self, a: Acquire) -> Reply {
        self.expire_keys();
        let timing = self.timing();
        let now = self.now;
        if self.cancel.iter().any(|(tok, _)| *tok == a.tok)
            && self.mutant != Some(Mutant::GrantPastCancelMark)
        {
            saw("a cancelled request refused");
            return Reply::Cancelled;
        }
        let mut call = Call::new();
        let mine = self.holder_of(a.tok).filter(|holder| !holder.over);
        let mut entry = a
            .waiter
            .and_then(|id| self.queue.iter().find(|e| e.id == id).cloned());
        let queued = entry
            .as_ref()
            .is_some_and(|e| e.exp + timing.reap_grace > now);
        call.reaps = queued
            && entry
                .as_ref()
                .is_some_and(|e| e.exp > now && now - e.steady >= timing.head_ttl)
            || self.mutant == Some(Mutant::ReapWithoutSteady);
        let first = self.first_holder();
        let head = self.peek_head(&mut call);
        let reaping = call.reaps && !call.dead.is_empty();
        let unheard = self.unheard_grant(a.tok);
        let wanted = a.mode.kind();
        for other in [
            first.as_ref().map(|h| h.mode),
            head.as_ref().map(|e| e.mode),
            mine.as_ref().map(|h| h.mode),
        ]
        .into_iter()
        .flatten()
        {
            if other.kind() != wanted {
                return Reply::Mode;
            }
        }
        if a.reenter && mine.is_none() {
            return Reply::NotHeld;
        }
        if a.reenter && a.mode == Mode::Exclusive && mine.as_ref().unwrap().mode == Mode::Shared {
            return Reply::Mode;
        }
        if a.stay && mine.is_none() && !queued {
            return Reply::Gone;
        }

        // Writes.
        self.begin_writes(&mut call, true);
        if let Some(unheard) = unheard {
            saw("an unheard grant taken back");
            if let Some(wid) = unheard.wid {
                self.delete_wake(wid);
            }
            self.remove_holder(&mut call, unheard.tok);
            self.history_lease(unheard.fence, now);
        }
        if let Some(e) = &mut entry {
            if !queued {
                self.remove_entry(&mut call, e.id);
                entry = None;
            } else if e.exp <= now {
                saw("a lapsed entry renewed");
                e.steady = now;
            }
        }

        if let Some(mut held) = mine {
            saw(if a.reenter {
                "a re-entry"
            } else if held.granted {
                "a grant claimed"
            } else {
                "a lease reset by its holder's call"
            });
            if a.reenter {
                held.count += 1;
                if now + a.ttl > held.exp {
                    held.exp = now + a.ttl;
                    held.ttl = a.ttl;
                }
            } else {
                held.exp = now + a.ttl;
                held.ttl = a.ttl;
            }
            held.granted = false;
            held.wid = None;
            return self.acquired(&mut call, held, false, a.waiter, entry.is_some());
        }

        self.hand_off(&mut call, entry.as_ref().map(|e| e.id));
        let head = self.peek_head(&mut call);
        let first_in_line = head.as_ref().is_none_or(|h| Some(h.id) == a.waiter)
            || self.mutant == Some(Mutant::SkipHeadCheck)
            || (self.mutant == Some(Mutant::SharedBesideQueuedWriter)
                && a.mode == Mode::Shared
                && self.live_count() > 0);
        if first_in_line && self.admitted(a.mode) {
            let fence = self.next_fence();
            let holder = Holder {
                tok: a.tok,
                mode: a.mode,
                count: 1,
                fence,
                since: now,
                ttl: a.ttl,
                exp: now + a.ttl,
                granted: false,
                wid: None,
                over: false,
            };
            return self.acquired(&mut call, holder, true, a.waiter, entry.is_some());
        }

        let mut position = 0;
        let hint;
        if let Some(mut e) = entry {
            // (Its own entry dropped as dead: only a deliberate bug does that, and the script
            // then fails part-way, as Lua's ZRANK + 1 on a missing member does.)
            let Some(rank) = self.queue.iter().position(|x| x.id == e.id) else {
                return Reply::Failed;
            };
            position = rank + 1;
            if reaping && position > HEAD_PLACES + 1 {
                saw("the head lease given ahead");
                call.lease_through = (position - 1).min(AHEAD_PLACES);
            }
            e.exp = now + self.entry_life(position);
            e.due = now + self.hint_at(&call, position, a.ttl);
            hint = e.due - now;
            self.put_entry(&mut call, e);
        } else if let Some(id) = a.waiter {
            self.delete_wake(id);
            let position_new = self.queue.len() + 1;
            let e = Entry {
                id,
                tok: a.tok,
                mode: a.mode,
                since: now,
                exp: now + self.entry_life(position_new),
                ttl: a.ttl,
                steady: now,
                claims: a.claims,
                due: now + self.hint_at(&call, position_new, a.ttl),
            };
            hint = e.due - now;
            self.put_entry(&mut call, e);
            position = self.queue.len();
        } else {
            hint = self.hint_at(&call, 0, a.ttl);
        }
        self.lease_head(&mut call);
        self.settle(&call);
        Reply::Busy {
            holder: self.first_holder().map(|h| h.tok),
            position,
            length: self.queue.len(),
            hint,
        }
    }

    /// The lock taken (or claimed, or re-entered): the record written, the caller's entry and
    /// wake-ups gone, whoever is admitted behind it handed the lock.
    fn acquired(
        &mut self,
        call: &mut Call,
        holder: Holder,
        new: bool,
        waiter: Option<Wid>,
        had_entry: bool,
    ) -> Reply {
        let fence = holder.fence;
        if !new {
            self.history_lease(fence, holder.exp);
        }
        self.put_holder(call, holder, new);
        if let Some(id) = waiter {
            if had_entry {
                self.remove_entry(call, id);
            }
            self.delete_wake(id);
        }
        self.hand_off(call, None);
        self.lease_head(call);
        self.settle(call);
        Reply::Acquired { fence }
    }

    /// `release.lua`, op `token`: `held_fence` names the fence a run that lost its lease held.
    pub fn release(&mut self, tok: Tok, min_hold: Time, held_fence: Option<u32>) -> Reply {
        self.expire_keys();
        let now = self.now;
        let mut call = Call::new();
        let mut mine = self.holder_of(tok);
        if mine.is_none() && self.mutant == Some(Mutant::ReleaseWithoutToken) {
            mine = self.first_holder();
        }
        let Some(mut mine) = mine else {
            if let Some(fence) = held_fence {
                saw("a lost hold reported");
                self.history_end(fence, Ending::Lost, true);
            }
            return Reply::NotHeld;
        };
        let _ = self.peek_head(&mut call);
        self.begin_writes(&mut call, true);
        let keep_until = mine.since.min(now) + min_hold;
        let reply = if mine.count > 1 {
            mine.count -= 1;
            let count = mine.count;
            self.put_holder(&mut call, mine, false);
            Reply::StillHeld(count)
        } else if keep_until > now {
            saw("a minimum hold kept");
            mine.exp = keep_until;
            mine.ttl = keep_until - now;
            mine.over = true;
            let fence = mine.fence;
            self.put_holder(&mut call, mine, false);
            self.history_end(fence, Ending::Released, false);
            Reply::Kept(keep_until - now)
        } else {
            self.remove_holder(&mut call, mine.tok);
            self.history_end(mine.fence, Ending::Released, false);
            Reply::Released
        };
        self.hand_off(&mut call, None);
        self.lease_head(&mut call);
        self.settle(&call);
        reply
    }

    /// `release.lua`, op `leave`: a waiter gives its token up.
    pub fn leave(&mut self, waiter: Wid, tok: Tok, mark: bool) -> Reply {
        self.expire_keys();
        let mut call = Call::new();
        let mine = self.holder_of(tok);
        let _ = self.peek_head(&mut call);
        self.begin_writes(&mut call, true);
        if mark {
            let exp = self.now + self.timing().mark_ttl;
            self.cancel.retain(|(t, _)| *t != tok);
            self.cancel.push((tok, exp));
        }
        self.remove_entry(&mut call, waiter);
        self.delete_wake(waiter);
        if let Some(mine) = mine {
            self.remove_holder(&mut call, mine.tok);
            self.history_end(mine.fence, Ending::GivenBack, false);
        }
        self.hand_off(&mut call, None);
        self.lease_head(&mut call);
        self.settle(&call);
        Reply::Left
    }

    /// `release.lua`, op `force`.
    pub fn force(&mut self) -> Reply {
        self.expire_keys();
        let mut call = Call::new();
        let _ = self.peek_head(&mut call);
        let evicted: Vec<Holder> = self.live().into_iter().cloned().collect();
        self.begin_writes(&mut call, true);
        self.holders.clear();
        call.holders_changed = true;
        for holder in &evicted {
            self.history_end(holder.fence, Ending::Forced, false);
        }
        self.hand_off(&mut call, None);
        self.lease_head(&mut call);
        self.settle(&call);
        Reply::Forced(evicted.iter().map(|h| h.tok).collect())
    }

    /// `extend.lua`.
    pub fn extend(&mut self, tok: Tok, ttl: Time) -> Reply {
        self.expire_keys();
        let mut call = Call::new();
        let Some(mut mine) = self.holder_of(tok).filter(|holder| !holder.over) else {
            return Reply::NotHeld;
        };
        mine.exp = self.now + ttl;
        mine.ttl = ttl;
        mine.granted = false;
        mine.wid = None;
        let (fence, exp) = (mine.fence, mine.exp);
        self.put_holder(&mut call, mine, false);
        self.history_lease(fence, exp);
        self.settle(&call);
        Reply::Extended
    }

    /// `refresh.lua`.
    pub fn refresh(&mut self, waiter: Wid) -> Reply {
        self.expire_keys();
        let mut call = Call::new();
        let now = self.now;
        let Some(rank) = self
            .queue
            .iter()
            .position(|e| e.id == waiter && e.exp > now)
        else {
            return Reply::NotQueued;
        };
        let mut entry = self.queue[rank].clone();
        entry.exp = now + self.entry_life(rank + 1);
        entry.due = now + self.timing().entry_ttl / 3;
        self.put_entry(&mut call, entry);
        self.settle(&call);
        Reply::Queued {
            position: rank + 1,
            length: self.queue.len(),
        }
    }

    /// BLPOP's pop: the first message of a waiter's wake list.
    pub fn pop(&mut self, waiter: Wid) -> Option<Msg> {
        self.expire_keys();
        let list = self.wake.iter_mut().find(|list| list.id == waiter)?;
        let msg = list.msgs.pop_front();
        if list.msgs.is_empty() {
            self.delete_wake(waiter);
        }
        msg
    }
}
