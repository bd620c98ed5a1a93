//! Quorum mode (docs/servers.md "Several masters"): the lock held on a majority of
//! independent redis-servers. Masters stopped (SIGSTOP), killed and restarted before, during
//! and between acquisitions; the verdicts, the fences and what is left on each master checked
//! from outside.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::{RedisServer, Redlock, TempDir, send_signal, wait_until};

/// `count` independent masters.
struct Masters {
    servers: Vec<RedisServer>,
}

impl Masters {
    fn start(count: usize) -> Self {
        Self::start_with(count, &[])
    }

    fn start_with(count: usize, extra: &[&str]) -> Self {
        Self {
            servers: (0..count).map(|_| RedisServer::start_with(extra)).collect(),
        }
    }

    /// REDLOCK_URL for all of them: URLs separated by spaces.
    fn urls(&self) -> String {
        self.servers
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn redlock(&self, args: &[&str]) -> Redlock {
        Redlock::new(args).env("REDLOCK_URL", &self.urls())
    }

    /// The keys on each master, the fence counter and the history left out.
    fn lock_keys(&self) -> Vec<Vec<String>> {
        self.servers
            .iter()
            .map(|server| {
                server
                    .keys_but_history()
                    .into_iter()
                    .filter(|key| !key.ends_with(":fence"))
                    .collect()
            })
            .collect()
    }

    fn holders_on(&self, index: usize, key: &str) -> i64 {
        self.servers[index].cmd(&["HLEN", &format!("redlock:{{{key}}}:holders")])
    }

    /// Whether `key` is held on a majority of the masters.
    fn held_on_a_majority(&self, key: &str) -> bool {
        let held = (0..self.servers.len())
            .filter(|index| self.holders_on(*index, key) > 0)
            .count();
        held > self.servers.len() / 2
    }
}

/// Whether `server` answers a PING within `limit` (not while it runs DEBUG SLEEP).
fn answers_within(server: &RedisServer, limit: Duration) -> bool {
    let Ok(client) = redis::Client::open(server.url()) else {
        return false;
    };
    let Ok(mut con) = client.get_connection_with_timeout(limit) else {
        return false;
    };
    let _ = con.set_read_timeout(Some(limit));
    redis::cmd("PING").query::<String>(&mut con).is_ok()
}

#[test]
fn a_lock_is_held_on_every_master_and_released_everywhere() {
    let masters = Masters::start(5);
    let out = masters
        .redlock(&["acquire", "--key", "q", "--ttl", "30s", "--json"])
        .run();
    out.code(0);
    let acquired = out.json();
    let token = acquired["token"].as_str().unwrap().to_owned();
    let fence = acquired["fence"].as_u64().unwrap();
    for (index, server) in masters.servers.iter().enumerate() {
        assert_eq!(masters.holders_on(index, "q"), 1, "master {index}");
        // The fence written back: the counter and the record carry the quorum's fence.
        let counter: String = server.cmd(&["GET", "redlock:{q}:fence"]);
        assert_eq!(counter.parse::<u64>().unwrap(), fence, "master {index}");
    }
    let inspected = masters.redlock(&["inspect", "--key", "q", "--json"]).run();
    inspected.code(0);
    let view = inspected.json();
    assert_eq!(view["verdict"], "held");
    assert_eq!(view["fence"].as_u64(), Some(fence));
    assert_eq!(view["masters"].as_array().unwrap().len(), 5);
    assert_eq!(view["majority"], 3);
    // The same object as on one Redis: the holder as a majority has it, each master's too.
    assert_eq!(view["state"], "held", "{view:#}");
    assert_eq!(
        view["holders"][0]["fence"].as_u64(),
        Some(fence),
        "{view:#}"
    );
    assert_eq!(
        view["masters"][4]["lock"]["holders"][0]["fence"].as_u64(),
        Some(fence)
    );
    masters
        .redlock(&["inspect", "--key", "q"])
        .run()
        .code(0)
        .stdout_contains("held on 5 of 5 masters (a majority is 3)");
    masters
        .redlock(&["list"])
        .run()
        .code(0)
        .stdout_contains("5/5");
    masters
        .redlock(&["acquire", "--key", "q", "--ttl", "30s"])
        .run()
        .code(75);
    masters
        .redlock(&["extend", "--key", "q", "--token", &token, "--ttl", "60s"])
        .run()
        .code(0);
    masters
        .redlock(&["release", "--key", "q", "--token", &token])
        .run()
        .code(0);
    assert!(masters.lock_keys().iter().all(Vec::is_empty));
    masters
        .redlock(&["inspect", "--key", "q"])
        .run()
        .code(1)
        .stdout_contains("free on 5 of 5");
    // Free: as on one server, the last fence issued, no holder.
    let free = masters.redlock(&["inspect", "--key", "q", "--json"]).run();
    free.code(1);
    let free = free.json();
    assert_eq!(
        (free["state"].as_str(), free["fence"].as_u64()),
        (Some("free"), Some(fence)),
        "{free:#}"
    );
    assert_eq!(free["holders"], serde_json::json!([]), "{free:#}");
    masters
        .redlock(&["release", "--key", "q", "--token", &token])
        .run()
        .code(1);
    // Force: every master's holder evicted, each holder reported once.
    masters
        .redlock(&["acquire", "--key", "q", "--ttl", "30s"])
        .run()
        .code(0);
    let forced = masters.redlock(&["release", "--key", "q", "--force"]).run();
    forced.code(0);
    assert_eq!(
        forced.stdout.matches("by force").count(),
        1,
        "{}",
        forced.stdout
    );
    assert!(masters.lock_keys().iter().all(Vec::is_empty));
    masters
        .redlock(&["release", "--key", "q", "--force"])
        .run()
        .code(1);
}

#[test]
fn bad_quorums_are_refused_before_redis() {
    let masters = Masters::start(4);
    masters
        .redlock(&["run", "--key", "q", "--", "true"])
        .run()
        .code(64)
        .one_line_error("quorum mode needs an odd number");
    Redlock::new(&["run", "--key", "q", "--", "true"])
        .env(
            "REDLOCK_URL",
            &format!("{} {}", masters.servers[0].url(), masters.servers[1].url()),
        )
        .run()
        .code(64)
        .one_line_error("at least 3");
    let three = Masters {
        servers: masters.servers.into_iter().take(3).collect(),
    };
    for args in [
        &["run", "--key", "q", "--limit", "2", "--", "true"][..],
        &["acquire", "--key", "q", "--replicas", "1"][..],
    ] {
        three.redlock(args).run().code(64);
    }
    assert!(three.lock_keys().iter().all(Vec::is_empty));
    // The same masters given as repeated --redis.
    let mut args = vec!["run".to_owned(), "--key".into(), "q".into()];
    for server in &three.servers {
        args.extend(["--redis".to_owned(), server.url()]);
    }
    args.extend(["--".into(), "true".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Redlock::new(&args).run().code(0);
    // Separated by line breaks and tabs too (a multi-line value in a CI file's YAML).
    let urls: Vec<String> = three.servers.iter().map(RedisServer::url).collect();
    Redlock::new(&["run", "--key", "q", "--", "true"])
        .env(
            "REDLOCK_URL",
            &format!("{}\n  {}\t{}\n", urls[0], urls[1], urls[2]),
        )
        .run()
        .code(0);
    // One server named twice is not two independent masters: losing its data would lose two
    // votes (repro: one server given twice of three let a second holder in after it restarted
    // empty). Also under another name for the loopback address, or as another database.
    let (first, second) = (three.servers[0].port, three.servers[1].port);
    for urls in [
        format!("redis://127.0.0.1:{first} redis://127.0.0.1:{first} redis://127.0.0.1:{second}"),
        format!("redis://localhost:{first} redis://127.0.0.1:{second} redis://127.0.0.1:{first}"),
        format!(
            "redis://127.0.0.1:{first}/0 redis://127.0.0.1:{first}/1 redis://127.0.0.1:{second}"
        ),
        format!(
            "redis://[::ffff:127.0.0.1]:{first} redis://127.0.0.1:{second} redis://0.0.0.0:{first}"
        ),
    ] {
        Redlock::new(&["run", "--key", "q", "--", "true"])
            .env("REDLOCK_URL", &urls)
            .run()
            .code(64)
            .one_line_error(&format!("names the server 127.0.0.1:{first} again"));
    }
    // One group of sentinels watches several masters: the same sentinels with other services
    // are other masters, not one named twice (here no sentinel answers: a plain server).
    let out = Redlock::new(&["inspect", "--key", "q", "--connect-timeout", "300ms"])
        .env(
            "REDLOCK_URL",
            &["a", "b", "c"]
                .map(|service| format!("redis+sentinel://127.0.0.1:{first}/{service}"))
                .join(" "),
        )
        .run();
    assert!(!out.stderr.contains("again"), "{}", out.stderr);
    assert!(three.lock_keys().iter().all(Vec::is_empty));
}

/// `history` and `check` read every master's history, merged: a hold recorded on each master
/// is one hold; a master down is warned of and changes nothing; fewer than a majority is an
/// error, never an answer.
#[test]
fn history_and_check_read_every_master_merged() {
    let mut masters = Masters::start(3);
    masters
        .redlock(&["history", "--key", "q"])
        .run()
        .code(1)
        .stderr_contains("has no history");
    masters
        .redlock(&["check", "q", "--succeeded-within", "1h"])
        .run()
        .code(83);
    masters
        .redlock(&["run", "--key", "q", "--", "sh", "-c", "exit 3"])
        .run()
        .code(3);
    masters.servers[0].kill();
    masters
        .redlock(&["run", "--key", "q", "--", "true"])
        .run()
        .code(0);
    let out = masters.redlock(&["history", "--key", "q", "--json"]).run();
    out.code(0).stderr_contains("did not answer");
    let runs = out.json();
    let exits: Vec<i64> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["exit"].as_i64().unwrap())
        .collect();
    assert_eq!(exits, [0, 3], "{runs:#}");
    masters
        .redlock(&["check", "q", "--succeeded-within", "1h"])
        .run()
        .code(0)
        .stdout_contains("q: OK: last success ");
    // metrics: each lock once, as the first master that answers has it.
    let metrics = masters.redlock(&["metrics"]).run();
    metrics.code(0);
    assert_eq!(
        metrics
            .stdout
            .lines()
            .filter(|line| line.starts_with("redlock_lock_last_exit_status{key=\"q\"} 0"))
            .count(),
        1,
        "{}",
        metrics.stdout
    );
    masters.servers[1].kill();
    masters
        .redlock(&["check", "q", "--succeeded-within", "1h"])
        .run()
        .code(69)
        .one_line_error("masters answered");
}

/// `list`, `metrics` and `inspect`'s verdict read each lock as a majority of masters has it:
/// a holder left on one master of three (a failed acquisition that could not give it back), or
/// two holders of one fence on two masters (two contenders in one tenth of a second), is not a
/// held lock; a run recorded by a majority is the last run, whatever one master recorded since.
#[test]
fn list_metrics_and_inspect_show_each_lock_as_a_majority_has_it() {
    let masters = Masters::start(3);
    masters
        .redlock(&["acquire", "--key", "held", "--ttl", "60s"])
        .run()
        .code(0);
    // A leftover: taken on the first master alone.
    masters.servers[0]
        .redlock(&["acquire", "--key", "leftover", "--ttl", "60s"])
        .run()
        .code(0);
    // Two processes' holds with one fence, each on a master of its own (the counters set
    // above the clock, so that each takes the next number).
    for server in &masters.servers[..2] {
        let _: () = server.cmd(&["SET", "redlock:{split}:fence", "9000000000000000"]);
        server
            .redlock(&["acquire", "--key", "split", "--ttl", "60s"])
            .run()
            .code(0);
    }
    // A run every master recorded (exit 0), then one on the first master alone (exit 5).
    masters
        .redlock(&["run", "--key", "ran", "--", "true"])
        .run()
        .code(0);
    masters.servers[0]
        .redlock(&["run", "--key", "ran", "--", "sh", "-c", "exit 5"])
        .run()
        .code(5);

    let inspected = masters
        .redlock(&["inspect", "--key", "split", "--json"])
        .run();
    inspected.code(0);
    let split = inspected.json();
    assert_eq!(split["verdict"], "contested", "{split:#}");
    assert_eq!(split["state"], "contested", "{split:#}");
    assert_eq!(split["holders"], serde_json::json!([]), "{split:#}");
    // The last run as the masters agree on it, as `list` shows it.
    let ran = masters
        .redlock(&["inspect", "--key", "ran", "--json"])
        .run();
    ran.code(1);
    assert_eq!(ran.json()["last_run"]["exit"], 0, "{}", ran.stdout);
    masters
        .redlock(&["inspect", "--key", "ran"])
        .run()
        .code(1)
        .stdout_contains("free on 3 of 3 masters")
        .stdout_contains("exit 0");
    masters
        .redlock(&["inspect", "--key", "leftover"])
        .run()
        .code(1);

    let listed = masters.redlock(&["list", "--json"]).run();
    listed.code(0);
    let locks = listed.json();
    let lock = |name: &str| {
        locks
            .as_array()
            .unwrap()
            .iter()
            .find(|lock| lock["key"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {locks:#}"))
            .clone()
    };
    for (name, holders, held_on) in [("held", 1, 3), ("leftover", 0, 1), ("split", 0, 2)] {
        let lock = lock(name);
        assert_eq!(
            lock["holders"].as_array().map(Vec::len),
            Some(holders),
            "{lock:#}"
        );
        assert_eq!(lock["held_on"], held_on, "{lock:#}");
    }
    let table = masters.redlock(&["list"]).run();
    table.code(0);
    for (name, shown) in [("held", "3/3"), ("leftover", "1/3"), ("split", "2/3")] {
        let line = table
            .stdout
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{}", table.stdout));
        assert!(line.contains(shown), "{line}");
        assert_eq!(
            line.contains("not held by a majority"),
            name != "held",
            "{line}"
        );
    }

    let metrics = masters.redlock(&["metrics"]).run();
    metrics.code(0);
    for (line, wanted) in [
        ("redlock_lock_held{key=\"held\",mode=\"exclusive\"}", "1"),
        (
            "redlock_lock_held{key=\"leftover\",mode=\"exclusive\"}",
            "0",
        ),
        ("redlock_lock_held{key=\"split\",mode=\"exclusive\"}", "0"),
        ("redlock_lock_holders{key=\"split\"}", "0"),
        ("redlock_lock_last_exit_status{key=\"ran\"}", "0"),
    ] {
        let found = metrics
            .stdout
            .lines()
            .find(|sample| sample.starts_with(line))
            .unwrap_or_else(|| panic!("no {line}:\n{}", metrics.stdout));
        assert_eq!(found.rsplit(' ').next(), Some(wanted), "{found}");
    }
}

/// A nested invocation that fails to re-enter (too few masters answer) gives back only its own
/// count: the enclosing hold stays on every master that has it. Repro (review): it was given
/// back whole on the master that granted the re-entry, and a stranger took the lock while the
/// outer invocation still held it.
/// A waiter in quorum mode says where its wait stands at every progress interval, as one on a
/// single Redis does (the one wait loop draws the status line for either store): who holds
/// the lock and how long is left, with no place in a queue (there is none across masters).
#[test]
fn a_quorum_waiter_in_a_ci_log_reports_progress() {
    let masters = Masters::start(3);
    let out = masters
        .redlock(&[
            "acquire",
            "--key",
            "k",
            "--ttl",
            "60s",
            "--note",
            "the holder",
        ])
        .run();
    out.code(0);
    let out = masters
        .redlock(&[
            "acquire",
            "--key",
            "k",
            "--ttl",
            "10s",
            "--wait",
            "2500ms",
            "--progress-every",
            "1s",
        ])
        .run();
    out.code(75);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.starts_with("redlock: waiting for lock 'k': held by "))
        .collect();
    assert!(lines.len() >= 2, "{}", out.stderr);
    assert!(
        lines.iter().all(|line| line.contains("the holder")
            && line.contains(" left")
            && !line.contains("position")),
        "{}",
        out.stderr
    );
}

#[test]
fn a_failed_reentry_leaves_the_enclosing_hold() {
    let masters = Masters::start(3);
    let out = masters
        .redlock(&["acquire", "--key", "k", "--ttl", "60s"])
        .run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    // The third master lost its data; the second stops answering: the outer hold is on the
    // first (and the stopped second), a re-entry can only win the first.
    let _: () = masters.servers[2].cmd(&["FLUSHALL"]);
    send_signal(masters.servers[1].pid(), "STOP");
    let quick = ["--command-timeout", "300ms", "--connect-timeout", "300ms"];
    let nested = masters
        .redlock(&[&quick[..], &["acquire", "--key", "k", "--ttl", "10s"]].concat())
        .env("REDLOCK_KEY", "k")
        .env("REDLOCK_TOKEN", &token)
        .run();
    assert_ne!(nested.status.code(), Some(0), "{}", nested.stderr);
    assert_eq!(
        masters.holders_on(0, "k"),
        1,
        "the enclosing hold was given back"
    );
    masters
        .redlock(
            &[
                &quick[..],
                &["acquire", "--key", "k", "--ttl", "10s", "--no-reenter"],
            ]
            .concat(),
        )
        .run()
        .code(75);
    send_signal(masters.servers[1].pid(), "CONT");
}

#[test]
fn two_masters_down_of_five_still_works_three_down_is_unavailable_and_leaves_nothing() {
    let mut masters = Masters::start(5);
    masters.servers[0].kill();
    masters.servers[1].kill();
    masters
        .redlock(&["run", "--key", "q", "--ttl", "3s", "--", "true"])
        .run()
        .code(0);
    masters.servers[2].kill();
    let out = masters
        .redlock(&["acquire", "--key", "q", "--ttl", "30s"])
        .run();
    out.code(69).one_line_error("masters answered");
    for index in 3..5 {
        let left: Vec<String> = masters.servers[index]
            .keys_but_history()
            .into_iter()
            .filter(|key| !key.ends_with(":fence"))
            .collect();
        assert!(left.is_empty(), "master {index} kept {left:?}");
    }
}

/// A run's final release that a majority of masters refused before running it (restarting:
/// the connection refused) is sent again, as on one Redis, for up to the release timeout (5 s
/// by default): the masters back after 1.5 s with their data (an AOF), the lock is released on
/// every master, and their histories say it was sent again. It used to be given up after one
/// attempt, and the lock stayed held on a majority until its lease ended.
#[test]
fn a_release_a_majority_refused_before_running_is_sent_again() {
    let dir = TempDir::new("quorum-release");
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let mut masters = Masters::start_with(3, &["--appendonly", "yes", "--appendfsync", "always"]);
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        started.display(),
        go.display()
    );
    let running = masters
        .redlock(&[
            "run", "--key", "q", "--ttl", "60s", "--", "sh", "-c", &script,
        ])
        .spawn();
    // (The command started: the acquisition is over, its fence written back if need be.)
    assert!(
        wait_until(Duration::from_secs(10), || started.exists()),
        "the command never started"
    );
    assert!((0..3).all(|index| masters.holders_on(index, "q") == 1));
    masters.servers[1].kill();
    masters.servers[2].kill();
    std::fs::write(&go, "").unwrap();
    // How long the two are down: the fault itself, not a wait for anything.
    std::thread::sleep(Duration::from_millis(1500));
    masters.servers[1].restart();
    masters.servers[2].restart();
    let out = running.wait(Duration::from_secs(15));
    out.code(0);
    if !masters.lock_keys().iter().all(Vec::is_empty) {
        out.fail(&format!(
            "the lock is left on the masters: {:?}",
            masters.lock_keys()
        ));
    }
    for server in &masters.servers[1..] {
        let last: Vec<String> = server.cmd(&["ZRANGE", "redlock:{q}:history", "-1", "-1"]);
        assert!(
            last.first()
                .is_some_and(|entry| entry.contains("release sent again")),
            "{last:?}"
        );
    }
}

/// A release that a majority of masters never ran (still down when `--release-timeout` has
/// passed) is no release, though one master let go: redlock says it could not release, and
/// exits with the command's status. It used to say the lock was released.
#[test]
fn a_release_only_a_minority_ran_is_reported_as_failed() {
    let dir = TempDir::new("quorum-unreleased");
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let mut masters = Masters::start(3);
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done; exit 4",
        started.display(),
        go.display()
    );
    let running = masters
        .redlock(&[
            "run",
            "--key",
            "q",
            "--release-timeout",
            "1s",
            "-v",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || started.exists()),
        "the command never started"
    );
    masters.servers[1].kill();
    masters.servers[2].kill();
    std::fs::write(&go, "").unwrap();
    let out = running.wait(Duration::from_secs(15));
    out.code(4).stderr_contains("could not release lock 'q'");
    if out.stderr.contains("released lock 'q'") {
        out.fail("said the lock was released");
    }
}

#[test]
fn a_run_survives_a_minority_lost_and_stops_when_a_majority_is_lost() {
    let dir = TempDir::new("quorum-run");
    let mut masters = Masters::start(5);
    // A minority lost mid-run: the command finishes.
    let running = masters
        .redlock(&["run", "--key", "q", "--ttl", "2s", "--", "sleep", "3"])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || masters.held_on_a_majority("q")),
        "the run never held q"
    );
    masters.servers[0].kill();
    masters.servers[1].kill();
    running.wait(Duration::from_secs(15)).code(0);
    // A majority lost: the command is dead before the lease can lapse, exit 125.
    let marker = dir.path().join("alive");
    // Written aside and renamed, so a kill mid-write never leaves it empty.
    let script = format!(
        "while :; do date +%s%N > {m}.new && mv {m}.new {m}; sleep 0.05; done",
        m = marker.display()
    );
    let running = masters
        .redlock(&[
            "run", "--key", "r", "--ttl", "2s", "--", "sh", "-c", &script,
        ])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || marker.exists()),
        "the command never started"
    );
    let lost_at = crate::util::wall_ms();
    masters.servers[2].kill();
    let out = running.wait(Duration::from_secs(15));
    out.code(125);
    let last_write_ns: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let last_write_ms = last_write_ns / 1_000_000;
    // Confirmed last before the loss; the lease was 2 s from a renewal's send.
    assert!(
        last_write_ms < lost_at + 2000,
        "the command ran {} ms after the majority was lost",
        last_write_ms.saturating_sub(lost_at)
    );
}

#[test]
fn a_stopped_master_does_not_stall_an_acquisition() {
    let masters = Masters::start(5);
    send_signal(masters.servers[0].pid(), "STOP");
    send_signal(masters.servers[1].pid(), "STOP");
    let started = Instant::now();
    let out = masters
        .redlock(&[
            "--command-timeout",
            "300ms",
            "--connect-timeout",
            "300ms",
            "acquire",
            "--key",
            "q",
            "--ttl",
            "10s",
        ])
        .run();
    out.code(0);
    // Bounded by the per-master timeout (connect and request), not by the stopped masters.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let token = out.stdout.trim().to_owned();
    send_signal(masters.servers[0].pid(), "CONT");
    send_signal(masters.servers[1].pid(), "CONT");
    masters
        .redlock(&["release", "--key", "q", "--token", &token])
        .run()
        .code(0);
    // The stopped masters ran the requests when continued: given up, nothing held there.
    wait_until(Duration::from_secs(5), || {
        (0..5).all(|index| masters.holders_on(index, "q") == 0)
    });
    for index in 0..5 {
        assert_eq!(masters.holders_on(index, "q"), 0, "master {index}");
    }
    // A new name's fences differ between masters (each its own clock), so the largest is
    // written back: to the masters that granted it, not waiting for the stopped one a second
    // time. Repro: 4.0 s here (6 s with the default timeouts), twice the bound.
    send_signal(masters.servers[0].pid(), "STOP");
    let started = Instant::now();
    masters
        .redlock(&[
            "--command-timeout",
            "2s",
            "--connect-timeout",
            "2s",
            "acquire",
            "--key",
            "fresh",
            "--ttl",
            "30s",
        ])
        .run()
        .code(0);
    assert!(
        started.elapsed() < Duration::from_millis(3500),
        "took {:?}: the stopped master was waited for twice",
        started.elapsed()
    );
    send_signal(masters.servers[0].pid(), "CONT");
}

/// A round ends once the answers decide it: with one of five masters stopped, an acquisition,
/// its renewals, a refusal (busy, given back) and its release each cost the straggler grace (a
/// quarter of a second), not the per-master limit (3 s here: a tenth of `--ttl 30s`). Repro:
/// the acquisition took 3 s, and so did the refusal after the round was made to end early.
#[test]
fn a_stopped_master_costs_a_round_the_grace_not_its_limit() {
    let masters = Masters::start(5);
    send_signal(masters.servers[4].pid(), "STOP");
    let timeouts = ["--command-timeout", "3s", "--connect-timeout", "3s"];
    let started = Instant::now();
    let mut args = timeouts.to_vec();
    args.extend(["acquire", "--key", "q", "--ttl", "30s"]);
    let out = masters.redlock(&args).run();
    out.code(0);
    let acquired_in = started.elapsed();
    let token = out.stdout.trim().to_owned();
    let started = Instant::now();
    let mut args = timeouts.to_vec();
    args.extend(["extend", "--key", "q", "--ttl", "30s"]);
    masters
        .redlock(&args)
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(0);
    let extended_in = started.elapsed();
    // Busy: decided by the four that answer; the stopped master is sent its give-back (with
    // the mark) but not waited for.
    let started = Instant::now();
    let mut args = timeouts.to_vec();
    args.extend(["acquire", "--key", "q", "--ttl", "30s"]);
    masters.redlock(&args).run().code(75);
    let refused_in = started.elapsed();
    send_signal(masters.servers[4].pid(), "CONT");
    // Well under the 3 s limit each, which the round waited out before.
    assert!(
        acquired_in < Duration::from_secs(2)
            && extended_in < Duration::from_secs(2)
            && refused_in < Duration::from_secs(2),
        "acquired in {acquired_in:?}, extended in {extended_in:?}, refused in {refused_in:?}: the stopped master's limit was waited out"
    );
    masters
        .redlock(&["release", "--key", "q"])
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(0);
}

/// The round takes longer than the lease (a majority answers late): validity is gone, so no
/// acquisition, and whatever the late masters granted is given back.
#[test]
fn a_majority_answering_after_the_lease_grants_nothing() {
    let masters = Masters::start_with(3, &["--enable-debug-command", "local"]);
    let sleepers: Vec<_> = masters.servers[..2]
        .iter()
        .map(|server| {
            let mut con = server.client();
            std::thread::spawn(move || {
                let _: redis::RedisResult<()> =
                    redis::cmd("DEBUG").arg("SLEEP").arg("1").query(&mut con);
            })
        })
        .collect();
    // Both asleep before the acquisition starts: a PING gets no answer.
    assert!(
        wait_until(Duration::from_secs(5), || masters.servers[..2]
            .iter()
            .all(|server| !answers_within(server, Duration::from_millis(50)))),
        "DEBUG SLEEP never started"
    );
    masters
        .redlock(&["acquire", "--key", "q", "--ttl", "500ms"])
        .run()
        .code(69);
    for sleeper in sleepers {
        sleeper.join().unwrap();
    }
    // The late grants are given back once the masters wake.
    wait_until(Duration::from_secs(5), || {
        (0..3).all(|index| masters.holders_on(index, "q") == 0)
    });
    for index in 0..3 {
        assert_eq!(masters.holders_on(index, "q"), 0, "master {index}");
    }
}

#[test]
fn shared_holders_coexist_and_exclude_a_writer_and_reentry_works() {
    let masters = Masters::start(3);
    let first = masters
        .redlock(&["acquire", "--key", "rw", "--shared", "--ttl", "30s"])
        .run();
    first.code(0);
    masters
        .redlock(&["acquire", "--key", "rw", "--shared", "--ttl", "30s"])
        .run()
        .code(0);
    masters
        .redlock(&["acquire", "--key", "rw", "--ttl", "30s"])
        .run()
        .code(75);
    // A nested run of the same lock re-enters it instead of waiting for itself.
    masters
        .redlock(&[
            "run",
            "--key",
            "nest",
            "--ttl",
            "5s",
            "--",
            "sh",
            "-c",
            "\"$REDLOCK_SELF\" run --key nest --ttl 5s -- true",
        ])
        .env("REDLOCK_SELF", crate::util::REDLOCK)
        .run()
        .code(0);
    assert!(
        masters
            .lock_keys()
            .iter()
            .all(|keys| keys.iter().all(|key| key.contains("{rw}")))
    );
}

/// Waiters that contend for the lock all get it in turn, never two at once, and a waiter
/// hears of a release instead of sleeping through it.
#[test]
fn contending_waiters_take_turns_and_wake_on_release() {
    let dir = TempDir::new("quorum-turns");
    let masters = Masters::start(3);
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $$\" >> {log}; sleep 0.05; echo \"end $$\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..6)
        .map(|_| {
            masters
                .redlock(&[
                    "run", "--key", "turns", "--ttl", "5s", "--wait", "60s", "--", "sh", "-c",
                    &script,
                ])
                .spawn()
        })
        .collect();
    for run in runs {
        run.wait(Duration::from_secs(60)).code(0);
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 12, "{lines:?}");
    for pair in lines.chunks(2) {
        let started = pair[0].strip_prefix("start ").unwrap();
        assert_eq!(pair[1], format!("end {started}"), "overlap: {lines:?}");
    }
    // A waiter behind a long holder is woken by the release, not by the holder's lease.
    let holder = masters
        .redlock(&["acquire", "--key", "wake", "--ttl", "60s"])
        .run();
    holder.code(0);
    let token = holder.stdout.trim().to_owned();
    let waiter = masters
        .redlock(&["run", "--key", "wake", "--wait", "60s", "--", "true"])
        .spawn();
    // Released once the waiter listens on every master (its first busy round started them).
    assert!(
        wait_until(Duration::from_secs(10), || masters.servers.iter().all(
            |server| {
                server
                    .cmd::<Vec<redis::Value>>(&["PUBSUB", "NUMSUB", "redlock:{wake}:released"])
                    .get(1)
                    .is_some_and(|count| *count == redis::Value::Int(1))
            }
        )),
        "the waiter never listened for releases"
    );
    let released = Instant::now();
    masters
        .redlock(&["release", "--key", "wake", "--token", &token])
        .run()
        .code(0);
    waiter.wait(Duration::from_secs(30)).code(0);
    // The waiter looks at the lock at least every 5 s without a notice; with one, at once.
    assert!(
        released.elapsed() < Duration::from_secs(4),
        "the waiter took {:?} after the release",
        released.elapsed()
    );
}

/// The fencing test: acquisitions across 5 masters by contending clients while a
/// random minority is stopped (a partition), or killed and restarted (AOF, fsync always):
/// fences strictly increase in the order the lock was held, and no two holders overlap.
#[test]
fn fences_rise_across_a_quorum_while_a_minority_fails() {
    let total: u64 = 300;
    let masters = Arc::new(Mutex::new(Masters::start_with(
        5,
        &["--appendonly", "yes", "--appendfsync", "always"],
    )));
    let urls = masters.lock().unwrap().urls();
    let done = Arc::new(AtomicBool::new(false));
    let faults = Arc::new(AtomicU64::new(0));
    let nemesis = {
        let (masters, done, faults) =
            (Arc::clone(&masters), Arc::clone(&done), Arc::clone(&faults));
        std::thread::spawn(move || {
            let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let pick = |value: u64, below: u64| usize::try_from(value % below).unwrap();
            while !done.load(Ordering::SeqCst) {
                // A minority: one or two masters at a time.
                let first = pick(next(), 5);
                let mut chosen = vec![first];
                if next() % 2 == 0 {
                    chosen.push((first + 1 + pick(next(), 4)) % 5);
                }
                let restart = next() % 3 == 0;
                {
                    let mut masters = masters.lock().unwrap();
                    for &index in &chosen {
                        if restart {
                            masters.servers[index].restart();
                        } else {
                            send_signal(masters.servers[index].pid(), "STOP");
                        }
                        faults.fetch_add(1, Ordering::SeqCst);
                    }
                }
                // How long the fault lasts: the fault itself, not a wait for anything.
                std::thread::sleep(Duration::from_millis(200 + next() % 400));
                if !restart {
                    let masters = masters.lock().unwrap();
                    for &index in &chosen {
                        send_signal(masters.servers[index].pid(), "CONT");
                    }
                }
                // The pause between faults.
                std::thread::sleep(Duration::from_millis(100 + next() % 200));
            }
        })
    };
    // (held now, last fence, overlaps, stale fences)
    let state = Arc::new(Mutex::new((false, 0u64, 0u32, 0u32)));
    let taken = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let (state, taken, urls) = (Arc::clone(&state), Arc::clone(&taken), urls.clone());
            std::thread::spawn(move || {
                while taken.fetch_add(1, Ordering::SeqCst) < total {
                    let out = Redlock::new(&[
                        "--command-timeout",
                        "200ms",
                        "--connect-timeout",
                        "200ms",
                        "acquire",
                        "--key",
                        "fenced",
                        "--ttl",
                        "5s",
                        "--wait",
                        "60s",
                        "--json",
                    ])
                    .env("REDLOCK_URL", &urls)
                    .run();
                    out.code(0);
                    let acquired = out.json();
                    let fence = acquired["fence"].as_u64().unwrap();
                    let token = acquired["token"].as_str().unwrap().to_owned();
                    {
                        let mut state = state.lock().unwrap();
                        if state.0 {
                            state.2 += 1;
                        }
                        if fence <= state.1 {
                            eprintln!("stale fence {fence} after {}", state.1);
                            state.3 += 1;
                        }
                        state.0 = true;
                        state.1 = fence;
                    }
                    // The hold itself: another holder meanwhile is an overlap.
                    std::thread::sleep(Duration::from_millis(5));
                    state.lock().unwrap().0 = false;
                    let released = Redlock::new(&[
                        "--command-timeout",
                        "200ms",
                        "--connect-timeout",
                        "200ms",
                        "release",
                        "--key",
                        "fenced",
                        "--token",
                        &token,
                    ])
                    .env("REDLOCK_URL", &urls)
                    .run();
                    // Unavailable only leaves it to expire: the next holder waits longer.
                    if released.status.code() != Some(0) {
                        released.code(69);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    nemesis.join().unwrap();
    let (_, _, overlaps, stale) = *state.lock().unwrap();
    eprintln!(
        "{total} acquisitions across 5 masters, {} faults: {overlaps} overlaps, {stale} stale fences",
        faults.load(Ordering::SeqCst)
    );
    assert_eq!((overlaps, stale), (0, 0));
    assert!(faults.load(Ordering::SeqCst) > 0);
}

/// The README's minimal ACL, without the Pub/Sub permissions: releases still work (the notice
/// is best effort) and a waiter still gets the lock, looking every second instead; `doctor`
/// warns of it on every master.
#[test]
fn the_minimal_acl_suffices_without_pubsub() {
    let masters = Masters::start(3);
    let mut urls = Vec::new();
    for server in &masters.servers {
        let mut args = vec!["ACL", "SETUSER", "locker", "on", ">pw"];
        args.extend(crate::bad_input::MINIMAL_ACL.split_whitespace());
        server.cmd::<()>(&args);
        urls.push(format!("redis://locker:pw@127.0.0.1:{}", server.port));
    }
    let urls = urls.join(" ");
    let holder = Redlock::new(&["acquire", "--key", "acl", "--ttl", "30s"])
        .env("REDLOCK_URL", &urls)
        .run();
    holder.code(0);
    let token = holder.stdout.trim().to_owned();
    let rounds_before = masters.servers[0].calls(&["evalsha", "eval"]);
    let waiter = Redlock::new(&["run", "--key", "acl", "--wait", "30s", "--", "true"])
        .env("REDLOCK_URL", &urls)
        .spawn();
    // Released once the waiter found the lock busy (its first round ran).
    assert!(
        wait_until(Duration::from_secs(10), || masters.servers[0]
            .calls(&["evalsha", "eval"])
            > rounds_before),
        "the waiter never asked"
    );
    Redlock::new(&["release", "--key", "acl", "--token", &token])
        .env("REDLOCK_URL", &urls)
        .run()
        .code(0);
    waiter.wait(Duration::from_secs(20)).code(0);
    assert!(masters.lock_keys().iter().all(Vec::is_empty));

    // The doctor says so for each master, as a warning; granted, the notices are fine.
    let notices = |out: &crate::util::Output| -> Vec<String> {
        out.stdout
            .lines()
            .filter(|line| line.split_whitespace().nth(1) == Some("notices"))
            .map(str::to_owned)
            .collect()
    };
    // (Exit 3: the minimal user may not read INFO, so the memory policy and the rest are
    // unknown, which is no all-clear.)
    let out = Redlock::new(&["doctor"]).env("REDLOCK_URL", &urls).run();
    out.code(3);
    let lines = notices(&out);
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    for line in &lines {
        assert!(
            line.starts_with("warning ") && line.contains("publish, subscribe"),
            "{line}"
        );
    }
    for server in &masters.servers {
        server.cmd::<()>(&[
            "ACL",
            "SETUSER",
            "locker",
            "+publish",
            "+subscribe",
            "&redlock:*",
        ]);
    }
    let out = Redlock::new(&["doctor"]).env("REDLOCK_URL", &urls).run();
    out.code(3);
    let lines = notices(&out);
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(
        lines.iter().all(|line| line.starts_with("ok ")),
        "{lines:?}"
    );
}

/// `doctor` in quorum mode: one JSON document, each finding naming its master; a master down
/// is a finding (a quorum works without it), fewer than a majority an error; one server named
/// twice in ways the URLs cannot tell apart (a TCP port and its socket) is unsafe. Repro: three
/// arrays one after another, none naming its master; exit 69 halfway through at one master
/// down; the same server twice reported as fine.
#[test]
fn doctor_reads_every_master_into_one_report() {
    let socket_dir = TempDir::new("socket");
    let socket = socket_dir.path().join("redis.sock");
    let socket = socket.to_str().unwrap();
    let mut shared = RedisServer::start_with(&["--unixsocket", socket]);
    let mut other = RedisServer::start();
    let third = RedisServer::start();
    let same_twice = format!("{} unix://{socket} {}", shared.url(), other.url());
    let out = Redlock::new(&["doctor"])
        .env("REDLOCK_URL", &same_twice)
        .run();
    out.code(1).stdout_contains(&format!(
        "UNSAFE   independent  the same server as master {}",
        shared.url()
    ));

    let urls = format!("{} {} {}", shared.url(), other.url(), third.url());
    other.kill();
    let out = Redlock::new(&["doctor", "--json"])
        .env("REDLOCK_URL", &urls)
        .run();
    let findings = out.json();
    let findings = findings.as_array().unwrap();
    assert!(
        findings.iter().all(|finding| finding["master"].is_string()),
        "{findings:#?}"
    );
    let down: Vec<_> = findings
        .iter()
        .filter(|finding| finding["check"] == "reachable")
        .collect();
    assert_eq!(down.len(), 1, "{findings:#?}");
    assert_eq!(down[0]["master"], other.url());
    assert_eq!(down[0]["verdict"], "warning");
    shared.kill();
    Redlock::new(&["doctor"])
        .env("REDLOCK_URL", &urls)
        .run()
        .code(69)
        .one_line_error("only 1 of 3 masters answered");
}

/// Script calls (refused ones included) and connections `server` receives while `during`
/// runs, less the one connection this takes to read them.
fn requests_during(server: &RedisServer, during: impl FnOnce()) -> (u64, u64) {
    let scripts = server.calls(&["evalsha", "eval"]);
    let connections = server.stat("total_connections_received");
    during();
    let connections = server.stat("total_connections_received") - connections - 1;
    (server.calls(&["evalsha", "eval"]) - scripts, connections)
}

/// A master that answers SUBSCRIBE with an error (renamed
/// away, as some hardened servers do) gets its release listener back at most once a second,
/// and the waiter, without notices from it, makes a round a second. It used to be 1 s apart
/// too: this pins it (without the pause, a listener reconnects thousands of times in 3 s).
#[test]
fn a_waiter_whose_subscription_is_refused_listens_and_looks_gently() {
    let masters = Masters {
        servers: vec![
            RedisServer::start_with(&["--rename-command", "SUBSCRIBE", ""]),
            RedisServer::start(),
            RedisServer::start(),
        ],
    };
    let holder = masters
        .redlock(&["acquire", "--key", "q", "--ttl", "30s"])
        .run();
    holder.code(0);
    let token = holder.stdout.trim().to_owned();
    let mut waiter = None;
    let (scripts, connections) = requests_during(&masters.servers[0], || {
        waiter = Some(
            masters
                .redlock(&["acquire", "--key", "q", "--ttl", "10s", "--wait", "30s"])
                .spawn(),
        );
        // The window the rates below are counted over (not a wait for something to happen).
        std::thread::sleep(Duration::from_secs(3));
    });
    // A listener's connection a second, and one kept for the rounds: a round at once, one
    // 100 ms later, then one a second.
    assert!(connections <= 6, "{connections} connections in 3 s");
    assert!(scripts <= 7, "{scripts} script calls in 3 s");
    masters
        .redlock(&["release", "--key", "q", "--token", &token])
        .run()
        .code(0);
    let out = waiter.unwrap().wait(Duration::from_secs(10));
    out.code(0);
}

/// A waiter whose rounds a majority of masters answers
/// with an error (NOREPLICAS) tries again after a pause that doubles from 200 ms to 2 s (a
/// round is the acquire script on every master and the give-back on each): about 5 rounds
/// in 3 s, where retrying at once would make thousands.
#[test]
fn a_waiter_whose_rounds_are_refused_tries_again_gently() {
    let masters = Masters::start(3);
    for server in &masters.servers[..2] {
        server.cmd::<()>(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    }
    let mut waiter = None;
    let mut refused = (0, 0);
    let granting = requests_during(&masters.servers[2], || {
        refused = requests_during(&masters.servers[0], || {
            waiter = Some(
                masters
                    .redlock(&["acquire", "--key", "q", "--ttl", "10s", "--wait", "30s"])
                    .spawn(),
            );
            // The window the requests are counted over.
            std::thread::sleep(Duration::from_secs(3));
        });
    });
    for server in &masters.servers[..2] {
        server.cmd::<()>(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    }
    // At most 5 rounds in 3 s, two script calls each on every master (on a refusing one, each
    // on a fresh connection), and the first call of each script twice (NOSCRIPT, then whole):
    // 12 at most.
    let (scripts, connections) = refused;
    assert!(
        scripts <= 14,
        "{scripts} script calls in 3 s on a refusing master"
    );
    assert!(
        connections <= 14,
        "{connections} connections in 3 s to a refusing master"
    );
    let (scripts, _) = granting;
    assert!(
        scripts <= 14,
        "{scripts} script calls in 3 s on the granting master"
    );
    let out = waiter.unwrap().wait(Duration::from_secs(10));
    out.code(0).stderr_contains("too few replicas");
}

/// Each URL may be any kind redlock supports: here a quorum mixing TLS and plain masters.
#[test]
fn a_quorum_mixes_tls_and_plain_masters() {
    let pki = crate::util::pki::Pki::generate();
    let (tls_a, port_a) = RedisServer::start_tls(&pki, "server", "no");
    let (tls_b, port_b) = RedisServer::start_tls(&pki, "server", "no");
    let plain = RedisServer::start();
    let ca = pki.cert("ca");
    let urls = format!(
        "rediss://127.0.0.1:{port_a} rediss://127.0.0.1:{port_b} {}",
        plain.url()
    );
    Redlock::new(&["run", "--key", "mixed", "--ttl", "2s", "--", "true"])
        .env("REDLOCK_URL", &urls)
        .env("REDLOCK_TLS_CA", ca.to_str().unwrap())
        .run()
        .code(0);
    for server in [&tls_a, &tls_b, &plain] {
        assert_eq!(server.keys_but_history(), ["redlock:{mixed}:fence"]);
    }
}

/// Many clients start at the same instant on a free lock: their first rounds split the vote
/// (each master grants a different one), every round is given back, and the random pauses
/// that double per failed round settle it: all of them get the lock, one at a time.
#[test]
fn waiters_that_split_the_vote_settle_in_bounded_time() {
    let masters = Masters::start(5);
    let start = Arc::new(std::sync::Barrier::new(8));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (start, urls) = (Arc::clone(&start), masters.urls());
            std::thread::spawn(move || {
                start.wait();
                let out = Redlock::new(&[
                    "run", "--key", "split", "--ttl", "3s", "--wait", "60s", "--", "sleep", "0.02",
                ])
                .env("REDLOCK_URL", &urls)
                .run();
                out.code(0);
                out.elapsed
            })
        })
        .collect();
    let slowest = clients
        .into_iter()
        .map(|client| client.join().unwrap())
        .max()
        .unwrap();
    assert!(slowest < Duration::from_secs(30), "took {slowest:?}");
    assert!(masters.lock_keys().iter().all(Vec::is_empty));
}

/// `acquire --keep-alive` in quorum mode: the keeper (started with the same URLs) renews on
/// every master until the lock is released, then ends.
#[test]
fn a_kept_lock_is_renewed_on_every_master() {
    use crate::util::{alive, wait_until};
    let masters = Masters::start(3);
    let out = masters
        .redlock(&[
            "acquire",
            "--key",
            "kept",
            "--ttl",
            "1s",
            "--keep-alive",
            "--json",
        ])
        .run();
    out.code(0);
    let json = out.json();
    let token = json["token"].as_str().unwrap().to_owned();
    let keeper = u32::try_from(json["keeper_pid"].as_u64().unwrap()).unwrap();
    // Longer than the 1 s lease twice over: held still only if the keeper renewed it.
    std::thread::sleep(Duration::from_millis(2500));
    for index in 0..3 {
        assert_eq!(
            masters.holders_on(index, "kept"),
            1,
            "not renewed on master {index}"
        );
    }
    masters
        .redlock(&["release", "--key", "kept", "--token", &token])
        .run()
        .code(0);
    assert!(
        wait_until(Duration::from_secs(3), || !alive(keeper)),
        "the keeper outlived the release"
    );
}

/// Passwords in any of the URLs never reach the command's environment, the output or errors.
#[test]
fn passwords_in_quorum_urls_stay_secret() {
    let open = RedisServer::start();
    let guarded: Vec<RedisServer> = (0..2)
        .map(|_| RedisServer::start_with(&["--requirepass", "s3cret-pw"]))
        .collect();
    let urls = format!(
        "{} redis://:s3cret-pw@127.0.0.1:{} redis://:s3cret-pw@127.0.0.1:{}",
        open.url(),
        guarded[0].port,
        guarded[1].port
    );
    let out = Redlock::new(&["-v", "run", "--key", "secret", "--", "env"])
        .env("REDLOCK_URL", &urls)
        .run();
    out.code(0);
    assert!(
        !out.stdout.contains("s3cret"),
        "the child saw it:\n{}",
        out.stdout
    );
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    assert!(out.stdout.contains("REDLOCK_FENCE="));
    let inspected = Redlock::new(&["inspect", "--key", "secret", "--json"])
        .env("REDLOCK_URL", &urls)
        .run();
    assert!(!inspected.stdout.contains("s3cret"), "{}", inspected.stdout);
    // An error that names a master shows its URL redacted.
    let wrong = urls.replace("s3cret-pw", "wrong-pw");
    let failed = Redlock::new(&["acquire", "--key", "secret", "--ttl", "5s"])
        .env("REDLOCK_URL", &wrong)
        .run();
    // A refused password outranks the master that answered: 77, not 69 (no retrying it).
    failed.code(77).one_line_error("authentication failed");
    assert!(!failed.stderr.contains("wrong-pw"), "{}", failed.stderr);
}

/// Repro: with one of three masters stopped, `run -- true` took 4.4-5.4 s and warned
/// "could not release lock ... it expires by itself" although a majority had released it. The
/// final release returns once a majority answered.
#[test]
fn the_final_release_returns_once_a_majority_answered() {
    let masters = Masters::start(3);
    send_signal(masters.servers[2].pid(), "STOP");
    let out = masters
        .redlock(&["run", "--key", "k", "--ttl", "5s", "--", "true"])
        .run();
    send_signal(masters.servers[2].pid(), "CONT");
    out.code(0);
    if out.stderr.contains("could not release") {
        out.fail("a majority released the lock");
    }
    // Two acquisition rounds wait for the stopped master (0.5 s each at --ttl 5s); the release
    // does not.
    if out.elapsed > Duration::from_millis(2_500) {
        out.fail("the release should not wait for the stopped master");
    }
    assert_eq!(masters.holders_on(0, "k") + masters.holders_on(1, "k"), 0);
}

/// Masters whose fence counters agree issue the same next fence (a fence's clock part is taken
/// to a tenth of a second when there is a counter), so an acquisition needs no second round to
/// write its fence back. After a first `run` (new counters, each from its own master's clock,
/// written back), 6 acquisitions and releases make 12 script calls on each master; writing each
/// fence back would make 18. One more is allowed for a tenth of a second that began between the
/// masters' scripts.
#[test]
fn masters_in_step_issue_one_fence_without_writing_it_back() {
    let masters = Masters::start(3);
    masters
        .redlock(&["run", "--key", "step", "--", "true"])
        .run()
        .code(0);
    let scripts = |server: &RedisServer| server.calls(&["evalsha", "eval"]);
    let before: Vec<u64> = masters.servers.iter().map(scripts).collect();
    let mut fences = Vec::new();
    for _ in 0..6 {
        let out = masters
            .redlock(&["acquire", "--key", "step", "--ttl", "30s", "--json"])
            .run();
        out.code(0);
        let acquired = out.json();
        fences.push(acquired["fence"].as_u64().unwrap());
        masters
            .redlock(&[
                "release",
                "--key",
                "step",
                "--token",
                acquired["token"].as_str().unwrap(),
            ])
            .run()
            .code(0);
    }
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "{fences:?}"
    );
    for (index, server) in masters.servers.iter().enumerate() {
        let calls = scripts(server) - before[index];
        assert!(
            calls <= 13,
            "master {index}: {calls} script calls for 6 acquisitions and releases"
        );
    }
}

/// More of what `list`, `metrics` and `inspect` make of masters that disagree (see
/// `list_metrics_and_inspect_show_each_lock_as_a_majority_has_it`), from a review.
mod majority_view {
    use super::Masters;
    use crate::util::{RedisServer, Redlock};

    /// The URL of a server that is gone: a master that does not answer.
    fn dead_url() -> String {
        let mut server = RedisServer::start();
        let url = server.url();
        server.kill();
        url
    }

    /// The value of the first sample of `metrics` that starts with `line`.
    fn sample(metrics: &str, line: &str) -> String {
        metrics
            .lines()
            .find(|sample| sample.starts_with(line))
            .unwrap_or_else(|| panic!("no {line}:\n{metrics}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_owned()
    }

    /// A lock taken on every master, its token.
    fn take(masters: &Masters, key: &str) -> String {
        let out = masters
            .redlock(&["acquire", "--key", key, "--ttl", "60s", "--json"])
            .run();
        out.code(0);
        out.json()["token"].as_str().unwrap().to_owned()
    }

    /// Rewrites the holder record of `token` on every master through `change`.
    fn change_records(
        masters: &Masters,
        key: &str,
        token: &str,
        change: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
    ) {
        let holders = format!("redlock:{{{key}}}:holders");
        for server in &masters.servers {
            let record: String = server.cmd(&["HGET", &holders, token]);
            let mut record: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&record).unwrap();
            change(&mut record);
            let record = serde_json::Value::Object(record).to_string();
            let _: () = server.cmd(&["HSET", &holders, token, &record]);
        }
    }

    /// Two failed acquisitions, each on one master, given back under one fence: neither is the
    /// last run, however many masters gave that fence.
    #[test]
    fn acquisitions_given_back_are_not_the_last_run() {
        let masters = Masters::start(3);
        let (first_dead, second_dead) = (dead_url(), dead_url());
        masters
            .redlock(&["run", "--key", "j", "--", "true"])
            .run()
            .code(0);
        for server in &masters.servers[..2] {
            let _: () = server.cmd(&["SET", "redlock:{j}:fence", "9000000000000000"]);
            Redlock::new(&["acquire", "--key", "j", "--ttl", "60s"])
                .env(
                    "REDLOCK_URL",
                    &format!("{} {first_dead} {second_dead}", server.url()),
                )
                .run()
                .code(69);
        }
        let metrics = masters.redlock(&["metrics"]).run();
        metrics.code(0);
        assert_eq!(
            sample(&metrics.stdout, "redlock_lock_last_exit_status{key=\"j\"}"),
            "0"
        );
    }

    /// A record with a field named as the token's digest (anyone may add fields): still the
    /// same holder on every master. Repro: its digest was read from the record, twice.
    #[test]
    fn a_record_with_a_tid_field_is_still_a_holder() {
        let masters = Masters::start(3);
        let token = take(&masters, "u");
        change_records(&masters, "u", &token, |record| {
            record.insert("tid".into(), "x".into());
        });
        held_by_one(&masters, "u");
        masters.servers[0]
            .redlock(&["inspect", "--key", "u"])
            .run()
            .code(0)
            .stdout_contains("acquire");
    }

    /// A record this version cannot read (pid -1) on every master: held, records unshown, not
    /// free or contested.
    #[test]
    fn an_unreadable_record_on_every_master_is_still_held() {
        let masters = Masters::start(3);
        let token = take(&masters, "p");
        change_records(&masters, "p", &token, |record| {
            record.insert("pid".into(), serde_json::json!(-1));
        });
        held_by_one(&masters, "p");
    }

    /// `list` shows `key` held on every master, `metrics` by one holder.
    fn held_by_one(masters: &Masters, key: &str) {
        let table = masters.redlock(&["list"]).run();
        table.code(0);
        let line = table.stdout.lines().find(|line| line.starts_with(key));
        assert!(
            line.is_some_and(|line| line.contains("3/3") && !line.contains("not held")),
            "{}",
            table.stdout
        );
        let metrics = masters.redlock(&["metrics"]).run();
        let holders = format!("redlock_lock_holders{{key=\"{key}\"}}");
        assert_eq!(sample(&metrics.stdout, &holders), "1");
    }

    /// The token's digest tells acquisitions apart and is shown nowhere.
    #[test]
    fn the_token_digest_is_not_shown() {
        let masters = Masters::start(3);
        take(&masters, "d");
        for args in [
            &["inspect", "--key", "d", "--json"][..],
            &["inspect", "--key", "d"],
            &["list", "--json"],
            &["metrics"],
        ] {
            let out = masters.redlock(args).run();
            assert!(!out.stdout.contains("tid"), "{args:?}: {}", out.stdout);
        }
        let out = masters.servers[0]
            .redlock(&["inspect", "--key", "d", "--json"])
            .run();
        assert!(!out.stdout.contains("tid"), "{}", out.stdout);
    }

    /// MASTERS is where the majority's holder holds the lock, not where anyone does: a
    /// leftover on the third master does not count.
    #[test]
    fn masters_counts_where_the_majoritys_holder_holds() {
        let masters = Masters::start(3);
        let urls = format!(
            "{} {} {}",
            masters.servers[0].url(),
            masters.servers[1].url(),
            dead_url()
        );
        Redlock::new(&["acquire", "--key", "h", "--ttl", "60s"])
            .env("REDLOCK_URL", &urls)
            .run()
            .code(0);
        masters.servers[2]
            .redlock(&["acquire", "--key", "h", "--ttl", "60s"])
            .run()
            .code(0);
        let table = masters.redlock(&["list"]).run();
        let line = table
            .stdout
            .lines()
            .find(|line| line.starts_with('h'))
            .unwrap();
        assert!(line.contains("2/3"), "{}", table.stdout);
        assert!(!line.contains("not held by a majority"), "{}", table.stdout);
    }
}
