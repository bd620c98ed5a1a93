//! Liveness after faults, counted: how long a key sits idle with a live waiter
//! queued behind waiters killed with SIGKILL (T39), and how long redlock takes to exit after
//! its command ended while Redis hangs (T40). Each measurement over its bound is a missed
//! bound, which fails the row: safety rows count overlaps, these count time lost.

use std::path::Path;
use std::time::{Duration, Instant};

use super::harness::{self, Tally};
use crate::util::{RedisServer, Redlock, TempDir, wait_for_file, wait_until};

/// The TTL every waiter of T39 asks for: the idle time is bounded by it in all.
const WAITER_TTL: Duration = Duration::from_secs(10);

/// T40's bound on the delay from the command's end to redlock's exit.
const EXIT_BOUND: Duration = Duration::from_millis(1500);

fn queued(server: &RedisServer) -> usize {
    server.cmd(&["ZCARD", "redlock:{job}:queue"])
}

/// Holds `job`, queues `dead` waiting `kind`s (`acquire`, or `run` of `sleep 300`) and a live
/// one of that kind behind them (a `run` of `true`), kills the `dead` ones with SIGKILL (a CI
/// runner's timeout, an OOM kill), releases; returns how long the key then sat without the live waiter
/// holding it (its exit code counted in `tally`).
fn idle_behind_dead_waiters(tally: &mut Tally, kind: &str, dead: usize) -> Duration {
    let server = RedisServer::start();
    let holder = server
        .redlock(&["acquire", "--key", "job", "--ttl", "300s"])
        .run();
    holder.code(0);
    let token = holder.stdout.trim().to_owned();
    let ttl = format!("{}s", WAITER_TTL.as_secs());
    let waiter = |wait: &str, command: &[&'static str]| {
        let mut args = vec![kind, "--key", "job", "--ttl", &ttl, "--wait", wait];
        if kind == "run" {
            args.push("--");
            args.extend_from_slice(command);
        }
        server.redlock(&args).spawn()
    };
    let mut doomed = Vec::new();
    for place in 1..=dead {
        doomed.push(waiter("20s", &["sleep", "300"]));
        assert!(
            wait_until(Duration::from_secs(10), || queued(&server) == place),
            "waiter {place} did not queue"
        );
    }
    let live = waiter("120s", &["true"]);
    assert!(
        wait_until(Duration::from_secs(10), || queued(&server) == dead + 1),
        "the live waiter did not queue"
    );
    for running in &doomed {
        running.signal("KILL");
    }
    for running in doomed {
        let _ = running.wait(Duration::from_secs(5));
    }
    tally.faults += u64::try_from(dead).unwrap();
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    let released = Instant::now();
    let out = live.wait(Duration::from_secs(120));
    let idle = released.elapsed();
    tally.runs += 1;
    tally.exit(
        out.status.code(),
        &[0],
        &format!("live {kind} behind {dead} dead"),
    );
    idle
}

/// T39: the idle time of a key with a live waiter queued behind N dead ones stays under a
/// second per dead waiter and within the waiters' TTL in all (up to 8 dead), for waiting
/// `acquire`s (which claim a grant with a call) and `run`s (which start on it).
/// The smoke tier runs 5 dead acquires and 2 dead runs; the full suite 1, 2, 5 and 8 of each.
#[test]
fn dead_waiters_ahead_of_a_live_one_leave_the_key_idle_briefly() {
    let mut tally = Tally::new(
        "T39",
        "dead waiters ahead of a live one: idle time while the lock is free",
    );
    let points: &[(&str, usize)] = if harness::full() {
        &[
            ("acquire", 1),
            ("acquire", 2),
            ("acquire", 5),
            ("acquire", 8),
            ("run", 1),
            ("run", 2),
            ("run", 5),
            ("run", 8),
        ]
    } else {
        &[("acquire", 5), ("run", 2)]
    };
    let mut figures = Vec::new();
    for &(kind, dead) in points {
        let idle = idle_behind_dead_waiters(&mut tally, kind, dead);
        let per_dead = Duration::from_secs(u64::try_from(dead).unwrap());
        if idle >= per_dead || idle > WAITER_TTL {
            eprintln!("{dead} dead {kind} waiters: the key sat idle {idle:?}");
            tally.missed_bounds += 1;
        }
        figures.push(format!("{dead} dead {kind}: {:.1} s", idle.as_secs_f64()));
    }
    tally.notes = format!(
        "from the release to the live waiter's exit, --ttl {}s: {} (bound: under 1 s per dead waiter, at most the TTL)",
        WAITER_TTL.as_secs(),
        figures.join(", ")
    );
    tally.finish();
}

/// A `run` whose command waits for `dir/go`, then writes the monotonic time it ended at to
/// `dir/end` and exits 0.
fn gated_run(redlock: Redlock, dir: &Path) -> crate::util::Running {
    let script = "import os, sys, time\n\
                  where = sys.argv[1]\n\
                  open(where + '/started', 'w').write('1')\n\
                  deadline = time.monotonic() + 20\n\
                  while not os.path.exists(where + '/go') and time.monotonic() < deadline:\n    \
                      time.sleep(0.005)\n\
                  open(where + '/end', 'w').write(str(time.monotonic_ns()))\n";
    redlock
        .args(&["--", "python3", "-c", script])
        .arg(dir)
        .spawn()
}

/// Runs a gated command, stops `stopped` (SIGSTOP) once it holds the lock, lets the command
/// end, and returns how long after its end redlock exited (its exit code counted in `tally`).
fn exit_delay(tally: &mut Tally, redlock: Redlock, stopped: u32, what: &str) -> Duration {
    let dir = TempDir::new("exit-delay");
    let running = gated_run(redlock, dir.path());
    wait_for_file(&dir.path().join("started"), Duration::from_secs(10));
    crate::util::send_signal(stopped, "STOP");
    tally.faults += 1;
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = running.wait(Duration::from_secs(30));
    let exited = harness::monotonic_ns();
    crate::util::send_signal(stopped, "CONT");
    tally.runs += 1;
    tally.exit(out.status.code(), &[0], what);
    let ended: u64 = std::fs::read_to_string(dir.path().join("end"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Duration::from_nanos(exited.saturating_sub(ended))
}

/// T40: Redis hangs (SIGSTOP) while `run` holds the lock; once the command ended, redlock
/// exits within 1.5 s: with a single server (the release cannot be made; the lock expires by
/// itself) and with a quorum of 3 masters, one of them stopped (a majority releases). The
/// default --ttl (30 s) and command timeout: the bound is the final release's, not theirs.
#[test]
fn redlock_exits_soon_after_its_command_when_redis_hangs() {
    let mut tally = Tally::new("T40", "Redis hung after the command: exit delay");
    let rounds = if harness::full() { 3 } else { 1 };
    let mut single = Vec::new();
    let mut quorum = Vec::new();
    for _ in 0..rounds {
        let server = RedisServer::start();
        let delay = exit_delay(
            &mut tally,
            server.redlock(&["run", "--key", "job"]),
            server.pid(),
            "single server stopped",
        );
        single.push(delay);

        let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
        let delay = exit_delay(
            &mut tally,
            Redlock::new(&["run", "--key", "job"]).env("REDLOCK_URL", &urls.join(" ")),
            masters[2].pid(),
            "one of 3 masters stopped",
        );
        quorum.push(delay);
    }
    for delay in single.iter().chain(&quorum) {
        if *delay > EXIT_BOUND {
            eprintln!("redlock exited {delay:?} after its command");
            tally.missed_bounds += 1;
        }
    }
    let slowest = |delays: &[Duration]| {
        delays
            .iter()
            .max()
            .map_or("-".to_owned(), |delay| format!("{} ms", delay.as_millis()))
    };
    tally.notes = format!(
        "slowest exit after the command, {rounds} rounds each: single server stopped {}, 1 of 3 masters stopped {} (bound: 1.5 s)",
        slowest(&single),
        slowest(&quorum)
    );
    tally.finish();
}
