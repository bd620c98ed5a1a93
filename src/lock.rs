//! The lock engine: acquire, extend, release, force-release, inspect and list one lock on one
//! Redis server. Each state change is a single token-checked Lua script (see `lua/README.md`);
//! this module only builds the arguments and decodes the replies. It knows nothing of the
//! command line and prints nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

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

/// Who is taking the lock, recorded for `inspect`.
#[derive(Debug, Clone)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub user: String,
    /// The supervised command line, or `acquire` for a bare acquisition.
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
        let uid = nix::unistd::getuid();
        let user = nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |user| user.name);
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

/// One holder as stored in Redis. Times are the server's clock, in milliseconds.
#[derive(Debug, Clone, Deserialize)]
pub struct Holder {
    pub mode: String,
    pub fence: u64,
    pub host: String,
    pub pid: u32,
    pub user: String,
    #[serde(rename = "cmd")]
    pub command: String,
    /// Acquired at (Unix ms, server time).
    pub since: u64,
    /// Lease length of the last acquire or extend (ms).
    pub ttl: u64,
    /// Expires at (Unix ms, server time).
    pub exp: u64,
}

impl Holder {
    fn decode(json: &str) -> anyhow::Result<Self> {
        serde_json::from_str(json)
            .map_err(|err| anyhow::anyhow!("unreadable holder record {json:?}: {err}"))
    }
}

/// A successful acquisition.
#[derive(Debug)]
pub struct Lease {
    pub token: Token,
    pub fence: u64,
    pub ttl: Duration,
    /// Server time of the grant (Unix ms).
    pub granted_at: u64,
}

/// What `release` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Released,
    /// Kept for the rest of the minimum hold; expires by itself after this long.
    Kept(Duration),
    /// The token holds nothing; nothing changed.
    NotHeld,
}

/// What `acquire` found.
#[derive(Debug)]
pub enum Acquisition {
    Acquired(Lease),
    /// Held by someone else; `now` is the server's time when checked.
    Busy {
        holder: Holder,
        now: u64,
    },
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

    /// Takes the lock for `who` with a lease of `ttl`, or reports the current holder.
    pub fn acquire(
        &self,
        session: &mut Session,
        ttl: Duration,
        who: &Identity,
    ) -> anyhow::Result<Acquisition> {
        let token = Token::generate();
        let ttl_ms = millis(ttl)?;
        let (granted, second, third): (i64, redis::Value, redis::Value) = session.run(|con| {
            scripts::ACQUIRE
                .key(&self.keys.holders)
                .key(&self.keys.fence)
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg("exclusive")
                .arg(&who.host)
                .arg(who.pid)
                .arg(&who.user)
                .arg(&who.command)
                .invoke(con)
        })?;
        if granted == 1 {
            let fence: u64 = redis::from_redis_value(second)?;
            let granted_at: u64 = redis::from_redis_value(third)?;
            Ok(Acquisition::Acquired(Lease {
                token,
                fence,
                ttl,
                granted_at,
            }))
        } else {
            let now: u64 = redis::from_redis_value(second)?;
            let json: String = redis::from_redis_value(third)?;
            Ok(Acquisition::Busy {
                holder: Holder::decode(&json)?,
                now,
            })
        }
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
    /// since its acquisition is kept until then instead (and expires by itself).
    pub fn release(
        &self,
        session: &mut Session,
        token: &Token,
        min_hold: Duration,
    ) -> anyhow::Result<Release> {
        let min_hold_ms = u64::try_from(min_hold.as_millis()).unwrap_or(u64::MAX);
        let reply: redis::Value = session.run(|con| {
            scripts::RELEASE
                .key(&self.keys.holders)
                .arg(token.as_str())
                .arg(min_hold_ms)
                .invoke(con)
        })?;
        Ok(match reply {
            redis::Value::Int(1) => Release::Released,
            redis::Value::Int(0) => Release::NotHeld,
            kept => {
                let (_, kept_ms): (i64, u64) = redis::from_redis_value(kept)?;
                Release::Kept(Duration::from_millis(kept_ms))
            }
        })
    }

    /// Removes every holder; returns the server time and the holders evicted.
    pub fn force_release(&self, session: &mut Session) -> anyhow::Result<(u64, Vec<Holder>)> {
        let reply: Vec<String> =
            session.run(|con| scripts::FORCE_RELEASE.key(&self.keys.holders).invoke(con))?;
        let (now, holders) = reply
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("empty reply from force_release"))?;
        let holders = holders
            .iter()
            .map(|json| Holder::decode(json))
            .collect::<anyhow::Result<_>>()?;
        Ok((now.parse()?, holders))
    }

    /// Reads the lock's state without changing it.
    pub fn inspect(&self, session: &mut Session) -> anyhow::Result<LockState> {
        let reply: Vec<Option<String>> = session.run(|con| {
            scripts::INSPECT
                .key(&self.keys.holders)
                .key(&self.keys.fence)
                .invoke(con)
        })?;
        let mut reply = reply.into_iter();
        let now = reply
            .next()
            .flatten()
            .ok_or_else(|| anyhow::anyhow!("empty reply from inspect"))?
            .parse()?;
        let last_fence = reply.next().flatten().map(|f| f.parse()).transpose()?;
        let mut holders = reply
            .flatten()
            .map(|json| Holder::decode(&json))
            .collect::<anyhow::Result<Vec<_>>>()?;
        holders.sort_by_key(|holder| (holder.since, holder.fence));
        Ok(LockState {
            name: self.name.clone(),
            now,
            last_fence,
            holders,
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
