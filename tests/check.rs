//! "Did it run anywhere?": `check` answers from a lock's history (a success within the window,
//! a hold in progress, one held too long, none at all) with its own exit statuses, as lines,
//! JSON or one monitoring-plugin line; `metrics` exposes every lock with a holder or a history
//! in the Prometheus text format (checked by promtool); and the history is fit to be their
//! source: its retention is set per lock and kept by every writer.

use std::time::Duration;

use crate::util::{RedisServer, TempDir, free_port, wait_until};

/// `check KEY --succeeded-within WINDOW` with `extra` arguments.
fn check(server: &RedisServer, key: &str, window: &str, extra: &[&str]) -> crate::util::Output {
    server
        .redlock(&["check", key, "--succeeded-within", window])
        .args(extra)
        .run()
}

/// A `run` of `job` whose command exits with `code`.
fn run_exiting(server: &RedisServer, key: &str, code: i32) {
    server
        .redlock(&["run", "--key", key, "--", "sh", "-c"])
        .arg(format!("exit {code}"))
        .run()
        .code(code);
}

/// A `run` of `key` that holds it until `gate` exists (at most 20 s), started once it holds it.
fn hold_until(server: &RedisServer, key: &str, gate: &std::path::Path) -> crate::util::Running {
    let started = gate.with_extension("started");
    let running = server
        .redlock(&["run", "--key", key, "--ttl", "3s", "--", "sh", "-c"])
        .arg(format!(
            "touch {started}; i=0; while [ ! -e {gate} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done",
            started = started.display(),
            gate = gate.display()
        ))
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || started.exists()));
    running
}

#[test]
fn check_tells_each_reason_a_job_did_not_succeed_apart() {
    let server = RedisServer::start();
    // Never taken: no history (83).
    check(&server, "job", "1h", &[])
        .code(83)
        .stdout_contains("job: NO HISTORY");
    // It ran and failed: stale (80), naming how the latest ended.
    run_exiting(&server, "job", 3);
    check(&server, "job", "1h", &[])
        .code(80)
        .stdout_contains("job: STALE: no success in its history (1 hold since ")
        .stdout_contains("latest: exit 3 on ");
    // It succeeded: OK, and the line says when and where.
    run_exiting(&server, "job", 0);
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    check(&server, "job", "1h", &[])
        .code(0)
        .stdout_contains("job: OK: last success ")
        .stdout_contains(&format!(" ago on {host} (took "));
    // The success grows older than the window: stale again, with its age and the latest runs.
    std::thread::sleep(Duration::from_millis(1100));
    run_exiting(&server, "job", 4);
    check(&server, "job", "1s", &[])
        .code(80)
        .stdout_contains("last success ")
        .stdout_contains(", none within 1.0s; latest: exit 4 on ");
    // In progress now, and no success within the window: running (81), and since when.
    let dir = TempDir::new("check-running");
    let gate = dir.path().join("gate");
    let running = hold_until(&server, "job", &gate);
    check(&server, "job", "1s", &[])
        .code(81)
        .stdout_contains("job: RUNNING: held by ")
        .stdout_contains(" since ");
    // Held longer than --max-held: that outranks everything (82), even a fresh success.
    std::thread::sleep(Duration::from_millis(600));
    check(&server, "job", "1h", &["--max-held", "500ms"])
        .code(82)
        .stdout_contains("job: HELD TOO LONG: held by ")
        .stdout_contains("longer than --max-held 500ms");
    server
        .redlock(&["check", "job", "--max-held", "1h"])
        .run()
        .code(0)
        .stdout_contains("nothing held longer than 1h");
    std::fs::write(&gate, "").unwrap();
    running.wait(Duration::from_secs(10)).code(0);
    check(&server, "job", "1s", &[]).code(0);
}

#[test]
fn several_locks_at_once_as_lines_json_and_a_plugin_line() {
    let server = RedisServer::start();
    run_exiting(&server, "ok", 0);
    run_exiting(&server, "failed", 1);
    let both = ["check", "ok", "--key", "failed", "--succeeded-within", "1h"];
    // The worst decides; -q leaves out the locks that are OK.
    let out = server.redlock(&both).run();
    out.code(80);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    let quiet = server.redlock(&both).arg("-q").run();
    quiet.code(80);
    assert!(
        quiet.stdout.starts_with("failed: STALE") && quiet.stdout.lines().count() == 1,
        "{}",
        quiet.stdout
    );
    server
        .redlock(&["check", "ok", "never", "--succeeded-within", "1h", "-q"])
        .run()
        .code(83);

    let json = server.redlock(&both).arg("--json").run();
    json.code(80);
    let json = json.json();
    assert_eq!(json[0]["key"], "ok");
    assert_eq!(json[0]["status"], "ok");
    assert_eq!(json[0]["last_success"]["exit"], 0);
    assert!(json[0]["last_success_age_ms"].as_u64().unwrap() < 60_000);
    assert_eq!(json[0]["succeeded_within_ms"], 3_600_000);
    assert_eq!(json[1]["status"], "stale");
    assert_eq!(json[1]["last_success"], serde_json::Value::Null);
    assert_eq!(json[1]["latest"][0]["exit"], 1);

    // The plugin line: one line, STATE, text, performance data; the plugin's exit codes.
    let plugin = server.redlock(&both).arg("--nagios").run();
    plugin.code(2);
    let line = plugin.stdout.trim_end();
    assert_eq!(plugin.stdout.lines().count(), 1, "{}", plugin.stdout);
    let (text, perf) = line.split_once(" | ").expect("performance data");
    assert!(text.starts_with("REDLOCK CRITICAL - ok: OK: "), "{line}");
    assert!(text.contains("; failed: STALE: "), "{line}");
    // Quoted labels (they may hold spaces), each value's unit, and the window as critical.
    let perf: Vec<&str> = perf.split(";0; ").collect();
    assert_eq!(perf.len(), 4, "{perf:?}");
    assert!(perf[0].starts_with("'ok success_age'=") && perf[0].ends_with("s;;3600"));
    assert_eq!(perf[1], "'ok held'=0s;;");
    assert_eq!(perf[2], "'failed success_age'=U;;3600");
    assert_eq!(perf[3], "'failed held'=0s;;;0;");
    let ok = server
        .redlock(&["check", "ok", "--succeeded-within", "1h", "--nagios"])
        .run();
    ok.code(0);
    assert!(
        ok.stdout.starts_with("REDLOCK OK - ok: OK: "),
        "{}",
        ok.stdout
    );
    let dir = TempDir::new("check-plugin");
    let gate = dir.path().join("gate");
    let running = hold_until(&server, "failed", &gate);
    let warning = server
        .redlock(&["check", "failed", "--succeeded-within", "1h", "--nagios"])
        .run();
    warning.code(1);
    assert!(
        warning
            .stdout
            .starts_with("REDLOCK WARNING - failed: RUNNING: "),
        "{}",
        warning.stdout
    );
    std::fs::write(&gate, "").unwrap();
    running.wait(Duration::from_secs(10)).code(0);
    // An error is UNKNOWN (3), on stdout where the monitoring reads it, whatever failed: Redis
    // unreachable, or a URL that does not parse.
    let closed = format!("redis://127.0.0.1:{}", free_port());
    let unknown = crate::util::Redlock::new(&[
        "check",
        "ok",
        "--succeeded-within",
        "1h",
        "--nagios",
        "--redis",
        &closed,
    ])
    .run();
    unknown.code(3);
    assert!(
        unknown.stdout.starts_with("REDLOCK UNKNOWN - ") && unknown.stdout.lines().count() == 1,
        "{}",
        unknown.stdout
    );
    crate::util::Redlock::new(&[
        "check",
        "ok",
        "--succeeded-within",
        "1h",
        "--nagios",
        "--redis",
        "nope://x",
    ])
    .run()
    .code(3)
    .stdout_contains("REDLOCK UNKNOWN - ");
}

#[test]
fn check_refuses_bad_input_before_reaching_redis() {
    let server = RedisServer::start();
    for args in [
        &["check", "job"][..],
        &["check", "--succeeded-within", "1h"],
        &["check", "job", "--succeeded-within", "0"],
        &["check", "job", "--succeeded-within", "367d"],
        &["check", "a\u{1b}b", "--succeeded-within", "1h"],
    ] {
        server.redlock(args).run().code(64);
    }
    assert!(server.keys().is_empty());
}

/// With --nagios, a command line that does not parse (a typo in a service definition) is the
/// plugin convention's UNKNOWN: exit 3 and the one line the monitoring system shows (only that,
/// as for the plugin's other UNKNOWNs). Nothing reaches Redis.
#[test]
fn check_nagios_with_a_bad_command_line_is_unknown() {
    let server = RedisServer::start();
    for args in [
        &["check", "job", "--succeeded-within", "1hh", "--nagios"][..],
        &["check", "job", "--nagios"],
        &[
            "--quiet",
            "check",
            "--nagios",
            "job",
            "--succeeded-within",
            "0",
        ],
        &[
            "check",
            "job",
            "--succeeded-within",
            "1h",
            "--json",
            "--nagios",
        ],
    ] {
        let out = server.redlock(args).run();
        out.code(3);
        let line = out.stdout.trim_end();
        if !line.starts_with("REDLOCK UNKNOWN - ")
            || line.contains('\n')
            || !line.ends_with("; see 'redlock check --help'")
        {
            out.fail("expected one plugin line 'REDLOCK UNKNOWN - ...' on stdout");
        }
        if !out.stderr.is_empty() {
            out.fail("expected only the plugin line, nothing on stderr");
        }
    }
    // Not a plugin: the usual usage error; nor is another command with those words.
    for args in [
        &["check", "job", "--succeeded-within", "1hh"][..],
        &["inspect", "check", "--nagios"],
        &["run", "--key", "check", "--nagios", "--", "true"],
    ] {
        let out = server.redlock(args).run();
        out.code(64);
        if !out.stdout.is_empty() {
            out.fail("expected nothing on stdout");
        }
    }
    assert!(server.keys().is_empty());
}

/// The history's retention: a hold asks for it, it is stored with the lock, and every later
/// writer keeps to it (until the history expires), waiters handed the lock included.
#[test]
fn the_history_keeps_what_the_lock_asked_for() {
    let server = RedisServer::start();
    const HISTORY: &str = "redlock:{job}:history";
    server
        .redlock(&[
            "run",
            "--key",
            "job",
            "--history",
            "3",
            "--history-ttl",
            "2m",
            "--",
            "true",
        ])
        .run()
        .code(0);
    let pttl: i64 = server.cmd(&["PTTL", HISTORY]);
    assert!(pttl > 100_000 && pttl <= 120_000, "{pttl}");
    // Later holds that ask nothing keep the lock's retention: the count and the expiry.
    for _ in 0..5 {
        run_exiting(&server, "job", 0);
    }
    let token = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run();
    token.code(0);
    server
        .redlock(&["extend", "--key", "job", "--ttl", "30s", "--token"])
        .arg(token.stdout.trim())
        .run()
        .code(0);
    server
        .redlock(&["release", "--key", "job", "--force"])
        .run()
        .code(0);
    assert_eq!(server.cmd::<i64>(&["ZCARD", HISTORY]), 3);
    let pttl: i64 = server.cmd(&["PTTL", HISTORY]);
    assert!(pttl > 100_000 && pttl <= 120_000, "{pttl}");
    let shown = server
        .redlock(&["history", "--key", "job", "--json"])
        .run()
        .json();
    assert_eq!(shown.as_array().unwrap().len(), 3);
    assert_eq!(shown[0]["outcome"], "forced");

    // More than the default 100, asked by a waiter that was handed the lock.
    let holder = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run();
    holder.code(0);
    let waiter = server
        .redlock(&[
            "run",
            "--key",
            "job",
            "--wait",
            "20s",
            "--history",
            "120",
            "--",
            "true",
        ])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || {
        server.cmd::<i64>(&["ZCARD", "redlock:{job}:queue"]) == 1
    }));
    server
        .redlock(&["release", "--key", "job", "--token"])
        .arg(holder.stdout.trim())
        .run()
        .code(0);
    waiter.wait(Duration::from_secs(20)).code(0);
    for _ in 0..120 {
        run_exiting(&server, "job", 0);
    }
    assert_eq!(server.cmd::<i64>(&["ZCARD", HISTORY]), 120);
    let shown = server
        .redlock(&["history", "--key", "job", "--json"])
        .run()
        .json();
    assert_eq!(shown.as_array().unwrap().len(), 120);
    // The expiry asked for earlier stays: nobody asked for another.
    let pttl: i64 = server.cmd(&["PTTL", HISTORY]);
    assert!(pttl > 100_000 && pttl <= 120_000, "{pttl}");

    // A retention written by hand past the bounds is held to them by every script.
    let forged = r#"{"fence":"1","mode":"exclusive","limit":0,"host":"h","pid":1,"user":"u","cmd":"c","since":1,"exp":2,"ended":2,"outcome":"released","keep":0,"keep_ms":1e13}"#;
    server.cmd::<()>(&["ZADD", "redlock:{forged}:history", "1", forged]);
    run_exiting(&server, "forged", 0);
    run_exiting(&server, "forged", 0);
    assert_eq!(server.cmd::<i64>(&["ZCARD", "redlock:{forged}:history"]), 1);
    let pttl: i64 = server.cmd(&["PTTL", "redlock:{forged}:history"]);
    assert!(pttl > 0 && pttl <= 366 * 24 * 3_600_000, "{pttl}");
    server
        .redlock(&["history", "--key", "forged"])
        .run()
        .code(0)
        .stderr_empty();

    // Out of bounds: refused, nothing changed.
    for args in [
        &["--history", "0"][..],
        &["--history", "1001"],
        &["--history-ttl", "30s"],
        &["--history-ttl", "367d"],
    ] {
        server
            .redlock(&["run", "--key", "bounds"])
            .args(args)
            .args(&["--", "true"])
            .run()
            .code(64);
    }
    assert!(server.keys().iter().all(|key| !key.contains("bounds")));
}

/// `run` records why its command ended when redlock had a hand in it: a signal it passed on,
/// a lock it lost.
#[test]
fn the_history_says_what_stopped_a_run() {
    let server = RedisServer::start();
    let dir = TempDir::new("check-why");
    let gate = dir.path().join("gate");
    let running = hold_until(&server, "job", &gate);
    running.signal("TERM");
    running.wait(Duration::from_secs(10)).code(143);
    let history = server
        .redlock(&["history", "--key", "job", "--json"])
        .run()
        .json();
    assert_eq!(history[0]["signal"], 15, "{history}");
    assert_eq!(history[0]["why"], "SIGTERM passed on to the command");

    let running = hold_until(&server, "lost", &dir.path().join("never"));
    server.cmd::<()>(&["DEL", "redlock:{lost}:holders", "redlock:{lost}:leases"]);
    running.wait(Duration::from_secs(10)).code(125);
    let history = server
        .redlock(&["history", "--key", "lost", "--json"])
        .run()
        .json();
    assert_eq!(history[0]["outcome"], "lost");
    assert_eq!(
        history[0]["why"],
        "stopped: the key was deleted, expired, or taken by another holder"
    );
}

/// `metrics` passes promtool's check, shows the held locks by mode and the free ones with a
/// history, and escapes label values.
#[test]
fn metrics_expose_every_lock_with_a_holder_or_a_history() {
    let server = RedisServer::start();
    let odd = r#"back\slash "quoted""#;
    run_exiting(&server, odd, 0);
    run_exiting(&server, "failed", 2);
    for _ in 0..2 {
        server
            .redlock(&["acquire", "--key", "pool", "--limit", "2", "--ttl", "30s"])
            .run()
            .code(0);
    }
    let token = server
        .redlock(&["acquire", "--key", "held", "--ttl", "30s"])
        .run();
    token.code(0);
    // Nothing but a fence counter: not a lock anyone needs to see.
    server.cmd::<()>(&["SET", "redlock:{bare}:fence", "5"]);

    let out = server.redlock(&["metrics"]).run();
    out.code(0).stderr_empty();
    let text = &out.stdout;
    let checked = promtool(text);
    assert!(checked.status.success(), "promtool: {checked:?}\n{text}");

    let sample = |line: &str| {
        assert!(
            text.lines().any(|have| have == line),
            "no line {line:?} in\n{text}"
        );
    };
    sample(r#"redlock_lock_held{key="held",mode="exclusive"} 1"#);
    sample(r#"redlock_lock_held{key="held",mode="shared"} 0"#);
    sample(r#"redlock_lock_held{key="pool",mode="semaphore"} 1"#);
    sample(r#"redlock_lock_holders{key="pool"} 2"#);
    sample(r#"redlock_lock_held{key="failed",mode="exclusive"} 0"#);
    sample(r#"redlock_lock_last_exit_status{key="failed"} 2"#);
    sample(r#"redlock_lock_last_exit_status{key="back\\slash \"quoted\""} 0"#);
    sample(r#"redlock_lock_waiters{key="held"} 0"#);
    sample(r#"redlock_lock_unreadable{key="held"} 0"#);
    assert!(!text.contains("bare"), "{text}");
    assert!(
        !text.contains(r#"redlock_lock_last_success_timestamp_seconds{key="failed"}"#),
        "{text}"
    );
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    let now = crate::util::wall_ms() as f64 / 1000.0;
    let success =
        value(r#"redlock_lock_last_success_timestamp_seconds{key="back\\slash \"quoted\""}"#);
    assert!((now - success).abs() < 60.0, "{success} vs {now}");
    let lease = value(r#"redlock_lock_lease_remaining_seconds{key="held"}"#);
    assert!(lease > 20.0 && lease <= 30.0, "{lease}");
    for metric in [
        "redlock_lock_unreadable",
        "redlock_lock_held",
        "redlock_lock_holders",
        "redlock_lock_waiters",
        "redlock_lock_held_seconds",
        "redlock_lock_lease_remaining_seconds",
        "redlock_lock_min_hold",
        "redlock_lock_min_hold_remaining_seconds",
        "redlock_lock_fence",
        "redlock_lock_last_exit_status",
        "redlock_lock_last_end_timestamp_seconds",
        "redlock_lock_last_success_timestamp_seconds",
        "redlock_lock_last_success_duration_seconds",
    ] {
        sample(&format!("# TYPE {metric} gauge"));
        assert!(text.contains(&format!("# HELP {metric} ")), "{metric}");
    }
    // No lock at all: HELP and TYPE alone, still valid.
    let empty = RedisServer::start();
    let out = empty.redlock(&["metrics"]).run();
    out.code(0);
    assert!(promtool(&out.stdout).status.success());
}

/// A `--min-hold` remainder is no running job: `redlock_lock_held`, `holders`, `held_seconds`
/// and the lease left describe running holds only, and the minimum hold has series of its own.
/// Repro: after `run --min-hold 1m mh -- true`, metrics said held 1, holders 1 and a growing
/// held_seconds, so the README's `held_seconds > 7200` alert fired for any min-hold over 2 h.
#[test]
fn metrics_count_a_min_hold_apart_from_running_jobs() {
    let server = RedisServer::start();
    server
        .redlock(&["run", "--key", "mh", "--min-hold", "1m", "--", "true"])
        .run()
        .code(0);
    let running = server
        .redlock(&["run", "--key", "busy", "--", "sleep", "30"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || {
        server.cmd::<i64>(&["EXISTS", "redlock:{busy}:holders"]) == 1
    }));
    let out = server.redlock(&["metrics"]).run();
    out.code(0).stderr_empty();
    let text = &out.stdout;
    let checked = promtool(text);
    assert!(checked.status.success(), "promtool: {checked:?}\n{text}");
    let value = |line: &str| -> f64 {
        text.lines()
            .find_map(|have| have.strip_prefix(line))
            .unwrap_or_else(|| panic!("no {line} in\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        value(r#"redlock_lock_held{key="mh",mode="exclusive"}"#),
        0.0
    );
    assert_eq!(value(r#"redlock_lock_holders{key="mh"}"#), 0.0);
    assert_eq!(value(r#"redlock_lock_held_seconds{key="mh"}"#), 0.0);
    assert_eq!(
        value(r#"redlock_lock_lease_remaining_seconds{key="mh"}"#),
        0.0
    );
    assert_eq!(value(r#"redlock_lock_min_hold{key="mh"}"#), 1.0);
    let left = value(r#"redlock_lock_min_hold_remaining_seconds{key="mh"}"#);
    assert!(left > 30.0 && left <= 60.0, "{left}");
    // A running job is what it was.
    assert_eq!(
        value(r#"redlock_lock_held{key="busy",mode="exclusive"}"#),
        1.0
    );
    assert_eq!(value(r#"redlock_lock_holders{key="busy"}"#), 1.0);
    assert_eq!(value(r#"redlock_lock_min_hold{key="busy"}"#), 0.0);
    assert_eq!(
        value(r#"redlock_lock_min_hold_remaining_seconds{key="busy"}"#),
        0.0
    );
    running.signal("TERM");
    running.wait(Duration::from_secs(10)).code(143);
}

/// `promtool check metrics` of `text`, killed after 20 s (Debian's prometheus package; .ci/run installs it).
pub(crate) fn promtool(text: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is needed (apt-get install prometheus; .ci/run does)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    if !wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    }) {
        let _ = child.kill();
    }
    child.wait_with_output().unwrap()
}

/// Found in review: `check` believed end times in the future. A success that "ended" at
/// i64::MAX ms (a record written by hand, or by a server whose clock was far ahead) reported
/// OK, "0ms ago", for ever. A hold whose start or end lies more than a minute after the
/// server's clock is left out, with a warning, by `check` (lines, JSON, plugin line) and by
/// `metrics`; one a few seconds ahead (a clock stepped back a little) still counts.
#[test]
fn a_success_that_ends_in_the_future_is_not_believed() {
    let server = RedisServer::start();
    run_exiting(&server, "job", 3);
    run_exiting(&server, "near", 3);
    let now = server.time_ms();
    let forge = |key: &str, fence: u64, ended: u64| {
        let entry = serde_json::json!({
            "fence": fence.to_string(), "mode": "exclusive", "limit": 0, "host": "forged",
            "pid": 1, "user": "u", "cmd": "c", "since": now - 1000, "exp": now + 30_000,
            "ended": ended, "outcome": "released", "exit": 0,
        });
        let history = format!("redlock:{{{key}}}:history");
        server.cmd::<()>(&["ZADD", &history, &fence.to_string(), &entry.to_string()]);
    };
    forge("job", 100, i64::MAX as u64);
    forge("job", 101, now + 3_600_000);
    forge("near", 100, now + 5_000);

    let out = check(&server, "job", "1h", &[]);
    out.code(80).stdout_contains("job: STALE: ");
    assert_eq!(
        out.stderr.matches("ahead of the server's clock (2").count(),
        2,
        "one warning per hold left out: {}",
        out.stderr
    );
    assert!(!out.stdout.contains("forged"), "{}", out.stdout);
    let json = check(&server, "job", "1h", &["--json"]);
    json.code(80);
    let json = json.json();
    assert_eq!(json[0]["status"], "stale");
    assert_eq!(json[0]["last_success"], serde_json::Value::Null);
    let plugin = check(&server, "job", "1h", &["--nagios"]);
    plugin
        .code(2)
        .stdout_contains("REDLOCK CRITICAL - job: STALE");
    // Five seconds ahead: believed.
    check(&server, "near", "1h", &[])
        .code(0)
        .stdout_contains("near: OK: last success ")
        .stderr_empty();

    // inspect.lua passes over holds ahead of the server's clock: metrics finds no success
    // of `job`, and none to warn of.
    let metrics = server.redlock(&["metrics"]).run();
    metrics.code(0);
    assert!(
        !metrics
            .stdout
            .contains(r#"redlock_lock_last_success_timestamp_seconds{key="job"}"#),
        "{}",
        metrics.stdout
    );
    assert!(
        metrics
            .stdout
            .contains(r#"redlock_lock_last_success_timestamp_seconds{key="near"}"#),
        "{}",
        metrics.stdout
    );
}

/// Found in review: a forged success an hour ahead of the server's clock hid the lock's real
/// last success from `metrics` (inspect.lua took the newest entry). It is passed over, and
/// the real one reported.
#[test]
fn a_success_ahead_of_the_clock_does_not_hide_the_real_one_from_metrics() {
    let server = RedisServer::start();
    run_exiting(&server, "shadowed", 0);
    let entries: Vec<String> = server.cmd(&["ZRANGE", "redlock:{shadowed}:history", "0", "-1"]);
    let real: serde_json::Value = serde_json::from_str(&entries[0]).unwrap();
    let real_end = real["ended"].as_u64().unwrap();
    let now = server.time_ms();
    let entry = serde_json::json!({
        "fence": "9000000000000000", "mode": "exclusive", "limit": 0, "host": "forged", "pid": 1,
        "user": "u", "cmd": "c", "since": now, "exp": now + 30_000, "ended": now + 3_600_000,
        "outcome": "released", "exit": 0,
    });
    server.cmd::<()>(&[
        "ZADD",
        "redlock:{shadowed}:history",
        "9000000000000000",
        &entry.to_string(),
    ]);
    let metrics = server.redlock(&["metrics"]).run();
    metrics.code(0);
    let line = format!(
        "redlock_lock_last_success_timestamp_seconds{{key=\"shadowed\"}} {}.{:03}",
        real_end / 1000,
        real_end % 1000
    );
    assert!(
        metrics.stdout.contains(&line),
        "no {line:?} in:\n{}",
        metrics.stdout
    );
}
