//! Each subcommand's behaviour, output shape and exit codes against a real server.

use std::time::Duration;

use crate::util::{REDLOCK, RedisServer, Redlock, field_names, wait_until};

const HOLDERS: &str = "redlock:{deploy}:holders";
const FENCE: &str = "redlock:{deploy}:fence";

fn acquire(server: &RedisServer, key: &str, ttl: &str) -> String {
    let out = server
        .redlock(&["acquire", "--key", key, "--ttl", ttl])
        .run();
    out.code(0).stderr_empty();
    let token = out.stdout.trim().to_owned();
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "token {token:?}"
    );
    token
}

/// The fence of the latest acquisition of `deploy`, which the counter holds: the server's
/// clock in microseconds when it was issued (so that fences keep rising even if the counter is
/// lost, or behind).
fn first_fence(server: &RedisServer) -> u64 {
    let fence: String = server.cmd(&["GET", FENCE]);
    let fence: u64 = fence.parse().unwrap();
    let clock = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap();
    assert!(
        fence < clock && clock - fence < 60_000_000,
        "fence {fence} was not started from the server's clock ({clock} µs)"
    );
    fence
}

#[test]
fn acquire_prints_a_token_and_inspect_shows_the_holder() {
    let server = RedisServer::start();
    acquire(&server, "deploy", "30s");
    let fence = first_fence(&server);

    let out = server.redlock(&["inspect", "--key", "deploy"]).run();
    out.code(0)
        .stdout_contains(&format!("deploy: held (exclusive), last fence: {fence}"))
        .stdout_contains("HOST")
        .stdout_contains("acquire");

    let out = server
        .redlock(&["inspect", "--key", "deploy", "--json"])
        .run();
    out.code(0);
    let view = out.json();
    assert_eq!(
        field_names(&view),
        [
            "fence", "holders", "key", "last_run", "limit", "mode", "state", "waiters"
        ]
    );
    assert_eq!(view["key"], "deploy");
    assert_eq!(view["state"], "held");
    assert_eq!(view["mode"], "exclusive");
    assert_eq!(view["fence"], fence);
    let holder = &view["holders"][0];
    assert_eq!(
        field_names(holder),
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
    assert_eq!(holder["command"], "acquire (pid: its caller)");
    assert_eq!(holder["fence"], fence);
    assert_eq!(holder["ttl_ms"], 30000);
    assert!(holder["ttl_left_ms"].as_u64().unwrap() <= 30000);
    // The caller's pid (the script that will release), not acquire's own, long gone.
    assert_eq!(holder["pid"], u64::from(std::process::id()));
    assert!(holder["since"].as_str().unwrap().ends_with('Z'));

    // The lease belongs to Redis: the holders key expires on its own.
    let pttl: i64 = server.cmd(&["PTTL", HOLDERS]);
    assert!(pttl > 25_000 && pttl <= 30_000, "PTTL {pttl}");
    // The fence counter is the one key without a TTL.
    let pttl: i64 = server.cmd(&["PTTL", FENCE]);
    assert_eq!(pttl, -1);
}

/// The holder's user is $USER, else $LOGNAME, else the name of the uid.
#[test]
fn the_holder_is_named_after_user_or_logname_or_the_uid() {
    let server = RedisServer::start();
    let uid_name = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .expect("id runs")
            .stdout,
    )
    .unwrap();
    let cases = [
        (Some("alice"), Some("bob"), "alice"),
        (None, Some("bob"), "bob"),
        (None, None, uid_name.trim()),
    ];
    for (n, (user, logname, expected)) in cases.into_iter().enumerate() {
        let key = format!("who{n}");
        let mut acquire = server.redlock(&["acquire", "--key", &key, "--ttl", "30s"]);
        for (name, value) in [("USER", user), ("LOGNAME", logname)] {
            acquire = match value {
                Some(value) => acquire.env(name, value),
                None => acquire.env_remove(name),
            };
        }
        acquire.run().code(0);
        let out = server.redlock(&["inspect", "--key", &key, "--json"]).run();
        assert_eq!(
            out.json()["holders"][0]["user"],
            expected,
            "{user:?} {logname:?}"
        );
    }
}

#[test]
fn busy_lock_exits_75_naming_the_holder_and_minus_e_overrides() {
    let server = RedisServer::start();
    acquire(&server, "deploy", "30s");
    let fence = first_fence(&server);

    let out = server
        .redlock(&["acquire", "--key", "deploy", "--ttl", "30s"])
        .run();
    out.code(75)
        .one_line_error("lock 'deploy' is busy: held by ")
        .stderr_contains(&format!(
            "command 'acquire (pid: its caller)' fence {fence}"
        ));
    assert!(out.stdout.is_empty());

    server
        .redlock(&[
            "acquire", "--key", "deploy", "--ttl", "30s", "-E", "0", "-q",
        ])
        .run()
        .code(0)
        .stderr_empty();
    server
        .redlock(&[
            "acquire",
            "--key",
            "deploy",
            "--ttl",
            "30s",
            "--conflict-exit-code",
            "3",
        ])
        .run()
        .code(3);
    // A busy attempt changes nothing, not even the fence.
    let after: String = server.cmd(&["GET", FENCE]);
    assert_eq!(after, fence.to_string());
}

#[test]
fn json_acquire_and_fences_strictly_increase() {
    let server = RedisServer::start();
    let mut last = 0;
    for round in 0..5 {
        let out = server
            .redlock(&["acquire", "--key", "deploy", "--ttl", "1m", "--json"])
            .run();
        out.code(0);
        let grant = out.json();
        assert_eq!(field_names(&grant), ["fence", "key", "token", "ttl_ms"]);
        assert_eq!(grant["key"], "deploy");
        assert_eq!(grant["ttl_ms"], 60_000);
        let fence = grant["fence"].as_u64().unwrap();
        // Higher each time (each is the server's clock when it was issued).
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
        let token = grant["token"].as_str().unwrap();
        if round % 2 == 0 {
            server
                .redlock(&["release", "--key", "deploy", "--token", token])
                .run()
                .code(0);
        } else {
            server
                .redlock(&["release", "--key", "deploy", "--force"])
                .run()
                .code(0);
        }
    }
    assert_eq!(last, first_fence(&server));
}

/// `acquire --json` on a busy lock prints JSON too (who holds it), and with `--log-format
/// json` the busy line is a notice, not an error: it is an expected outcome. Repro: stdout
/// stayed empty and the line said `"level":"error"`.
#[test]
fn a_busy_json_acquire_prints_json_and_logs_a_notice() {
    let server = RedisServer::start();
    acquire(&server, "deploy", "30s");
    let fence = first_fence(&server);
    let out = server
        .redlock(&[
            "--log-format",
            "json",
            "acquire",
            "--key",
            "deploy",
            "--ttl",
            "30s",
            "--json",
        ])
        .run();
    out.code(75);
    let busy = out.json();
    assert_eq!(field_names(&busy), ["busy", "holder", "key"], "{busy}");
    assert_eq!(busy["key"], "deploy");
    assert_eq!(busy["busy"], true);
    let holder = &busy["holder"];
    assert_eq!(holder["fence"], fence);
    assert_eq!(holder["mode"], "exclusive");
    assert_eq!(holder["command"], "acquire (pid: its caller)");
    for field in ["host", "pid", "user", "held_ms", "ttl_left_ms", "since_ms"] {
        assert!(!holder[field].is_null(), "{field}: {busy}");
    }
    let line: serde_json::Value = serde_json::from_str(out.stderr.trim())
        .unwrap_or_else(|err| out.fail(&format!("one JSON line on stderr: {err}")));
    assert_eq!(line["level"], "notice", "{line}");
    assert_eq!(line["exit"], 75, "{line}");
    // An error is still one.
    let out = server
        .redlock(&[
            "--log-format",
            "json",
            "acquire",
            "--key",
            "",
            "--ttl",
            "30s",
        ])
        .run();
    out.code(64);
    let line: serde_json::Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(line["level"], "error", "{line}");
    // -E 0: still busy, still JSON.
    let out = server
        .redlock(&[
            "acquire", "deploy", "--ttl", "30s", "--json", "-E", "0", "-q",
        ])
        .run();
    out.code(0).stderr_empty();
    assert_eq!(out.json()["busy"], true);
}

#[test]
fn release_is_token_checked() {
    let server = RedisServer::start();
    let token = acquire(&server, "deploy", "30s");
    let before: String = server.cmd(&["HGET", HOLDERS, &token]);

    let out = server
        .redlock(&[
            "release",
            "--key",
            "deploy",
            "--token",
            "0123456789abcdef0123456789abcdef",
        ])
        .run();
    out.code(1).one_line_error("not held by this token");
    let after: String = server.cmd(&["HGET", HOLDERS, &token]);
    assert_eq!(before, after, "a wrong token changed the lock");

    // The token may come from the environment, as inside `redlock run`.
    server
        .redlock(&["release", "--key", "deploy"])
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(0)
        .stderr_empty();
    assert_eq!(
        server.keys_but_history(),
        [FENCE],
        "only the fence counter stays"
    );

    server
        .redlock(&["release", "--key", "deploy", "--token", &token, "-q"])
        .run()
        .code(1)
        .stderr_empty();
}

#[test]
fn release_and_extend_of_an_expired_lock_exit_1_and_recreate_nothing() {
    let server = RedisServer::start();
    let token = acquire(&server, "deploy", "300ms");
    assert!(
        wait_until(Duration::from_secs(5), || server
            .cmd::<i64>(&["EXISTS", HOLDERS])
            == 0),
        "lock did not expire"
    );
    server
        .redlock(&[
            "extend", "--key", "deploy", "--token", &token, "--ttl", "30s",
        ])
        .run()
        .code(1)
        .one_line_error("not extended");
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", HOLDERS]),
        0,
        "extend re-created the lock"
    );
    server
        .redlock(&["release", "--key", "deploy", "--token", &token])
        .run()
        .code(1);
    assert_eq!(server.keys_but_history(), [FENCE]);
}

#[test]
fn a_stale_holder_cannot_release_or_extend_the_next_holders_lock() {
    let server = RedisServer::start();
    let stale = acquire(&server, "deploy", "200ms");
    let fence = first_fence(&server);
    assert!(wait_until(Duration::from_secs(5), || {
        server
            .redlock(&["acquire", "--key", "deploy", "--ttl", "30s", "-q"])
            .run()
            .status
            .success()
    }));
    let record: Vec<String> = server.cmd(&["HVALS", HOLDERS]);
    server
        .redlock(&["release", "--key", "deploy", "--token", &stale])
        .run()
        .code(1);
    server
        .redlock(&[
            "extend", "--key", "deploy", "--token", &stale, "--ttl", "1h",
        ])
        .run()
        .code(1);
    assert_eq!(server.cmd::<Vec<String>>(&["HVALS", HOLDERS]), record);
    let out = server
        .redlock(&["inspect", "--key", "deploy", "--json"])
        .run();
    out.code(0);
    assert!(out.json()["holders"][0]["fence"].as_u64().unwrap() > fence);
}

#[test]
fn extend_renews_only_for_its_own_token() {
    let server = RedisServer::start();
    let token = acquire(&server, "deploy", "5s");

    server
        .redlock(&[
            "extend", "--key", "deploy", "--token", &token, "--ttl", "2m",
        ])
        .run()
        .code(0)
        .stderr_empty();
    let pttl: i64 = server.cmd(&["PTTL", HOLDERS]);
    assert!(pttl > 100_000, "PTTL {pttl} after extend to 2m");
    let out = server
        .redlock(&["inspect", "--key", "deploy", "--json"])
        .run();
    assert_eq!(out.json()["holders"][0]["ttl_ms"], 120_000);

    server
        .redlock(&[
            "extend",
            "--key",
            "deploy",
            "--token",
            "ffffffffffffffffffffffffffffffff",
            "--ttl",
            "1h",
        ])
        .run()
        .code(1);
    let pttl: i64 = server.cmd(&["PTTL", HOLDERS]);
    assert!(
        pttl <= 120_000,
        "a stranger's extend changed the lease: PTTL {pttl}"
    );

    // Extending can also shorten: the new lease counts from now.
    server
        .redlock(&[
            "extend", "--key", "deploy", "--token", &token, "--ttl", "3s", "-v",
        ])
        .run()
        .code(0)
        .stderr_contains("extended 'deploy' to 3.0s");
    let pttl: i64 = server.cmd(&["PTTL", HOLDERS]);
    assert!(pttl <= 3000, "PTTL {pttl}");
}

#[test]
fn force_release_evicts_and_reports_who() {
    let server = RedisServer::start();
    let token = acquire(&server, "deploy", "30s");
    let fence = first_fence(&server);

    let out = server
        .redlock(&["release", "--key", "deploy", "--force"])
        .run();
    out.code(0)
        .stdout_contains("released 'deploy' by force, evicting ")
        .stdout_contains(&format!(
            "command 'acquire (pid: its caller)' fence {fence}"
        ));
    assert_eq!(server.keys_but_history(), [FENCE]);

    // The evicted holder finds out at its next release or extend.
    server
        .redlock(&["release", "--key", "deploy", "--token", &token])
        .run()
        .code(1);
    server
        .redlock(&["release", "--key", "deploy", "--force"])
        .run()
        .code(1)
        .one_line_error("was free");
}

/// flock, consul lock and etcdctl lock take the lock's name first, and so does redlock: the
/// same as --key, and both at once must agree. flock's -s, -x, -n and -w mean what they do there.
#[test]
fn the_lock_name_may_come_first_and_flocks_options_work() {
    let server = RedisServer::start();
    let out = server.redlock(&["acquire", "deploy", "--ttl", "30s"]).run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    server
        .redlock(&["inspect", "deploy"])
        .run()
        .code(0)
        .stdout_contains("deploy");
    server
        .redlock(&["extend", "deploy", "--ttl", "60s", "--token", &token])
        .run()
        .code(0);
    server
        .redlock(&["release", "deploy", "--key", "deploy", "--token", &token])
        .run()
        .code(0);
    server.redlock(&["history", "deploy"]).run().code(0);
    // run: the name, then the command (after `--` or not), or -c STRING.
    for (args, printed) in [
        (
            &["deploy", "--", "sh", "-c", "echo \"in $REDLOCK_KEY\""][..],
            "in deploy",
        ),
        (&["deploy", "echo", "plain"], "plain"),
        (
            &["deploy", "-c", "echo \"shell $REDLOCK_KEY\""],
            "shell deploy",
        ),
        (&["-c", "echo after", "deploy"], "after"),
    ] {
        server
            .redlock(&["run", "--ttl", "5s"])
            .args(args)
            .run()
            .code(0)
            .stdout_contains(printed);
    }
    // Named twice, differently: refused before anything is taken.
    for args in [
        &["acquire", "a", "--key", "b", "--ttl", "5s"][..],
        &["inspect", "a", "-k", "b"],
        &["history", "a", "-k", "b"],
        &["release", "a", "-k", "b", "--force"],
        &["extend", "a", "-k", "b", "--ttl", "5s", "--token", &token],
    ] {
        server
            .redlock(args)
            .run()
            .code(64)
            .one_line_error("lock name: given twice, as --key 'b' and as 'a'");
    }
    server
        .redlock(&["run", "deploy"])
        .run()
        .code(64)
        .one_line_error("lock 'deploy': no command to run");
    let keys = server.keys();
    assert!(
        !keys
            .iter()
            .any(|key| key.contains("{a}") || key.contains("{b}")),
        "{keys:?}"
    );

    // -s shares, -x is exclusive (the default), -n does not wait, -w waits (seconds, as
    // flock's -w takes them).
    for _ in 0..2 {
        server
            .redlock(&["acquire", "-s", "files", "--ttl", "30s"])
            .run()
            .code(0);
    }
    server
        .redlock(&["acquire", "-x", "-n", "files", "--ttl", "5s"])
        .run()
        .code(75);
    server
        .redlock(&["run", "-w", "0.3", "--ttl", "5s", "files", "--", "true"])
        .run()
        .code(75)
        .stderr_contains("still busy after waiting 300ms");
    // Between the name and `--`, options are options.
    server
        .redlock(&["run", "files", "-w", "0.3", "--ttl", "5s", "--", "true"])
        .run()
        .code(75)
        .stderr_contains("still busy after waiting 300ms");
    server
        .redlock(&["acquire", "-s", "-x", "files", "--ttl", "5s"])
        .run()
        .code(64);
}

/// After `--` comes the command, never the lock's name: a forgotten `--key` is refused with
/// exit 64 and nothing taken, instead of locking the command's first word and running the rest
/// (`run -- env echo hello` locked `env` and ran `echo hello`). Options between the name and
/// `--` are options, as before the name, in every command; flock's form without `--` stays.
#[test]
fn a_lock_name_is_never_taken_from_after_the_dashes() {
    let server = RedisServer::start();
    for args in [
        &["run", "--ttl", "10m", "--", "env", "echo", "hello"][..],
        &["run", "--", "./deploy.sh", "prod"],
        &["run", "--ttl", "5s", "--", "sh", "-c", "echo hello"],
        &["run", "-c", "echo hello", "--", "job"],
    ] {
        let out = server.redlock(args).run();
        out.code(64).one_line_error("no lock name");
        assert!(!out.stdout.contains("hello"), "{}", out.stdout);
    }
    let token = "0123456789abcdef0123456789abcdef";
    for args in [
        &["acquire", "--ttl", "10s", "--", "job"][..],
        &["inspect", "--", "job"],
        &["history", "--", "job"],
        &["release", "--force", "--", "job"],
        &["release", "--token", token, "--", "job"],
        &["extend", "--ttl", "5s", "--token", token, "--", "job"],
        &["check", "--succeeded-within", "1h", "--", "job"],
        &["inspect", "--key", "job", "--", "job"],
    ] {
        server
            .redlock(args)
            .run()
            .code(64)
            .one_line_error("'job' after '--'");
    }
    assert!(server.keys().is_empty(), "{:?}", server.keys());

    // Options between the name and `--`: the same as before it.
    server
        .redlock(&[
            "run",
            "job",
            "--ttl",
            "30s",
            "--note",
            "between",
            "--",
            "sh",
            "-c",
            "echo \"$REDLOCK_KEY $REDLOCK_TTL_MS\"",
        ])
        .run()
        .code(0)
        .stdout_contains("job 30000");
    server
        .redlock(&["history", "job", "--json"])
        .run()
        .code(0)
        .stdout_contains("\"note\": \"between\"");
    // flock's form: the name, then the command, whose options are its own.
    server
        .redlock(&["run", "job", "echo", "--ttl", "x", "--", "y"])
        .run()
        .code(0)
        .stdout_contains("--ttl x -- y");
    server
        .redlock(&["run", "--key", "job", "echo", "plain", "--"])
        .run()
        .code(0)
        .stdout_contains("plain --");
    // With --key and no `--`, the command starts at its first word, its options its own
    // (`-v`, `-c` and `-k` are redlock's too).
    server
        .redlock(&[
            "run", "-q", "--key", "job", "echo", "-n", "-v", "-c", "x", "-k", "y",
        ])
        .run()
        .code(0)
        .stderr_empty()
        .stdout_contains("-v -c x -k y");
    // A name before `--` with --key must be the same name.
    server
        .redlock(&["run", "--key", "job", "echo", "--", "hello"])
        .run()
        .code(64)
        .one_line_error("lock name: given twice, as --key 'job' and as 'echo'");
    server
        .redlock(&["run", "--key", "job", "job", "--", "echo", "same"])
        .run()
        .code(0)
        .stdout_contains("same");
    // An option redlock does not know is not a command.
    server
        .redlock(&["run", "job", "--tll", "5s", "--", "true"])
        .run()
        .code(64)
        .one_line_error("--tll");
}

/// Runs `commands` (a shell line) on a pseudo-terminal `columns` wide (script(1); no rows, as
/// some terminals report), with REDLOCK_URL pointing at `server`; what the terminal showed.
fn on_a_terminal(server: &RedisServer, columns: u16, commands: &str) -> String {
    let out = std::process::Command::new("script")
        .args([
            "-qfec",
            &format!("stty cols {columns}; {commands}"),
            "/dev/null",
        ])
        .env("REDLOCK_URL", server.url())
        .output()
        .expect("script(1) from util-linux");
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

/// On a terminal, `list`, `inspect`, `history` and `doctor` fit its width: by default the
/// columns an operator reads first (the lock, its mode, the holder as host:pid, how long it
/// has held it, the lease left, the waiters, times relative), the command cut to what is left;
/// `--wide` shows every column whole; a pipe always gets every column whole. Repro: at 80
/// columns `inspect` rows were 113-121 characters, `list` rows 150-166 (every one wrapped),
/// doctor's lines up to 210, and what was cut was the command and the note while the
/// 16-digit fence and the ISO times stayed.
#[test]
fn tables_fit_a_terminal_with_the_columns_read_first_and_never_cut_a_pipe() {
    let server = RedisServer::start();
    let long_command = format!("echo {}", "c".repeat(200));
    let long_note = "n".repeat(150);
    server
        .redlock(&[
            "run", "--ttl", "5s", "--note", &long_note, "wide", "--", "sh", "-c",
        ])
        .arg(&long_command)
        .run()
        .code(0);
    server
        .redlock(&["acquire", "wide", "--ttl", "30s", "--note", &long_note])
        .run()
        .code(0);
    let waiter = server
        .redlock(&["run", "wide", "--wait", "20s", "--", "sh", "-c"])
        .arg(&long_command)
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || {
        server.cmd::<i64>(&["ZCARD", "redlock:{wide}:queue"]) == 1
    }));
    server
        .redlock(&["run", "--min-hold", "1m", "kept", "--", "true"])
        .run()
        .code(0);
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let short_host = host.split('.').next().unwrap().to_owned();
    let redlock = crate::util::REDLOCK;
    let all = format!(
        "{redlock} list; {redlock} inspect wide; {redlock} history wide; {redlock} inspect kept; {redlock} doctor"
    );

    let fitted = on_a_terminal(&server, 80, &all);
    for line in fitted.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than the terminal: {line}\n{fitted}"
        );
    }
    let header = |table: &str, first: &str| -> Vec<String> {
        table
            .lines()
            .find(|line| line.starts_with(first))
            .unwrap_or_else(|| panic!("no header starting {first}:\n{table}"))
            .split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        header(&fitted, "LOCK"),
        [
            "LOCK",
            "MODE",
            "HOLDER",
            "HELD",
            "LEASE LEFT",
            "WAITERS",
            "COMMAND"
        ]
    );
    assert_eq!(
        header(&fitted, "MODE"),
        ["MODE", "HOLDER", "HELD", "LEASE LEFT", "COMMAND"]
    );
    assert_eq!(
        header(&fitted, "QUEUE"),
        ["QUEUE", "MODE", "WAITER", "WAITED", "COMMAND"]
    );
    assert_eq!(
        header(&fitted, "STARTED"),
        [
            "STARTED", "DURATION", "OUTCOME", "EXIT", "HOLDER", "COMMAND"
        ]
    );
    assert!(fitted.contains(&format!("{short_host}:")), "{fitted}");
    assert!(fitted.contains(" ago "), "{fitted}");
    assert!(fitted.contains("(min hold)"), "{fitted}");
    assert!(
        fitted.contains("persistence  no append-only file"),
        "{fitted}"
    );
    for hidden in [
        "FENCE",
        "SINCE",
        "RENEWED",
        "NOTE",
        &long_note[..20],
        "T0",
        "T1",
        "T2",
    ] {
        assert!(
            !fitted.contains(hidden),
            "{hidden} shown on 80 columns:\n{fitted}"
        );
    }
    // doctor's long lines go on under their text, none of it lost.
    let doctor = server.redlock(&["doctor"]).run();
    let words = |text: &str| {
        text.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let fitted_doctor = &fitted[fitted.find("ok       server").unwrap()..];
    assert_eq!(words(fitted_doctor), words(&doctor.stdout));

    // --wide: every column, whole.
    let wide = on_a_terminal(
        &server,
        80,
        &format!(
            "{redlock} list --wide; {redlock} inspect --wide wide; {redlock} history --wide wide"
        ),
    );
    assert!(wide.contains("FENCE") && wide.contains("SINCE"), "{wide}");
    // list, inspect (its holder and its last run), history (both holds).
    assert_eq!(wide.matches(long_note.as_str()).count(), 5, "{wide}");
    assert!(wide.contains(&long_command), "{wide}");
    // A pipe: the same.
    for args in [&["list"][..], &["inspect", "wide"], &["history", "wide"]] {
        server
            .redlock(args)
            .run()
            .code(0)
            .stdout_contains(&long_note)
            .stdout_contains("FENCE");
    }
    let empty = on_a_terminal(&server, 80, &format!("{redlock} --prefix nothing: list"));
    assert!(
        empty.contains(&format!(
            "no locks are held under prefix 'nothing:' on {}, database 0",
            server.url()
        )),
        "{empty}"
    );
    waiter.signal("TERM");
    waiter.wait(Duration::from_secs(10)).code(143);
}

#[test]
fn inspect_of_a_free_lock_exits_1() {
    let server = RedisServer::start();
    server
        .redlock(&["inspect", "--key", "never"])
        .run()
        .code(1)
        .stdout_contains("never: free (last fence: none issued yet)")
        .stderr_empty();
    let out = server
        .redlock(&["inspect", "--key", "never", "--json"])
        .run();
    out.code(1);
    let view = out.json();
    assert_eq!(view["state"], "free");
    assert_eq!(view["fence"], serde_json::Value::Null);
    assert_eq!(view["mode"], serde_json::Value::Null);
    assert_eq!(view["holders"], serde_json::json!([]));
    assert!(server.keys().is_empty(), "inspect wrote something");
}

#[test]
fn list_shows_held_locks_under_the_prefix_only() {
    let server = RedisServer::start();
    acquire(&server, "b-job", "30s");
    acquire(&server, "a-job", "30s");
    let released = acquire(&server, "c-job", "30s");
    server
        .redlock(&["release", "--key", "c-job", "--token", &released])
        .run()
        .code(0);
    server
        .redlock(&[
            "acquire",
            "--key",
            "other",
            "--ttl",
            "30s",
            "--prefix",
            "elsewhere:",
        ])
        .run()
        .code(0);
    // Unrelated data that merely looks like ours is skipped, not fatal, and left alone.
    server.cmd::<()>(&["HSET", "redlock:{foreign}:holders", "field", "value"]);
    server.cmd::<()>(&["SET", "redlock:{plain}:holders", "x"]);

    // One waiter on b-job, so that every column has something to show.
    let waiter = server
        .redlock(&["acquire", "--key", "b-job", "--ttl", "5s", "--wait", "20s"])
        .spawn();
    assert!(crate::util::wait_until(Duration::from_secs(10), || {
        server.cmd::<i64>(&["ZCARD", "redlock:{b-job}:queue"]) == 1
    }));
    let out = server.redlock(&["list"]).run();
    waiter.signal("TERM");
    out.code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[1].starts_with("a-job "));
    assert!(lines[2].starts_with("b-job "));
    out.stderr_contains("skipping redlock:{foreign}:holders");
    // Each cell sits under its heading.
    let b_fence: String = server.cmd(&["GET", "redlock:{b-job}:fence"]);
    let expected = [
        ("KEY", "b-job"),
        ("MODE", "exclusive"),
        ("HOLDERS", "1"),
        ("WAITERS", "1"),
        ("PID", &std::process::id().to_string()),
        ("COMMAND", "acquire (pid: its caller)"),
        ("TTL LEFT", ""),
        ("FENCE", &b_fence),
    ];
    let header = lines[0];
    let headings: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(
        headings,
        [
            "KEY", "MODE", "HOLDERS", "WAITERS", "HOST", "PID", "USER", "COMMAND", "SINCE", "HELD",
            "TTL LEFT", "RENEWED", "FENCE", "NOTE"
        ],
        "{header}"
    );
    for (heading, value) in expected {
        let start = header.find(heading).unwrap();
        let end = headings
            .iter()
            .map(|h| header.find(h).unwrap())
            .find(|&at| at > start)
            .unwrap_or(lines[2].len());
        let cell = lines[2][start..end.min(lines[2].len())].trim();
        if heading == "TTL LEFT" {
            assert!(
                cell.ends_with('s'),
                "TTL LEFT is {cell:?} in\n{}",
                out.stdout
            );
        } else {
            assert_eq!(cell, value, "column {heading} in\n{}", out.stdout);
        }
    }

    let out = server.redlock(&["list", "--json", "-q"]).run();
    out.code(0).stderr_empty();
    let list = out.json();
    let keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["a-job", "b-job"]);
    assert_eq!(
        list[0]["holders"][0]["command"],
        "acquire (pid: its caller)"
    );

    let out = server
        .redlock(&["list", "--json", "--prefix", "elsewhere:"])
        .run();
    assert_eq!(out.json()[0]["key"], "other");
    let hash: Vec<String> = server.cmd(&["HGETALL", "redlock:{foreign}:holders"]);
    assert_eq!(hash, ["field", "value"]);
}

#[test]
fn odd_lock_names_are_stored_literally_under_one_hash_tag() {
    let server = RedisServer::start();
    for name in [
        "}x",
        "a}{b",
        "{}",
        "100%",
        "with space",
        "glob*?[x]",
        "日本",
    ] {
        let token = acquire(&server, name, "30s");
        let out = server.redlock(&["list", "--json"]).run();
        assert_eq!(out.json()[0]["key"], name);
        server
            .redlock(&["release", "--key", name, "--token", &token])
            .run()
            .code(0);
    }
    let mut keys = server.keys_but_history();
    keys.sort();
    // One fence per name, each with a non-empty tag that keeps lock and fence on one slot.
    assert_eq!(keys.len(), 7, "{keys:?}");
    assert!(
        keys.contains(&"redlock:{%7Dx}:fence".to_owned()),
        "{keys:?}"
    );
    // Cluster hashes only the part between the first `{` and the next `}`.
    let tag = |key: &str| {
        let open = key.find('{').unwrap();
        let close = open + key[open..].find('}').unwrap();
        key[open + 1..close].to_owned()
    };
    for key in &keys {
        assert!(!tag(key).is_empty(), "{key}");
        assert_eq!(tag(key), tag(&key.replace(":fence", ":holders")), "{key}");
    }
}

#[test]
fn scripts_are_reloaded_after_the_server_flushes_its_cache() {
    let server = RedisServer::start();
    let token = acquire(&server, "deploy", "30s");
    server.cmd::<()>(&["SCRIPT", "FLUSH"]);
    server
        .redlock(&[
            "extend", "--key", "deploy", "--token", &token, "--ttl", "30s",
        ])
        .run()
        .code(0);
    server.cmd::<()>(&["SCRIPT", "FLUSH"]);
    server
        .redlock(&["release", "--key", "deploy", "--token", &token])
        .run()
        .code(0);
}

#[test]
fn verbose_logs_steps_and_completions_generate() {
    let server = RedisServer::start();
    let out = server
        .redlock(&["acquire", "--key", "deploy", "--ttl", "30s", "-v"])
        .run();
    out.code(0)
        .stderr_contains("connected to redis://127.0.0.1:")
        .stderr_contains(&format!(
            "acquired 'deploy' (fence {}, ttl 30.0s)",
            first_fence(&server)
        ));

    for shell in ["bash", "zsh", "fish"] {
        let out = crate::util::Redlock::new(&["completions", shell]).run();
        out.code(0).stdout_contains("acquire");
    }
}

/// A keeper is started with the lock's name and prefix as arguments: one that starts with `-`
/// (a name `-deploy`, a prefix `-team:`) is a value, not a flag. Repro: the keeper did not
/// start (its parse error went to /dev/null) and the lease ran out under a caller told it was
/// kept.
#[test]
fn a_kept_lock_whose_name_and_prefix_start_with_a_dash_is_renewed() {
    let server = RedisServer::start();
    let out = server
        .redlock(&[
            "acquire",
            "--key=-deploy",
            "--ttl",
            "1s",
            "--keep-alive",
            "--json",
        ])
        .env("REDLOCK_PREFIX", "-team:")
        .run();
    out.code(0);
    let token = out.json()["token"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "-team:{-deploy}:holders"]),
        1,
        "the lease was not renewed"
    );
    server
        .redlock(&["release", "--key=-deploy"])
        .env("REDLOCK_PREFIX", "-team:")
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(0);
}

/// `acquire --keep-alive`: a background keeper renews the lease until the lock is released
/// with its token, until the watched process exits (then it releases), or until --max-hold
/// (then the lease runs out); `$(...)` around acquire does not wait for it.
#[test]
fn a_kept_lock_lives_until_released_or_its_limits() {
    use crate::util::{alive, wait_until};
    let server = RedisServer::start();
    let acquire = |key: &str, extra: &[&str]| {
        let out = server
            .redlock(
                &[
                    &[
                        "acquire",
                        "--key",
                        key,
                        "--ttl",
                        "1s",
                        "--keep-alive",
                        "--json",
                    ][..],
                    extra,
                ]
                .concat(),
            )
            .run();
        out.code(0);
        let json = out.json();
        (
            json["token"].as_str().unwrap().to_owned(),
            u32::try_from(json["keeper_pid"].as_u64().unwrap()).unwrap(),
        )
    };
    let held =
        |key: &str| server.cmd::<i64>(&["EXISTS", &format!("redlock:{{{key}}}:holders")]) == 1;

    // Renewed far past its 1 s lease, until released; then the keeper ends.
    let (token, keeper) = acquire("released", &[]);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(held("released"), "the lease was not renewed");
    server
        .redlock(&["release", "--key", "released", "--token", &token])
        .run()
        .code(0);
    assert!(
        wait_until(Duration::from_secs(3), || !alive(keeper)),
        "the keeper outlived the release"
    );

    // The watched process exits: the keeper releases the lock at once.
    let mut watched = std::process::Command::new("sleep")
        .arg("1.5")
        .spawn()
        .unwrap();
    let (_, keeper) = acquire("watched", &["--while-pid", &watched.id().to_string()]);
    assert!(held("watched"));
    watched.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || !held("watched")),
        "not released"
    );
    assert!(wait_until(Duration::from_secs(2), || !alive(keeper)));

    // --max-hold: renewals stop, the keeper ends, the lease runs out.
    let (_, keeper) = acquire("limited", &["--max-hold", "2s"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(held("limited"));
    assert!(
        wait_until(Duration::from_secs(2), || !alive(keeper)),
        "the keeper outlived --max-hold"
    );
    assert!(wait_until(Duration::from_secs(2), || !held("limited")));
}

/// The keeper holds none of the caller's descriptors beyond the standard
/// three, so a pipe the caller's shell passed as descriptor 3 ends when `acquire` does, not
/// when the keeper does (a CI step, `$(...)`, `| cat` would wait for --max-hold otherwise).
#[test]
fn the_keeper_keeps_none_of_the_callers_descriptors() {
    let server = RedisServer::start();
    let dir = crate::util::TempDir::new("keeper-fds");
    let token_file = dir.path().join("token");
    let started = std::time::Instant::now();
    let pipeline = std::process::Command::new("bash")
        .arg("-c")
        .arg(r#"{ "$0" acquire --key k --ttl 3s --keep-alive --max-hold 30s -q > "$1"; } 3>&1 | cat"#)
        .arg(REDLOCK)
        .arg(&token_file)
        .env("REDLOCK_URL", server.url())
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(pipeline.status.success(), "{pipeline:?}");
    let token = std::fs::read_to_string(&token_file).unwrap();
    server
        .redlock(&["release", "--key", "k", "--token", token.trim()])
        .run()
        .code(0);
    assert!(
        elapsed < Duration::from_secs(5),
        "the pipeline waited {elapsed:?} for the keeper"
    );
}

/// A keeper whose every renewal is answered with an error
/// (a server whose EVALSHA and EVAL are renamed away) retries every ttl/12, at most 500 ms
/// apart, and ends (125) once the lease it was started on could have lapsed. It used to retry
/// on until --max-hold (an hour by default), on a lease long gone. Started here as `acquire
/// --keep-alive` starts it, with the token of a lock taken elsewhere.
#[test]
fn a_keeper_whose_renewals_are_refused_retries_gently_and_ends_with_the_lease() {
    let server = RedisServer::start();
    let refusing = RedisServer::start_with(&[
        "--rename-command",
        "EVALSHA",
        "",
        "--rename-command",
        "EVAL",
        "",
    ]);
    let out = server
        .redlock(&["acquire", "--key", "kept", "--ttl", "3s"])
        .run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    let errors = refusing.stat("total_error_replies");
    let connections = refusing.stat("total_connections_received");
    let keeper = refusing
        .redlock(&[
            "keep-alive",
            "--key",
            "kept",
            "--ttl",
            "3s",
            "--max-hold",
            "1h",
        ])
        .env("REDLOCK_TOKEN", &token)
        .spawn();
    let out = keeper.wait(Duration::from_secs(10));
    // Less the test's own INFO connection.
    let connections = refusing.stat("total_connections_received") - connections - 1;
    let errors = refusing.stat("total_error_replies") - errors;
    out.code(125).stderr_contains("unknown command");
    // Every 250 ms for the 3 s lease: 12.
    assert!(errors <= 16, "{errors} error replies:\n{}", out.stderr);
    assert!(
        connections <= 16,
        "{connections} connections:\n{}",
        out.stderr
    );
}

/// Fences keep rising when the fence counter is lost (deleted, flushed, evicted, a restart
/// without persistence): a missing counter starts from the server's clock in microseconds.
/// `--while-pid` naming no process would have the keeper release the lock at once, behind a
/// printed token: refused before anything is taken.
#[test]
fn a_kept_lock_for_a_process_that_does_not_exist_is_refused() {
    let server = RedisServer::start();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let gone = gone.id().to_string();
    for pid in [gone.as_str(), "0", "4294967295"] {
        server
            .redlock(&[
                "acquire",
                "--key",
                "kept",
                "--ttl",
                "5s",
                "--keep-alive",
                "--while-pid",
                pid,
            ])
            .run()
            .code(64)
            .one_line_error(&format!("--while-pid {pid}: no such process"));
    }
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

/// Takes `deploy`, gives it back, and returns the fence the hold was issued.
fn fence_of_one_hold(server: &RedisServer) -> u64 {
    let out = server
        .redlock(&["acquire", "--key", "deploy", "--ttl", "30s", "--json"])
        .run();
    out.code(0);
    let token = out.json()["token"].as_str().unwrap().to_owned();
    server
        .redlock(&["release", "--key", "deploy", "--token", &token])
        .run()
        .code(0);
    out.json()["fence"].as_u64().unwrap()
}

#[test]
fn fences_keep_rising_when_the_counter_is_lost() {
    let mut server = RedisServer::start();
    let mut last = fence_of_one_hold(&server);
    for lose in ["DEL", "FLUSHALL", "restart"] {
        match lose {
            "DEL" => server.cmd::<()>(&["DEL", FENCE]),
            "FLUSHALL" => server.cmd::<()>(&["FLUSHALL"]),
            _ => server.restart(),
        }
        let next = fence_of_one_hold(&server);
        assert!(
            next > last,
            "fence {next} after {last}, the counter lost by {lose}"
        );
        last = next;
    }
    // A counter at the largest integer a script can hold is refused, and nothing changes.
    server.cmd::<()>(&["SET", FENCE, "9007199254740991"]);
    server
        .redlock(&["acquire", "--key", "deploy", "--ttl", "30s"])
        .run()
        .code(64)
        .one_line_error("fence counter redlock:{deploy}:fence is at its maximum");
    assert_eq!(server.keys_but_history(), [FENCE]);
}

/// A fence counter behind the server's clock (a replica promoted before the latest fences
/// reached it, which then issues fences from the counter it has) does not hold the next fence
/// back: it is the server's clock (to a tenth of a second), above every fence issued more than a
/// tenth of a second before and above the counter. A counter ahead of the clock (written back
/// from a master whose clock is ahead, in quorum mode) gives one more than itself.
#[test]
fn fences_rise_above_a_counter_left_behind() {
    let server = RedisServer::start();
    let counter =
        |server: &RedisServer| -> u64 { server.cmd::<String>(&["GET", FENCE]).parse().unwrap() };
    let issued: Vec<u64> = (0..3).map(|_| fence_of_one_hold(&server)).collect();
    assert!(
        issued.windows(2).all(|pair| pair[0] < pair[1]),
        "{issued:?}"
    );
    // The counter as a replica that missed the last two fences has it, a failover later.
    let behind = issued[0];
    server.cmd::<()>(&["SET", FENCE, &behind.to_string()]);
    std::thread::sleep(Duration::from_millis(150));
    let next = fence_of_one_hold(&server);
    assert!(
        next > issued[2] && next > behind + 1,
        "fence {next} after fences {issued:?} and a counter left at {behind}"
    );
    assert_eq!(counter(&server), next);
    // Far behind: a counter that started long ago and was never raised.
    server.cmd::<()>(&["SET", FENCE, "1000"]);
    std::thread::sleep(Duration::from_millis(150));
    let after = fence_of_one_hold(&server);
    assert!(after > next, "fence {after} after {next}");
    // Ahead of the clock by a day: one more than the counter.
    let ahead = after + 86_400_000_000;
    server.cmd::<()>(&["SET", FENCE, &ahead.to_string()]);
    assert_eq!(fence_of_one_hold(&server), ahead + 1);
    assert_eq!(counter(&server), ahead + 1);
}

/// A request redlock gave up on (no answer within --command-timeout: the server stopped,
/// sleeping, or paused) still runs when the server comes back; it must take nothing. redlock
/// marks the token given up before it exits, and the acquire script honours the mark, in
/// whichever order the server runs the two.
#[test]
fn a_request_given_up_on_takes_nothing_when_it_runs_late() {
    use crate::util::{send_signal, wait_until};
    let server = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let nothing_held = |server: &RedisServer| {
        server.cmd::<i64>(&["EXISTS", HOLDERS]) == 0
            && server.cmd::<i64>(&["EXISTS", "redlock:{deploy}:queue"]) == 0
    };
    let stall = |how: &str| -> std::thread::JoinHandle<()> {
        let (port, how) = (server.port, how.to_owned());
        match how.as_str() {
            "STOP" => {
                send_signal(server.pid(), "STOP");
                std::thread::spawn(|| {})
            }
            "PAUSE" => {
                server.cmd::<()>(&["CLIENT", "PAUSE", "2500", "WRITE"]);
                std::thread::spawn(|| {})
            }
            _ => std::thread::spawn(move || {
                let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let _: redis::RedisResult<()> =
                    redis::cmd("DEBUG").arg("SLEEP").arg("2.5").query(&mut con);
            }),
        }
    };
    for how in [
        "STOP",
        "SLEEP",
        "PAUSE",
        "STOP, only the acquire script cached",
    ] {
        for args in [
            &["acquire", "--key", "deploy", "--ttl", "60s"][..],
            &["acquire", "--key", "deploy", "--ttl", "60s", "--wait", "1s"],
            &["run", "--key", "deploy", "--ttl", "60s", "--", "true"],
        ] {
            // The scripts are in the server's cache, as on any server in use: the late request
            // runs, instead of failing with NOSCRIPT. Only the acquire script, at last: the
            // cancel must run even so.
            if how.contains("only") {
                server.cmd::<()>(&["SCRIPT", "FLUSH"]);
                server.cmd::<()>(&["DEL", "redlock:{warm}:holders", "redlock:{warm}:leases"]);
                server
                    .redlock(&["acquire", "--key", "warm", "--ttl", "1s"])
                    .run()
                    .code(0);
            } else {
                server
                    .redlock(&["run", "--key", "warm", "--", "true"])
                    .run()
                    .code(0);
            }
            let sleeper = stall(how.split(',').next().unwrap());
            std::thread::sleep(Duration::from_millis(100));
            let out = server
                .redlock(
                    &[
                        &["--command-timeout", "400ms", "--connect-timeout", "400ms"][..],
                        args,
                    ]
                    .concat(),
                )
                .run();
            if how.starts_with("STOP") {
                send_signal(server.pid(), "CONT");
            }
            sleeper.join().unwrap();
            out.code(69);
            // The server answers again and runs what it had buffered, in whichever order: the
            // lock stays free.
            assert!(wait_until(Duration::from_secs(5), || {
                server.cmd::<String>(&["PING"]) == "PONG"
            }));
            std::thread::sleep(Duration::from_millis(600));
            assert!(
                nothing_held(&server),
                "{how} {args:?}: a request given up on took the lock: {:?}",
                server.keys()
            );
        }
    }
}

/// `doctor` says, one line per subject, what the server does to the safety of locks, and exits
/// 1 when anything is unsafe: an eviction policy that evicts locks, a replica, a user denied a
/// command redlock needs.
#[test]
fn doctor_names_what_is_unsafe() {
    let verdict = |out: &crate::util::Output, check: &str| -> String {
        out.stdout
            .lines()
            .find(|line| line.split_whitespace().nth(1) == Some(check))
            .unwrap_or_else(|| out.fail(&format!("no {check} line")))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let server = RedisServer::start();
    let out = server.redlock(&["doctor"]).run();
    out.code(0);
    for (check, expected) in [
        ("server", "ok"),
        ("replication", "ok"),
        ("memory", "ok"),
        ("persistence", "warning"),
        ("permissions", "ok"),
    ] {
        assert_eq!(verdict(&out, check), expected, "{check}:\n{}", out.stdout);
    }
    let json = server.redlock(&["doctor", "--json"]).run();
    json.code(0);
    assert_eq!(json.json().as_array().unwrap().len(), 5);
    // The same word in JSON as in text.
    let persistence = json
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|finding| finding["check"] == "persistence")
        .cloned()
        .unwrap();
    assert_eq!(persistence["verdict"], "warning", "{persistence}");

    for (policy, expected) in [
        ("volatile-lru", "UNSAFE"),
        ("allkeys-lfu", "UNSAFE"),
        ("noeviction", "ok"),
    ] {
        server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "100mb"]);
        server.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let out = server.redlock(&["doctor"]).run();
        out.code(if expected == "ok" { 0 } else { 1 });
        assert_eq!(verdict(&out, "memory"), expected, "{policy}");
    }
    server.cmd::<()>(&["CONFIG", "SET", "appendonly", "yes"]);
    server.cmd::<()>(&["CONFIG", "SET", "appendfsync", "always"]);
    assert_eq!(
        verdict(&server.redlock(&["doctor"]).run(), "persistence"),
        "ok"
    );

    // A user that may not add to sorted sets, nor read INFO: the rest says "unknown".
    let mut args = vec!["ACL", "SETUSER", "narrow", "on", ">pw"];
    args.extend(
        "resetkeys ~redlock:* -@all +evalsha +eval +get +set +time +hgetall +hget"
            .split_whitespace(),
    );
    server.cmd::<()>(&args);
    let out = server
        .redlock(&["doctor"])
        .env(
            "REDLOCK_URL",
            &format!("redis://narrow:pw@127.0.0.1:{}", server.port),
        )
        .run();
    out.code(1).stdout_contains("zadd");
    assert_eq!(verdict(&out, "permissions"), "UNSAFE");
    assert_eq!(verdict(&out, "memory"), "unknown");

    // A replica refuses writes.
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &server.port.to_string()]);
    let out = replica.redlock(&["doctor"]).run();
    out.code(1);
    assert_eq!(verdict(&out, "role"), "UNSAFE");
}

/// Repro: with the README's least-privilege user doctor could not read INFO or
/// CONFIG, printed four `unknown` lines and exited 0 on a server with `allkeys-lru`; without a
/// password it printed unknowns and UNSAFE; against an HTTP server it said "Broken pipe". An
/// unknown safety subject now exits 3 and names the grant; the operator's grants see the
/// danger (exit 1); a server that cannot be asked fails as any command does (77, 69).
#[test]
fn doctor_never_passes_blind() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    let add_user = |name: &str, rules: &str| {
        let mut args = vec!["ACL", "SETUSER", name, "on", ">pw"];
        args.extend(rules.split_whitespace());
        server.cmd::<()>(&args);
        format!("redis://{name}:pw@127.0.0.1:{}", server.port)
    };
    let minimal = add_user("locker", crate::bad_input::MINIMAL_ACL);
    let out = server
        .redlock(&["doctor"])
        .env("REDLOCK_URL", &minimal)
        .run();
    out.code(3).stdout_contains("grant +info +config|get");
    assert_eq!(out.stdout.matches("unknown ").count(), 4, "{}", out.stdout);
    let operator = add_user(
        "operator",
        &format!("{} +info +config|get", crate::bad_input::MINIMAL_ACL),
    );
    let out = server
        .redlock(&["doctor"])
        .env("REDLOCK_URL", &operator)
        .run();
    out.code(1)
        .stdout_contains("UNSAFE   memory       maxmemory 100.00M with allkeys-lru");
    if out.stdout.contains("unknown") {
        out.fail("the operator's grants should see every subject");
    }

    let protected = RedisServer::start_with(&["--requirepass", "pw"]);
    Redlock::new(&["doctor"])
        .env("REDLOCK_URL", &protected.url())
        .run()
        .code(77)
        .one_line_error("authentication required");

    // Something that is not Redis: an HTTP server answering and closing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        if let Ok((mut stream, _)) = listener.accept() {
            let mut request = [0_u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n<html>no</html>\n");
        }
    });
    Redlock::new(&["doctor"])
        .env("REDLOCK_URL", &format!("redis://127.0.0.1:{port}"))
        .run()
        .code(69)
        .one_line_error("not a Redis server");
    http.join().unwrap();
}

/// No locks: stdout stays empty (scripts count lines), and a person at a terminal is told.
#[test]
fn list_of_nothing_says_so_only_on_a_terminal() {
    let server = RedisServer::start();
    server.redlock(&["list"]).run().code(0).stderr_empty();
    let out = std::process::Command::new("script")
        .args(["-qfec", &format!("{REDLOCK} list"), "/dev/null"])
        .env("REDLOCK_URL", server.url())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script(1) runs");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("no locks are held under prefix 'redlock:'"),
        "{shown}"
    );
}

/// Repro: a `--keep-alive` lock showed only the caller's pid, often gone by then:
/// the keeper that renews it is named too, once it has renewed.
#[test]
fn a_kept_lock_names_its_keeper() {
    let server = RedisServer::start();
    let out = server
        .redlock(&[
            "acquire",
            "--key",
            "k",
            "--ttl",
            "3s",
            "--keep-alive",
            "--max-hold",
            "20s",
        ])
        .run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    let mut keeper = serde_json::Value::Null;
    assert!(wait_until(Duration::from_secs(5), || {
        let view = server
            .redlock(&["inspect", "--key", "k", "--json"])
            .run()
            .json();
        keeper = view["holders"][0]["keeper_pid"].clone();
        !keeper.is_null()
    }));
    let pid = keeper.as_u64().unwrap();
    assert!(
        crate::util::alive(u32::try_from(pid).unwrap()),
        "keeper {pid}"
    );
    server
        .redlock(&["inspect", "--key", "k"])
        .run()
        .code(0)
        .stdout_contains(&format!(" (keeper {pid})"));
    server
        .redlock(&["release", "--key", "k"])
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(0);
}
