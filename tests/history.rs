//! Lock history and notes: every hold is recorded by the scripts that start and end it (no
//! extra round trip), with how it ended (released with the command's exit status or signal,
//! expired, forced, lost, given back), capped at 100 holds and expiring; `history` shows it,
//! `inspect` shows the last finished hold. `--note` (or the CI job's URL) travels with the
//! holder into inspect, list, history, the busy message and the waiting status line.

use std::time::Duration;

use crate::util::{RedisServer, TempDir, field_names, wait_until};

const HISTORY: &str = "redlock:{job}:history";

/// `history --json` of `job`, newest first.
fn history(server: &RedisServer) -> Vec<serde_json::Value> {
    let out = server.redlock(&["history", "--key", "job", "--json"]).run();
    out.code(0);
    out.json().as_array().unwrap().clone()
}

#[test]
fn every_hold_and_how_it_ended_is_recorded() {
    let server = RedisServer::start();
    let run = |args: &[&str], code: i32| {
        server
            .redlock(&["run", "--key", "job", "--ttl", "3s"])
            .args(args)
            .run()
            .code(code);
    };
    run(&["--note", "nightly build", "--", "sh", "-c", "exit 3"], 3);
    run(&["--", "sh", "-c", "kill -TERM $$"], 143);
    // An acquisition whose lease runs out.
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "300ms"])
        .run()
        .code(0);
    std::thread::sleep(Duration::from_millis(500));
    // A forced release, and a token release that reports its script's status.
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run()
        .code(0);
    server
        .redlock(&["release", "--key", "job", "--force"])
        .run()
        .code(0);
    let token = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run();
    token.code(0);
    server
        .redlock(&[
            "release",
            "--key",
            "job",
            "--token",
            token.stdout.trim(),
            "--exit-status",
            "4",
        ])
        .run()
        .code(0);
    // A run whose lock is deleted under it: it stops its command and reports the loss.
    let dir = TempDir::new("history-lost");
    let lost = server
        .redlock(&["run", "--key", "job", "--ttl", "1500ms", "--", "sh", "-c"])
        .arg(format!("touch {}/started; sleep 30", dir.path().display()))
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || dir
        .path()
        .join("started")
        .exists()));
    server.cmd::<()>(&["DEL", "redlock:{job}:holders", "redlock:{job}:leases"]);
    lost.wait(Duration::from_secs(10)).code(125);
    // And one holding now.
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run()
        .code(0);

    let runs = history(&server);
    let summary: Vec<(String, Option<i64>, Option<i64>)> = runs
        .iter()
        .map(|run| {
            (
                run["outcome"].as_str().unwrap().to_owned(),
                run["exit"].as_i64(),
                run["signal"].as_i64(),
            )
        })
        .collect();
    let expected: Vec<(String, Option<i64>, Option<i64>)> = vec![
        ("holding".into(), None, None),
        // SIGTERM sent to the command when the loss was noticed, SIGKILL if it lingered.
        (
            "lost".into(),
            None,
            runs[1]["signal"].as_i64().filter(|s| *s == 15 || *s == 9),
        ),
        ("released".into(), Some(4), None),
        ("forced".into(), None, None),
        ("expired".into(), None, None),
        ("released".into(), None, Some(15)),
        ("released".into(), Some(3), None),
    ];
    assert_eq!(summary, expected, "{runs:#?}");
    assert!(
        runs[1]["signal"].is_i64(),
        "the lost run's signal: {:#?}",
        runs[1]
    );
    // Fences descend; an ended hold has its end and duration; the note came along.
    let fences: Vec<u64> = runs
        .iter()
        .map(|run| run["fence"].as_u64().unwrap())
        .collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] > pair[1]),
        "{fences:?}"
    );
    assert_eq!(runs[6]["note"], "nightly build");
    assert_eq!(runs[6]["command"], "sh -c 'exit 3'");
    assert!(runs[6]["ended_ms"].as_u64().unwrap() >= runs[6]["since_ms"].as_u64().unwrap());
    let expired = &runs[4];
    assert_eq!(
        expired["ended_ms"].as_u64().unwrap() - expired["since_ms"].as_u64().unwrap(),
        300,
        "an expired hold ends when its lease did"
    );
    assert_eq!(runs[0]["ended"], serde_json::Value::Null);
    // The history expires (30 days after its last change), like every key but the fence.
    let pttl: i64 = server.cmd(&["PTTL", HISTORY]);
    assert!(
        pttl > 29 * 24 * 3600 * 1000 && pttl <= 30 * 24 * 3600 * 1000,
        "{pttl}"
    );

    // The table, newest first, and `inspect` naming the last finished hold.
    let out = server.redlock(&["history", "--key", "job"]).run();
    out.code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{}", out.stdout);
    assert!(lines[0].starts_with("FENCE") && lines[0].contains("OUTCOME"));
    assert!(lines[7].contains("released") && lines[7].contains("exit 3"));
    assert!(lines[7].contains("nightly build"));
    let out = server.redlock(&["inspect", "--key", "job"]).run();
    out.code(0)
        .stdout_contains("last run: fence")
        .stdout_contains("lost");
    let view = server
        .redlock(&["inspect", "--key", "job", "--json"])
        .run()
        .json();
    assert_eq!(view["last_run"]["outcome"], "lost");
    // No history: exit 1, with a notice.
    server
        .redlock(&["history", "--key", "never"])
        .run()
        .code(1)
        .stderr_contains("has no history");
    assert_eq!(
        server
            .redlock(&["inspect", "--key", "never", "--json"])
            .run()
            .json()["last_run"],
        serde_json::Value::Null
    );
}

/// Waiters handed the lock in a queue get their entries too, and the history keeps the last
/// 100 holds.
/// Repro: `run -- /no/such/command` was recorded as `released, exit -`, a
/// `--max-runtime` stop as a plain `released SIGTERM`, and `release --force` without who forced
/// it. Now: exit 127 (126 for a file that cannot run), the limit that stopped the command, and
/// user@host with the operator's `--reason`.
#[test]
fn the_history_says_why_a_hold_ended() {
    let server = RedisServer::start();
    server
        .redlock(&["run", "--key", "job", "--", "/no/such/command"])
        .run()
        .code(127);
    assert_eq!(history(&server)[0]["exit"], 127);
    server
        .redlock(&["run", "--key", "job", "--", "/dev/null"])
        .run()
        .code(126);
    assert_eq!(history(&server)[0]["exit"], 126);

    server
        .redlock(&[
            "run",
            "--key",
            "job",
            "--max-runtime",
            "1s",
            "--",
            "sleep",
            "10",
        ])
        .run()
        .code(124);
    let last = &history(&server)[0];
    assert_eq!(last["why"], "stopped at --max-runtime 1.0s", "{last}");
    assert_eq!(last["signal"], 15, "{last}");

    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run()
        .code(0);
    server
        .redlock(&[
            "release",
            "--key",
            "job",
            "--force",
            "--reason",
            "stuck since 3 a.m.",
        ])
        .run()
        .code(0);
    let last = &history(&server)[0];
    assert_eq!(last["outcome"], "forced");
    let why = last["why"].as_str().unwrap();
    assert!(
        why.starts_with("by ") && why.contains('@') && why.ends_with(": stuck since 3 a.m."),
        "{last}"
    );
    server
        .redlock(&["history", "--key", "job"])
        .run()
        .code(0)
        .stdout_contains("forced (by ")
        .stdout_contains("released (stopped at --max-runtime 1.0s)")
        .stdout_contains("exit 127");
    server
        .redlock(&["release", "--key", "job", "--token", "x", "--reason", "r"])
        .run()
        .code(64);
}

/// The first 256 bytes of every command stay in the history for 30 days, readable
/// by every Redis user with access to the keys. `run --hide-arguments` records the program
/// alone.
#[test]
fn hide_arguments_keeps_them_out_of_redis() {
    let server = RedisServer::start();
    let monitor = server.monitor();
    server
        .redlock(&[
            "run",
            "--key",
            "job",
            "--hide-arguments",
            "--",
            "true",
            "--password=hunter2",
        ])
        .run()
        .code(0);
    let calls = monitor.stop_after_all(&server);
    assert!(
        calls.iter().all(|(_, call)| !call.contains("hunter2")),
        "the arguments reached Redis: {calls:?}"
    );
    assert_eq!(history(&server)[0]["command"], "true …");
}

#[test]
fn hand_overs_are_recorded_and_the_history_is_capped() {
    let server = RedisServer::start();
    let holder = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run();
    holder.code(0);
    let waiters: Vec<_> = (0..3)
        .map(|n| {
            let waiter = server
                .redlock(&["run", "--key", "job", "--wait", "20s", "--note"])
                .arg(format!("waiter {n}"))
                .args(&["--", "true"])
                .spawn();
            // In order: each joins once the previous one is queued.
            assert!(wait_until(Duration::from_secs(10), || {
                server.cmd::<i64>(&["ZCARD", "redlock:{job}:queue"]) == n + 1
            }));
            waiter
        })
        .collect();
    server
        .redlock(&["release", "--key", "job", "--token", holder.stdout.trim()])
        .run()
        .code(0);
    for waiter in waiters {
        waiter.wait(Duration::from_secs(20)).code(0);
    }
    let notes: Vec<String> = history(&server)
        .iter()
        .map(|run| {
            format!(
                "{} {}",
                run["outcome"].as_str().unwrap(),
                run["note"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        notes,
        [
            "released waiter 2",
            "released waiter 1",
            "released waiter 0",
            "released -"
        ]
    );

    for _ in 0..100 {
        server
            .redlock(&["run", "--key", "job", "--", "true"])
            .run()
            .code(0);
    }
    let runs = history(&server);
    assert_eq!(runs.len(), 100);
    assert!(
        runs.iter().all(|run| run["note"].is_null()),
        "the oldest holds were not the ones dropped"
    );
}

/// The history costs no round trip: an uncontended `run -- true` still sends Redis exactly
/// two commands, the acquire and the release script.
#[test]
fn the_history_adds_no_round_trip() {
    let server = RedisServer::start();
    // Scripts cached and history started, so the call measured is the common one.
    server
        .redlock(&["run", "--key", "job", "--", "true"])
        .run()
        .code(0);
    let monitor = server.monitor();
    server
        .redlock(&["run", "--key", "job", "--", "true"])
        .run()
        .code(0);
    let lines = monitor.stop_after_all(&server);
    let sent: Vec<&str> = lines
        .iter()
        .map(|(_, line)| line.as_str())
        .filter(|line| !line.contains(" lua] ") && !line.contains("monitor-marker"))
        .map(|line| line.split_once("] ").map_or(line, |(_, command)| command))
        .map(|command| command.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(sent, ["\"EVALSHA\"", "\"EVALSHA\""], "{lines:#?}");
}

#[test]
fn notes_show_wherever_the_holder_does() {
    let server = RedisServer::start();
    // Under GitHub Actions, the run's URL is the default note.
    let out = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s", "--json"])
        .env("GITHUB_SERVER_URL", "https://github.com")
        .env("GITHUB_REPOSITORY", "acme/app")
        .env("GITHUB_RUN_ID", "77")
        .run();
    out.code(0);
    let url = "https://github.com/acme/app/actions/runs/77";
    let view = server
        .redlock(&["inspect", "--key", "job", "--json"])
        .run()
        .json();
    assert_eq!(view["holders"][0]["note"], url);
    assert_eq!(
        field_names(&view["holders"][0]),
        [
            "command",
            "fence",
            "held_ms",
            "holds",
            "host",
            "keeper_pid",
            "min_hold",
            "mode",
            "note",
            "pid",
            "renewed",
            "renewed_ms",
            "since",
            "since_ms",
            "ttl_left_ms",
            "ttl_ms",
            "user"
        ]
    );
    server
        .redlock(&["inspect", "--key", "job"])
        .run()
        .stdout_contains(url);
    server.redlock(&["list"]).run().stdout_contains(url);
    // A busy caller learns why the lock is taken.
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run()
        .code(75)
        .one_line_error(&format!("note '{url}'"));
    // So does a waiter, in its status line (here, a CI log: no terminal).
    server
        .redlock(&[
            "run", "--key", "job", "--wait", "1500ms", "--note", "second", "--", "true",
        ])
        .run()
        .code(75)
        .stderr_contains(&format!("(acquire (pid: its caller); {url})"));
    // GitLab's, Jenkins' and Buildkite's variables; an explicit --note wins over them.
    for (variable, value) in [
        ("CI_JOB_URL", "https://gitlab.example/acme/app/-/jobs/5"),
        ("BUILD_URL", "https://jenkins.example/job/app/9/"),
        (
            "BUILDKITE_BUILD_URL",
            "https://buildkite.com/acme/app/builds/3",
        ),
    ] {
        let out = server
            .redlock(&["run", "--key", variable, "--", "true"])
            .env(variable, value)
            .run();
        out.code(0);
        let runs = server
            .redlock(&["history", "--key", variable, "--json"])
            .run()
            .json();
        assert_eq!(runs[0]["note"], value, "{variable}");
    }
    let out = server
        .redlock(&["run", "--key", "explicit", "--note", "mine", "--", "true"])
        .env("CI_JOB_URL", "https://gitlab.example/x")
        .run();
    out.code(0);
    assert_eq!(
        server
            .redlock(&["history", "--key", "explicit", "--json"])
            .run()
            .json()[0]["note"],
        "mine"
    );
    // Bad notes are refused before anything reaches Redis.
    let before = server.keys();
    server
        .redlock(&["run", "--key", "bad", "--note", "a\u{1b}[2Jb", "--", "true"])
        .run()
        .code(64)
        .one_line_error("--note \"a\\u{1b}[2Jb\": control characters are not allowed");
    server
        .redlock(&[
            "acquire",
            "--key",
            "bad",
            "--ttl",
            "5s",
            "--note",
            &"x".repeat(501),
        ])
        .run()
        .code(64)
        .one_line_error("--note: 501 bytes long; the limit is 500");
    assert_eq!(server.keys(), before);
}

/// Found in review: `why` was cut at 256 bytes in the middle of a character, and the history
/// then failed to read (exit 69) until the entry aged out. A long reason in Cyrillic is cut at
/// a character's boundary, and the history reads.
#[test]
fn a_long_reason_in_any_script_is_cut_between_characters() {
    let server = RedisServer::start();
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run()
        .code(0);
    let reason = "Ж".repeat(150);
    server
        .redlock(&["release", "--key", "job", "--force", "--reason", &reason])
        .run()
        .code(0);
    let why = history(&server)[0]["why"].as_str().unwrap().to_owned();
    assert!(why.len() <= 256 && why.ends_with('Ж'), "{why}");
    server.redlock(&["inspect", "--key", "job"]).run().code(1);
}
