//! The records the scripts keep in Redis (holder records, queue entries, history entries) as
//! this version reads them, and the decoding that leaves out, and names, what it cannot read.

use serde::Deserialize;

use super::Identity;
use super::reply::unexpected;

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
    /// The first 16 hex digits of the SHA-1 of its token, which `inspect.lua` returns beside
    /// the record (the token itself is never read back): tells one acquisition on several
    /// masters from another. Not read from the record, where anyone could have put one.
    #[serde(skip)]
    pub token_digest: Option<String>,
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

pub(super) fn decode<T: serde::de::DeserializeOwned>(json: &str) -> anyhow::Result<T> {
    serde_json::from_str(json).map_err(|err| anyhow::anyhow!("unreadable record {json:?}: {err}"))
}

/// What each kind of record is called where one cannot be read ([`Unreadable::what`]).
pub(super) const HOLDER_RECORD: &str = "a holder record";
pub(super) const QUEUE_ENTRY: &str = "a queue entry";
pub(super) const HISTORY_ENTRY: &str = "a history entry";

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
pub(super) fn decode_each<T: serde::de::DeserializeOwned>(
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
pub(super) fn time_and_records<T: serde::de::DeserializeOwned>(
    reply: redis::Value,
    script: &str,
    key: &str,
    what: &'static str,
) -> anyhow::Result<(u64, Vec<T>, Vec<Unreadable>)> {
    let strings: Option<Vec<String>> = redis::from_redis_value_ref(&reply).ok();
    let Some((now, records)) = strings
        .as_deref()
        .and_then(<[String]>::split_first)
        .and_then(|(now, records)| Some((now.parse().ok()?, records)))
    else {
        return Err(unexpected(script, std::slice::from_ref(&reply)));
    };
    let mut unreadable = Vec::new();
    let records = decode_each(records, key, what, &mut unreadable);
    Ok((now, records, unreadable))
}

/// What a lock's history keeps, as a hold asks for it (`run`/`acquire --history`,
/// `--history-ttl`); `None` keeps the lock's own (that of its newest entry), else the defaults.
/// Every entry carries the retention of its hold, and every script that writes the history
/// applies the retention of the entry it wrote last (`lua/prelude/40-history.lua`, HISTORY_CAP).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Holds kept, newest first (1 to [`Retention::MAX_HOLDS`]).
    pub holds: Option<u32>,
    /// How long the history lives after its last change ([`Retention::MIN_TTL`] to
    /// [`Retention::MAX_TTL`]).
    pub ttl: Option<std::time::Duration>,
}

impl Retention {
    /// The most holds a history keeps (HISTORY_MAX_CAP in `lua/prelude/40-history.lua`; 100 unless asked,
    /// HISTORY_CAP).
    pub const MAX_HOLDS: u32 = 1000;
    /// The shortest and longest a history may be asked to live after its last change
    /// (HISTORY_MIN_TTL_MS, HISTORY_MAX_TTL_MS; 30 days unless asked, HISTORY_TTL_MS).
    pub const MIN_TTL: std::time::Duration = std::time::Duration::from_secs(60);
    pub const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);
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

/// How far after the server's clock a hold's start or end may lie and still be believed
/// ([`HistoryEntry::ahead_of`]). Every time in a history is the server's own clock when the
/// scripts wrote it, and readers compare with that clock: only a clock stepped back since, or a
/// record written by hand, puts one in the future. NTP steps a clock by well under a minute.
pub const AHEAD_OF_CLOCK_MS: u64 = 60_000;

impl HistoryEntry {
    /// The hold's start or end when it lies more than [`AHEAD_OF_CLOCK_MS`] after server time
    /// `now`. `check` and `metrics` leave such a hold out: a success that ends in the future
    /// would count as recent for ever.
    pub fn ahead_of(&self, now: u64) -> Option<u64> {
        let limit = now.saturating_add(AHEAD_OF_CLOCK_MS);
        [self.ended, Some(self.since)]
            .into_iter()
            .flatten()
            .find(|&at| at > limit)
    }

    /// Whether the hold ended well: released, with exit status 0 (the command `run` ran, or
    /// what `release --exit-status` reported). `lua/inspect.lua` says the same of its
    /// `last_success`.
    pub fn succeeded(&self) -> bool {
        self.ended.is_some() && self.outcome.as_deref() == Some("released") && self.exit == Some(0)
    }

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
