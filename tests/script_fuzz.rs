//! All or nothing, whatever is in Redis: a state fuzzer for the scripts of `lua/`.
//!
//! lua/README.md promises that every script checks everything before its first write, so an
//! error reply leaves Redis exactly as it was, and that a script that succeeds leaves every key
//! it wrote with an expiry (the fence counter aside). Examples cannot show that for every value
//! someone may have put at a lock's key names; this test draws the values. Each case writes a
//! lock's keys (holders, leases, the fence counter, queue, waiters, wake lists, cancel marks,
//! history) with records and scores drawn from hostile values (huge, negative, infinite, not a
//! number, not whole, wrong JSON types, fields missing or extra, long strings, keys of the wrong
//! type, keys without an expiry), then makes one call of redlock's own (the library's `Lock`,
//! which runs the real scripts) on every path: acquire in each mode, failing fast, joining the
//! queue or only staying in it, re-entering; release, with a minimum hold, of a lost hold;
//! leave; extend; raise; refresh; inspect; force; history; the doctor's ACL question. It then
//! checks the outcome:
//! - an error: every key byte-identical before and after (DUMP) with the same expiry;
//! - a read: nothing changed at all;
//! - a change: every key the call changed has an expiry (but the fence counter), none longer
//!   than a lock's keys may live; every holder record it wrote leases no longer than asked (or
//!   the grant, or the minimum hold), and its lease in the index is its record's; the fence
//!   counter never fell, and a fence handed out is above the one before.
//!
//! A failing case prints its seed and the state shrunk to the writes that still make it fail.
//! CI runs a seeded few hundred cases per server; the fault suite's long tier
//! (`tests/faults/run`, `REDLOCK_FAULTS_FULL`) runs thousands. `REDLOCK_FUZZ_SEED` and
//! `REDLOCK_FUZZ_CASES` rerun a given seed and count.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use redis::Value;
use redlock::conn::Session;
use redlock::keys::{LockName, Prefix};
use redlock::lock::{
    Acquisition, Ending, Identity, Lock, Mode, Queueing, Request, Retention, Token, Waiter,
};

use crate::util::RedisServer;
use crate::util::releases::{self, Release};

const NAME: &str = "fz";
const KEY: &str = "redlock:{fz}";
/// The longest a lock's key may live after a call: the history's longest retention (366 days)
/// and a day of slack. A key set to expire later was given a time the call did not check.
const LONGEST_KEY_MS: i64 = 367 * 24 * 3600 * 1000;
/// The grant a waiter is handed the lock with (`GRANT`).
const GRANT_MS: u64 = 5000;

/// xorshift64*: small, seeded, the same on every machine; and the case's hostility, which
/// scales the chance of each hostile value (none in a quarter of the cases, so that the calls
/// also get deep into the scripts; twice the base rate in another quarter).
struct Rng(u64, u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut rng = Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, 100);
        rng.1 = *rng.pick(&[0, 30, 100, 200]);
        rng
    }

    /// True with probability `percent` in 100, scaled by the case's hostility.
    fn hostile(&mut self, percent: u64) -> bool {
        self.below(10_000) < percent * self.1
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent` in 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[usize::try_from(self.below(items.len() as u64)).unwrap()]
    }
}

/// The tokens and waiter ids of a case: the state's records use them, and so does the call,
/// so that it meets its own record, entry, wake list or cancel mark.
const TOKENS: [&str; 4] = [
    "0123456789abcdef0123456789abcdef",
    "fedcba9876543210fedcba9876543210",
    "00000000000000000000000000000001",
    "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbb",
];
const WAITERS: [&str; 4] = [
    "0123456789abcdef",
    "fedcba9876543210",
    "0000000000000001",
    "aaaaaaaabbbbbbbb",
];

/// JSON values (as text) that no field of a record should hold, and some it may.
fn hostile_value(rng: &mut Rng) -> String {
    let long = "x".repeat(100_000);
    let values: &[&str] = &[
        "1e300",
        "-1e300",
        "-1",
        "0",
        "1.5",
        "-0.5",
        "9007199254740993",
        "9007199254740991",
        "253402300800000",
        "9223372036854775807",
        "18446744073709551616",
        "1e999",
        "-1e999",
        "NaN",
        "nan",
        "Infinity",
        "-Infinity",
        "0x10",
        "\"\"",
        "\"12\"",
        "\"1e300\"",
        "\"\\u009b[31m\"",
        "\"\\u0000\"",
        "\"é\"",
        "true",
        "false",
        "null",
        "[]",
        "{}",
        "[1,2]",
        "{\"a\":1}",
        "\"exclusive\"",
        "\"shared\"",
        "\"semaphore\"",
        "\"0123456789abcdef\"",
    ];
    if rng.chance(3) {
        return format!("\"{long}\"");
    }
    (*rng.pick(values)).to_owned()
}

/// A record as (field, JSON text) pairs, mutated by hostile values: fields changed, removed or
/// added. Every few records is not an object at all.
fn record_json(rng: &mut Rng, mut fields: Vec<(String, String)>) -> String {
    if rng.hostile(3) {
        let junk: &[&str] = &[
            "not json",
            "",
            "[]",
            "{}",
            "null",
            "1",
            "\"s\"",
            "{\"mode\":",
        ];
        return (*rng.pick(junk)).to_owned();
    }
    if rng.hostile(20) {
        for _ in 0..=rng.below(2) {
            let what = rng.below(10);
            let at = usize::try_from(rng.below(fields.len() as u64)).unwrap();
            if what < 6 {
                fields[at].1 = hostile_value(rng);
            } else if what < 8 {
                fields.remove(at);
            } else {
                let names: &[&str] = &[
                    "exp", "since", "ttl", "count", "limit", "pid", "ended", "exit", "signal",
                    "keep", "keep_ms", "steady", "due", "claim", "granted", "wid", "over", "tok",
                    "fence", "outcome", "why", "keeper", "extra",
                ];
                fields.push(((*rng.pick(names)).to_owned(), hostile_value(rng)));
            }
            if fields.is_empty() {
                break;
            }
        }
    }
    let mut json = String::from("{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        write!(json, "\"{name}\":{value}").unwrap();
    }
    json.push('}');
    json
}

/// The lock's kind in this case (most records agree, so that calls get past the kind check).
#[derive(Clone, Copy)]
struct Kind {
    semaphore: bool,
    limit: u64,
}

fn mode_of(rng: &mut Rng, kind: Kind) -> (&'static str, u64) {
    if rng.hostile(3) {
        return *rng.pick(&[("exclusive", 0), ("shared", 0), ("semaphore", 2)]);
    }
    if kind.semaphore {
        ("semaphore", kind.limit)
    } else if rng.chance(50) {
        ("exclusive", 0)
    } else {
        ("shared", 0)
    }
}

fn text(value: impl std::fmt::Display) -> String {
    value.to_string()
}

fn quoted(value: &str) -> String {
    format!("\"{value}\"")
}

/// A holder record, live or expired, for `token`.
fn holder_fields(rng: &mut Rng, kind: Kind, now: u64, fence: u64) -> (Vec<(String, String)>, u64) {
    let (mode, limit) = mode_of(rng, kind);
    let since = now - rng.below(100_000);
    let exp = if rng.chance(75) {
        now + 1 + rng.below(60_000)
    } else {
        now - rng.below(10_000)
    };
    let mut fields = vec![
        ("mode".to_owned(), quoted(mode)),
        ("limit".to_owned(), text(limit)),
        ("count".to_owned(), text(1 + rng.below(3))),
        ("fence".to_owned(), quoted(&fence.to_string())),
        ("host".to_owned(), quoted("h")),
        ("pid".to_owned(), text(rng.below(1000))),
        ("user".to_owned(), quoted("u")),
        ("cmd".to_owned(), quoted("c")),
        ("since".to_owned(), text(since)),
        ("ttl".to_owned(), text(60_000)),
        ("exp".to_owned(), text(exp)),
    ];
    if rng.chance(15) {
        fields.push(("granted".to_owned(), "true".to_owned()));
        fields.push(("wid".to_owned(), quoted(rng.pick::<&str>(&WAITERS))));
    }
    if rng.chance(10) {
        fields.push(("over".to_owned(), "true".to_owned()));
    }
    if rng.chance(10) {
        fields.push(("keep".to_owned(), text(rng.below(2000))));
        fields.push(("keep_ms".to_owned(), text(rng.below(1 << 40))));
    }
    (fields, exp)
}

/// A score as Redis takes it: mostly `good`, sometimes one no script writes.
fn score(rng: &mut Rng, good: u64) -> String {
    if rng.hostile(10) {
        let hostile: &[&str] = &[
            "1e300",
            "-1e300",
            "inf",
            "-inf",
            "1.5",
            "-1",
            "0",
            "9007199254740993",
            "253402300800000",
            "9223372036854775807",
        ];
        return (*rng.pick(hostile)).to_owned();
    }
    good.to_string()
}

/// The state of one case: the commands that write it, in order (shrinking drops some).
#[derive(Clone, Default)]
struct State {
    writes: Vec<Vec<String>>,
}

impl State {
    fn push(&mut self, args: &[&str]) {
        self.writes
            .push(args.iter().map(|arg| (*arg).to_owned()).collect());
    }

    fn print(&self) -> String {
        let mut out = String::new();
        for write in &self.writes {
            let shown: Vec<String> = write
                .iter()
                .map(|arg| {
                    if arg.len() > 400 {
                        format!("{:?}...({} bytes)", &arg[..40], arg.len())
                    } else {
                        format!("{arg:?}")
                    }
                })
                .collect();
            writeln!(out, "  {}", shown.join(" ")).unwrap();
        }
        out
    }
}

/// Expiry for a key just written: mostly one, sometimes none (keys someone wrote by hand).
fn expire(rng: &mut Rng, state: &mut State, key: &str) {
    if !rng.hostile(10) {
        let ms = (1000 + rng.below(120_000)).to_string();
        state.push(&["PEXPIRE", key, &ms]);
    }
}

/// A key of another type than the lock's own at `key`.
fn wrong_type(rng: &mut Rng, state: &mut State, key: &str) {
    match rng.below(5) {
        0 => state.push(&["SET", key, "x"]),
        1 => state.push(&["RPUSH", key, "x"]),
        2 => state.push(&["HSET", key, "f", "v"]),
        3 => state.push(&["SADD", key, "m"]),
        _ => state.push(&["ZADD", key, "1", "m"]),
    }
}

fn generate(rng: &mut Rng, now: u64, kind: Kind) -> State {
    let mut state = State::default();
    let now_us = now * 1000;
    let key = |suffix: &str| format!("{KEY}:{suffix}");

    // The fence counter.
    let mut fence = now_us - rng.below(10_000_000);
    let fence_kind = if rng.hostile(20) {
        1 + rng.below(2)
    } else if rng.chance(10) {
        0
    } else {
        3
    };
    match fence_kind {
        0 => {}
        1 => wrong_type(rng, &mut state, &key("fence")),
        2 => {
            let values: &[&str] = &[
                "abc",
                "-5",
                "1e5",
                "1.5",
                "",
                "99999999999999999999",
                "9007199254740990",
                "9007199254740991",
                " 12",
            ];
            state.push(&["SET", &key("fence"), *rng.pick(values)]);
        }
        _ => {
            if rng.chance(20) {
                fence = now_us + rng.below(10_000_000);
            }
            state.push(&["SET", &key("fence"), &fence.to_string()]);
        }
    }

    // Holders and their leases.
    if rng.hostile(4) {
        let which = key(if rng.chance(50) { "holders" } else { "leases" });
        wrong_type(rng, &mut state, &which);
    } else {
        let holders = rng.below(4);
        for i in 0..holders {
            let token = if rng.hostile(3) {
                "not-a-token"
            } else {
                TOKENS[usize::try_from(i).unwrap()]
            };
            let (fields, exp) = holder_fields(rng, kind, now, fence - 100 * (i + 1));
            let json = record_json(rng, fields);
            if !rng.hostile(3) {
                state.push(&["HSET", &key("holders"), token, &json]);
            }
            if !rng.hostile(3) {
                let score = score(rng, exp);
                state.push(&["ZADD", &key("leases"), &score, token]);
            }
        }
        if rng.hostile(3) {
            state.push(&["ZADD", &key("leases"), &(now + 5000).to_string(), "stray"]);
        }
        if holders > 0 {
            expire(rng, &mut state, &key("holders"));
            expire(rng, &mut state, &key("leases"));
        }
    }

    // The queue and its entries.
    if rng.hostile(4) {
        let which = key(if rng.chance(50) { "queue" } else { "waiters" });
        wrong_type(rng, &mut state, &which);
    } else {
        let waiting = rng.below(5);
        for i in 0..waiting {
            let at = usize::try_from(i).unwrap();
            let id = WAITERS[at];
            let (mode, limit) = mode_of(rng, kind);
            let exp = if rng.chance(70) {
                now + 1 + rng.below(120_000)
            } else {
                now - rng.below(100_000)
            };
            let mut fields = vec![
                ("tok".to_owned(), quoted(TOKENS[(at + 1) % TOKENS.len()])),
                ("mode".to_owned(), quoted(mode)),
                ("limit".to_owned(), text(limit)),
                ("host".to_owned(), quoted("h")),
                ("pid".to_owned(), text(rng.below(1000))),
                ("user".to_owned(), quoted("u")),
                ("cmd".to_owned(), quoted("c")),
                ("since".to_owned(), text(now - rng.below(100_000))),
                ("exp".to_owned(), text(exp)),
                ("ttl".to_owned(), text(1 + rng.below(60_000))),
                ("steady".to_owned(), text(now - rng.below(10_000))),
                ("due".to_owned(), text(now + rng.below(2000))),
            ];
            if rng.chance(40) {
                fields.push(("claim".to_owned(), text(600)));
            }
            if rng.chance(10) {
                fields.push(("keep".to_owned(), text(rng.below(2000))));
                fields.push(("keep_ms".to_owned(), text(rng.below(1 << 40))));
            }
            let json = record_json(rng, fields);
            if !rng.hostile(3) {
                let score = score(rng, i + 1);
                state.push(&["ZADD", &key("queue"), &score, id]);
            }
            if !rng.hostile(3) {
                state.push(&["HSET", &key("waiters"), id, &json]);
            }
        }
        if waiting > 0 {
            expire(rng, &mut state, &key("queue"));
            expire(rng, &mut state, &key("waiters"));
        }
    }

    // Wake lists and cancel marks.
    for id in WAITERS {
        if rng.chance(15) {
            let wake = key(&format!("wake:{id}"));
            if rng.hostile(25) {
                wrong_type(rng, &mut state, &wake);
            } else {
                let messages: &[&str] = &["g:1:2", "w:1:2:{}", "h:5", "l", "junk", ""];
                state.push(&["RPUSH", &wake, *rng.pick(messages)]);
            }
            expire(rng, &mut state, &wake);
        }
    }
    if rng.hostile(4) {
        let wake = key("wake:");
        wrong_type(rng, &mut state, &wake);
    }
    for token in TOKENS {
        if rng.chance(5) {
            let cancel = key(&format!("cancel:{token}"));
            if rng.hostile(40) {
                wrong_type(rng, &mut state, &cancel);
            } else {
                state.push(&["SET", &cancel, "1"]);
            }
            expire(rng, &mut state, &cancel);
        }
    }

    // The history.
    if rng.hostile(3) {
        wrong_type(rng, &mut state, &key("history"));
    } else {
        let entries = rng.below(5);
        for i in 0..entries {
            let entry_fence = fence - 100 * (i + 1);
            let (mut fields, exp) = holder_fields(rng, kind, now, entry_fence);
            if rng.chance(50) {
                fields.push(("ended".to_owned(), text(exp.min(now))));
                fields.push(("outcome".to_owned(), quoted("released")));
                fields.push(("exit".to_owned(), text(rng.below(3))));
            }
            let json = record_json(rng, fields);
            let score = score(rng, entry_fence);
            state.push(&["ZADD", &key("history"), &score, &json]);
        }
        if entries > 0 {
            expire(rng, &mut state, &key("history"));
        }
    }
    state
}

/// One call of redlock's, on every script path.
#[derive(Debug, Clone)]
enum Call {
    Acquire {
        token: usize,
        mode: Mode,
        queueing: u8,
        waiter: usize,
        claims: bool,
        reenter: bool,
        ttl_ms: u64,
        history: Retention,
    },
    Release {
        token: usize,
        min_hold_ms: u64,
        held_fence: Option<u64>,
    },
    Leave {
        waiter: usize,
        mark: bool,
    },
    Extend {
        token: usize,
        ttl_ms: u64,
    },
    Raise {
        token: usize,
        fence: u64,
    },
    Refresh {
        waiter: usize,
    },
    Inspect {
        success: bool,
    },
    Force,
    History,
}

impl Call {
    fn draw(rng: &mut Rng, now: u64, kind: Kind) -> Self {
        let token = usize::try_from(rng.below(TOKENS.len() as u64 + 1)).unwrap();
        let waiter = usize::try_from(rng.below(WAITERS.len() as u64 + 1)).unwrap();
        match rng.below(20) {
            0..=7 => Call::Acquire {
                token,
                mode: if rng.hostile(15) {
                    *rng.pick(&[
                        Mode::Exclusive,
                        Mode::Shared,
                        Mode::Semaphore(1),
                        Mode::Semaphore(2),
                        Mode::Semaphore(3),
                    ])
                } else if kind.semaphore {
                    Mode::Semaphore(u32::try_from(kind.limit).unwrap())
                } else {
                    *rng.pick(&[Mode::Exclusive, Mode::Shared])
                },
                queueing: u8::try_from(rng.below(3)).unwrap(),
                waiter,
                claims: rng.chance(50),
                reenter: rng.chance(15),
                ttl_ms: *rng.pick(&[1000, 2000, 30_000, 600_000]),
                history: if rng.chance(20) {
                    Retention {
                        holds: Some(u32::try_from(1 + rng.below(1000)).unwrap()),
                        ttl: Some(Duration::from_secs(60 + rng.below(1_000_000))),
                    }
                } else {
                    Retention::default()
                },
            },
            8..=10 => Call::Release {
                token,
                min_hold_ms: *rng.pick(&[0, 0, 60_000]),
                held_fence: rng
                    .chance(30)
                    .then(|| now * 1000 - 100 * (1 + rng.below(5))),
            },
            11 | 12 => Call::Leave {
                waiter,
                mark: rng.chance(50),
            },
            13 | 14 => Call::Extend {
                token,
                ttl_ms: *rng.pick(&[1000, 30_000]),
            },
            15 => Call::Raise {
                token,
                fence: now * 1000 + rng.below(1_000_000),
            },
            16 => Call::Refresh { waiter },
            17 => Call::Inspect {
                success: rng.chance(50),
            },
            18 => Call::Force,
            _ => Call::History,
        }
    }

    /// Whether the call only reads.
    fn reads_only(&self) -> bool {
        matches!(self, Call::Inspect { .. } | Call::History)
    }

    /// The longest lease a holder record this call writes may have, ms.
    fn longest_lease(&self) -> u64 {
        match self {
            Call::Acquire { ttl_ms, .. } | Call::Extend { ttl_ms, .. } => (*ttl_ms).max(GRANT_MS),
            Call::Release { min_hold_ms, .. } => (*min_hold_ms).max(GRANT_MS),
            _ => GRANT_MS,
        }
    }
}

fn token(index: usize) -> Token {
    Token::parse(
        TOKENS
            .get(index)
            .copied()
            .unwrap_or("5555555555555555aaaaaaaaaaaaaaaa"),
    )
    .unwrap()
}

fn waiter(index: usize, claims: bool) -> Waiter {
    Waiter {
        id: WAITERS
            .get(index)
            .copied()
            .unwrap_or("5555555555555555")
            .to_owned(),
        // A waiter's entry holds the token after the waiter's own (see `generate`).
        token: token((index + 1) % TOKENS.len()),
        claims,
    }
}

/// What the call answered: an error, or what it did for the checks.
#[derive(Debug)]
enum Outcome {
    Failed(String),
    Done { fence: Option<u64> },
}

fn perform(session: &mut Session, call: &Call) -> Outcome {
    let lock = Lock::new(
        &Prefix::new("redlock:").unwrap(),
        LockName::new(NAME).unwrap(),
    );
    let who = Identity::current("fuzz");
    let done = |fence| Outcome::Done { fence };
    let result: anyhow::Result<Outcome> = match call {
        Call::Acquire {
            token: index,
            mode,
            queueing,
            waiter: at,
            claims,
            reenter,
            ttl_ms,
            history,
        } => {
            let place = waiter(*at, *claims);
            let own = token(*index);
            // A queued call holds its waiter's token, as redlock's calls do.
            let token = if *queueing == 0 {
                own
            } else {
                place.token.clone()
            };
            let request = Request {
                token: &token,
                ttl: Duration::from_millis(*ttl_ms),
                mode: *mode,
                who: &who,
                reenter: *reenter,
                replicas: None,
                history: *history,
            };
            let queueing = match queueing {
                0 => Queueing::No,
                1 => Queueing::Join(&place),
                _ => Queueing::Stay(&place),
            };
            lock.acquire(session, &request, queueing)
                .map(|got| match got {
                    Acquisition::Acquired(lease) => done(Some(lease.fence)),
                    _ => done(None),
                })
        }
        Call::Release {
            token: index,
            min_hold_ms,
            held_fence,
        } => {
            let ending = Ending {
                held_fence: *held_fence,
                exit: Some(0),
                signal: None,
                why: Some("fuzz".to_owned()),
            };
            lock.release(
                session,
                &token(*index),
                Duration::from_millis(*min_hold_ms),
                &ending,
            )
            .map(|_| done(None))
        }
        Call::Leave { waiter: at, mark } => lock
            .leave(session, &waiter(*at, false), *mark)
            .map(|()| done(None)),
        Call::Extend {
            token: index,
            ttl_ms,
        } => lock
            .extend(
                session,
                &token(*index),
                Duration::from_millis(*ttl_ms),
                None,
            )
            .map(|_| done(None)),
        Call::Raise {
            token: index,
            fence,
        } => lock
            .raise_fence(session, &token(*index), *fence)
            .map(|_| done(None)),
        Call::Refresh { waiter: at } => lock
            .refresh(session, &waiter(*at, false))
            .map(|_| done(None)),
        Call::Inspect { success } => if *success {
            lock.inspect_with_success(session)
        } else {
            lock.inspect(session)
        }
        .map(|_| done(None)),
        Call::Force => lock.force_release(session, "fuzz").map(|_| done(None)),
        Call::History => lock.history(session).map(|_| done(None)),
    };
    result.unwrap_or_else(|err| Outcome::Failed(format!("{err:#}")))
}

/// Every key with its DUMP and its expiry: PEXPIRETIME (absolute, exact) where the server has
/// it (7.0 on), else PTTL; -1 for none.
type Snapshot = BTreeMap<String, (Vec<u8>, i64)>;

fn snapshot(con: &mut redis::Connection, absolute: bool) -> Snapshot {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    if keys.is_empty() {
        return Snapshot::new();
    }
    let mut pipe = redis::pipe();
    for key in &keys {
        let expiry = if absolute { "PEXPIRETIME" } else { "PTTL" };
        pipe.cmd("DUMP").arg(key).cmd(expiry).arg(key);
    }
    let replies: Vec<Value> = pipe.query(con).unwrap();
    let mut shot = Snapshot::new();
    for (at, key) in keys.iter().enumerate() {
        let dump = match &replies[2 * at] {
            Value::BulkString(bytes) => bytes.clone(),
            _ => continue,
        };
        let expiry = match &replies[2 * at + 1] {
            Value::Int(ms) => *ms,
            _ => continue,
        };
        shot.insert(key.clone(), (dump, expiry));
    }
    shot
}

fn server_ms(con: &mut redis::Connection) -> u64 {
    let time: Vec<String> = redis::cmd("TIME").query(con).unwrap();
    time[0].parse::<u64>().unwrap() * 1000 + time[1].parse::<u64>().unwrap() / 1000
}

fn fence_value(shot: &Snapshot, con: &mut redis::Connection) -> Option<u64> {
    shot.get(&format!("{KEY}:fence"))?;
    let value: Option<String> = redis::cmd("GET")
        .arg(format!("{KEY}:fence"))
        .query(con)
        .ok()?;
    value?.parse().ok()
}

/// How the cases of a run ended: a fuzzer whose calls all fail (a script that no longer takes
/// the arguments redlock sends, say) would prove nothing.
#[derive(Debug, Default)]
struct Tally {
    failed: u64,
    read: u64,
    changed: u64,
    unchanged: u64,
}

/// Runs one case: writes `state`, reads the keys, calls, reads again. `None` when every check
/// held, else what failed.
fn run_case(
    con: &mut redis::Connection,
    session: &mut Session,
    state: &State,
    call: &Call,
) -> Option<String> {
    run_counted(con, session, state, call, &mut Tally::default())
}

fn run_counted(
    con: &mut redis::Connection,
    session: &mut Session,
    state: &State,
    call: &Call,
    tally: &mut Tally,
) -> Option<String> {
    redis::cmd("FLUSHALL").query::<()>(con).unwrap();
    let absolute = redis::cmd("PEXPIRETIME").arg("x").query::<i64>(con).is_ok();
    for write in &state.writes {
        let mut cmd = redis::cmd(&write[0]);
        for arg in &write[1..] {
            cmd.arg(arg);
        }
        // (A write of another type over a key shrinking left is refused: no matter.)
        let _: redis::RedisResult<Value> = cmd.query(con);
    }
    let started = server_ms(con);
    let before = snapshot(con, absolute);
    let fence_before = fence_value(&before, con);
    let outcome = perform(session, call);
    let after = snapshot(con, absolute);
    let now = server_ms(con);
    // (PTTL counts down meanwhile; PEXPIRETIME stays.)
    let elapsed = if absolute {
        0
    } else {
        i64::try_from(now - started).unwrap() + 2
    };
    match outcome {
        Outcome::Failed(error) => {
            tally.failed += 1;
            if std::env::var_os("REDLOCK_FUZZ_SHOW").is_some() {
                println!("error: {error}");
            }
            for key in before.keys().chain(after.keys()) {
                let (was, is) = (before.get(key), after.get(key));
                let same = match (was, is) {
                    (Some((dump, pttl)), Some((dump_now, pttl_now))) => {
                        dump == dump_now
                            && (*pttl == -1 && *pttl_now == -1
                                || (*pttl >= 0
                                    && *pttl_now >= 0
                                    && (0..=elapsed).contains(&(pttl - pttl_now))))
                    }
                    // An expiry that ran out meanwhile.
                    (Some((_, expiry)), None) => {
                        *expiry >= 0
                            && (absolute && *expiry <= i64::try_from(now).unwrap()
                                || !absolute && *expiry <= elapsed)
                    }
                    _ => false,
                };
                if !same {
                    return Some(format!(
                        "the call failed ({error}) but changed {key}: {} -> {}",
                        shown(was),
                        shown(is)
                    ));
                }
            }
            None
        }
        Outcome::Done { fence } => {
            if call.reads_only() {
                tally.read += 1;
            } else if before.len() == after.len()
                && before
                    .iter()
                    .zip(&after)
                    .all(|((key, (dump, _)), (key_now, (dump_now, _)))| {
                        key == key_now && dump == dump_now
                    })
            {
                tally.unchanged += 1;
            } else {
                tally.changed += 1;
            }
            let fence_key = format!("{KEY}:fence");
            for (key, (dump, pttl)) in &after {
                let changed = before.get(key).is_none_or(|(old, _)| old != dump);
                if call.reads_only() && changed {
                    return Some(format!("a read changed {key}"));
                }
                if !changed || *key == fence_key {
                    continue;
                }
                if *pttl < 0 {
                    return Some(format!("{key} was written and has no expiry"));
                }
                let left = if absolute {
                    *pttl - i64::try_from(now).unwrap()
                } else {
                    *pttl
                };
                if left > LONGEST_KEY_MS {
                    return Some(format!("{key} was written to live {left} ms"));
                }
            }
            if let Some(problem) = leases_as_asked(con, &before, call, now) {
                return Some(problem);
            }
            let fence_after = fence_value(&after, con);
            if let (Some(was), Some(is)) = (fence_before, fence_after)
                && is < was
                && was < 9_007_199_254_740_991
            {
                return Some(format!("the fence counter fell from {was} to {is}"));
            }
            if fence_before.is_some() && fence_after.is_none() && after.contains_key(&fence_key) {
                return Some("the fence counter no longer holds a number".to_owned());
            }
            // (A claim of a lock handed over, or a re-entry, keeps the fence its hold has.)
            if let (Some(was), Some(issued)) = (fence_before, fence)
                && issued <= was
                && !holder_fences(con, &before).contains(&issued.to_string())
            {
                return Some(format!("fence {issued} handed out after {was}"));
            }
            None
        }
    }
}

fn shown(entry: Option<&(Vec<u8>, i64)>) -> String {
    match entry {
        None => "absent".to_owned(),
        Some((dump, pttl)) => format!("{} bytes, PTTL {pttl}", dump.len()),
    }
}

/// The holder records of a snapshot, by token.
fn holders_in(con: &mut redis::Connection, shot: &Snapshot) -> BTreeMap<String, String> {
    let Some((dump, _)) = shot.get(&format!("{KEY}:holders")) else {
        return BTreeMap::new();
    };
    // Restored under another name, to read them as they were.
    let scratch = "fuzz:before";
    let _: () = redis::cmd("DEL").arg(scratch).query(con).unwrap();
    let restored: redis::RedisResult<()> = redis::cmd("RESTORE")
        .arg(scratch)
        .arg(0)
        .arg(dump.as_slice())
        .query(con);
    let records = if restored.is_ok() {
        redis::cmd("HGETALL")
            .arg(scratch)
            .query(con)
            .unwrap_or_default()
    } else {
        BTreeMap::new()
    };
    let _: () = redis::cmd("DEL").arg(scratch).query(con).unwrap();
    records
}

/// The digits of field `name` of a record, from its JSON text (cjson takes records that serde
/// does not: hexadecimal numbers, say).
fn digits_of(json: &str, name: &str) -> Option<String> {
    let label = format!("\"{name}\":");
    let rest = &json[json.find(&label)? + label.len()..];
    let digits: String = rest
        .trim_start_matches('"')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some(digits)
}

/// The fences of the holder records of a snapshot, as their text.
fn holder_fences(con: &mut redis::Connection, shot: &Snapshot) -> Vec<String> {
    holders_in(con, shot)
        .values()
        .filter_map(|json| digits_of(json, "fence"))
        .collect()
}

/// Every holder record the call wrote (changed, or new) leases no longer than asked, and its
/// lease in the index is its record's `exp`.
fn leases_as_asked(
    con: &mut redis::Connection,
    before: &Snapshot,
    call: &Call,
    now: u64,
) -> Option<String> {
    let holders = format!("{KEY}:holders");
    let old = holders_in(con, before);
    let Ok(records) = redis::cmd("HGETALL")
        .arg(&holders)
        .query::<BTreeMap<String, String>>(con)
    else {
        return None;
    };
    for (token, json) in &records {
        if old.get(token) == Some(json) {
            continue;
        }
        let Ok(record) = serde_json::from_str::<serde_json::Value>(json) else {
            return Some(format!("holder {token} was written as {json:?}"));
        };
        let Some(exp) = record["exp"].as_u64() else {
            return Some(format!(
                "holder {token} was written with exp {}",
                record["exp"]
            ));
        };
        // (A record rewritten without a new lease, a hold counted down, keeps the one it had.)
        let had = old
            .get(token)
            .and_then(|json| digits_of(json, "exp"))
            .and_then(|digits| digits.parse().ok())
            .unwrap_or(0);
        if exp > had && exp > now + call.longest_lease() {
            return Some(format!(
                "holder {token} was written to lease {} ms (at most {} asked)",
                exp - now,
                call.longest_lease()
            ));
        }
        let score: Option<String> = redis::cmd("ZSCORE")
            .arg(format!("{KEY}:leases"))
            .arg(token)
            .query(con)
            .unwrap_or(None);
        if score.as_deref() != Some(exp.to_string().as_str()) {
            return Some(format!(
                "holder {token} was written with exp {exp} but its lease is {score:?}"
            ));
        }
    }
    None
}

/// Drops writes from a failing state while it still fails: the minimal form to print.
fn shrink(
    con: &mut redis::Connection,
    session: &mut Session,
    mut state: State,
    call: &Call,
) -> State {
    loop {
        let mut smaller = false;
        let mut at = 0;
        while at < state.writes.len() {
            let mut trial = state.clone();
            trial.writes.remove(at);
            if run_case(con, session, &trial, call).is_some() {
                state = trial;
                smaller = true;
            } else {
                at += 1;
            }
        }
        if !smaller {
            return state;
        }
    }
}

/// Runs `cases` cases from `seed` against `server`; panics with the first failure, shrunk.
fn fuzz(server: &RedisServer, seed: u64, cases: u64) {
    let mut con = server.client();
    let mut session = server.session();
    let mut tally = Tally::default();
    for case in 0..cases {
        let case_seed = seed.wrapping_add(case);
        let mut rng = Rng::new(case_seed);
        let now = server_ms(&mut con);
        let kind = Kind {
            semaphore: rng.chance(30),
            limit: 1 + rng.below(3),
        };
        let state = generate(&mut rng, now, kind);
        let call = Call::draw(&mut rng, now, kind);
        if let Some(problem) = run_counted(&mut con, &mut session, &state, &call, &mut tally) {
            let minimal = shrink(&mut con, &mut session, state, &call);
            let again = run_case(&mut con, &mut session, &minimal, &call)
                .unwrap_or_else(|| problem.clone());
            panic!(
                "script fuzz case failed: {again}\n  seed {case_seed} (REDLOCK_FUZZ_SEED={case_seed} \
                 REDLOCK_FUZZ_CASES=1 reruns it)\n  call {call:?}\n  state (shrunk):\n{}\
                 server log:\n{}",
                minimal.print(),
                server.log()
            );
        }
    }
    println!("script fuzz: seed {seed}, {cases} cases: {tally:?}");
    // Hostile values refuse many calls; most must still get through to their writes, or the
    // cases test only the checks.
    assert!(
        cases < 50 || tally.changed * 4 >= cases && tally.failed * 2 <= cases,
        "too few cases reached the scripts' writes: {tally:?}"
    );
}

/// The seed and the number of cases: `REDLOCK_FUZZ_SEED`/`REDLOCK_FUZZ_CASES`, else a fixed
/// seed and `ci` cases (`long` in the fault suite's long tier).
fn plan(ci: u64, long: u64) -> (u64, u64) {
    let seed = std::env::var("REDLOCK_FUZZ_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(20_261_128);
    let default = if std::env::var_os("REDLOCK_FAULTS_FULL").is_some() {
        long
    } else {
        ci
    };
    let cases = std::env::var("REDLOCK_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    (seed, cases)
}

#[test]
fn every_script_is_all_or_nothing_on_hostile_state() {
    let server = RedisServer::start();
    let (seed, cases) = plan(400, 5000);
    fuzz(&server, seed, cases);
}

#[test]
fn every_script_is_all_or_nothing_on_hostile_state_on_redis_6_0() {
    let binary = releases::binary(Release::Redis6_0);
    let server = RedisServer::start_binary(&binary, &[]);
    let (seed, cases) = plan(150, 3000);
    fuzz(&server, seed, cases);
}

#[test]
fn every_script_is_all_or_nothing_on_hostile_state_on_valkey() {
    let binary = releases::binary(Release::Valkey);
    let server = RedisServer::start_binary(&binary, &[]);
    let (seed, cases) = plan(150, 3000);
    fuzz(&server, seed, cases);
}
