//! Faults from people and configuration, counted (docs/reliability.md): a Redis user with the
//! documented minimal ACL, whose rights change mid-run (T31); passwords from every source,
//! looked for wherever redlock writes (T33); lock names built to break things (T34); and a
//! crowd of waiters that must not load Redis (T37).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::harness::{self, Probe, Sampler, Tally};
use crate::bad_input::MINIMAL_ACL;
use crate::util::{RedisServer, Redlock, TempDir, wait_until};

const HOLDERS: &str = "redlock:{job}:holders";

/// One number from `INFO <section>`.
fn info(server: &RedisServer, section: &str, field: &str) -> f64 {
    let text: String = server.cmd(&["INFO", section]);
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
}

/// Failed AUTH attempts since the last `ACL LOG RESET`, from the ACL log's "auth" entries.
fn failed_auths(server: &RedisServer) -> i64 {
    let entries: Vec<Vec<redis::Value>> = server.cmd(&["ACL", "LOG", "128"]);
    let text = |value: &redis::Value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        _ => String::new(),
    };
    entries
        .iter()
        .filter_map(|entry| {
            let field = |name: &str| {
                entry
                    .chunks(2)
                    .find(|pair| text(&pair[0]) == name)
                    .map(|pair| pair[1].clone())
            };
            let is_auth = field("reason").is_some_and(|reason| text(&reason) == "auth");
            match field("count") {
                Some(redis::Value::Int(count)) if is_auth => Some(count),
                _ => None,
            }
        })
        .sum()
}

/// T31: the documented minimal ACL carries contended runs; a right taken away mid-run (the
/// scripts, or the whole user) stops the command with 77; a wrong password is tried a few
/// times at most, never hammered.
#[test]
fn a_minimal_acl_user_runs_and_a_lost_right_stops_cleanly() {
    let mut tally = Tally::new(
        "T31",
        "the minimal ACL: contended runs, -eval and DELUSER mid-run, a wrong password",
    );
    let server = RedisServer::start();
    let add_user = || {
        let mut args = vec!["ACL", "SETUSER", "locker", "on", ">pw"];
        args.extend(MINIMAL_ACL.split_whitespace());
        server.cmd::<()>(&args);
    };
    add_user();
    let url = format!("redis://locker@127.0.0.1:{}", server.port);
    let as_locker = |args: &[&str]| {
        Redlock::new(args)
            .env("REDLOCK_URL", &url)
            .env("REDLOCK_PASSWORD", "pw")
    };
    let sampler = Sampler::start(server.port, Duration::from_secs(5));

    // Contended runs.
    let probe = Probe::new();
    let (workers, each) = if harness::full() { (8, 25) } else { (3, 4) };
    let codes = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                for _ in 0..each {
                    let mut args =
                        vec!["run", "--key", "job", "--ttl", "5s", "--wait", "120s", "--"];
                    let command = probe.command(Duration::from_millis(20));
                    args.extend(command.iter().map(String::as_str));
                    let out = as_locker(&args).run();
                    codes.lock().unwrap().push(out.status.code());
                }
            });
        }
    });
    for code in codes.lock().unwrap().iter() {
        tally.runs += 1;
        tally.exit(*code, &[0], "a contended run under the minimal ACL");
    }
    let verdict = probe.verdict();
    tally.add_verdict(verdict);

    // A right taken away mid-run: the scripts (-evalsha -eval), then the user itself.
    let mut stopped_in = Vec::new();
    let takeaways: [&[&str]; 2] = [
        &["ACL", "SETUSER", "locker", "-evalsha", "-eval"],
        &["ACL", "DELUSER", "locker"],
    ];
    for takeaway in takeaways {
        let probe = Probe::new();
        let mut args = vec!["run", "--key", "job", "--ttl", "2s", "--"];
        let command = probe.command(Duration::from_secs(30));
        args.extend(command.iter().map(String::as_str));
        let running = as_locker(&args).spawn();
        assert!(probe.wait_started(1, Duration::from_secs(10)));
        let at = Instant::now();
        server.cmd::<redis::Value>(takeaway);
        let out = running.wait(Duration::from_secs(15));
        stopped_in.push(at.elapsed());
        tally.runs += 1;
        tally.faults += 1;
        tally.exit(out.status.code(), &[77], &format!("{takeaway:?} mid-run"));
        if probe.verdict().completed != 0 {
            eprintln!("{takeaway:?}: the command ran on");
            tally.overlaps += 1;
        }
        let _: redis::Value = server.cmd(&["ACL", "DELUSER", "locker"]);
        add_user();
        // The lock it could not release expires by itself.
        if !wait_until(Duration::from_secs(4), || {
            server.cmd::<i64>(&["EXISTS", HOLDERS]) == 0
        }) {
            tally.leaked_keys += 1;
        }
    }

    // A wrong password: 77, with a handful of AUTH attempts, even for a waiting run.
    let _: () = server.cmd(&["ACL", "LOG", "RESET"]);
    let started = Instant::now();
    let out = Redlock::new(&[
        "run", "--key", "job", "--ttl", "5s", "--wait", "10s", "--", "true",
    ])
    .env("REDLOCK_URL", &url)
    .env("REDLOCK_PASSWORD", "wrong")
    .run();
    tally.runs += 1;
    tally.faults += 1;
    tally.exit(out.status.code(), &[77], "a wrong password");
    std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    let attempts = failed_auths(&server);
    if attempts > 3 {
        eprintln!("{attempts} AUTH attempts with a wrong password");
        tally.unexplained_exits += 1;
    }
    tally.add_sampled(sampler.stop());
    tally.notes = format!(
        "{} contended runs, {} probes completed; -eval and DELUSER mid-run: command stopped, 77, within {} and {} ms; wrong password: 77 after {} ms, {attempts} failed AUTH",
        workers * each,
        verdict.completed,
        stopped_in[0].as_millis(),
        stopped_in[1].as_millis(),
        out.elapsed.as_millis()
    );
    tally.finish();
}

/// T33: a password given through the environment, a file (0600 and 0644), REDLOCK_URL or
/// `--redis` never shows in redlock's command line (unless put there), the command's
/// environment or command line, `-vv` output, JSON output or error messages; a file others
/// can read and a password on the command line are warned about.
#[test]
fn a_password_shows_nowhere() {
    let mut tally = Tally::new("T33", "passwords from every source, looked for everywhere");
    let secret = "s3cret-T33-Pa55";
    let server = RedisServer::start_with(&["--requirepass", secret]);
    let dir = TempDir::new("secrets");
    let private = dir.path().join("private");
    let shared = dir.path().join("shared");
    for (file, mode) in [(&private, 0o600), (&shared, 0o644)] {
        std::fs::write(file, format!("{secret}\n")).unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let bare = format!("redis://127.0.0.1:{}", server.port);
    let with_secret = format!("redis://:{secret}@127.0.0.1:{}", server.port);
    let (private, shared) = (private.display().to_string(), shared.display().to_string());
    // (source, global args, environment, whether the password is in redlock's own argv,
    // the warning expected)
    type Source<'a> = (
        &'a str,
        Vec<&'a str>,
        Vec<(&'a str, &'a str)>,
        bool,
        Option<&'a str>,
    );
    let sources: [Source<'_>; 5] = [
        (
            "REDLOCK_PASSWORD",
            vec!["--redis", &bare],
            vec![("REDLOCK_PASSWORD", secret)],
            false,
            None,
        ),
        (
            "--password-file 0600",
            vec!["--redis", &bare, "--password-file", &private],
            vec![],
            false,
            None,
        ),
        (
            "--password-file 0644",
            vec!["--redis", &bare, "--password-file", &shared],
            vec![],
            false,
            Some("readable by others"),
        ),
        (
            "REDLOCK_URL",
            vec![],
            vec![("REDLOCK_URL", &with_secret)],
            false,
            None,
        ),
        (
            "--redis URL",
            vec!["--redis", &with_secret],
            vec![],
            true,
            Some("process list"),
        ),
    ];
    let mut shown = Vec::new();
    let mut looked = 0;
    for (n, (source, global, env, in_argv, warning)) in sources.iter().enumerate() {
        let held = format!("held-{n}");
        let seen = dir.path().join("seen");
        let command = format!(
            "env > {seen}.env; tr '\\0' ' ' < /proc/$$/cmdline > {seen}.cmdline; tr '\\0' ' ' < /proc/$PPID/cmdline > {seen}.parent",
            seen = seen.display()
        );
        let invocations: Vec<Vec<&str>> = vec![
            vec![
                "-vv", "run", "--key", "job", "--ttl", "5s", "--", "sh", "-c", &command,
            ],
            vec![
                "--log-format",
                "json",
                "-vv",
                "acquire",
                "--key",
                &held,
                "--ttl",
                "30s",
                "--note",
                "n",
            ],
            vec!["inspect", "--key", &held, "--json"],
            vec!["list", "--json"],
            vec!["-vv", "doctor"],
        ];
        for args in invocations {
            let mut redlock = Redlock::new(&[]).env_remove("REDLOCK_URL");
            for (name, value) in env {
                redlock = redlock.env(name, value);
            }
            let out = redlock.args(global).args(&args).run();
            tally.runs += 1;
            tally.exit(out.status.code(), &[0, 1], &format!("{source}: {args:?}"));
            looked += 2;
            if out.stdout.contains(secret) || out.stderr.contains(secret) {
                shown.push(format!("{source}: output of {:?}", args[..2].join(" ")));
            }
            if let Some(warning) = warning
                && args[0] == "-vv"
                && args[1] == "run"
                && !out.stderr.contains(warning)
            {
                eprintln!(
                    "{source}: no warning containing {warning:?}:\n{}",
                    out.stderr
                );
                tally.unexplained_exits += 1;
            }
        }
        for (what, file) in [
            ("the command's environment", "env"),
            ("the command's command line", "cmdline"),
            ("redlock's command line", "parent"),
        ] {
            let text = std::fs::read_to_string(dir.path().join(format!("seen.{file}"))).unwrap();
            looked += 1;
            if text.contains(secret) && !(file == "parent" && *in_argv) {
                shown.push(format!("{source}: {what}"));
            }
        }
    }
    // A wrong password's error names neither it nor the right one.
    let wrong = format!("redis://:wrong-{secret}@127.0.0.1:{}", server.port);
    let out = Redlock::new(&["inspect", "--key", "held"])
        .env("REDLOCK_URL", &wrong)
        .run();
    tally.runs += 1;
    tally.faults += 1;
    tally.exit(out.status.code(), &[77], "a wrong password");
    looked += 1;
    if out.stderr.contains(secret) {
        shown.push("the wrong password's error".to_owned());
    }
    for place in &shown {
        eprintln!("the password showed in {place}");
    }
    tally.unexplained_exits += shown.len() as u64;
    tally.notes = format!(
        "5 sources x 5 commands (run -vv, acquire with JSON logs, inspect --json, list --json, doctor -vv) and a wrong password: {looked} places looked at, password found in {}; warned for the 0644 file and the URL on the command line (the one place it shows: redlock's own argv, as put there)",
        shown.len()
    );
    tally.finish();
}

/// T34: lock names built to break things are refused as usage errors that touch nothing, or
/// used literally: their own keys only, shown escaped, released by their token.
#[test]
fn hostile_lock_names_are_refused_or_taken_literally() {
    let mut tally = Tally::new(
        "T34",
        "lock names: empty, long, control bytes, non-UTF-8, globs, braces",
    );
    let server = RedisServer::start();
    let bystander = server
        .redlock(&["acquire", "--key", "bystander", "--ttl", "60s"])
        .run();
    bystander.code(0);
    let bystander_record: Vec<String> = server.cmd(&["HVALS", "redlock:{bystander}:holders"]);
    let long = "k".repeat(1025);
    let refused: Vec<&[u8]> = vec![
        b"",
        long.as_bytes(),
        b"line\nbreak",
        b"carriage\rreturn",
        b"esc\x1b[31m",
        b"nul-free\x07bell",
        b"bad\xffutf8",
    ];
    let literal: Vec<&str> = vec![
        "*",
        "job?",
        "[a-z]*",
        "{x}",
        "a}b{c",
        "{",
        "}",
        "{}",
        "a b",
        "quote'\"",
        "ключ",
        "redlock:{bystander}:holders",
        "..",
    ];
    let mut names_checked = 0;
    for name in &refused {
        let before = server.keys();
        for args in [
            vec!["acquire", "--ttl", "10s", "--key"],
            vec!["release", "--force", "--key"],
            vec!["inspect", "--key"],
            vec!["run", "--ttl", "10s", "--key"],
        ] {
            let mut redlock = server.redlock(&args).arg(OsStr::from_bytes(name));
            if args[0] == "run" {
                redlock = redlock.args(&["--", "true"]);
            }
            let out = redlock.run();
            tally.runs += 1;
            tally.exit(
                out.status.code(),
                &[64],
                &format!("{:?} {args:?}", String::from_utf8_lossy(name)),
            );
            if out.stderr.lines().count() != 1 || out.stderr.contains('\x1b') {
                eprintln!("not one clean line: {:?}", out.stderr);
                tally.unexplained_exits += 1;
            }
        }
        if server.keys() != before {
            eprintln!("refused name {name:?} changed Redis");
            tally.leaked_keys += 1;
        }
        names_checked += 1;
    }
    for name in &literal {
        let out = server
            .redlock(&["acquire", "--ttl", "10s", "--key", name])
            .run();
        tally.runs += 1;
        tally.exit(out.status.code(), &[0], &format!("acquire {name:?}"));
        let token = out.stdout.trim().to_owned();
        let inspected = server.redlock(&["inspect", "--json", "--key", name]).run();
        let listed = server.redlock(&["list", "--json"]).run();
        let named = inspected.status.success()
            && inspected.json()["key"] == serde_json::json!(name)
            && listed.json().as_array().is_some_and(|locks| {
                locks
                    .iter()
                    .any(|lock| lock["key"] == serde_json::json!(name))
            });
        let table = server.redlock(&["list"]).run();
        if !named || table.stdout.contains('\x1b') {
            eprintln!(
                "{name:?}: not shown as itself\n{}\n{}",
                inspected.stdout, listed.stdout
            );
            tally.unexplained_exits += 1;
        }
        let released = server
            .redlock(&["release", "--key", name, "--token", &token])
            .run();
        tally.exit(released.status.code(), &[0], &format!("release {name:?}"));
        let left: Vec<String> = server
            .keys_but_history()
            .into_iter()
            .filter(|key| !key.ends_with(":fence") && !key.starts_with("redlock:{bystander}"))
            .collect();
        if !left.is_empty() {
            eprintln!("{name:?} left {left:?}");
            tally.leaked_keys += 1;
        }
        names_checked += 1;
    }
    // Nothing reached the bystander.
    let after: Vec<String> = server.cmd(&["HVALS", "redlock:{bystander}:holders"]);
    if after != bystander_record {
        eprintln!("the bystander lock changed");
        tally.overlaps += 1;
    }
    tally.notes = format!(
        "{names_checked} names: {} refused with 64 by acquire, release, inspect and run, Redis untouched; {} taken literally, shown as themselves, released by token; the bystander lock untouched",
        refused.len(),
        literal.len()
    );
    tally.finish();
}

/// T37: a crowd of waiters behind a long hold costs Redis little (commands per second, CPU,
/// connections per waiter), then every one of them runs, in turn.
#[test]
fn a_crowd_of_waiters_costs_redis_little() {
    let mut tally = Tally::new("T37", "many waiters behind a long hold");
    let server = RedisServer::start_with(&["--maxclients", "2000"]);
    let (waiters, hold) = if harness::full() {
        (300, Duration::from_secs(30))
    } else {
        (30, Duration::from_secs(4))
    };
    let holder = server
        .redlock(&["acquire", "--key", "job", "--ttl", "120s"])
        .run();
    holder.code(0);
    let probe = Probe::new();
    let mut running = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        let mut args = vec![
            "run", "--key", "job", "--ttl", "10s", "--wait", "600s", "--",
        ];
        let command = probe.command(Duration::from_millis(5));
        args.extend(command.iter().map(String::as_str));
        running.push(server.redlock(&args).spawn());
    }
    let queued = wait_until(Duration::from_secs(120), || {
        server.cmd::<i64>(&["HLEN", "redlock:{job}:waiters"]) == waiters as i64
    });
    assert!(queued, "the waiters did not all queue");
    let sampler = Sampler::start(server.port, Duration::from_secs(120));
    let commands_before = info(&server, "stats", "total_commands_processed");
    let cpu = |server: &RedisServer| {
        info(server, "cpu", "used_cpu_sys") + info(server, "cpu", "used_cpu_user")
    };
    let cpu_before = cpu(&server);
    let started = Instant::now();
    std::thread::sleep(hold);
    let seconds = started.elapsed().as_secs_f64();
    // INFO's own commands aside.
    let commands = info(&server, "stats", "total_commands_processed") - commands_before - 2.0;
    let cpu_share = (cpu(&server) - cpu_before) / seconds;
    let clients = info(&server, "clients", "connected_clients") - 1.0;
    let ops = commands / seconds;
    let per_waiter = clients / waiters as f64;
    if ops > 2000.0 || cpu_share > 0.25 || per_waiter > 2.0 {
        eprintln!(
            "{ops:.0} ops/s, CPU {:.1} %, {per_waiter:.2} connections per waiter",
            cpu_share * 100.0
        );
        tally.unexplained_exits += 1;
    }
    server
        .redlock(&["release", "--key", "job", "--token", holder.stdout.trim()])
        .run()
        .code(0);
    for waiter in running {
        let out = waiter.wait(Duration::from_secs(300));
        tally.runs += 1;
        tally.exit(out.status.code(), &[0], "a waiter in the crowd");
    }
    let verdict = probe.verdict();
    tally.add_verdict(verdict);
    tally.add_sampled(sampler.stop());
    tally.notes = format!(
        "{waiters} waiters behind a {} s hold: {ops:.1} commands/s (plan: 2,000), Redis CPU {:.1} % (plan: 25 %), {per_waiter:.2} connections per waiter (plan: 2); then {} probes ran one at a time",
        hold.as_secs(),
        cpu_share * 100.0,
        verdict.completed
    );
    tally.finish();
}
