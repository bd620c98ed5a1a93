//! `--wait`: FIFO order, crash safety of the queue, prompt take-over from a dead holder,
//! signals while waiting, and no polling (Redis commands per acquisition do not grow with the
//! hold time).

use std::time::{Duration, Instant};

use crate::util::{RedisServer, Running, TempDir, alive, wait_for_file, wait_until, wall_ms};

fn waiters(server: &RedisServer) -> usize {
    let out = server.redlock(&["inspect", "--key", "job", "--json"]).run();
    out.json()["waiters"].as_array().map_or(0, Vec::len)
}

/// Starts a waiting `run` of `script` and returns once it is queued as waiter `position`.
fn queue_run(server: &RedisServer, script: &str, position: usize) -> Running {
    let running = server
        .redlock(&[
            "run", "--key", "job", "--wait", "60s", "--", "sh", "-c", script,
        ])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || waiters(server) == position),
        "waiter {position} did not queue"
    );
    running
}

/// Starts a waiting `acquire --ttl 10s --wait 30s` and returns once it is the only waiter.
fn queue_acquire(server: &RedisServer) -> Running {
    let waiter = server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "30s"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || waiters(server) == 1));
    waiter
}

fn hold(server: &RedisServer, ttl: &str) -> String {
    let out = server
        .redlock(&["acquire", "--key", "job", "--ttl", ttl])
        .run();
    out.code(0);
    out.stdout.trim().to_owned()
}

#[test]
fn ten_waiters_acquire_in_arrival_order() {
    let server = RedisServer::start();
    let dir = TempDir::new("fifo");
    let order = dir.path().join("order");
    let token = hold(&server, "60s");
    let running: Vec<Running> = (0..10)
        .map(|n| queue_run(&server, &format!("echo {n} >> {}", order.display()), n + 1))
        .collect();
    let out = server.redlock(&["inspect", "--key", "job"]).run();
    out.code(0)
        .stdout_contains("QUEUE")
        .stdout_contains("echo 9 >>");
    // Header and rows line up: MODE is a column of the queue table too.
    let header = out
        .stdout
        .lines()
        .find(|line| line.starts_with("QUEUE"))
        .unwrap();
    let columns: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|column| !column.is_empty())
        .collect();
    assert_eq!(
        columns,
        [
            "QUEUE",
            "MODE",
            "HOST",
            "PID",
            "USER",
            "COMMAND",
            "WAITING SINCE",
            "WAITED",
            "NOTE"
        ]
    );
    let first = out
        .stdout
        .lines()
        .find(|line| line.starts_with("1 "))
        .unwrap();
    assert_eq!(
        first.split_whitespace().nth(1),
        Some("exclusive"),
        "{first}"
    );

    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    for waiter in running {
        waiter.wait(Duration::from_secs(30)).code(0);
    }
    let ran: Vec<String> = std::fs::read_to_string(&order)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(ran, (0..10).map(|n| n.to_string()).collect::<Vec<_>>());
    assert_eq!(
        server.keys_but_history(),
        ["redlock:{job}:fence"],
        "the queue left keys behind"
    );
}

/// `run` starts on the grant a release hands it: no script call of its own between the
/// hand-over and the command's start. Its first renewal, a third of the way into the 5 s grant,
/// makes the grant a full lease, so a command that outlives the grant keeps the lock.
#[test]
fn a_run_handed_the_lock_starts_on_its_grant_and_renews_it() {
    let server = RedisServer::start();
    let dir = TempDir::new("grant");
    let started = dir.path().join("started");
    let token = hold(&server, "60s");
    let running = queue_run(
        &server,
        &format!("date +%s%3N > {}; sleep 3", started.display()),
        1,
    );
    let monitor = server.monitor();
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    let started_at: u64 = wait_for_file(&started, Duration::from_secs(10))
        .parse()
        .unwrap();
    let record = || crate::run::holder_record(&server);
    assert!(
        wait_until(Duration::from_secs(3), || record()["ttl"] == 30_000),
        "the grant was not renewed to the full lease: {}",
        record()
    );
    running.wait(Duration::from_secs(10)).code(0);
    let commands = monitor.stop();
    let scripts: Vec<&(u64, String)> = commands
        .iter()
        .filter(|(_, line)| line.contains("\"EVALSHA\"") || line.contains("\"EVAL\""))
        .collect();
    // The release (EVALSHA, and EVAL on a fresh server) comes first, from its own client.
    let client = |line: &str| line.split(']').next().unwrap_or_default().to_owned();
    let releaser = client(&scripts.first().expect("the release is seen").1);
    let before_start: Vec<_> = scripts
        .iter()
        .filter(|(at, line)| client(line) != releaser && *at <= started_at)
        .collect();
    assert!(
        before_start.is_empty(),
        "script calls between the hand-over and the start: {before_start:?}"
    );
    assert!(
        scripts.iter().any(|(at, _)| *at > started_at),
        "no renewal after the start: {commands:?}"
    );
}

/// A host that stalls the new holder for a second and a half as its command starts (1.2 s was
/// seen while 1,000 holders exited at once on 2 CPUs) does not cost it the lock: the grant
/// outlasts the stall, the renewal after it makes the grant a full lease, and the command
/// runs to its end (with a 2 s grant it was stopped at once, exit 125).
#[test]
fn a_run_stalled_as_it_starts_on_its_grant_keeps_the_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("stalled-start");
    let started = dir.path().join("started");
    let token = hold(&server, "60s");
    let running = queue_run(
        &server,
        &format!("date +%s > {}; sleep 3", started.display()),
        1,
    );
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    wait_for_file(&started, Duration::from_secs(10));
    running.signal("STOP");
    std::thread::sleep(Duration::from_millis(1500));
    running.signal("CONT");
    let out = running.wait(Duration::from_secs(15));
    out.code(0);
}

/// A run started on its grant whose renewal cannot get through (the server runs no script
/// while paused for writes) stops the command before the grant can lapse, on the grant's own
/// shorter schedule, and exits 125.
#[test]
fn a_run_whose_grant_is_never_renewed_stops_before_the_grant_lapses() {
    let server = RedisServer::start();
    let dir = TempDir::new("grant-lost");
    let token = hold(&server, "60s");
    let d = dir.path().display();
    let waiter = queue_run(
        &server,
        &format!(
            "trap 'date +%s%3N > {d}/got; exit 1' TERM; echo $$ > {d}/pid; while :; do sleep 0.05; done"
        ),
        1,
    );
    let mut con = server.client();
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    let pid: u32 = wait_for_file(&dir.path().join("pid"), Duration::from_secs(10))
        .parse()
        .unwrap();
    // Before the first renewal, a third of the way into the grant: no script runs from now.
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "20000", "WRITE"][..])
        .query(&mut con)
        .unwrap();
    let records: Vec<String> = redis::cmd("HVALS")
        .arg("redlock:{job}:holders")
        .query(&mut con)
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(&records[0]).unwrap();
    assert_eq!(record["ttl"], 5000, "not the grant: {record}");
    let expiry = record["exp"].as_u64().unwrap();
    let dead = wait_until(Duration::from_secs(8), || !alive(pid));
    let dead_at = wall_ms();
    assert!(dead, "the command is still running");
    assert!(
        dead_at < expiry,
        "the command died {} ms after the grant expired",
        dead_at - expiry
    );
    let term_at: u64 = wait_for_file(&dir.path().join("got"), Duration::from_secs(1))
        .parse()
        .unwrap();
    assert!(term_at < expiry);
    let out = waiter.wait(Duration::from_secs(10));
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut con).unwrap();
    out.code(125)
        .stderr_contains("renewals not confirmed")
        .stderr_contains("no answer within");
}

/// A waiter stopped while its turn came finds its grant lapsed when it continues: it queues
/// again (here: takes the free lock) instead of failing or starting on a lapsed grant.
/// Waiter `position` of a `--limit 2` semaphore on `job` with a lease of `ttl`, running `script`.
fn queue_permit(server: &RedisServer, ttl: &str, script: &str, position: usize) -> Running {
    let running = server
        .redlock(&[
            "run", "--key", "job", "--limit", "2", "--ttl", ttl, "--wait", "60s", "--", "sh", "-c",
            script,
        ])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || waiters(server) == position),
        "waiter {position} did not queue"
    );
    running
}

/// Grants last as long as each waiter asked, at most: when one release hands out a short one
/// and a long one, the next in line watches the one that ends first. Here the short grant's
/// waiter is stopped and never claims it: its permit is free again after 1 s, not after the
/// long grant's 5 s.
#[test]
fn the_next_waiter_watches_the_grant_that_ends_first() {
    let server = RedisServer::start();
    let dir = TempDir::new("shortest-grant");
    let ran = dir.path().join("ran");
    for _ in 0..2 {
        server
            .redlock(&["acquire", "--key", "job", "--limit", "2", "--ttl", "60s"])
            .run()
            .code(0);
    }
    let short = queue_permit(&server, "1s", "true", 1);
    let long = queue_permit(&server, "60s", "sleep 8", 2);
    let next = queue_permit(&server, "60s", &format!("touch {}", ran.display()), 3);
    short.signal("STOP");
    server
        .redlock(&["release", "--key", "job", "--force"])
        .run()
        .code(0);
    let released = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || ran.exists()),
        "the third waiter never ran"
    );
    let waited = released.elapsed();
    assert!(
        waited < Duration::from_millis(3500),
        "the third waiter ran {waited:?} after the release: it watched the long grant"
    );
    next.wait(Duration::from_secs(10)).code(0);
    long.wait(Duration::from_secs(20)).code(0);
    short.signal("CONT");
}

#[test]
fn a_waiter_stopped_through_its_grant_queues_again() {
    let server = RedisServer::start();
    let dir = TempDir::new("stopped-waiter");
    let ran = dir.path().join("ran");
    let token = hold(&server, "60s");
    let waiter = queue_run(&server, &format!("touch {}", ran.display()), 1);
    waiter.signal("STOP");
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    // The 5 s grant lapses while the waiter is stopped.
    std::thread::sleep(Duration::from_millis(5500));
    waiter.signal("CONT");
    let out = waiter.wait(Duration::from_secs(20));
    out.code(0).stderr_contains("queueing again");
    assert!(ran.exists(), "the command did not run");
}

/// A waiting `acquire` claims its grant with a call as soon as it is woken, so its grant is
/// short (600 ms): one stopped through it is not a dead waiter to the queue, but neither does
/// it lose its wait. Woken late, it finds the grant lapsed, queues again, and takes the lock
/// with a full lease.
#[test]
fn a_waiting_acquire_stopped_through_its_grant_queues_again() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let waiter = queue_acquire(&server);
    waiter.signal("STOP");
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "redlock:{job}:holders"]),
        0,
        "the stopped waiter's grant outlived the claim window"
    );
    waiter.signal("CONT");
    let out = waiter.wait(Duration::from_secs(20));
    out.code(0).stderr_contains("queueing again");
    let pttl = server.cmd::<i64>(&["PTTL", "redlock:{job}:holders"]);
    assert!(pttl > 5000, "not a full lease: PTTL {pttl}");
}

#[test]
fn a_newcomer_does_not_barge_past_the_queue() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let queued = queue_run(&server, "sleep 1", 1);
    // Released and immediately requested by a stranger: the lock is already the waiter's.
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s"])
        .run()
        .code(75);
    queued.wait(Duration::from_secs(10)).code(0);
}

#[test]
fn killed_waiters_do_not_stall_the_queue() {
    let server = RedisServer::start();
    let dir = TempDir::new("dead-waiter");
    let done = |name: &str| format!("touch {}/{name}", dir.path().display());
    let token = hold(&server, "60s");
    // The head and a waiter in the middle die; the others must still get their turn.
    let dead_head = queue_run(&server, &done("dead-head"), 1);
    let first = queue_run(&server, &done("first"), 2);
    let dead_middle = queue_run(&server, &done("dead-middle"), 3);
    let last = queue_run(&server, &done("last"), 4);
    dead_head.signal("KILL");
    dead_middle.signal("KILL");
    let _ = dead_head.wait(Duration::from_secs(5));
    let _ = dead_middle.wait(Duration::from_secs(5));

    let released = Instant::now();
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    first.wait(Duration::from_secs(10)).code(0);
    last.wait(Duration::from_secs(10)).code(0);
    // Each dead waiter costs at most its 5 s grant.
    assert!(
        released.elapsed() < Duration::from_secs(13),
        "the queue took {:?}",
        released.elapsed()
    );
    assert!(dir.path().join("first").exists() && dir.path().join("last").exists());
    assert!(!dir.path().join("dead-head").exists());
    // What the dead waiters leave (their wake lists) expires within 5 s.
    assert!(
        wait_until(Duration::from_secs(7), || server.keys_but_history()
            == ["redlock:{job}:fence"]),
        "left behind: {:?}",
        server.keys_but_history()
    );
}

#[test]
fn a_holder_killed_with_sigkill_is_taken_over_right_at_its_expiry() {
    let server = RedisServer::start();
    let dir = TempDir::new("dead-holder");
    let holder = server
        .redlock(&["run", "--key", "job", "--ttl", "2s", "--", "sleep", "60"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || server
        .redlock(&["inspect", "--key", "job", "-q"])
        .run()
        .status
        .success()));
    let got = dir.path().join("got");
    let waiter = queue_run(&server, &format!("date +%s%3N > {}", got.display()), 1);
    holder.signal("KILL");
    let killed_at = wall_ms();
    let _ = holder.wait(Duration::from_secs(5));
    // Dead now: this expiry is final.
    let records: Vec<String> = server.cmd(&["HVALS", "redlock:{job}:holders"]);
    let record: serde_json::Value = serde_json::from_str(&records[0]).unwrap();
    let expiry = record["exp"].as_u64().unwrap();
    waiter.wait(Duration::from_secs(10)).code(0);
    let got_at: u64 = wait_for_file(&got, Duration::from_secs(1)).parse().unwrap();
    assert!(
        got_at <= killed_at + 3000,
        "taken over {} ms after the kill",
        got_at - killed_at
    );
    assert!(got_at >= expiry, "taken before the lease expired");
    assert!(
        got_at - expiry < 500,
        "taken over {} ms after the lease expired",
        got_at - expiry
    );
}

#[test]
fn a_signal_or_the_end_of_the_wait_leaves_the_queue_at_once() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let waiter = server
            .redlock(&[
                "acquire", "--key", "job", "--ttl", "10s", "--wait", "forever",
            ])
            .spawn();
        assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
        let sent = Instant::now();
        waiter.signal(signal);
        let out = waiter.wait(Duration::from_secs(5));
        out.code(code);
        assert!(
            sent.elapsed() < Duration::from_millis(500),
            "{:?}",
            sent.elapsed()
        );
        assert!(out.stdout.is_empty());
        assert_eq!(waiters(&server), 0, "SIG{signal} left the queue entry");
    }
    let out = server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "700ms"])
        .run();
    out.code(75)
        .stderr_contains("still busy after waiting 700ms: held by");
    assert!(out.elapsed >= Duration::from_millis(650) && out.elapsed < Duration::from_secs(3));
    server
        .redlock(&[
            "run", "-E", "9", "--key", "job", "--wait", "300ms", "--", "true",
        ])
        .run()
        .code(9);
    assert_eq!(waiters(&server), 0);
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    // Besides the fence, only the marks of the tokens given up, which expire.
    let keys = server.keys_but_history();
    for key in keys.iter().filter(|key| key.contains(":cancel:")) {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        assert!(pttl > 0 && pttl <= 300_000, "{key}: PTTL {pttl}");
    }
    let keys: Vec<&String> = keys
        .iter()
        .filter(|key| !key.contains(":cancel:"))
        .collect();
    assert_eq!(keys, ["redlock:{job}:fence"]);
}

#[test]
fn a_waiting_acquire_prints_the_token_and_tells_stderr_once() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let waiter = queue_acquire(&server);
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    let out = waiter.wait(Duration::from_secs(10));
    out.code(0)
        .stderr_contains("waiting for lock 'job': held by ")
        .stderr_contains("position 1 of 1")
        .stderr_contains("acquired lock 'job' after waiting");
    assert_eq!(out.stderr.lines().count(), 2, "{}", out.stderr);
    let second = out.stdout.trim();
    assert_eq!(second.len(), 32);
    // The waiter's lease is a full one, not the short hand-over grant.
    let pttl: i64 = server.cmd(&["PTTL", "redlock:{job}:holders"]);
    assert!(pttl > 8000, "PTTL {pttl}");
    server
        .redlock(&["release", "--key", "job", "--token", second])
        .run()
        .code(0);
}

/// Commands per acquisition for 8 contending loops holding `hold`: (sent by redlock, run by
/// Redis including the calls inside scripts, seconds each run took).
fn commands_per_acquisition(hold: &str) -> (f64, f64, f64) {
    const LOOPS: usize = 8;
    const RUNS: usize = 4;
    let server = RedisServer::start();
    server.cmd::<()>(&["CONFIG", "RESETSTAT"]);
    let loops: Vec<_> = (0..LOOPS)
        .map(|_| {
            let url = server.url();
            let hold = hold.to_owned();
            std::thread::spawn(move || {
                let started = Instant::now();
                for _ in 0..RUNS {
                    crate::util::Redlock::new(&["run", "-q", "--key", "job", "--wait", "60s"])
                        .args(&["--", "sleep", &hold])
                        .env("REDLOCK_URL", &url)
                        .run()
                        .code(0);
                }
                started.elapsed()
            })
        })
        .collect();
    let took: Duration = loops.into_iter().map(|handle| handle.join().unwrap()).sum();
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let calls = |wanted: &dyn Fn(&str) -> bool| -> f64 {
        let total: u64 = info
            .lines()
            .filter_map(|line| line.strip_prefix("cmdstat_"))
            .filter(|line| wanted(line.split(':').next().unwrap_or_default()))
            .filter_map(|line| {
                line.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        total as f64 / (LOOPS * RUNS) as f64
    };
    (
        // Everything redlock sends is one of these; all else runs inside scripts.
        calls(&|name| matches!(name, "evalsha" | "eval" | "blpop" | "script|load")),
        calls(&|name| !matches!(name, "config|resetstat" | "info")),
        took.as_secs_f64() / (LOOPS * RUNS) as f64,
    )
}

#[test]
fn commands_per_acquisition_grow_only_by_the_head_lease() {
    let (short_sent, short_all, _) = commands_per_acquisition("0.01");
    let (long_sent, long_all, long_took) = commands_per_acquisition("0.3");
    println!(
        "commands per acquisition, sent / run by Redis: {short_sent:.2} / {short_all:.1} (10 ms hold), {long_sent:.2} / {long_all:.1} (300 ms hold, {long_took:.2} s a run)"
    );
    // All 8 waiters are within the first places, whose head lease makes each look at the lock
    // once a second (a script call and a new block): no more than that per second waited.
    let waited = (long_took - 0.3).max(0.0);
    assert!(
        long_sent <= short_sent * 1.25 + 2.0 * waited
            && long_all <= short_all * 1.25 + 30.0 * waited,
        "{long_sent:.2} / {long_all:.1} commands per acquisition with a 300 ms hold ({waited:.2} s waited) vs {short_sent:.2} / {short_all:.1} with 10 ms: something polls"
    );
    // Join, the wake-up (and, for the next in line, one more block to watch the grant) and the
    // release: `run` starts on the grant without a claim of its own.
    assert!(
        short_sent < 4.5,
        "{short_sent:.2} commands per acquisition: more than join, wake-ups and release"
    );
}

#[test]
fn eight_loops_of_twenty_five_waiting_runs_never_overlap() {
    crate::run::exclusion_loops(&["--wait", "60s"]);
}

/// A Redis restart (locks and queue gone) does not end a wait: the waiter reconnects, finds its
/// place gone, queues again and takes the lock.
#[test]
fn a_waiter_outlives_a_redis_restart() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("restart");
    let ran = dir.path().join("ran");
    let _token = hold(&server, "60s");
    let waiter = queue_run(&server, &format!("touch {}", ran.display()), 1);
    server.restart();
    let out = waiter.wait(Duration::from_secs(20));
    out.code(0);
    assert!(ran.exists(), "the command did not run");
}

/// A stall longer than the block and the command timeout (the server stopped while the
/// holder's lease ends, which the first waiters block until) does not end a wait either:
/// requests fail and are retried until the server answers, and the waiters keep their places.
#[test]
fn a_waiter_outlives_a_long_stall_and_keeps_its_place() {
    let server = RedisServer::start();
    let dir = TempDir::new("stall");
    let order = dir.path().join("order");
    let _token = hold(&server, "6s");
    let waiters: Vec<Running> = (0..2)
        .map(|n| {
            let running = server
                .redlock(&[
                    "run",
                    "-v",
                    "--command-timeout",
                    "500ms",
                    "--key",
                    "job",
                    "--wait",
                    "60s",
                    "--",
                    "sh",
                    "-c",
                    &format!("echo {n} >> {}", order.display()),
                ])
                .spawn();
            assert!(wait_until(Duration::from_secs(10), || waiters(&server) == n + 1));
            running
        })
        .collect();
    crate::util::send_signal(server.pid(), "STOP");
    // Past the holder's expiry (which ends the waiters' blocks) and their timeouts.
    std::thread::sleep(Duration::from_secs(10));
    crate::util::send_signal(server.pid(), "CONT");
    for waiter in waiters {
        waiter
            .wait(Duration::from_secs(20))
            .code(0)
            .stderr_contains("retrying while the wait lasts");
    }
    let ran = std::fs::read_to_string(&order).unwrap();
    assert_eq!(ran, "0\n1\n", "the queue's order was lost");
}

/// Redis gone for good: the wait ends when its time is up, with 69 (not 75: nobody answered
/// that the lock was busy).
#[test]
fn a_waiter_whose_redis_never_comes_back_exits_69_when_the_wait_ends() {
    let mut server = RedisServer::start();
    let _token = hold(&server, "60s");
    let waiter = server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "3s"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
    server.kill();
    let out = waiter.wait(Duration::from_secs(10));
    out.code(69).stderr_contains("connection refused");
    assert!(
        out.elapsed >= Duration::from_secs(3) && out.elapsed < Duration::from_secs(6),
        "{:?}",
        out.elapsed
    );
}

/// While a waiter cannot reach Redis it says so at every progress interval, in a log as on a
/// terminal: for how long Redis has been unreachable, and how much longer it will try. Repro:
/// one warning, then silence until the wait ended (an hour, in the README's CI example).
#[test]
fn a_waiter_says_at_every_progress_interval_that_redis_is_unreachable() {
    let mut server = RedisServer::start();
    let _token = hold(&server, "60s");
    let waiter = server
        .redlock(&[
            "run",
            "--key",
            "job",
            "--wait",
            "4500ms",
            "--progress-every",
            "1s",
            "--",
            "true",
        ])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
    server.kill();
    let out = waiter.wait(Duration::from_secs(15));
    out.code(69);
    let said: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.contains("Redis unreachable for"))
        .collect();
    assert!(said.len() >= 2, "{}", out.stderr);
    for line in &said {
        assert!(
            line.starts_with("redlock: waiting for lock 'job': Redis unreachable for ")
                && line.contains("connection refused")
                && line.contains("; trying for ")
                && line.ends_with(" more"),
            "{line}\n{}",
            out.stderr
        );
    }
}

/// A signal ends a wait within a second even when Redis hangs: while queued (leaving the queue
/// is tried, bounded, and what could not be cleaned is said), and during the first request.
#[test]
fn a_signal_ends_a_wait_within_a_second_whatever_redis_does() {
    let server = RedisServer::start();
    let _token = hold(&server, "60s");
    let waiter = server
        .redlock(&[
            "acquire", "--key", "job", "--ttl", "10s", "--wait", "forever",
        ])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
    crate::util::send_signal(server.pid(), "STOP");
    let sent = Instant::now();
    waiter.signal("TERM");
    let out = waiter.wait(Duration::from_secs(10));
    let took = sent.elapsed();
    out.code(143)
        .stderr_contains("could not leave the queue of lock 'job'");
    assert!(took < Duration::from_secs(1), "took {took:?}");

    // The server is still stopped: the first request of a new waiter hangs.
    let waiter = server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "30s"])
        .spawn();
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    waiter.signal("INT");
    let out = waiter.wait(Duration::from_secs(10));
    let took = sent.elapsed();
    crate::util::send_signal(server.pid(), "CONT");
    out.code(130);
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// A signal ends an acquisition that does not wait within a second when its request hangs
/// (the server stopped after accepting the connection): the request runs on redlock's main
/// thread, which polls the signals beside the socket while it waits for the reply.
#[test]
fn a_signal_ends_a_request_that_does_not_wait_whatever_redis_does() {
    let server = RedisServer::start();
    crate::util::send_signal(server.pid(), "STOP");
    let acquire = server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s"])
        .spawn();
    // Its only poll is the request's wait for the reply.
    let in_poll = || {
        std::fs::read_to_string(format!("/proc/{}/wchan", acquire.pid()))
            .is_ok_and(|at| at.contains("poll"))
    };
    assert!(
        wait_until(Duration::from_secs(10), in_poll),
        "the request never waited for its reply"
    );
    let sent = Instant::now();
    acquire.signal("TERM");
    let out = acquire.wait(Duration::from_secs(10));
    let took = sent.elapsed();
    crate::util::send_signal(server.pid(), "CONT");
    out.code(143)
        .stderr_contains("the request may still run when the server answers");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// A signal ends the final release of a `run` at once when Redis does not answer it: redlock
/// is stopped where its command has ended and its release is not sent yet, the server is
/// stopped, and TERM is waiting for redlock when it continues. It says the release was cut
/// short and exits with the command's status; the lock is left to its lease.
#[test]
fn a_signal_ends_a_release_that_redis_does_not_answer() {
    let server = RedisServer::start();
    let running = server
        .redlock(&["run", "--key", "job", "--ttl", "30s", "--", "true"])
        .env("REDLOCK_FAILPOINT", "stop:ending")
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || crate::util::stopped(
            running.pid()
        )),
        "redlock did not stop where its command had ended"
    );
    crate::util::send_signal(server.pid(), "STOP");
    running.signal("TERM");
    let sent = Instant::now();
    running.signal("CONT");
    let out = running.wait(Duration::from_secs(10));
    let took = sent.elapsed();
    crate::util::send_signal(server.pid(), "CONT");
    out.code(0)
        .stderr_contains("could not release lock 'job' (SIGTERM received while releasing)");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// A server named by its host name (which only a lookup turns into an address, so its
/// requests go through a worker thread rather than the main one): a waiter queues, is woken
/// when the holder lets go, runs its command and releases, as on an address.
#[test]
fn a_server_named_by_its_host_name_serves_a_waiter() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let by_name = server.url().replace("127.0.0.1", "localhost");
    let waiter = server
        .redlock(&["run", "--key", "job", "--wait", "20s", "--", "echo", "ran"])
        .env("REDLOCK_URL", &by_name)
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    let out = waiter.wait(Duration::from_secs(20));
    out.code(0).stdout_contains("ran");
    server.redlock(&["inspect", "--key", "job"]).run().code(1);
}

/// Without a terminal (a CI log) a waiter says where it stands when it starts and then every
/// --progress-every, with current figures: who holds the lock and for how long, the place in
/// the queue, the time left. A holder's command is printed with its control characters
/// escaped.
#[test]
fn a_waiter_in_a_ci_log_reports_progress() {
    let server = RedisServer::start();
    let holder = server
        .redlock(&["run", "--key", "job", "--", "sh", "-c", "sleep 4 # \x1b[2J"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || server
        .redlock(&["inspect", "--key", "job", "-q"])
        .run()
        .status
        .success()));
    let out = server
        .redlock(&[
            "acquire",
            "--key",
            "job",
            "--ttl",
            "10s",
            "--wait",
            "20s",
            "--progress-every",
            "1s",
        ])
        .run();
    out.code(0);
    holder.wait(Duration::from_secs(10)).code(0);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.starts_with("redlock: waiting for lock 'job': held by "))
        .collect();
    assert!(lines.len() >= 3, "{}", out.stderr);
    assert!(lines.iter().all(|line| line.contains("position 1 of 1")
        && line.contains(" left")
        && line.contains("\\u{1b}[2J")
        && !line.contains('\x1b')));
    // The holder's time grows from line to line.
    let held: Vec<&str> = lines
        .iter()
        .map(|line| {
            line.split(") for ")
                .nth(1)
                .unwrap()
                .split(';')
                .next()
                .unwrap()
        })
        .collect();
    assert_ne!(held.first(), held.last(), "{held:?}");
}

/// On a terminal the status line is redrawn in place and never wider than the terminal; what
/// gives way is the holder's command and note, never the place in the queue and the time left.
/// Repro: at 80 columns the line was cut to `...; po…`.
#[test]
fn the_status_line_fits_the_terminal_keeping_the_place_and_the_time_left() {
    let server = RedisServer::start();
    let holder = server
        .redlock(&["run", "--key", "job", "--ttl", "60s", "--note"])
        .arg("deploying release 2026.11.22 to production, ticket OPS-1234")
        .args(&["--", "sh", "-c", "sleep 30; echo a long command line"])
        .spawn();
    assert!(crate::util::wait_until(Duration::from_secs(10), || {
        server.cmd::<i64>(&["EXISTS", "redlock:{job}:holders"]) == 1
    }));
    for columns in [80, 60] {
        let inner = format!(
            "stty cols {columns}; {} acquire --key job --ttl 10s --wait 1500ms",
            crate::util::REDLOCK
        );
        let out = std::process::Command::new("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("REDLOCK_URL", server.url())
            .stdin(std::process::Stdio::piped())
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        let drawn: Vec<&str> = shown
            .split('\r')
            .filter_map(|part| part.strip_prefix("\x1b[K"))
            .filter(|part| part.starts_with("redlock: ") && !part.contains("still busy"))
            .collect();
        assert!(drawn.len() >= 2, "{shown:?}");
        for line in drawn {
            assert!(
                line.chars().count() < columns,
                "{} columns: {line:?}",
                line.chars().count()
            );
            assert!(
                line.contains("(place 1 of 1, ") && line.contains(" left)"),
                "{columns} columns: {line:?}"
            );
        }
    }
    holder.signal("TERM");
    holder.wait(Duration::from_secs(10)).code(143);
}

/// A wait that runs out reports the holder as of then: "held for" counts the wait itself,
/// although the last reply from Redis came when the wait began.
#[test]
fn a_wait_that_runs_out_reports_current_figures() {
    let server = RedisServer::start();
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "60s"])
        .run()
        .code(0);
    let out = server
        .redlock(&[
            "acquire", "--key", "job", "--ttl", "10s", "--wait", "2500ms",
        ])
        .run();
    out.code(75);
    let held = out
        .stderr
        .split("held for ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|figure| figure.strip_suffix('s'))
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .unwrap_or_else(|| out.fail("no 'held for Ns' in the message"));
    assert!(
        held >= 2.4,
        "held for {held}s after a 2.5s wait: {}",
        out.stderr
    );
}

/// Queues `count` waiting `acquire`s of `job` behind `ahead` others and kills them all with
/// SIGKILL (a CI runner's timeout, an OOM kill): their places stay in the queue.
fn queue_dead_acquires(server: &RedisServer, ahead: usize, count: usize) {
    let acquire = ["acquire", "--key", "job", "--ttl", "10s", "--wait", "20s"];
    queue_dead(server, ahead, count, &acquire);
}

/// Queues `count` waiting redlock commands `args` behind `ahead` others and kills them all
/// with SIGKILL.
fn queue_dead(server: &RedisServer, ahead: usize, count: usize, args: &[&str]) {
    let mut queued = Vec::new();
    for position in ahead + 1..=ahead + count {
        let running = server.redlock(args).spawn();
        assert!(
            wait_until(Duration::from_secs(10), || waiters(server) == position),
            "waiter {position} did not queue"
        );
        queued.push(running);
    }
    for running in &queued {
        running.signal("KILL");
    }
    for running in queued {
        let _ = running.wait(Duration::from_secs(5));
    }
}

/// Holds `job`, queues `dead` waiting acquires and kills them (-9), queues a live one behind
/// them (`--ttl 10s`), releases, and asserts the live one acquired within `bound` of the
/// release.
fn live_waiter_behind_dead_ones(dead: usize, bound: Duration) {
    live_waiter_behind(0, dead, "10s", bound);
}

/// Holds `job`, queues `fast` runs of `true`, then `dead` waiting acquires killed with -9, then
/// a live `acquire --ttl live_ttl`; releases, and asserts the runs succeeded and the live one
/// acquired within `bound` of the release.
fn live_waiter_behind(fast: usize, dead: usize, live_ttl: &str, bound: Duration) {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let runs: Vec<Running> = (1..=fast).map(|n| queue_run(&server, "true", n)).collect();
    queue_dead_acquires(&server, fast, dead);
    let live = server
        .redlock(&[
            "acquire", "--key", "job", "--ttl", live_ttl, "--wait", "60s",
        ])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || server
            .cmd::<usize>(&["ZCARD", "redlock:{job}:queue"])
            == fast + dead + 1),
        "the live waiter did not queue behind the dead ones"
    );
    let released = Instant::now();
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    for run in runs {
        run.wait(Duration::from_secs(10)).code(0);
    }
    live.wait(Duration::from_secs(40)).code(0);
    assert!(
        released.elapsed() < bound,
        "the live waiter acquired {:?} after the release",
        released.elapsed()
    );
}

/// Waiters killed while queued must not starve a live one behind them. Each
/// dead place lapses within the head lease (3 s) once it is among the first places, and a dead
/// waiter handed the lock before that costs one grant; the live waiter, near the head, looks
/// every second. So the lock is taken within a grant, a head lease and a look of the release
/// (9 s with slack), below the 10 s TTL the waiters asked for; before the fix it sat free for
/// 30+ s and the live waiter could time out (75) without ever holding it.
#[test]
fn five_dead_waiters_do_not_starve_a_live_one() {
    live_waiter_behind_dead_ones(5, Duration::from_secs(9));
}

/// A run of dead waiters longer than the head (20, the head lease covers 8) costs no
/// more than the TTL they asked for in all. The live waiter far back looks every third of its
/// TTL, and once it finds lapsed entries at the head it gives the head lease to every place ahead
/// of it, so they lapse together; before, each head's worth cost a look of a second per place
/// (19.4 s here, with a 10 s TTL).
#[test]
fn twenty_dead_waiters_cost_no_more_than_the_ttl() {
    live_waiter_behind_dead_ones(20, Duration::from_secs(10));
}

/// Two dead waiters at the head, the one told to watch the first one's grant
/// dead too: the live waiter behind them is not left to its 40 s refresh (it took 45.75 s).
/// Killed just before the release, both may still be live when their turns come: each then
/// costs a waiting `acquire`'s short grant (0.6 s), not the 5 s one of `run` (with a 1.5 s
/// grant this took 3.2 s).
#[test]
fn two_dead_waiters_at_the_head_do_not_starve_a_live_one() {
    live_waiter_behind_dead_ones(2, Duration::from_millis(2500));
}

/// A wait that runs out names who holds the lock then, read again, not the
/// holder seen when the wait began. Here the holder seen then has released, and the lock was
/// handed to the `run` queued first, which has not renewed its grant yet (it does a third of
/// the way into it): the message says it is being handed over, and to whom.
#[test]
fn a_wait_that_runs_out_names_the_holder_of_the_moment() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let next = queue_run(&server, "sleep 10", 1);
    let late = server
        .redlock(&[
            "acquire", "--key", "job", "--ttl", "10s", "--wait", "1500ms",
        ])
        .spawn();
    // Released within its wait (1.5 s), which then ends before the grant's first renewal
    // (1.7 s after it).
    assert!(
        wait_until(Duration::from_secs(10), || waiters(&server) == 2),
        "the second waiter did not queue"
    );
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    let out = late.wait(Duration::from_secs(10));
    out.code(75);
    let busy = out
        .stderr
        .lines()
        .find(|line| line.contains("still busy after waiting"))
        .unwrap_or_else(|| out.fail("no 'still busy' line"));
    assert!(
        busy.contains("being handed over to") && busy.contains(&format!("pid {} user", next.pid())),
        "did not name the grant to the next waiter: {busy}"
    );
    next.signal("TERM");
    let _ = next.wait(Duration::from_secs(10));
}

/// A waiter whose claim is answered only after a stall (here `CLIENT PAUSE`,
/// shorter than the command timeout, so the call sent as it began is answered as it ends)
/// does not give up with 69 ("granted too late to start the command safely") while its wait
/// has time left and Redis answers again: it confirms the lease once more and runs its
/// command.
#[test]
fn a_waiter_granted_after_a_stall_runs_its_command() {
    let server = RedisServer::start();
    let holder = server
        .redlock(&["run", "--key", "job", "--ttl", "5s", "--", "sleep", "4"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || server
        .cmd::<i64>(&["EXISTS", "redlock:{job}:holders"])
        == 1));
    let waiter = server
        .redlock(&[
            "run", "--key", "job", "--ttl", "5s", "--wait", "30s", "--", "echo", "ran",
        ])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
    // Paused within a second of the join, before the waiter's next look, and until the
    // holder's unrenewed lease has run out: that look is answered at the end, with the lock.
    std::thread::sleep(Duration::from_millis(500));
    server.cmd::<()>(&["CLIENT", "PAUSE", "4800", "ALL"]);
    let out = waiter.wait(Duration::from_secs(40));
    let _ = holder.wait(Duration::from_secs(20));
    out.code(0).stdout_contains("ran");
}

/// A `run --ttl 3s` waiter stopped (SIGSTOP) between its grant and the start of its command,
/// for 2.7 s: the grant is too near its end to start the command on. With wait time left it gives
/// the lock back and queues again, and runs its command (0); with none left it exits 75, the
/// busy status: its command could not run under the lock within its wait, although Redis is
/// healthy. It used to exit 69 ("Redis unavailable") either way.
#[test]
fn a_run_waiter_stopped_between_its_grant_and_its_command_queues_again() {
    let server = RedisServer::start();
    for (wait, code) in [("20s", 0), ("2s", 75)] {
        let token = hold(&server, "60s");
        let waiter = server
            .redlock(&[
                "run", "-v", "--key", "job", "--ttl", "3s", "--wait", wait, "--", "echo", "ran",
            ])
            .env("REDLOCK_FAILPOINT", "stop:acquired")
            .spawn();
        assert!(wait_until(Duration::from_secs(10), || waiters(&server) == 1));
        server
            .redlock(&["release", "--key", "job", "--token", &token])
            .run()
            .code(0);
        assert!(
            wait_until(Duration::from_secs(10), || crate::util::stopped(
                waiter.pid()
            )),
            "the waiter did not stop at its grant"
        );
        // The fault's length.
        std::thread::sleep(Duration::from_millis(2700));
        waiter.signal("CONT");
        let out = waiter.wait(Duration::from_secs(30));
        out.code(code)
            .stderr_contains("granted too late to start the command safely");
        if code == 0 {
            out.stdout_contains("ran").stderr_contains("queueing again");
        } else {
            out.stderr_contains("no --wait time is left");
            assert!(out.stdout.is_empty(), "the command ran: {}", out.stdout);
        }
        assert_eq!(server.cmd::<i64>(&["EXISTS", "redlock:{job}:holders"]), 0);
    }
}

/// Repro: a waiter that timed out or was interrupted left `P{K}:cancel:<token>` for
/// 5 minutes, although nothing is promised to be left behind. With every request answered,
/// leaving the queue leaves nothing; the marker is kept only while a request may arrive late
/// (covered in bad_input and faults).
#[test]
fn a_waiter_that_gives_up_leaves_nothing_behind() {
    let server = RedisServer::start();
    let _token = hold(&server, "60s");
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "1s"])
        .run()
        .code(75);
    let waiter = queue_acquire(&server);
    waiter.signal("TERM");
    waiter.wait(Duration::from_secs(5)).code(143);
    let mut keys = server.keys_but_history();
    keys.retain(|key| !key.ends_with(":fence"));
    assert_eq!(keys, ["redlock:{job}:holders", "redlock:{job}:leases"]);
}

/// A fast drain (eight `run`s of `true`) moves eight waiters killed a moment ago, and the live
/// waiter behind them, into the head lease's places, none of which called since it joined far
/// back. Each is told as it moves up (so the live one calls every second and drops the dead
/// ones once their head lease lapses): the lock is taken about 3 s after the release, within
/// the bound of a second per dead waiter. With the wake-up deferred until the queue had stayed
/// put for a second, nobody called, and the live waiter slept until its own hint (12.3 s).
#[test]
fn dead_waiters_moved_up_by_a_fast_drain_do_not_starve_a_live_one() {
    // (--ttl 30s: the live waiter's own look at place 17 is then 9 s away, not 3.3 s.)
    live_waiter_behind(8, 8, "30s", Duration::from_secs(8));
}

/// Dead `run` waiters at the head: a run starts its command on the grant without a call, so the
/// grant (5 s) is not claimed as a waiting acquire's is. The wake-up a live run takes off its
/// list at once is still there for a dead one: the next call after 0.6 s deletes it and the
/// grant, and the lock passes on. Killed just before the release, both dead places are still
/// live when their turns come (the head lease lapses 3 s after their last call); each costs
/// well under a second, so the live `run` behind them starts within 2.5 s (it took 5 s, the
/// first one's grant, before).
#[test]
fn dead_run_waiters_handed_the_lock_cost_under_a_second_each() {
    let server = RedisServer::start();
    let token = hold(&server, "60s");
    let run = ["run", "--key", "job", "--wait", "20s", "--", "sleep", "30"];
    queue_dead(&server, 0, 2, &run);
    let dir = TempDir::new("dead-runs");
    let started = dir.path().join("started");
    let live = server
        .redlock(&[
            "run",
            "--key",
            "job",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!("echo go > {}", started.display()),
        ])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || server
            .cmd::<usize>(&["ZCARD", "redlock:{job}:queue"])
            == 3),
        "the live waiter did not queue behind the dead ones"
    );
    let released = Instant::now();
    server
        .redlock(&["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    wait_for_file(&started, Duration::from_secs(20));
    let took = released.elapsed();
    live.wait(Duration::from_secs(10)).code(0);
    assert!(
        took < Duration::from_millis(2500),
        "the live run started {took:?} after the release"
    );
    // The dead ones' grants ended early: expired holds in the history, no later than the
    // live run's start.
    let history = server.redlock(&["history", "--key", "job", "--json"]).run();
    history.code(0);
    assert!(
        history.stdout.matches("\"expired\"").count() >= 1,
        "{}",
        history.stdout
    );
}
