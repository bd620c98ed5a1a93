//! Hostile data in Redis: keys that another user of the server filled by hand,
//! with records that are well-formed or only look so. Every script that reads a capped key is
//! run over ten times its cap; each must answer with a documented exit code (never 70), leave
//! every key it wrote with an expiry (the fence counter aside), and refuse a record it could
//! not process before its first write, so that nothing is left half-changed. The readers
//! (list, inspect, history) cut fields too long to show, skip records they cannot read with a
//! warning, and let no string from Redis or a server drive the terminal.

use std::time::Duration;

use crate::util::{RedisServer, Redlock};

const HOLDERS: &str = "redlock:{job}:holders";
const LEASES: &str = "redlock:{job}:leases";
const QUEUE: &str = "redlock:{job}:queue";
const WAITERS: &str = "redlock:{job}:waiters";
const HISTORY: &str = "redlock:{job}:history";

/// One command with many arguments (one round trip, however long).
fn cmd_many(server: &RedisServer, head: &[&str], rest: &[String]) {
    let mut args: Vec<&str> = head.to_vec();
    args.extend(rest.iter().map(String::as_str));
    server.cmd::<redis::Value>(&args);
}

/// A finished hold's history entry, as redlock writes it.
fn history_entry(fence: u64) -> String {
    serde_json::json!({
        "fence": fence.to_string(), "mode": "exclusive", "limit": 0, "host": "h", "pid": 1,
        "user": "u", "cmd": "c", "since": 1, "exp": 2, "ended": 2, "outcome": "released",
    })
    .to_string()
}

/// Adds `count` well-formed, finished entries to the history of `key`, fences 1 to `count`.
fn fill_history(server: &RedisServer, key: &str, count: u64) {
    let members: Vec<String> = (1..=count)
        .flat_map(|fence| [fence.to_string(), history_entry(fence)])
        .collect();
    cmd_many(server, &["ZADD", key], &members);
}

/// Asserts that every key of the lock `job` but its fence counter has an expiry.
#[track_caller]
fn every_key_expires(server: &RedisServer) {
    for key in server.keys() {
        if key.ends_with(":fence") {
            continue;
        }
        let pttl: i64 = server.cmd(&["PTTL", &key]);
        assert!(pttl > 0, "{key} has no expiry (PTTL {pttl})");
    }
}

fn zcard(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["ZCARD", key])
}

/// Repro: 8,200 entries made `settle` unpack them all in one call, which failed
/// after the holder was written: no token, a lock without expiry, every later acquire failing.
#[test]
fn a_history_filled_by_hand_neither_breaks_nor_blocks_the_lock() {
    let server = RedisServer::start();
    fill_history(&server, "redlock:{h}:history", 8200);
    let out = server
        .redlock(&["acquire", "--key", "h", "--ttl", "30s"])
        .run();
    out.code(0);
    assert_eq!(out.stdout.trim().len(), 32, "a token: {:?}", out.stdout);
    let pttl: i64 = server.cmd(&["PTTL", "redlock:{h}:holders"]);
    assert!(pttl > 25_000 && pttl <= 30_000, "PTTL {pttl}");
    every_key_expires(&server);
    server
        .redlock(&["release", "--key", "h", "--force"])
        .run()
        .code(0);
    // Each call trims a bounded number; successive calls bring it back to its cap.
    let mut calls = 2;
    while zcard(&server, "redlock:{h}:history") > 100 {
        assert!(calls < 12, "still trimming after {calls} calls");
        server
            .redlock(&["acquire", "--key", "h", "--ttl", "30s"])
            .run()
            .code(0);
        server
            .redlock(&["release", "--key", "h", "--force"])
            .run()
            .code(0);
        calls += 2;
    }
    assert_eq!(zcard(&server, "redlock:{h}:history"), 100);
    every_key_expires(&server);
}

/// The history (cap: 100) at ten times its cap, under every script that reads or trims it.
#[test]
fn every_script_copes_with_a_history_ten_times_its_cap() {
    let server = RedisServer::start();
    let redlock = |args: &[&str]| server.redlock(args).run();
    fill_history(&server, HISTORY, 1000);
    // Read-only: history shows its cap, inspect the latest hold.
    let out = redlock(&["history", "--key", "job", "--json"]);
    out.code(0);
    assert_eq!(out.json().as_array().unwrap().len(), 100);
    redlock(&["inspect", "--key", "job"])
        .code(1)
        .stdout_contains("last run: fence 1000");
    // acquire.lua, extend.lua, release.lua (token, then force), each over a full history.
    let token = redlock(&["acquire", "--key", "job", "--ttl", "30s"]);
    token.code(0);
    let token = token.stdout.trim().to_owned();
    every_key_expires(&server);
    fill_history(&server, HISTORY, 1000);
    redlock(&["extend", "--key", "job", "--token", &token, "--ttl", "40s"]).code(0);
    every_key_expires(&server);
    fill_history(&server, HISTORY, 1000);
    redlock(&["release", "--key", "job", "--token", &token]).code(0);
    every_key_expires(&server);
    redlock(&["acquire", "--key", "job", "--ttl", "30s"]).code(0);
    fill_history(&server, HISTORY, 1000);
    redlock(&["release", "--key", "job", "--force"]).code(0);
    every_key_expires(&server);
    // run: a queued acquire, renewals and a release with its exit status.
    fill_history(&server, HISTORY, 1000);
    redlock(&["run", "--key", "job", "--ttl", "3s", "--", "sleep", "1.5"]).code(0);
    every_key_expires(&server);
    assert!(
        zcard(&server, HISTORY) <= 101,
        "{}",
        zcard(&server, HISTORY)
    );
}

/// raise.lua (quorum mode) trims the history it moves an entry in.
#[test]
fn raising_a_fence_copes_with_a_history_ten_times_its_cap() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for server in &servers {
        fill_history(server, HISTORY, 1000);
    }
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let out = Redlock::new(&["acquire", "--key", "job", "--ttl", "30s"])
        .env("REDLOCK_URL", &urls.join(" "))
        .run();
    out.code(0);
    for server in &servers {
        every_key_expires(server);
        assert!(zcard(server, HISTORY) <= 101, "{}", zcard(server, HISTORY));
    }
}

/// A holder record as redlock writes it, with lease end `exp` (server ms).
fn holder_record(mode: &str, fence: u64, since: u64, exp: u64) -> String {
    serde_json::json!({
        "mode": mode, "limit": 0, "count": 1, "fence": fence.to_string(), "host": "h",
        "pid": 1, "user": "u", "cmd": "c", "since": since, "ttl": exp - since, "exp": exp,
    })
    .to_string()
}

/// Expired holders are deleted 100 per call: 1,000 of them beside one live shared holder.
#[test]
fn expired_holders_ten_times_the_cleanup_are_deleted_over_calls() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let (mut fields, mut members) = (Vec::new(), Vec::new());
    for n in 0..=1000u64 {
        let token = format!("{n:032x}");
        // The first is live for a minute; the rest expired a second ago.
        let exp = if n == 0 { now + 60_000 } else { now - 1000 };
        fields.extend([
            token.clone(),
            holder_record("shared", n + 1, now - 5000, exp),
        ]);
        members.extend([exp.to_string(), token]);
    }
    cmd_many(&server, &["HSET", HOLDERS], &fields);
    cmd_many(&server, &["ZADD", LEASES], &members);
    for key in [HOLDERS, LEASES] {
        server.cmd::<()>(&["PEXPIREAT", key, &(now + 60_000).to_string()]);
    }
    for call in 1..=10 {
        server
            .redlock(&["acquire", "--key", "job", "--shared", "--ttl", "30s"])
            .run()
            .code(0);
        every_key_expires(&server);
        // 1,001 records, the live one and the 1,000 expired; each call deletes 100 expired
        // ones and adds its own hold.
        let left: i64 = server.cmd(&["HLEN", HOLDERS]);
        assert_eq!(left, 1001 - 100 * call + call, "after call {call}");
    }
    server
        .redlock(&["inspect", "--key", "job"])
        .run()
        .code(0)
        .stdout_contains("shared by 11");
}

/// A queue entry as redlock writes it, for waiter `n`, alive until `exp` (server ms).
fn queue_entry(n: u64, exp: u64) -> String {
    serde_json::json!({
        "tok": format!("{n:032x}"), "mode": "exclusive", "limit": 0, "host": "h", "pid": 1,
        "user": "u", "cmd": "c", "since": exp - 120_000, "exp": exp, "ttl": 30_000,
    })
    .to_string()
}

/// The head of the queue is looked for among 1,000 entries per call; 10,000 dead ones there
/// (lapsed for two minutes: anyone may drop those, not only a steady waiter) take a call per
/// 1,000 (busy meanwhile, with nobody holding), then the lock is taken.
#[test]
fn a_queue_of_dead_waiters_ten_times_the_scan_is_dropped_over_calls() {
    let server = RedisServer::start();
    let now = server.time_ms();
    for chunk in 0..10u64 {
        let (mut places, mut entries) = (Vec::new(), Vec::new());
        for n in chunk * 1000..(chunk + 1) * 1000 {
            let id = format!("{n:016x}");
            places.extend([(n + 1).to_string(), id.clone()]);
            entries.extend([id, queue_entry(n, now - 120_000)]);
        }
        cmd_many(&server, &["ZADD", QUEUE], &places);
        cmd_many(&server, &["HSET", WAITERS], &entries);
    }
    for key in [QUEUE, WAITERS] {
        server.cmd::<()>(&["PEXPIREAT", key, &(now + 60_000).to_string()]);
    }
    server
        .redlock(&["inspect", "--key", "job"])
        .run()
        .code(1)
        .stdout_contains("10000 entries in the queue");
    let mut calls = 0;
    loop {
        calls += 1;
        let out = server
            .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
            .run();
        every_key_expires(&server);
        if out.status.code() == Some(0) {
            break;
        }
        out.code(75);
        assert!(calls < 11, "still busy after {calls} calls");
    }
    assert!(calls >= 10, "taken after {calls} calls");
    let left: i64 = server.cmd(&["ZCARD", QUEUE]);
    assert_eq!(left, 0);
}

/// A record that decodes but that a script could not use after its first write (a queue entry
/// without its token, a holder with a non-numeric `since` or an infinite `limit`, a history
/// entry with a nested value) is refused before anything changes: exit 64, Redis untouched.
#[test]
fn records_a_script_could_not_use_are_refused_before_any_write() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let until = (now + 60_000).to_string();
    // A dead waiter at the head, then one without the token it would hold: a release's
    // hand-off drops the first and would put the second's missing token into the holders.
    let token = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run();
    token.code(0);
    let mut headless: serde_json::Value =
        serde_json::from_str(&queue_entry(2, now + 60_000)).unwrap();
    headless.as_object_mut().unwrap().remove("tok");
    server.cmd::<()>(&[
        "ZADD",
        QUEUE,
        "1",
        "0000000000000001",
        "2",
        "0000000000000002",
    ]);
    server.cmd::<()>(&[
        "HSET",
        WAITERS,
        "0000000000000001",
        &queue_entry(1, now - 120_000),
        "0000000000000002",
        &headless.to_string(),
    ]);
    for key in [QUEUE, WAITERS] {
        server.cmd::<()>(&["PEXPIREAT", key, &until]);
    }
    let before = state_of(&server);
    server
        .redlock(&["release", "--key", "job", "--token", token.stdout.trim()])
        .run()
        .code(64)
        .one_line_error(WAITERS);
    assert!(
        before == state_of(&server),
        "the refused release changed Redis"
    );
    server.cmd::<()>(&["DEL", QUEUE, WAITERS, HOLDERS, LEASES]);

    // Holders whose fields a script would compute with, or encode again, after its first
    // write: a release with a `since` that is not a number, an extend of a record holding
    // infinity (cjson decodes it, and cannot encode it).
    let token = format!("{:032x}", 7);
    let since_soon = serde_json::json!({"mode": "exclusive", "fence": "7", "host": "h",
        "pid": 1, "user": "u", "cmd": "c", "since": "soon", "ttl": 1, "exp": now + 60_000});
    let infinite = serde_json::json!({"mode": "semaphore", "limit": f64::INFINITY,
        "fence": "7", "host": "h", "pid": 1, "user": "u", "cmd": "c", "since": now, "ttl": 1,
        "exp": now + 60_000});
    for (record, command) in [
        (
            since_soon.to_string(),
            vec!["release", "--key", "job", "--token", &token],
        ),
        (
            // serde_json writes infinity as null: put the literal back.
            infinite.to_string().replace("null", "1e999"),
            vec!["extend", "--key", "job", "--token", &token, "--ttl", "10s"],
        ),
    ] {
        server.cmd::<()>(&["HSET", HOLDERS, &token, &record]);
        server.cmd::<()>(&["ZADD", LEASES, &(now + 60_000).to_string(), &token]);
        let before = state_of(&server);
        server
            .redlock(&command)
            .run()
            .code(64)
            .one_line_error(HOLDERS);
        assert!(
            before == state_of(&server),
            "{command:?} changed Redis: {record}"
        );
        server.cmd::<()>(&["DEL", HOLDERS, LEASES]);
    }
}

/// A user name of 70,000 characters (from $USER) made the table formatter panic (exit 70) in
/// list, inspect and history, for everyone, until the entry aged out. It is now cut when
/// written; a longer field written by someone else is cut when shown.
#[test]
fn a_field_wider_than_a_column_is_cut_not_fatal() {
    let server = RedisServer::start();
    let long = "u".repeat(70_000);
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "60s"])
        .env("USER", &long)
        .run()
        .code(0);
    let records: Vec<String> = server.cmd(&["HVALS", HOLDERS]);
    let record: serde_json::Value = serde_json::from_str(&records[0]).unwrap();
    assert_eq!(
        record["user"].as_str().unwrap().len(),
        256,
        "cut when written"
    );
    // What an older version wrote, or anyone by hand: 70,000 characters in the history.
    let mut entry: serde_json::Value = serde_json::from_str(&history_entry(1)).unwrap();
    entry["host"] = serde_json::json!(long);
    server.cmd::<()>(&["ZADD", HISTORY, "1", &entry.to_string()]);
    for args in [
        &["list"][..],
        &["inspect", "--key", "job"],
        &["history", "--key", "job"],
    ] {
        let out = server.redlock(args).run();
        out.code(0).stderr_empty();
        let widest = out.stdout.lines().map(|line| line.chars().count()).max();
        assert!(
            widest < Some(2000),
            "{args:?}: a line of {widest:?} characters"
        );
    }
    server
        .redlock(&["history", "--key", "job"])
        .run()
        .stdout_contains(&format!("{}…", "u".repeat(511)));
}

/// A record that passes the scripts' checks but that this version cannot read (`"pid": -1`)
/// is left out with one warning naming its key, never exit 70: list, inspect, history, a
/// busy acquire and a forced release go on as if it were absent (or name nobody).
#[test]
fn a_record_redlock_cannot_read_is_skipped_with_a_warning() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let token = format!("{:032x}", 7);
    let mut record: serde_json::Value =
        serde_json::from_str(&holder_record("exclusive", 7, now, now + 60_000)).unwrap();
    record["pid"] = serde_json::json!(-1);
    server.cmd::<()>(&["HSET", HOLDERS, &token, &record.to_string()]);
    server.cmd::<()>(&["ZADD", LEASES, &(now + 60_000).to_string(), &token]);
    let mut entry: serde_json::Value = serde_json::from_str(&history_entry(7)).unwrap();
    entry["pid"] = serde_json::json!(-1);
    fill_history(&server, HISTORY, 2);
    server.cmd::<()>(&["ZADD", HISTORY, "7", &entry.to_string()]);
    // One warning per record left out, naming its key: the holder, and the history entry
    // that inspect shows as the last run.
    let warned = |out: &crate::util::Output, keys: &[&str]| {
        let warnings: Vec<&str> = out.stderr.lines().collect();
        let named = |key: &&str| {
            warnings
                .iter()
                .any(|line| line.starts_with("redlock: warning: ") && line.contains(key))
        };
        assert!(
            warnings.len() == keys.len() && keys.iter().all(named),
            "one warning naming each of {keys:?}: {:?}",
            out.stderr
        );
    };
    let both = [HOLDERS, HISTORY];
    let out = server.redlock(&["list", "--json"]).run();
    out.code(0);
    warned(&out, &both);
    assert_eq!(out.json()[0]["holders"], serde_json::json!([]));
    let out = server.redlock(&["list"]).run();
    out.code(0).stdout_contains("\njob  unreadable  1");
    warned(&out, &both);
    let out = server.redlock(&["inspect", "--key", "job"]).run();
    out.code(0).stdout_contains("job: held (unreadable)");
    warned(&out, &both);
    let out = server.redlock(&["inspect", "--key", "job", "--json"]).run();
    out.code(0);
    warned(&out, &both);
    assert_eq!(out.json()["state"], "held");
    let out = server.redlock(&["history", "--key", "job", "--json"]).run();
    out.code(0);
    warned(&out, &[HISTORY]);
    assert_eq!(out.json().as_array().unwrap().len(), 2);
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s"])
        .run()
        .code(75)
        .one_line_error("busy");
    let out = server
        .redlock(&["release", "--key", "job", "--force"])
        .run();
    out.code(0);
    warned(&out, &[HOLDERS]);
    let left: i64 = server.cmd(&["EXISTS", HOLDERS]);
    assert_eq!(left, 0, "the unreadable holder was evicted too");
}

/// Members redlock did not write in a lock's history (added by hand: a JSON object that is no
/// hold, and text that is no JSON) are skipped by every reader with a warning, as the writers
/// go on beside them. Repro: `run` went on writing while `history` and `check` refused the
/// whole history (64, "nothing was changed") and `inspect` of the held lock exited 64.
#[test]
fn members_redlock_did_not_write_in_a_history_are_skipped_by_its_readers() {
    let server = RedisServer::start();
    server.cmd::<()>(&["ZADD", HISTORY, "1", "no json", "5", r#"{"note":"hand"}"#]);
    server
        .redlock(&["run", "--key", "job", "--", "true"])
        .run()
        .code(0);
    let out = server.redlock(&["history", "--key", "job", "--json"]).run();
    out.code(0).stderr_contains(HISTORY);
    assert_eq!(out.json().as_array().unwrap().len(), 1, "{}", out.stdout);
    server
        .redlock(&["check", "job", "--succeeded-within", "1h"])
        .run()
        .code(0);
    let holder = server
        .redlock(&["run", "--key", "job", "--", "sleep", "2"])
        .spawn();
    assert!(crate::util::wait_until(Duration::from_secs(5), || {
        server.cmd::<i64>(&["EXISTS", HOLDERS]) == 1
    }));
    server
        .redlock(&["inspect", "--key", "job"])
        .run()
        .code(0)
        .stdout_contains("held");
    holder.wait(Duration::from_secs(10)).code(0);
}

/// What a forged record carries to clear an operator's screen and retitle the terminal (OSC
/// 0), then a bidirectional override that would show text in another order.
const HOSTILE: &str = "\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{202e}exe.txt\u{2066}";

/// Whether `text` holds anything that drives a terminal: ESC, BEL, or a bidi override.
fn drives_a_terminal(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c, '\u{1b}' | '\u{7}' | '\u{9b}')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    })
}

/// Terminal escapes in any string read from Redis (a holder's mode, host, user, command and
/// note, a waiter's mode, a history entry's outcome, the last run's) or from a server (an
/// error reply) reach the terminal escaped, in text and in JSON (still valid JSON).
#[test]
fn strings_from_redis_or_a_server_cannot_drive_the_terminal() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let until = (now + 60_000).to_string();
    let token = format!("{:032x}", 7);
    let mut holder: serde_json::Value =
        serde_json::from_str(&holder_record("exclusive", 7, now, now + 60_000)).unwrap();
    for field in ["host", "user", "cmd", "note"] {
        holder[field] = serde_json::json!(format!("{field}{HOSTILE}"));
    }
    holder["mode"] = serde_json::json!(format!("{HOSTILE}exclusive"));
    server.cmd::<()>(&["HSET", HOLDERS, &token, &holder.to_string()]);
    server.cmd::<()>(&["ZADD", LEASES, &until, &token]);
    let mut entry: serde_json::Value = serde_json::from_str(&history_entry(6)).unwrap();
    entry["outcome"] = serde_json::json!(format!("released{HOSTILE}"));
    entry["mode"] = serde_json::json!(format!("{HOSTILE}exclusive"));
    server.cmd::<()>(&["ZADD", HISTORY, "6", &entry.to_string()]);
    let check = |args: &[&str]| {
        let out = server.redlock(args).run();
        assert!(
            out.status
                .code()
                .is_some_and(|code| code == 0 || code == 75),
            "{args:?}: {:?}",
            out.status
        );
        assert!(
            !drives_a_terminal(&out.stdout),
            "{args:?} stdout: {:?}",
            out.stdout
        );
        assert!(
            !drives_a_terminal(&out.stderr),
            "{args:?} stderr: {:?}",
            out.stderr
        );
        assert!(
            out.stdout.contains("PWNED") || out.stderr.contains("PWNED"),
            "{args:?}: the data is shown, escaped: {} {}",
            out.stdout,
            out.stderr
        );
        if args.contains(&"--json") {
            assert!(out.stdout.contains(r"\u202e"), "{args:?}: {}", out.stdout);
            out.json();
        }
    };
    // The busy message names the forged holder (on its own it is admitted by nobody).
    check(&["acquire", "--key", "job", "--ttl", "10s"]);
    check(&[
        "acquire",
        "--key",
        "job",
        "--ttl",
        "10s",
        "--log-format",
        "json",
    ]);
    // A forged waiter too, for the readers.
    let mut waiter: serde_json::Value =
        serde_json::from_str(&queue_entry(1, now + 60_000)).unwrap();
    waiter["mode"] = serde_json::json!(format!("{HOSTILE}exclusive"));
    server.cmd::<()>(&["ZADD", QUEUE, "1", "0000000000000001"]);
    server.cmd::<()>(&["HSET", WAITERS, "0000000000000001", &waiter.to_string()]);
    for key in [HOLDERS, LEASES, QUEUE, WAITERS, HISTORY] {
        server.cmd::<()>(&["PEXPIREAT", key, &until]);
    }
    for args in [
        &["list"][..],
        &["inspect", "--key", "job"],
        &["history", "--key", "job"],
        &["list", "--json"],
        &["inspect", "--key", "job", "--json"],
        &["history", "--key", "job", "--json"],
    ] {
        check(args);
    }

    // A server whose error replies carry the same: one escaped line.
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", fake.local_addr().unwrap());
    let replier = std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        if let Ok((mut con, _)) = fake.accept() {
            let _ = con.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut request = [0u8; 4096];
            while matches!(con.read(&mut request), Ok(n) if n > 0) {
                let reply = format!("-ERR {HOSTILE}\r\n");
                if con.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
        }
    });
    let out = Redlock::new(&["inspect", "--key", "job"])
        .env("REDLOCK_URL", &url)
        .run();
    assert!(
        out.status.code() != Some(70),
        "{:?}: {}",
        out.status,
        out.stderr
    );
    out.one_line_error("PWNED");
    assert!(!drives_a_terminal(&out.stderr), "stderr: {:?}", out.stderr);
    drop(out);
    let _ = replier.join();
}

/// Found in review: with nobody holding the lock, the kind check stopped at the missing holder
/// and never looked at the head of the queue, so a semaphore request next to a live exclusive
/// waiter at the head handed that waiter the lock and then took a permit beside it. A request
/// of another kind than the queue's head is refused (64) and changes nothing.
#[test]
fn a_request_of_another_kind_than_the_queues_head_is_refused_when_nobody_holds() {
    let server = RedisServer::start();
    let now = server.time_ms();
    server.cmd::<()>(&["ZADD", QUEUE, "1", "0000000000000001"]);
    server.cmd::<()>(&[
        "HSET",
        WAITERS,
        "0000000000000001",
        &queue_entry(1, now + 60_000),
    ]);
    for key in [QUEUE, WAITERS] {
        server.cmd::<()>(&["PEXPIREAT", key, &(now + 60_000).to_string()]);
    }
    server
        .redlock(&["acquire", "--key", "job", "--limit", "3", "--ttl", "10s"])
        .run()
        .code(64)
        .one_line_error("the lock is an exclusive/shared lock, not a semaphore of 3");
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", HOLDERS]),
        0,
        "nothing was taken"
    );
}

/// Found in review: a queue entry whose `steady` (the head lease's bookkeeping) is not a
/// number passed the record check, and a script computed with it: exit 70. It is foreign data.
#[test]
fn a_queue_entry_with_a_forged_head_lease_field_is_foreign_data() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let mut entry: serde_json::Value = serde_json::from_str(&queue_entry(1, now + 60_000)).unwrap();
    entry["steady"] = serde_json::json!("x");
    server.cmd::<()>(&["ZADD", QUEUE, "1", "0000000000000001"]);
    server.cmd::<()>(&["HSET", WAITERS, "0000000000000001", &entry.to_string()]);
    for key in [QUEUE, WAITERS] {
        server.cmd::<()>(&["PEXPIREAT", key, &(now + 60_000).to_string()]);
    }
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "1s"])
        .run()
        .code(64)
        .one_line_error("that redlock did not write");
}

/// Every key with its DUMP and its absolute expiry (PEXPIRETIME): what a refused call must
/// leave exactly as it was.
fn state_of(server: &RedisServer) -> Vec<(String, Option<Vec<u8>>, i64)> {
    server
        .keys()
        .into_iter()
        .map(|key| {
            let dumped: Option<Vec<u8>> = server.cmd(&["DUMP", &key]);
            let expiry: i64 = server.cmd(&["PEXPIRETIME", &key]);
            (key, dumped, expiry)
        })
        .collect()
}

/// Asserts that every key of the lock but its fence counter expires, within 31 days.
#[track_caller]
fn every_key_expires_within_a_month(server: &RedisServer) {
    for key in server.keys() {
        if key.ends_with(":fence") {
            continue;
        }
        let pttl: i64 = server.cmd(&["PTTL", &key]);
        assert!(
            pttl > 0 && pttl <= 31 * 24 * 3600 * 1000,
            "{key} expires in {pttl} ms"
        );
    }
}

/// Found by the state fuzzer (tests/script_fuzz.rs) and the security review: a shared holder
/// whose lease score someone set to 1e300 made `acquire --shared` fail (exit 69, "ERR value is
/// not an integer or out of range") after the script had written its own holder: the lock
/// showed "shared by 2" and the keys kept their old expiry. The lease read back after the
/// first write is now kept within the longest lease a call asks for (30 days).
#[test]
fn a_forged_lease_score_cannot_fail_a_script_after_its_writes() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let token = format!("{:032x}", 7);
    server.cmd::<()>(&[
        "HSET",
        HOLDERS,
        &token,
        &holder_record("shared", 7, now, now + 60_000),
    ]);
    server.cmd::<()>(&["ZADD", LEASES, "1e300", &token]);
    server
        .redlock(&["acquire", "--shared", "--ttl", "5s", "--key", "job"])
        .run()
        .code(0);
    every_key_expires_within_a_month(&server);
    server
        .redlock(&["inspect", "--key", "job"])
        .run()
        .code(0)
        .stdout_contains("shared by 2");
    // The same score behind a lease without its record (an index to repair), for a waiter
    // that leaves the queue.
    let stray = format!("{:032x}", 8);
    server.cmd::<()>(&["ZADD", LEASES, "1e300", &stray]);
    let waiter = server
        .redlock(&["acquire", "--ttl", "5s", "--key", "job", "--wait", "300ms"])
        .run();
    waiter.code(75);
    every_key_expires_within_a_month(&server);
}

/// Found by the state fuzzer: records whose numbers a script would compute with but not write
/// back as they were are refused before any write (exit 64, Redis untouched): a holder record
/// without its fence (a re-entry wrote a second hold, then answered without a fence: exit 69),
/// a hold counted 1.5 times (counted down to 0.5, an answer redlock cannot read: exit 69), a
/// lease ending in the year 10000 (cjson wrote it back as 2.534023008e+14, which no reader
/// takes for a time).
#[test]
fn records_whose_numbers_a_script_could_not_write_back_are_refused_before_any_write() {
    let server = RedisServer::start();
    let now = server.time_ms();
    let token = format!("{:032x}", 7);
    let record = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut record: serde_json::Value =
            serde_json::from_str(&holder_record("exclusive", 7, now, now + 60_000)).unwrap();
        change(&mut record);
        record.to_string()
    };
    let cases = [
        (
            record(&|record| {
                record.as_object_mut().unwrap().remove("fence");
            }),
            vec!["acquire", "--key", "job", "--ttl", "60s"],
        ),
        (
            record(&|record| record["count"] = serde_json::json!(1.5)),
            vec!["release", "--key", "job"],
        ),
        (
            record(&|record| {
                record["count"] = serde_json::json!(2);
                record["exp"] = serde_json::json!(253_402_300_800_000_u64);
            }),
            vec!["release", "--key", "job"],
        ),
    ];
    // A field redlock does not know, holding what cjson decodes but cannot encode again: the
    // record of a hold re-entered once (count 2) is written back by its release (count 1).
    let unknown = |value: &str| {
        let reentered = record(&|record| record["count"] = serde_json::json!(2));
        (
            format!("{},\"extra\":{value}}}", &reentered[..reentered.len() - 1]),
            vec!["release", "--key", "job"],
        )
    };
    let cases = cases
        .into_iter()
        .chain(["NaN", "Infinity", "-Infinity"].map(unknown));
    for (record, command) in cases {
        server.cmd::<()>(&["HSET", HOLDERS, &token, &record]);
        server.cmd::<()>(&["ZADD", LEASES, &(now + 60_000).to_string(), &token]);
        for key in [HOLDERS, LEASES] {
            server.cmd::<()>(&["PEXPIREAT", key, &(now + 60_000).to_string()]);
        }
        let before = state_of(&server);
        server
            .redlock(&command)
            .env("REDLOCK_KEY", "job")
            .env("REDLOCK_TOKEN", &token)
            .run()
            .code(64)
            .one_line_error(HOLDERS);
        assert!(
            before == state_of(&server),
            "{command:?} changed Redis: {record}"
        );
        server.cmd::<()>(&["DEL", HOLDERS, LEASES]);
    }
}

/// Found by the state fuzzer: a queue someone wrote without an expiry kept none after a script
/// changed it (a forced release dropped its dead head and handed the lock on). A script that
/// writes a queue's keys leaves each with an expiry.
#[test]
fn a_queue_written_by_hand_without_an_expiry_gets_one_when_a_script_changes_it() {
    let server = RedisServer::start();
    let now = server.time_ms();
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .run()
        .code(0);
    server.cmd::<()>(&[
        "ZADD",
        QUEUE,
        "1",
        "0000000000000001",
        "2",
        "0000000000000002",
        "3",
        "0000000000000003",
    ]);
    server.cmd::<()>(&[
        "HSET",
        WAITERS,
        "0000000000000001",
        &queue_entry(1, now - 120_000),
        "0000000000000002",
        &queue_entry(2, now + 60_000),
        "0000000000000003",
        &queue_entry(3, now + 60_000),
    ]);
    server
        .redlock(&["release", "--force", "--key", "job", "--reason", "test"])
        .run()
        .code(0);
    let left: i64 = server.cmd(&["ZCARD", QUEUE]);
    assert_eq!(
        left, 1,
        "the dead head dropped, the next one handed the lock"
    );
    every_key_expires_within_a_month(&server);
}

/// Found by the state fuzzer: a cancel mark of another type failed the acquisition with
/// Redis's own "WRONGTYPE Operation against a key holding the wrong kind of value", naming no
/// key. It is foreign data, named as such.
#[test]
fn a_cancel_mark_of_another_type_is_named_as_foreign_data() {
    let server = RedisServer::start();
    let token = format!("{:032x}", 7);
    let cancel = format!("redlock:{{job}}:cancel:{token}");
    server.cmd::<()>(&["HSET", &cancel, "f", "v"]);
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s"])
        .env("REDLOCK_KEY", "job")
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(64)
        .one_line_error(&cancel);
}

/// Found by the state fuzzer: a hold whose `since` lies ahead of the server's clock (a clock
/// stepped back, or a record written by hand) was kept for its minimum hold from then: as
/// long as the clock was off, plus the minimum hold. A hold cannot have begun after now.
#[test]
fn a_minimum_hold_counts_from_now_at_the_latest() {
    use redlock::keys::{LockName, Prefix};
    use redlock::lock::{Ending, Lock, Release, Token};

    let server = RedisServer::start();
    let now = server.time_ms();
    let token = format!("{:032x}", 7);
    let day = 24 * 3600 * 1000;
    server.cmd::<()>(&[
        "HSET",
        HOLDERS,
        &token,
        &serde_json::json!({
            "mode": "exclusive", "limit": 0, "count": 1, "fence": "7", "host": "h", "pid": 1,
            "user": "u", "cmd": "c", "since": now + day, "ttl": 60_000, "exp": now + 60_000,
        })
        .to_string(),
    ]);
    server.cmd::<()>(&["ZADD", LEASES, &(now + 60_000).to_string(), &token]);
    let mut session = server.session();
    let lock = Lock::new(
        &Prefix::new("redlock:").unwrap(),
        LockName::new("job").unwrap(),
    );
    let released = lock
        .release(
            &mut session,
            &Token::parse(&token).unwrap(),
            Duration::from_secs(60),
            &Ending::default(),
        )
        .unwrap();
    match released {
        Release::Kept(kept) => assert!(kept <= Duration::from_secs(60), "kept {kept:?}"),
        other => panic!("released: {other:?}"),
    }
    let pttl: i64 = server.cmd(&["PTTL", HOLDERS]);
    assert!(pttl <= 60_000, "the lock is kept {pttl} ms");
}

/// The first millisecond of year 10000, which RFC 3339 cannot write.
const YEAR_10000_MS: u64 = 253_402_300_800_000;

/// Found in review: a holder's, a waiter's or a history entry's time at or after year 10000
/// (253402300800000, or i64::MAX) made `list` exit 70 for every lock under the prefix,
/// and `history`, `inspect --json`, `check --json` for that lock ("a Display implementation
/// returned an error"). A history entry's such time is shown as one that cannot be shown; a
/// holder's or a waiter's is a number the scripts refuse (it has more than 14 digits: see
/// lua/README.md), so that lock is foreign data: skipped by `list` with a warning, refused by
/// `inspect` (64). Every reader answers, none with 70.
#[test]
fn a_time_past_year_9999_is_shown_as_such_never_70() {
    let server = RedisServer::start();
    server
        .redlock(&["acquire", "--key", "bystander", "--ttl", "60s"])
        .run()
        .code(0);
    let now = server.time_ms();
    let until = (now + 60_000).to_string();
    for (fence, since) in [(5_u64, YEAR_10000_MS), (6, i64::MAX as u64)] {
        let mut entry: serde_json::Value = serde_json::from_str(&history_entry(fence)).unwrap();
        entry["since"] = serde_json::json!(since);
        entry["exp"] = serde_json::json!(since);
        entry["ended"] = serde_json::json!(since);
        entry["exit"] = serde_json::json!(0);
        server.cmd::<()>(&["ZADD", HISTORY, &fence.to_string(), &entry.to_string()]);
    }
    // Another lock, held by a record whose times are past year 9999, and waited for by one.
    let forged = |key: &str| key.replace("{job}", "{forged}");
    let token = format!("{:032x}", 7);
    let mut holder: serde_json::Value =
        serde_json::from_str(&holder_record("exclusive", 7, now, now + 60_000)).unwrap();
    holder["since"] = serde_json::json!(YEAR_10000_MS);
    holder["ttl"] = serde_json::json!(60_000);
    server.cmd::<()>(&["HSET", &forged(HOLDERS), &token, &holder.to_string()]);
    server.cmd::<()>(&["ZADD", &forged(LEASES), &until, &token]);
    let mut waiter: serde_json::Value =
        serde_json::from_str(&queue_entry(1, now + 60_000)).unwrap();
    waiter["since"] = serde_json::json!(YEAR_10000_MS);
    server.cmd::<()>(&["ZADD", &forged(QUEUE), "1", "0000000000000001"]);
    server.cmd::<()>(&[
        "HSET",
        &forged(WAITERS),
        "0000000000000001",
        &waiter.to_string(),
    ]);
    for key in [HOLDERS, LEASES, QUEUE, WAITERS] {
        server.cmd::<()>(&["PEXPIREAT", &forged(key), &until]);
    }
    server.cmd::<()>(&["PEXPIREAT", HISTORY, &until]);
    let unshown = "after year 9999";
    let answers = |args: &[&str], codes: &[i32]| {
        let out = server.redlock(args).run();
        if !out.status.code().is_some_and(|code| codes.contains(&code)) {
            out.fail(&format!("expected one of {codes:?}"));
        }
        if out.stderr.contains("panicked") || out.stderr.contains("Display") {
            out.fail("a panic");
        }
        out
    };
    answers(&["list"], &[0])
        .stdout_contains("bystander")
        .stderr_contains("redlock:{forged}:holders");
    answers(&["list", "--json"], &[0]);
    answers(&["inspect", "--key", "forged"], &[64]);
    answers(&["inspect", "--key", "job"], &[0, 1]);
    answers(&["inspect", "--key", "job", "--json"], &[0, 1]).json();
    answers(&["history", "--key", "job"], &[0]).stdout_contains(unshown);
    let history = answers(&["history", "--key", "job", "--json"], &[0]);
    for entry in history.json().as_array().unwrap() {
        assert_eq!(entry["since"], unshown, "{}", history.stdout);
        assert_eq!(entry["ended"], unshown, "{}", history.stdout);
    }
    let outcomes = [0, 80, 81, 83];
    for args in [
        &["check", "job", "--succeeded-within", "1h"][..],
        &["check", "job", "--succeeded-within", "1h", "--json"],
        &["check", "job", "--max-held", "1h", "--json"],
    ] {
        let out = answers(args, &outcomes);
        if args.contains(&"--json") {
            out.json();
        }
    }
    answers(
        &["check", "job", "--succeeded-within", "1h", "--nagios"],
        &[0, 1, 2],
    );
    answers(&["metrics"], &[0]);
}

/// C1 controls (U+0080-U+009F; U+009B is CSI, ESC [ in one character, U+0085 a line break to
/// some terminals) and the direction marks (U+061C, U+200E, U+200F) beside the overrides.
const C1_AND_MARKS: &str = "\u{9b}2J\u{85}\u{9d}0;PWNED\u{9c}\u{61c}\u{200e}\u{200f}\u{202e}";

/// Whether `text` holds a character of [`C1_AND_MARKS`]'s kinds raw.
fn holds_c1_or_marks(text: &str) -> bool {
    text.chars().any(|c| {
        ('\u{7f}'..='\u{9f}').contains(&c)
            || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    })
}

/// Found in review: `--json`, `--log-format json` and `metrics` wrote C1 controls and the
/// direction marks raw, and text output the marks. Each is escaped everywhere: JSON with `\u`
/// escapes (the same string once decoded), text as `printable` writes it (`\u{9b}`), and a
/// Prometheus label value as that text, which promtool accepts.
#[test]
fn c1_controls_and_direction_marks_are_escaped_everywhere() {
    let server = RedisServer::start();
    let name = "mark\u{200e}\u{200f}\u{202e}ed";
    server
        .redlock(&["run", "--key", name, "--", "true"])
        .run()
        .code(0);
    let now = server.time_ms();
    let until = (now + 60_000).to_string();
    let token = format!("{:032x}", 7);
    let mut holder: serde_json::Value =
        serde_json::from_str(&holder_record("exclusive", 7, now, now + 60_000)).unwrap();
    for field in ["host", "user", "cmd", "note"] {
        holder[field] = serde_json::json!(format!("{field}{C1_AND_MARKS}"));
    }
    server.cmd::<()>(&["HSET", HOLDERS, &token, &holder.to_string()]);
    server.cmd::<()>(&["ZADD", LEASES, &until, &token]);
    let mut entry: serde_json::Value = serde_json::from_str(&history_entry(6)).unwrap();
    entry["cmd"] = serde_json::json!(format!("cmd{C1_AND_MARKS}"));
    entry["why"] = serde_json::json!(format!("why{C1_AND_MARKS}"));
    server.cmd::<()>(&["ZADD", HISTORY, "6", &entry.to_string()]);
    for key in [HOLDERS, LEASES, HISTORY] {
        server.cmd::<()>(&["PEXPIREAT", key, &until]);
    }
    let escaped = |args: &[&str], codes: &[i32]| {
        let out = server.redlock(args).run();
        if !out.status.code().is_some_and(|code| codes.contains(&code)) {
            out.fail(&format!("expected one of {codes:?}"));
        }
        if holds_c1_or_marks(&out.stdout) || holds_c1_or_marks(&out.stderr) {
            out.fail("a C1 control or a direction mark written raw");
        }
        out
    };
    for args in [
        &["list"][..],
        &["inspect", "--key", "job"],
        &["history", "--key", "job"],
    ] {
        escaped(args, &[0]).stdout_contains(r"\u{9b}2J");
    }
    escaped(&["history", "--key", name], &[0]);
    let acquired = escaped(&["acquire", "--key", name, "--ttl", "30s", "--json"], &[0]);
    assert_eq!(acquired.json()["key"], name);
    escaped(&["list"], &[0]).stdout_contains(r"mark\u{200e}\u{200f}\u{202e}ed");
    let json = escaped(&["inspect", "--key", "job", "--json"], &[0]);
    assert_eq!(
        json.json()["holders"][0]["note"],
        format!("note{C1_AND_MARKS}"),
        "the same string once decoded"
    );
    json.stdout_contains(r"\u009b2J").stdout_contains(r"\u200e");
    let json = escaped(&["list", "--json"], &[0]);
    assert_eq!(
        json.json()[0]["holders"][0]["user"],
        format!("user{C1_AND_MARKS}")
    );
    let json = escaped(&["history", "--key", "job", "--json"], &[0]);
    assert_eq!(json.json()[0]["why"], format!("why{C1_AND_MARKS}"));
    escaped(&["history", "--key", name, "--json"], &[0]);
    let json = escaped(&["check", name, "--succeeded-within", "1h", "--json"], &[0]);
    assert_eq!(json.json()[0]["key"], name);
    escaped(
        &["check", "job", "--succeeded-within", "1h", "--nagios"],
        &[0, 1, 2],
    );
    // The busy message names the holder, in text and in JSON lines.
    escaped(&["acquire", "--key", "job", "--ttl", "5s"], &[75]).stderr_contains(r"\u{9b}2J");
    let busy = escaped(
        &[
            "acquire",
            "--key",
            "job",
            "--ttl",
            "5s",
            "--log-format",
            "json",
        ],
        &[75],
    );
    let line: serde_json::Value = serde_json::from_str(busy.stderr.lines().next().unwrap())
        .unwrap_or_else(|err| busy.fail(&format!("not a JSON line: {err}")));
    assert!(
        line["message"].as_str().unwrap().contains(r"host\u{9b}2J"),
        "{line}"
    );
    let metrics = escaped(&["metrics"], &[0]);
    metrics.stdout_contains(r#"{key="mark\\u{200e}\\u{200f}\\u{202e}ed"}"#);
    let checked = crate::check::promtool(&metrics.stdout);
    assert!(
        checked.status.success(),
        "promtool: {checked:?}\n{}",
        metrics.stdout
    );
}

/// A script called by hand (or by another redlock version) with another number of keys or
/// arguments than it names is refused before it reads or writes anything, and says what it
/// takes; called with the right numbers, the same text runs.
#[test]
fn a_script_called_with_other_inputs_than_it_names_is_refused() {
    let server = RedisServer::start();
    let acquire = format!("{}{}", redlock::PRELUDE, include_str!("../lua/acquire.lua"));
    let keys = [
        "holders", "leases", "fence", "queue", "waiters", "wake:w", "cancel:t", "history",
    ]
    .map(|name| format!("redlock:{{job}}:{name}"));
    let mut client = server.client();
    let mut call = redis::cmd("EVAL");
    call.arg(&acquire).arg(7).arg(&keys[..7]);
    let refused = call.query::<redis::Value>(&mut client).unwrap_err();
    assert!(
        refused.to_string().contains(
            "redlock script called with 7 keys and 0 arguments; it takes 8 and 18 (mixed redlock versions?)"
        ),
        "{refused}"
    );
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    let token = "0123456789abcdef0123456789abcdef";
    let mut call = redis::cmd("EVAL");
    call.arg(&acquire)
        .arg(8)
        .arg(&keys[..])
        .arg(token)
        .arg(30_000)
        .arg("exclusive")
        .arg(0);
    call.arg(
        &[
            "host", "1", "user", "true", "", "", "0", "0", "0", "0", "0", "0", "", "",
        ][..],
    );
    let reply: Vec<redis::Value> = call.query(&mut client).unwrap_or_else(|err| {
        panic!(
            "the acquire script with its 8 keys and 18 arguments: {err}\n{}",
            server.log()
        )
    });
    assert_eq!(reply[0], redis::Value::Int(1), "acquired: {reply:?}");
}
