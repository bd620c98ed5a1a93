//! The lock engine: acquire, extend, release, force-release, inspect and list one lock on one
//! Redis server. Each state change is a single token-checked Lua script (see `lua/README.md`);
//! this module only builds the arguments and decodes the replies. It knows nothing of the
//! command line and prints nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::conn::Session;
use crate::exit::{Failure, fail, failure_of};
use crate::keys::{LockKeys, LockName, Prefix};
use crate::scripts::{
    self, AcquireInputs, DoctorInputs, ExtendInputs, HistoryInputs, InspectInputs, RaiseInputs,
    RefreshInputs, ReleaseInputs, arg,
};

/// The secret that proves a holder owns its lock: a UUID v4 (122 random bits from the OS), as
/// 32 hex digits.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh random token.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Accepts a token as printed by `acquire`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(text.to_ascii_lowercase()))
        } else {
            Err("not a redlock token (32 hex digits, as printed by `redlock acquire`)".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Who holds or waits for a lock, recorded for `inspect`. Stored as `cmd` in Redis, shown as
/// `command` in JSON output.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub user: String,
    /// The supervised command line, or `acquire` for a bare acquisition.
    #[serde(rename(deserialize = "cmd"))]
    pub command: String,
    /// Why it holds the lock, in the holder's words (`--note`, or the CI job's URL).
    #[serde(default)]
    pub note: Option<String>,
}

impl Identity {
    /// Longest host, user and command recorded, in bytes (lua/README.md, "Holders"); longer
    /// ones are cut at a character boundary. They come from the environment, which anyone
    /// sharing the lock can fill, and every reader of the lock shows them.
    pub const MAX_FIELD: usize = 256;

    /// This process, described by `command`.
    pub fn current(command: &str) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "unknown".into());
        Self {
            host: cut(&host, Self::MAX_FIELD),
            pid: std::process::id(),
            user: cut(&user_name(), Self::MAX_FIELD),
            command: cut(command, Self::MAX_FIELD),
            note: None,
        }
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The user's name as login, su, sudo and cron set it ($USER, else $LOGNAME), else looked up
/// from the uid. The lookup (NSS) costs ~0.1 ms even from /etc/passwd, and far more, or hangs,
/// with a directory service behind it; the name is only shown to people.
fn user_name() -> String {
    ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| {
            let uid = nix::unistd::getuid();
            name_of(uid).unwrap_or_else(|| uid.to_string())
        })
}

/// The name of `uid` through NSS.
#[cfg(not(target_env = "musl"))]
fn name_of(uid: nix::unistd::Uid) -> Option<String> {
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|user| user.name)
}

/// The name of `uid` in /etc/passwd, where musl (no NSS) looks too, but through its stdio and
/// allocator: 13 system calls where reading the file takes 4.
#[cfg(target_env = "musl")]
fn name_of(uid: nix::unistd::Uid) -> Option<String> {
    name_in_passwd(&std::fs::read_to_string("/etc/passwd").ok()?, uid.as_raw())
}

/// The first name with `uid` in the text of a passwd(5) file.
#[cfg(any(test, target_env = "musl"))]
fn name_in_passwd(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?;
        (id.parse() == Ok(uid) && !name.is_empty()).then(|| name.to_owned())
    })
}

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
}

/// How many replicas must acknowledge a write (`WAIT`), and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    pub count: u32,
    pub timeout: Duration,
}

impl Replicas {
    /// `count` replicas, waited for at most half of `request_timeout` and at most a second:
    /// the rest of the request's time is for its round trip. `WAIT 0` would wait forever.
    pub fn within(count: u32, request_timeout: Duration) -> Self {
        Self {
            count,
            timeout: (request_timeout / 2).clamp(Duration::from_millis(1), Duration::from_secs(1)),
        }
    }
}

/// One holder as stored in Redis. Times are the server's clock, in milliseconds.
#[derive(Debug, Clone, Deserialize)]
pub struct Holder {
    /// `exclusive`, `shared` or `semaphore`.
    pub mode: String,
    /// The semaphore's limit (0 for other modes).
    #[serde(default)]
    pub limit: u32,
    /// Holds by this token: more than 1 when nested invocations re-entered the lock.
    #[serde(default = "one")]
    pub count: u32,
    /// Stored as a string (Lua's numbers print 14 significant digits); read either way.
    #[serde(deserialize_with = "number_or_string")]
    pub fence: u64,
    #[serde(flatten)]
    pub who: Identity,
    /// Acquired at (Unix ms, server time).
    pub since: u64,
    /// Lease length of the last acquire or extend (ms).
    pub ttl: u64,
    /// Expires at (Unix ms, server time).
    pub exp: u64,
    /// The hold is over (the run ended) and the lock is only kept for its minimum hold
    /// (`run --min-hold`).
    #[serde(default)]
    pub over: bool,
    /// A hand-over grant its waiter has not yet claimed or renewed.
    #[serde(default)]
    pub granted: bool,
    /// The pid of the keeper renewing it (`acquire --keep-alive`), on the same host.
    #[serde(default)]
    pub keeper: Option<u32>,
}

impl Holder {
    /// When its lease was last set (acquired, renewed or extended), server ms.
    pub fn renewed(&self) -> u64 {
        self.exp.saturating_sub(self.ttl)
    }
}

/// One queued waiter as stored in Redis (its token is never read back).
#[derive(Debug, Clone, Deserialize)]
pub struct Queued {
    pub mode: String,
    #[serde(flatten)]
    pub who: Identity,
    /// Joined the queue at (Unix ms, server time).
    pub since: u64,
}

fn one() -> u32 {
    1
}

/// A u64 written as a JSON number or as a string of digits.
fn number_or_string<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(u64),
        Text(String),
    }
    match Either::deserialize(deserializer)? {
        Either::Number(n) => Ok(n),
        Either::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

fn decode<T: serde::de::DeserializeOwned>(json: &str) -> anyhow::Result<T> {
    serde_json::from_str(json).map_err(|err| anyhow::anyhow!("unreadable record {json:?}: {err}"))
}

/// A record the scripts accepted that this version cannot read (a pid of -1, a number past
/// its field's range): left out of what is shown, and named, so the reader can say so. Data
/// in Redis is never a reason to fail.
#[derive(Debug, Clone)]
pub struct Unreadable {
    /// The Redis key it is in.
    pub key: String,
    /// `a holder record`, `a queue entry` or `a history entry`.
    pub what: &'static str,
    /// Why it cannot be read (the field and what is wrong with it).
    pub why: String,
}

/// Decodes the records in `key`; those that do not decode are noted in `unreadable`.
fn decode_each<T: serde::de::DeserializeOwned>(
    records: &[String],
    key: &str,
    what: &'static str,
    unreadable: &mut Vec<Unreadable>,
) -> Vec<T> {
    records
        .iter()
        .filter_map(|json| match serde_json::from_str(json) {
            Ok(record) => Some(record),
            Err(err) => {
                unreadable.push(Unreadable {
                    key: key.to_owned(),
                    what,
                    why: err.to_string(),
                });
                None
            }
        })
        .collect()
}

/// A reply that is the server's time followed by JSON records (`force` release, `history`),
/// the records of `key` that do not decode left out and noted.
fn time_and_records<T: serde::de::DeserializeOwned>(
    reply: &[String],
    script: &str,
    key: &str,
    what: &'static str,
) -> anyhow::Result<(u64, Vec<T>, Vec<Unreadable>)> {
    let (now, records) = reply
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty reply from {script}"))?;
    let mut unreadable = Vec::new();
    let records = decode_each(records, key, what, &mut unreadable);
    Ok((now.parse()?, records, unreadable))
}

/// How long a queue entry lives unless its waiter refreshes it: a waiter calls (`refresh`, or
/// `acquire` with [`Queueing::Stay`]) within a third of this after its last call, and sooner
/// when an `acquire` reply's `hint` says so. A waiter that died stays in the queue this long at
/// most; in the first places of the queue, 3 s (the head lease, `lua/prelude.lua`). Handed the
/// lock before its entry lapsed, it costs the queue one [`GRANT`].
///
/// Each refresh costs Redis a script call and a BLPOP ended and begun again: every 40 s,
/// 10,000 idle waiters cost it 3.0–3.5 % of a core with [`Lock::refresh`], 3.4–4.8 % with
/// `acquire` (two runs of benches/queue_scale.py --idle-simulation; docs/queue-scale.md).
pub const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(120);

/// Live holders `inspect` reads at most (earliest lease end first); [`LockState::holder_count`]
/// counts them all.
pub const INSPECT_HOLDERS: usize = 1000;
/// Waiters `inspect` reads at most, from the head of the queue;
/// [`LockState::queue_length`] counts them all.
pub const INSPECT_WAITERS: usize = 100;
/// The lease a waiter is handed the lock with: `run` starts on it and its first renewal
/// extends it, `acquire` claims the full lease at once (and is handed a [`CLAIM_GRANT`]). A
/// dead `run` waiter's turn costs the queue at most this long. Long enough for a host that stalls the new holder for a second or two as its
/// command starts (1.2 s was seen while 1,000 holders exited at once on 2 CPUs: with a 2 s
/// grant the command was stopped as soon as it started, exit 125; docs/queue-scale.md).
pub const GRANT: Duration = Duration::from_secs(5);

/// The grant of a waiter that claims a lock handed over with a call of its own ([`Waiter`]'s
/// `claims`): it makes that call as soon as it is woken (a round trip), so a grant it has not
/// claimed within this is a dead waiter's, and lapses for the next in line. Woken to claimed
/// took at most 5.6 ms (p90 4.1 ms) with both CPUs busy four times over (docs/queue-scale.md);
/// a live waiter slower than this loses its turn and queues again, a dead one costs the queue
/// this long, under the second per dead waiter the queue promises.
pub const CLAIM_GRANT: Duration = Duration::from_millis(600);

/// How long the mark of a token given up lives: far longer than a request can sit in a stalled
/// server's buffers before it runs, and short enough to leave nothing behind for long.
pub const CANCEL_MARK_TTL: Duration = Duration::from_secs(300);

/// How long a wake-up waits in a waiter's list; a live waiter takes it within milliseconds,
/// so this only bounds what a dead waiter leaves behind.
pub const WAKE_TTL: Duration = Duration::from_secs(5);

/// What a script pushed onto a waiter's wake list (see `hand_off` in `lua/prelude.lua`).
#[derive(Debug)]
pub enum Wake {
    /// The lock was handed to this waiter: a grant of [`GRANT`] with this fence, ending at
    /// `expires` (server time, Unix ms). The waiter's next acquire call, or an extend, turns
    /// it into a full lease.
    Granted { fence: u64, expires: u64 },
    /// The waiter is now first in line, behind `holder`, in a queue of `length`; nobody tells
    /// it when the holders' grants at `expires` (server time, Unix ms) run out unclaimed.
    Watch {
        expires: u64,
        length: usize,
        holder: Option<Holder>,
    },
    /// Anything else: look at the lock again.
    Look,
}

impl Wake {
    fn parse(message: &str) -> Self {
        let mut parts = message.splitn(4, ':');
        let kind = parts.next();
        let mut number = || parts.next().and_then(|part| part.parse::<u64>().ok());
        match (kind, number(), number()) {
            (Some("g"), Some(fence), Some(expires)) => Self::Granted { fence, expires },
            (Some("w"), Some(expires), Some(length)) => Self::Watch {
                expires,
                length: usize::try_from(length).unwrap_or(usize::MAX),
                holder: parts.next().and_then(|json| decode(json).ok()),
            },
            _ => Self::Look,
        }
    }
}

/// A place in a lock's queue: the id that names its wake list, and the token it will hold.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub id: String,
    pub token: Token,
    /// Claims a lock handed over with a call of its own (`acquire`), rather than starting on
    /// the grant (`run`): it is handed a [`CLAIM_GRANT`], so dying as its turn comes costs the
    /// queue that much, not a [`GRANT`].
    pub claims: bool,
}

impl Waiter {
    pub fn new() -> Self {
        Self {
            id: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
            token: Token::generate(),
            claims: false,
        }
    }
}

impl Default for Waiter {
    fn default() -> Self {
        Self::new()
    }
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

/// What the user may not do, as the doctor asks it (`Lock::denied_commands`).
#[derive(Debug)]
pub(crate) struct Denied {
    /// Commands redlock sends or its scripts call, on the lock's keys: those requests fail.
    pub(crate) commands: Vec<String>,
    /// PUBLISH and SUBSCRIBE on the lock's release channel: quorum-mode waiters are then not
    /// told of releases, and look every second instead.
    pub(crate) notices: Vec<String>,
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

/// A lock's state at one instant of the server's clock.
#[derive(Debug)]
pub struct LockState {
    pub name: LockName,
    /// Server time of the reading (Unix ms).
    pub now: u64,
    /// The last fencing token handed out for this name, if any ever was.
    pub last_fence: Option<u64>,
    /// Live holders, oldest first: all of them, or the [`INSPECT_HOLDERS`] whose leases end
    /// first.
    pub holders: Vec<Holder>,
    /// How many holders are live (more than `holders.len()` when not all were read).
    pub holder_count: usize,
    /// Live waiters, in queue order, from the head: at most [`INSPECT_WAITERS`].
    pub waiters: Vec<Queued>,
    /// Entries in the queue. A waiter that died counts until its entry reaches the head, so
    /// this can exceed the live waiters even when `waiters` shows them all.
    pub queue_length: usize,
    /// The latest hold that is over (ended, or expired), from the history.
    pub last_run: Option<HistoryEntry>,
    /// Records left out because they cannot be read.
    pub unreadable: Vec<Unreadable>,
}

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
    /// `acquire` with [`Queueing::Stay`] claims it) or the entry expired (that call says
    /// [`Acquisition::Gone`]).
    NotQueued { now: u64 },
}

/// One lock under a prefix.
#[derive(Debug, Clone)]
pub struct Lock {
    pub name: LockName,
    keys: LockKeys,
    /// Releases publish on [`LockKeys::released_channel`] (quorum mode: its waiters listen).
    notify: bool,
    /// Renewals come from the keeper of `acquire --keep-alive`, this pid: the holder record
    /// names it beside the caller's.
    keeper: Option<u32>,
}

impl Lock {
    pub fn new(prefix: &Prefix, name: LockName) -> Self {
        let keys = prefix.keys(&name);
        Self {
            name,
            keys,
            notify: false,
            keeper: None,
        }
    }

    /// The same lock, whose releases tell the waiters listening on its channel.
    pub fn notifying(self) -> Self {
        Self {
            notify: true,
            ..self
        }
    }

    /// The same lock, renewed by the keeper process `pid` (`acquire --keep-alive`).
    pub fn kept_by(self, pid: u32) -> Self {
        Self {
            keeper: Some(pid),
            ..self
        }
    }

    /// The channel releases publish on when [`Self::notifying`].
    pub fn released_channel(&self) -> String {
        self.keys.released_channel()
    }

    /// The ACL channel pattern that covers the release channels of every lock under this
    /// lock's prefix.
    pub fn released_channels_pattern(&self) -> String {
        self.keys.released_channels_pattern()
    }

    /// Quorum mode: writes `fence` back where `token` holds the lock (the counter rises to it,
    /// the record and the history entry carry it). `false`: the token holds nothing here.
    pub fn raise_fence(
        &self,
        session: &mut Session,
        token: &Token,
        fence: u64,
    ) -> anyhow::Result<bool> {
        let keys = &self.keys;
        let (raised, _now): (i64, u64) = session.run(|con| {
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
        Ok(raised == 1)
    }

    /// Takes the lock as `request` says, or reports who holds it, queueing as `queueing` says.
    pub fn acquire(
        &self,
        session: &mut Session,
        request: &Request<'_>,
        queueing: Queueing<'_>,
    ) -> anyhow::Result<Acquisition> {
        let Request {
            token,
            ttl,
            mode,
            who,
            reenter,
            replicas,
        } = *request;
        let ttl_ms = millis(ttl)?;
        let (waiter_id, queued_only, claims) = match queueing {
            Queueing::No => ("", false, false),
            Queueing::Join(waiter) => (waiter.id.as_str(), false, waiter.claims),
            Queueing::Stay(waiter) => (waiter.id.as_str(), true, waiter.claims),
        };
        // With too few replicas connected to acknowledge it, taking the lock would only give it
        // back: nothing is taken (no fence burned, no hold in the history, no contender
        // blocked), and a wait tries again after a pause. `WAIT 0 0` answers at once with the
        // replicas that acknowledge this connection's writes: all connected ones. (Not on a
        // Cluster, where this connection may be on another master than the lock's slot: the
        // WAIT after the script still gives an unacknowledged lock back. Nor on a connection
        // that has written: WAIT then counts the replicas that acknowledged that write.)
        if let Some(replicas) = replicas
            && !session.is_cluster()
            && session.is_fresh()
        {
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
        }
        let keys = &self.keys;
        let (reply, acknowledged): (Vec<redis::Value>, _) = session.run(|con| {
            let inputs = AcquireInputs {
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
            };
            match replicas {
                Some(replicas) => scripts::ACQUIRE
                    .call_and_wait(con, inputs, replicas.count, ms(replicas.timeout))
                    .map(|(reply, acknowledged)| (reply, Some(acknowledged))),
                None => scripts::ACQUIRE
                    .call(con, inputs)
                    .map(|reply| (reply, None)),
            }
        })?;
        let mut reply = reply.into_iter();
        let mut next = || reply.next().unwrap_or(redis::Value::Nil);
        let status: i64 = redis::from_redis_value(next())?;
        match status {
            1 => {
                let lease = Lease {
                    token: token.clone(),
                    fence: redis::from_redis_value::<String>(next())?.parse()?,
                    ttl,
                };
                if let (Some(replicas), Some(acknowledged)) = (replicas, acknowledged) {
                    // Not (known to be) on enough replicas: a failover could lose it. Given
                    // back at once.
                    let err = match acknowledged {
                        Ok(count) if count >= replicas.count => {
                            return Ok(Acquisition::Acquired(lease));
                        }
                        Ok(count) => unacknowledged("the lock", count, replicas),
                        Err(err) => session.explain(&err).context("WAIT for replicas failed"),
                    };
                    // Never recorded as a run that ended.
                    let ending = Ending {
                        why: Some("given back: too few replicas acknowledged it".to_owned()),
                        ..Ending::default()
                    };
                    self.release(session, token, Duration::ZERO, &ending)?;
                    return Err(err.context("the lock was taken and given back"));
                }
                Ok(Acquisition::Acquired(lease))
            }
            0 => {
                let now = redis::from_redis_value(next())?;
                let holder: Option<String> = redis::from_redis_value(next())?;
                Ok(Acquisition::Busy {
                    // A record this version cannot read names nobody; the lock is busy all
                    // the same.
                    holder: holder.as_deref().and_then(|json| decode(json).ok()),
                    now,
                    position: redis::from_redis_value(next())?,
                    length: redis::from_redis_value(next())?,
                    hint: Duration::from_millis(redis::from_redis_value(next())?),
                })
            }
            -1 => Ok(Acquisition::Gone),
            -3 => Ok(Acquisition::Cancelled),
            _ => Ok(Acquisition::NotHeldByToken),
        }
    }

    /// Gives up `waiter`'s token: leaves the queue, gives back whatever the token holds (a lock
    /// handed over meanwhile, or taken by a request whose reply never came), and marks the token
    /// so that a request of it still on its way to Redis takes nothing when it runs, whichever
    /// comes first. The mark lives [`CANCEL_MARK_TTL`].
    /// `mark`: a request of the token may still be on its way; without one, leaving leaves
    /// nothing behind.
    pub fn leave(&self, session: &mut Session, waiter: &Waiter, mark: bool) -> anyhow::Result<()> {
        self.release_script(
            session,
            "leave",
            Some(&waiter.token),
            Duration::ZERO,
            &waiter.id,
            &Ending::default(),
            mark,
        )
        .map(drop)
    }

    /// The commands redlock needs (lua/doctor.lua lists them) that the user may not run on
    /// this lock's keys, and the Pub/Sub commands of quorum mode's release notices it may not
    /// run on the lock's channel; `None` when the server cannot tell (before Redis 7).
    pub(crate) fn denied_commands(&self, session: &mut Session) -> anyhow::Result<Option<Denied>> {
        let reply: Vec<redis::Value> = session.run(|con| {
            scripts::DOCTOR.call(
                con,
                DoctorInputs {
                    sample: arg(&self.keys.holders),
                    script_sha: arg(scripts::ACQUIRE.sha()),
                    channel: arg(self.keys.released_channel()),
                },
            )
        })?;
        let mut reply = reply.into_iter();
        let mut next = || reply.next().unwrap_or(redis::Value::Nil);
        let checked: i64 = redis::from_redis_value(next())?;
        if checked == 0 {
            return Ok(None);
        }
        Ok(Some(Denied {
            commands: redis::from_redis_value(next())?,
            notices: redis::from_redis_value(next())?,
        }))
    }

    /// Keeps `waiter`'s queue entry alive for another [`QUEUE_ENTRY_TTL`], without reading the
    /// rest of the queue or the holders: the cheap call for a waiter that has nothing to look
    /// at, only a place to keep.
    pub fn refresh(&self, session: &mut Session, waiter: &Waiter) -> anyhow::Result<Refreshed> {
        let keys = &self.keys;
        let reply: Vec<u64> = session.run(|con| {
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
        let size = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
        Ok(match reply[..] {
            [1, now, position, length] => Refreshed::Queued {
                now,
                position: size(position),
                length: size(length),
            },
            [_, now, ..] => Refreshed::NotQueued { now },
            _ => anyhow::bail!("unexpected reply from the refresh script: {reply:?}"),
        })
    }

    /// Blocks until a script wakes `waiter` or `timeout` passes; `None` if nothing came.
    pub fn wait_for_wake(
        &self,
        session: &mut Session,
        waiter: &Waiter,
        timeout: Duration,
    ) -> anyhow::Result<Option<Wake>> {
        // The read timeout must outlast the block, or the server pops a wake-up for a client
        // that has stopped listening and the wake-up is lost.
        let command_timeout = session.command_timeout();
        session.set_command_timeout(timeout + command_timeout.max(Duration::from_secs(1)))?;
        let key = self.keys.wake(&waiter.id);
        let popped: Option<(String, String)> = session.run(|con| {
            redis::cmd("BLPOP")
                .arg(&key)
                .arg(format!("{:.3}", timeout.as_secs_f64().max(0.001)))
                .query(con)
        })?;
        session.set_command_timeout(command_timeout)?;
        Ok(popped.map(|(_, message)| Wake::parse(&message)))
    }

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
        let ((extended, _now), acknowledged): ((i64, u64), _) = session.run(|con| {
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
        if let (Some(replicas), Some(acknowledged)) = (replicas, acknowledged)
            && extended == 1
        {
            match acknowledged {
                Ok(count) if count >= replicas.count => {}
                Ok(count) => return Err(unacknowledged("the renewal", count, replicas)),
                Err(err) => {
                    return Err(session.explain(&err).context("WAIT for replicas failed"));
                }
            }
        }
        Ok(extended == 1)
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
        Ok(
            match self.release_script(session, "token", Some(token), min_hold, "", ending, false)? {
                redis::Value::Int(1) => Release::Released,
                redis::Value::Int(0) => Release::NotHeld,
                other => match redis::from_redis_value::<(i64, u64)>(other)? {
                    (3, holds) => Release::StillHeld(u32::try_from(holds)?),
                    (_, kept_ms) => Release::Kept(Duration::from_millis(kept_ms)),
                },
            },
        )
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
        let reply: Vec<String> = redis::from_redis_value(self.release_script(
            session,
            "force",
            None,
            Duration::ZERO,
            "",
            &ending,
            false,
        )?)?;
        time_and_records(&reply, "release", &self.keys.holders, "a holder record")
    }

    /// Runs `lua/release.lua`; `mark`: with `leave`, set the token's cancel mark.
    #[allow(clippy::too_many_arguments)]
    fn release_script(
        &self,
        session: &mut Session,
        op: &str,
        token: Option<&Token>,
        min_hold: Duration,
        waiter_id: &str,
        ending: &Ending,
        mark: bool,
    ) -> anyhow::Result<redis::Value> {
        let min_hold_ms = u64::try_from(min_hold.as_millis()).unwrap_or(u64::MAX);
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
                op: arg(op),
                token: arg(token.map_or("", Token::as_str)),
                min_hold_ms: arg(min_hold_ms),
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
            // Giving a token up must take effect even if nobody waits for the reply.
            if op == "leave" {
                scripts::RELEASE.call_whole(con, inputs)
            } else {
                scripts::RELEASE.call(con, inputs)
            }
        })
    }

    /// Reads the lock's state without changing it.
    pub fn inspect(&self, session: &mut Session) -> anyhow::Result<LockState> {
        let keys = &self.keys;
        #[allow(clippy::type_complexity)]
        let (now, last_fence, holders, waiters, holder_count, queue_length, last_run): (
            u64,
            Option<u64>,
            Vec<String>,
            Vec<String>,
            usize,
            usize,
            Option<String>,
        ) = session.run(|con| {
            scripts::INSPECT.call(
                con,
                InspectInputs {
                    holders: arg(&keys.holders),
                    leases: arg(&keys.leases),
                    fence: arg(&keys.fence),
                    queue: arg(&keys.queue),
                    waiters: arg(&keys.waiters),
                    history: arg(&keys.history),
                    max_holders: arg(INSPECT_HOLDERS),
                    max_waiters: arg(INSPECT_WAITERS),
                },
            )
        })?;
        let mut unreadable = Vec::new();
        let mut holders: Vec<Holder> =
            decode_each(&holders, &keys.holders, "a holder record", &mut unreadable);
        holders.sort_by_key(|holder| (holder.since, holder.fence));
        let waiters = decode_each(&waiters, &keys.waiters, "a queue entry", &mut unreadable);
        let last_run = decode_each(
            &Vec::from_iter(last_run),
            &keys.history,
            "a history entry",
            &mut unreadable,
        )
        .pop();
        Ok(LockState {
            name: self.name.clone(),
            now,
            last_fence,
            holders,
            holder_count,
            waiters,
            queue_length,
            last_run,
            unreadable,
        })
    }

    /// The lock's history, oldest hold first, the server's time of the reading, and the entries
    /// that cannot be read.
    pub fn history(
        &self,
        session: &mut Session,
    ) -> anyhow::Result<(u64, Vec<HistoryEntry>, Vec<Unreadable>)> {
        let reply: Vec<String> = session.run(|con| {
            scripts::HISTORY.call(
                con,
                HistoryInputs {
                    history: arg(&self.keys.history),
                },
            )
        })?;
        time_and_records(&reply, "history", &self.keys.history, "a history entry")
    }
}

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

/// One hold in a lock's history. Times are the server's clock, in Unix milliseconds.
#[derive(Debug, Clone, Deserialize)]
pub struct HistoryEntry {
    #[serde(deserialize_with = "number_or_string")]
    pub fence: u64,
    pub mode: String,
    #[serde(default)]
    pub limit: u32,
    #[serde(flatten)]
    pub who: Identity,
    pub since: u64,
    /// The lease's end as last set (by the acquisition or a renewal).
    pub exp: u64,
    /// When the hold ended, if it did before its lease ran out.
    #[serde(default)]
    pub ended: Option<u64>,
    /// `released`, `forced`, `given back` or `lost` (with `ended`).
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub exit: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why it ended, when someone said: a limit that stopped the command, who forced it.
    #[serde(default)]
    pub why: Option<String>,
}

impl HistoryEntry {
    /// How the hold stands at server time `now`: its outcome, `expired` when its lease ran out
    /// first, or `holding`.
    pub fn status(&self, now: u64) -> &str {
        match (&self.outcome, self.ended) {
            (Some(outcome), _) => outcome,
            (None, Some(_)) => "ended",
            (None, None) if self.exp <= now => "expired",
            (None, None) => "holding",
        }
    }

    /// When the hold ended: given, or the lease's end once that has passed.
    pub fn end(&self, now: u64) -> Option<u64> {
        self.ended.or((self.exp <= now).then_some(self.exp))
    }
}

/// The held locks under a prefix, and keys that looked like locks but hold foreign data.
#[derive(Debug, Default)]
pub struct Listing {
    pub locks: Vec<LockState>,
    /// Key and reason, for keys matching the layout whose content redlock did not write.
    pub skipped: Vec<(String, anyhow::Error)>,
}

/// Every held lock under `prefix`, by name, on every master of a Cluster. Uses SCAN, never
/// KEYS.
pub fn list(session: Session, prefix: &Prefix) -> anyhow::Result<Listing> {
    let mut masters = session.masters()?;
    let mut names = BTreeMap::new();
    for master in &mut masters {
        scan_holders(master, prefix, &mut names)?;
    }
    // Each lock is read by a script, on whichever master serves it (redirected there).
    let session = &mut masters[0];
    let mut listing = Listing::default();
    for (key, name) in names {
        match Lock::new(prefix, name).inspect(session) {
            Ok(state) if state.holder_count == 0 => {}
            Ok(state) => listing.locks.push(state),
            Err(err) if failure_of(&err) == Some(Failure::Usage) => {
                listing.skipped.push((key, err));
            }
            Err(err) => return Err(err),
        }
    }
    listing
        .locks
        .sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    Ok(listing)
}

/// Adds the holders keys under `prefix` of one server to `names`.
fn scan_holders(
    session: &mut Session,
    prefix: &Prefix,
    names: &mut BTreeMap<String, LockName>,
) -> anyhow::Result<()> {
    let pattern = prefix.holders_pattern();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = session.run(|con| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("hash")
                .query(con)
        })
        .map_err(|err| {
            // SCAN's TYPE option came with Redis 6.0; older servers call it a syntax error.
            if format!("{err:#}").contains("syntax error") {
                fail(
                    Failure::Unsupported,
                    "the server does not know SCAN ... TYPE: it is older than Redis 6.0, and redlock needs Redis 6.0 or later",
                )
            } else {
                err
            }
        })?;
        for key in keys {
            let Ok(key) = String::from_utf8(key) else {
                continue;
            };
            if let Some(name) = prefix.name_of_holders_key(&key) {
                names.insert(key, name);
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// A constant duration in ms, for a script.
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A yes/no script argument.
fn flag(set: bool) -> &'static str {
    if set { "1" } else { "0" }
}

/// The error for a write too few replicas acknowledged.
fn unacknowledged(what: &str, acknowledged: u32, replicas: Replicas) -> anyhow::Error {
    fail(
        Failure::Unavailable,
        format!(
            "only {acknowledged} of the {} replicas asked for acknowledged {what} within {}",
            replicas.count,
            crate::duration::display(replicas.timeout)
        ),
    )
}

fn millis(duration: Duration) -> anyhow::Result<u64> {
    match u64::try_from(duration.as_millis()) {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(fail(Failure::Usage, "lease must be at least 1ms")),
    }
}

#[cfg(test)]
mod tests {
    use super::{Token, Wake, name_in_passwd};

    #[test]
    fn passwd_lookup_finds_the_first_name_of_a_uid() {
        let passwd = "# a comment\nroot:x:0:0:root:/root:/bin/sh\nbroken\n:x:7:7::/:/bin/sh\n\
                      alice:x:1000:1000:Alice:/home/alice:/bin/sh\nalias:x:1000:1000::/:/bin/sh\n";
        assert_eq!(name_in_passwd(passwd, 0).as_deref(), Some("root"));
        assert_eq!(name_in_passwd(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(name_in_passwd(passwd, 7), None, "an empty name is no name");
        assert_eq!(name_in_passwd(passwd, 4242), None);
    }

    #[test]
    fn wake_messages_parse_and_anything_else_means_look_again() {
        assert!(matches!(
            Wake::parse("g:7:1795329318937"),
            Wake::Granted {
                fence: 7,
                expires: 1_795_329_318_937
            }
        ));
        let record = r#"{"mode":"exclusive","limit":0,"fence":7,"host":"h:1","pid":9,"user":"u","cmd":"a:b","since":1,"ttl":2000,"exp":2001,"count":1}"#;
        let Wake::Watch {
            expires,
            length,
            holder,
        } = Wake::parse(&format!("w:2001:3:{record}"))
        else {
            panic!("not a watch");
        };
        assert_eq!((expires, length), (2001, 3));
        assert_eq!(holder.unwrap().who.command, "a:b");
        for other in ["1", "", "g:7", "g:x:1", "w:1", "x:1:2"] {
            assert!(matches!(Wake::parse(other), Wake::Look), "{other:?}");
        }
    }

    #[test]
    fn tokens_are_unique_hex_and_only_tokens_parse() {
        let tokens: std::collections::HashSet<String> = (0..100_000)
            .map(|_| Token::generate().as_str().to_owned())
            .collect();
        assert_eq!(tokens.len(), 100_000);
        assert!(
            tokens
                .iter()
                .all(|token| { token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()) })
        );
        let token = tokens.iter().next().unwrap();
        assert_eq!(Token::parse(&token.to_uppercase()).unwrap().as_str(), token);
        for bad in [
            "",
            "abc",
            "g0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
        ] {
            assert!(Token::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format!("{:?}", Token::generate()), "Token(***)");
    }
}
