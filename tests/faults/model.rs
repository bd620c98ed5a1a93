//! Model-based test: seeded random sequences of acquire, release, extend, expiry, crash (a
//! holder that vanishes without releasing) and takeover (`release --force`) in the three
//! modes, each step's exit code and the lock's state afterwards (`inspect --json`, and the
//! raw keys) checked against a small reference model of who holds the lock.
//!
//! Expiry is made unambiguous: a token that is to expire is taken with a 300 ms lease and the
//! model waits 450 ms before the next step, so no step ever races a lease's end.

use std::time::Duration;

use super::harness::{self, Tally};
use super::soak::seed;
use crate::util::RedisServer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Exclusive,
    Shared,
    Semaphore,
}

#[derive(Debug, Clone)]
struct Holder {
    token: String,
    mode: Mode,
    live: bool,
}

struct Model {
    key: &'static str,
    /// The modes this key is used in (exclusive and shared mix; a semaphore stays one).
    modes: &'static [Mode],
    holders: Vec<Holder>,
}

const LIMIT: usize = 3;

impl Model {
    fn live(&self) -> impl Iterator<Item = &Holder> {
        self.holders.iter().filter(|holder| holder.live)
    }

    fn admits(&self, mode: Mode) -> bool {
        let live: Vec<&Holder> = self.live().collect();
        match mode {
            Mode::Exclusive => live.is_empty(),
            Mode::Shared => live.iter().all(|holder| holder.mode == Mode::Shared),
            Mode::Semaphore => live.len() < LIMIT,
        }
    }
}

fn mode_args(mode: Mode) -> &'static [&'static str] {
    match mode {
        Mode::Exclusive => &[],
        Mode::Shared => &["--shared"],
        Mode::Semaphore => &["--limit", "3"],
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).unwrap()
    }
}

/// One step; returns a description of what it did, for the failure message.
fn step(server: &RedisServer, model: &mut Model, rng: &mut Rng, tally: &mut Tally) -> String {
    let key = model.key;
    let choice = rng.below(10);
    match choice {
        // Acquire (long lease), or acquire a lease that will have expired by the next step.
        0..=3 | 9 => {
            let expiring = choice == 9;
            let mode = model.modes[rng.below(model.modes.len())];
            let ttl = if expiring { "300ms" } else { "60s" };
            let mut args = vec!["acquire", "--key", key, "--ttl", ttl];
            args.extend(mode_args(mode));
            let out = server.redlock(&args).run();
            tally.runs += 1;
            let admitted = model.admits(mode);
            let want = if admitted { 0 } else { 75 };
            if out.status.code() != Some(want) {
                out.fail(&format!("acquire {mode:?}: the model says exit {want}"));
            }
            if admitted {
                model.holders.push(Holder {
                    token: out.stdout.trim().to_owned(),
                    mode,
                    live: !expiring,
                });
                if expiring {
                    tally.faults += 1;
                    std::thread::sleep(Duration::from_millis(450));
                }
            }
            format!("acquire {mode:?} {ttl}: {want}")
        }
        // Release or extend by a token the model knows, live or not.
        4..=6 if !model.holders.is_empty() => {
            let at = rng.below(model.holders.len());
            let holder = model.holders[at].clone();
            let release = choice != 6;
            let out = if release {
                server
                    .redlock(&["release", "--key", key, "--token", &holder.token])
                    .run()
            } else {
                server
                    .redlock(&[
                        "extend",
                        "--key",
                        key,
                        "--token",
                        &holder.token,
                        "--ttl",
                        "60s",
                    ])
                    .run()
            };
            let want = if holder.live { 0 } else { 1 };
            if out.status.code() != Some(want) {
                out.fail(&format!("{holder:?}: the model says exit {want}"));
            }
            if release {
                model.holders[at].live = false;
            }
            format!(
                "{} {:?} (live {}): {want}",
                if release { "release" } else { "extend" },
                holder.mode,
                holder.live
            )
        }
        // A crash: the holder vanishes without a word; its lease runs on in the model too.
        7 if model.live().next().is_some() => {
            tally.faults += 1;
            "crash (no release)".to_owned()
        }
        // Takeover: an operator breaks the lock.
        8 => {
            let out = server.redlock(&["release", "--key", key, "--force"]).run();
            let want = if model.live().next().is_some() { 0 } else { 1 };
            if out.status.code() != Some(want) {
                out.fail(&format!("release --force: the model says exit {want}"));
            }
            for holder in &mut model.holders {
                holder.live = false;
            }
            tally.faults += 1;
            format!("takeover: {want}")
        }
        _ => "nothing".to_owned(),
    }
}

/// The lock's state as redlock and Redis report it, against the model.
fn check(server: &RedisServer, model: &Model, history: &[String]) {
    let out = server
        .redlock(&["inspect", "--key", model.key, "--json"])
        .run();
    let state = out.json();
    let live: Vec<&Holder> = model.live().collect();
    let holders = state["holders"].as_array().map_or(0, Vec::len);
    let context = || format!("after {history:#?}\ninspect: {state}");
    assert_eq!(holders, live.len(), "holders; {}", context());
    let want_state = if live.is_empty() { "free" } else { "held" };
    assert_eq!(state["state"], want_state, "state; {}", context());
    let exists: i64 = server.cmd(&["EXISTS", &format!("redlock:{{{}}}:holders", model.key)]);
    if live.is_empty() {
        // Only expired holders may remain, and only until their own expiry.
        let pttl: i64 = server.cmd(&["PTTL", &format!("redlock:{{{}}}:holders", model.key)]);
        assert!(
            exists == 0 || pttl > 0,
            "a holders key without expiry; {}",
            context()
        );
    } else {
        assert_eq!(exists, 1, "holders key; {}", context());
        let modes: Vec<&str> = state["holders"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|holder| holder["mode"].as_str())
            .collect();
        for holder in &live {
            let mode = match holder.mode {
                Mode::Exclusive => "exclusive",
                Mode::Shared => "shared",
                Mode::Semaphore => "semaphore",
            };
            assert!(modes.contains(&mode), "mode {mode}; {}", context());
        }
    }
}

#[test]
fn random_operations_match_the_model() {
    let seed = seed();
    println!("model: seed {seed} (REDLOCK_FAULTS_SEED reruns it)");
    let mut tally = Tally::new(
        "model",
        "random acquire/release/extend/expire/crash/takeover",
    );
    let server = RedisServer::start();
    let steps = if harness::full() { 250 } else { 40 };
    let mut rng = Rng(seed | 1);
    for (key, modes) in [
        ("exclusive", &[Mode::Exclusive][..]),
        ("rw", &[Mode::Exclusive, Mode::Shared][..]),
        ("semaphore", &[Mode::Semaphore][..]),
    ] {
        let mut model = Model {
            key,
            modes,
            holders: Vec::new(),
        };
        let mut history = Vec::new();
        for _ in 0..steps {
            let done = step(&server, &mut model, &mut rng, &mut tally);
            history.push(done);
            if history.len() > 12 {
                history.remove(0);
            }
            check(&server, &model, &history);
        }
    }
    tally.notes = format!("seed {seed}, {steps} steps on each of 3 keys");
    tally.finish();
}
