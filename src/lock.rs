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
use crate::scripts;

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
}

impl Identity {
    /// Longest command recorded; longer ones are cut at a character boundary.
    const MAX_COMMAND: usize = 256;

    /// This process, described by `command`.
    pub fn current(command: &str) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "unknown".into());
        let user = user_name();
        let mut command = command.to_owned();
        if command.len() > Self::MAX_COMMAND {
            let mut cut = Self::MAX_COMMAND;
            while !command.is_char_boundary(cut) {
                cut -= 1;
            }
            command.truncate(cut);
        }
        Self {
            host,
            pid: std::process::id(),
            user,
            command,
        }
    }
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
    pub fence: u64,
    #[serde(flatten)]
    pub who: Identity,
    /// Acquired at (Unix ms, server time).
    pub since: u64,
    /// Lease length of the last acquire or extend (ms).
    pub ttl: u64,
    /// Expires at (Unix ms, server time).
    pub exp: u64,
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

fn decode<T: serde::de::DeserializeOwned>(json: &str) -> anyhow::Result<T> {
    serde_json::from_str(json).map_err(|err| anyhow::anyhow!("unreadable record {json:?}: {err}"))
}

/// How long a queue entry lives unless its waiter refreshes it (every third of this).
pub const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(30);
/// The lease a waiter is handed the lock with: `run` starts on it and its first renewal
/// extends it, `acquire` claims the full lease at once. A dead waiter's turn costs the queue at
/// most this long.
pub const GRANT: Duration = Duration::from_secs(2);

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
}

impl Waiter {
    pub fn new() -> Self {
        Self {
            id: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
            token: Token::generate(),
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
}

/// A lock's state at one instant of the server's clock.
#[derive(Debug)]
pub struct LockState {
    pub name: LockName,
    /// Server time of the reading (Unix ms).
    pub now: u64,
    /// The last fencing token handed out for this name, if any ever was.
    pub last_fence: Option<u64>,
    /// Live holders, oldest first.
    pub holders: Vec<Holder>,
    /// Live waiters, in queue order.
    pub waiters: Vec<Queued>,
}

/// One lock under a prefix.
#[derive(Debug, Clone)]
pub struct Lock {
    pub name: LockName,
    keys: LockKeys,
}

impl Lock {
    pub fn new(prefix: &Prefix, name: LockName) -> Self {
        let keys = prefix.keys(&name);
        Self { name, keys }
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
        } = *request;
        let ttl_ms = millis(ttl)?;
        let (waiter_id, queued_only) = match queueing {
            Queueing::No => ("", false),
            Queueing::Join(waiter) => (waiter.id.as_str(), false),
            Queueing::Stay(waiter) => (waiter.id.as_str(), true),
        };
        let reply: Vec<redis::Value> = session.run(|con| {
            scripts::ACQUIRE
                .key(&self.keys.holders)
                .key(&self.keys.fence)
                .key(&self.keys.queue)
                .key(self.keys.wake(waiter_id))
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(mode.name())
                .arg(mode.limit())
                .arg(&who.host)
                .arg(who.pid)
                .arg(&who.user)
                .arg(&who.command)
                .arg(waiter_id)
                .arg(if queued_only { "1" } else { "0" })
                .arg(QUEUE_ENTRY_TTL.as_millis() as u64)
                .arg(GRANT.as_millis() as u64)
                .arg(WAKE_TTL.as_millis() as u64)
                .arg(if reenter { "1" } else { "0" })
                .invoke(con)
        })?;
        let mut reply = reply.into_iter();
        let mut next = || reply.next().unwrap_or(redis::Value::Nil);
        let status: i64 = redis::from_redis_value(next())?;
        match status {
            1 => Ok(Acquisition::Acquired(Lease {
                token: token.clone(),
                fence: redis::from_redis_value(next())?,
                ttl,
            })),
            0 => {
                let now = redis::from_redis_value(next())?;
                let holder: Option<String> = redis::from_redis_value(next())?;
                Ok(Acquisition::Busy {
                    holder: holder.as_deref().map(decode).transpose()?,
                    now,
                    position: redis::from_redis_value(next())?,
                    length: redis::from_redis_value(next())?,
                    hint: Duration::from_millis(redis::from_redis_value(next())?),
                })
            }
            -1 => Ok(Acquisition::Gone),
            _ => Ok(Acquisition::NotHeldByToken),
        }
    }

    /// Leaves the queue, giving back a lock handed over in the meantime.
    pub fn leave(&self, session: &mut Session, waiter: &Waiter) -> anyhow::Result<()> {
        self.release_script(
            session,
            "leave",
            Some(&waiter.token),
            Duration::ZERO,
            &waiter.id,
        )
        .map(drop)
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
    pub fn extend(
        &self,
        session: &mut Session,
        token: &Token,
        ttl: Duration,
    ) -> anyhow::Result<bool> {
        let ttl_ms = millis(ttl)?;
        let (extended, _now): (i64, u64) = session.run(|con| {
            scripts::EXTEND
                .key(&self.keys.holders)
                .arg(token.as_str())
                .arg(ttl_ms)
                .invoke(con)
        })?;
        Ok(extended == 1)
    }

    /// Releases the hold of `token`; with a non-zero `min_hold`, a lock held for less than that
    /// since its acquisition is kept until then instead (and expires by itself). A released
    /// lock goes to the head of the queue.
    pub fn release(
        &self,
        session: &mut Session,
        token: &Token,
        min_hold: Duration,
    ) -> anyhow::Result<Release> {
        Ok(
            match self.release_script(session, "token", Some(token), min_hold, "")? {
                redis::Value::Int(1) => Release::Released,
                redis::Value::Int(0) => Release::NotHeld,
                other => match redis::from_redis_value::<(i64, u64)>(other)? {
                    (3, holds) => Release::StillHeld(u32::try_from(holds)?),
                    (_, kept_ms) => Release::Kept(Duration::from_millis(kept_ms)),
                },
            },
        )
    }

    /// Removes every holder; returns the server time and the holders evicted.
    pub fn force_release(&self, session: &mut Session) -> anyhow::Result<(u64, Vec<Holder>)> {
        let reply: Vec<String> = redis::from_redis_value(self.release_script(
            session,
            "force",
            None,
            Duration::ZERO,
            "",
        )?)?;
        let (now, holders) = reply
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("empty reply from release"))?;
        let holders = holders
            .iter()
            .map(|json| decode(json))
            .collect::<anyhow::Result<_>>()?;
        Ok((now.parse()?, holders))
    }

    fn release_script(
        &self,
        session: &mut Session,
        op: &str,
        token: Option<&Token>,
        min_hold: Duration,
        waiter_id: &str,
    ) -> anyhow::Result<redis::Value> {
        let min_hold_ms = u64::try_from(min_hold.as_millis()).unwrap_or(u64::MAX);
        session.run(|con| {
            scripts::RELEASE
                .key(&self.keys.holders)
                .key(&self.keys.fence)
                .key(&self.keys.queue)
                .key(self.keys.wake(waiter_id))
                .arg(op)
                .arg(token.map_or("", Token::as_str))
                .arg(min_hold_ms)
                .arg(waiter_id)
                .arg(GRANT.as_millis() as u64)
                .arg(WAKE_TTL.as_millis() as u64)
                .invoke(con)
        })
    }

    /// Reads the lock's state without changing it.
    pub fn inspect(&self, session: &mut Session) -> anyhow::Result<LockState> {
        let (now, last_fence, holders, waiters): (u64, Option<u64>, Vec<String>, Vec<String>) =
            session.run(|con| {
                scripts::INSPECT
                    .key(&self.keys.holders)
                    .key(&self.keys.fence)
                    .key(&self.keys.queue)
                    .invoke(con)
            })?;
        let mut holders = holders
            .iter()
            .map(|json| decode::<Holder>(json))
            .collect::<anyhow::Result<Vec<_>>>()?;
        holders.sort_by_key(|holder| (holder.since, holder.fence));
        let waiters = waiters
            .iter()
            .map(|json| decode(json))
            .collect::<anyhow::Result<_>>()?;
        Ok(LockState {
            name: self.name.clone(),
            now,
            last_fence,
            holders,
            waiters,
        })
    }
}

/// The held locks under a prefix, and keys that looked like locks but hold foreign data.
#[derive(Debug, Default)]
pub struct Listing {
    pub locks: Vec<LockState>,
    /// Key and reason, for keys matching the layout whose content redlock did not write.
    pub skipped: Vec<(String, anyhow::Error)>,
}

/// Every held lock under `prefix`, by name. Uses SCAN, never KEYS.
pub fn list(session: &mut Session, prefix: &Prefix) -> anyhow::Result<Listing> {
    let pattern = prefix.holders_pattern();
    let mut names = BTreeMap::new();
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
            break;
        }
        cursor = next;
    }
    let mut listing = Listing::default();
    for (key, name) in names {
        match Lock::new(prefix, name).inspect(session) {
            Ok(state) if state.holders.is_empty() => {}
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
