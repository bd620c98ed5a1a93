//! The version matrix: the everyday flows against every server release redlock supports
//! (Redis 6.0, 6.2, Debian's 7.0, and Valkey), and the refusal of an older one (5.0), each
//! with the real binary of that release (tests/util/releases.rs fetches and caches them).
//! docs/servers.md, "Supported servers", is the table of what this tests.

use std::path::Path;
use std::time::Duration;

use crate::util::releases::{self, Release};
use crate::util::{RedisServer, TempDir};

/// run with exit codes, acquire/extend/release, FIFO --wait with several waiters, shared,
/// semaphore, re-entry, inspect/list/history with --json, doctor, release --force.
/// Returns what doctor printed.
fn everyday_flows(binary: &Path) -> String {
    let server = RedisServer::start_binary(binary, &[]);

    // run passes the command's status through.
    server
        .redlock(&["run", "--key", "r", "--", "true"])
        .run()
        .code(0);
    server
        .redlock(&["run", "--key", "r", "--", "sh", "-c", "exit 3"])
        .run()
        .code(3);

    // acquire / extend / release, and a release that finds nothing.
    let out = server
        .redlock(&["acquire", "--key", "a", "--ttl", "10s"])
        .run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    server
        .redlock(&["extend", "--key", "a", "--ttl", "20s", "--token", &token])
        .run()
        .code(0);
    server
        .redlock(&["acquire", "--key", "a", "--ttl", "10s"])
        .run()
        .code(75);
    // Re-entry: a nested run under the holder's token.
    server
        .redlock(&["run", "--key", "a", "--", "true"])
        .env("REDLOCK_KEY", "a")
        .env("REDLOCK_TOKEN", &token)
        .run()
        .code(0);
    let view = server
        .redlock(&["inspect", "--key", "a", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(view["holders"][0]["mode"], "exclusive", "{view}");
    let listed = server.redlock(&["list", "--json"]).run().code(0).json();
    assert!(listed.to_string().contains("\"a\""), "{listed}");
    server
        .redlock(&["release", "--key", "a", "--token", &token])
        .run()
        .code(0);
    server
        .redlock(&["release", "--key", "a", "--token", &token])
        .run()
        .code(1);
    let history = server
        .redlock(&["history", "--key", "a", "--json"])
        .run()
        .code(0)
        .json();
    assert!(history.to_string().contains("released"), "{history}");

    // FIFO: three waiters queued in order run in that order.
    let dir = TempDir::new("matrix");
    let order = dir.path().join("order");
    let order_arg = order.to_str().unwrap().to_owned();
    let holder = server
        .redlock(&["acquire", "--key", "q", "--ttl", "30s"])
        .run();
    holder.code(0);
    let holder = holder.stdout.trim().to_owned();
    let waiters: Vec<_> = (1..=3)
        .map(|n| {
            let waiter = server
                .redlock(&["run", "--key", "q", "--ttl", "10s", "--wait", "30s", "--"])
                .args(&["sh", "-c", &format!("echo {n} >> \"$0\""), &order_arg])
                .spawn();
            // Each joins the queue before the next starts.
            let joined = crate::util::wait_until(Duration::from_secs(10), || {
                let length: i64 = server.cmd(&["ZCARD", "redlock:{q}:queue"]);
                length >= n
            });
            assert!(joined, "waiter {n} did not join the queue");
            waiter
        })
        .collect();
    server
        .redlock(&["release", "--key", "q", "--token", &holder])
        .run()
        .code(0);
    for waiter in waiters {
        waiter.wait(Duration::from_secs(30)).code(0);
    }
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "1\n2\n3\n");

    // Shared holders exclude a writer; a semaphore of 2 admits two.
    for _ in 0..2 {
        server
            .redlock(&["acquire", "--key", "s", "--shared", "--ttl", "10s"])
            .run()
            .code(0);
    }
    server
        .redlock(&["acquire", "--key", "s", "--ttl", "10s"])
        .run()
        .code(75);
    for _ in 0..2 {
        server
            .redlock(&["acquire", "--key", "m", "--limit", "2", "--ttl", "10s"])
            .run()
            .code(0);
    }
    server
        .redlock(&["acquire", "--key", "m", "--limit", "2", "--ttl", "10s"])
        .run()
        .code(75);
    server
        .redlock(&["release", "--key", "m", "--force"])
        .run()
        .code(0);
    server
        .redlock(&["acquire", "--key", "m", "--limit", "2", "--ttl", "10s"])
        .run()
        .code(0);

    // doctor reads the server (exit 0 or 1 for a verdict, never 69/70).
    let doctor = server.redlock(&["doctor"]).run();
    if !matches!(doctor.status.code(), Some(0 | 1)) {
        doctor.fail("doctor should give a verdict");
    }
    doctor.stdout
}

#[test]
fn everyday_flows_on_redis_6_0() {
    let doctor = everyday_flows(&releases::binary(Release::Redis6_0));
    assert!(doctor.contains("Redis 6.0.9"), "{doctor}");
}

#[test]
fn everyday_flows_on_redis_6_2() {
    let doctor = everyday_flows(&releases::binary(Release::Redis6_2));
    assert!(doctor.contains("Redis 6.2."), "{doctor}");
}

#[test]
fn everyday_flows_on_debians_redis_7() {
    let doctor = everyday_flows(Path::new("redis-server"));
    assert!(doctor.contains("Redis 7."), "{doctor}");
}

#[test]
fn everyday_flows_on_valkey() {
    // Valkey reports the Redis it forked from as redis_version; doctor names Valkey.
    let doctor = everyday_flows(&releases::binary(Release::Valkey));
    assert!(
        doctor.contains("Valkey 9.1.2 (compatible with Redis 7.2.4; standalone)"),
        "{doctor}"
    );
}

/// Repro: on Redis 5.0 BLPOP's fractional timeout is an error that a waiter retried
/// at once: 15,713 connections in a 9.4 s wait, nothing printed; `list` exited 69 on `SCAN ...
/// TYPE`. Now every command refuses at its first reply, naming the version found and the one
/// needed (exit 69), a waiter does not wait for a version to change, and nothing is written.
#[test]
fn redis_5_0_is_refused_at_the_first_reply_naming_both_versions() {
    let server = RedisServer::start_binary(&releases::binary(Release::Redis5_0), &[]);
    server.cmd::<()>(&["CONFIG", "RESETSTAT"]);
    for args in [
        &["run", "--key", "k", "--", "true"][..],
        &["acquire", "--key", "k", "--ttl", "10s", "--wait", "5s"],
        &["inspect", "--key", "k"],
        &["list"],
    ] {
        let out = server.redlock(args).run();
        out.code(69);
        let last = out.stderr.lines().last().unwrap_or_default();
        if !last.contains("6.0 or later") || !out.stderr.contains("5.0") && args[0] != "list" {
            out.fail("the error should name the version found and the one needed");
        }
        if out.elapsed > Duration::from_secs(3) {
            out.fail("a wait should not go on for a server too old");
        }
    }
    let connections = server.stat("total_connections_received");
    assert!(
        connections <= 12,
        "{connections} connections for 4 commands"
    );
    assert_eq!(server.keys(), Vec::<String>::new(), "nothing is written");
    let doctor = server.redlock(&["doctor"]).run();
    doctor
        .code(1)
        .stdout_contains("Redis 5.0.10: redlock needs Redis 6.0 or later");
}

/// Repro: the README's ACL line failed verbatim on Redis 6.0 (`resetchannels` is
/// 6.2+). Its 6.0 line works there, and what a missing grant does on 6.0 is what the README
/// says: `release` without `+del` (the release of a lock's only holder deletes both its keys)
/// exits 77, and the lock stays held until its lease runs out.
#[test]
fn the_readmes_acl_line_for_redis_6_0_works_there() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/servers.md"))
            .unwrap();
    let lines: Vec<&str> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("ACL SETUSER redlock on >PASSWORD "))
        .collect();
    let for_6_0 = crate::bad_input::MINIMAL_ACL.replace(" resetchannels", "");
    assert_eq!(lines, [crate::bad_input::MINIMAL_ACL, for_6_0.as_str()]);

    let server = RedisServer::start_binary(&releases::binary(Release::Redis6_0), &[]);
    let add_user = |name: &str, rules: &str| {
        let mut args = vec!["ACL", "SETUSER", name, "on", ">pw"];
        args.extend(rules.split_whitespace());
        server.cmd::<()>(&args);
        format!("redis://{name}:pw@127.0.0.1:{}", server.port)
    };
    let locker = add_user("locker", &for_6_0);
    let as_locker = |args: &[&str]| server.redlock(args).env("REDLOCK_URL", &locker);
    as_locker(&["run", "--key", "k", "--", "true"])
        .run()
        .code(0);
    let token = as_locker(&["acquire", "--key", "k", "--ttl", "10s"]).run();
    token.code(0);
    let token = token.stdout.trim().to_owned();
    let waiter = as_locker(&["acquire", "--key", "k", "--ttl", "10s", "--wait", "20s"]).spawn();
    as_locker(&["inspect", "--key", "k", "--json"])
        .run()
        .code(0);
    as_locker(&["list", "--json"]).run().code(0);
    as_locker(&["release", "--key", "k", "--token", &token])
        .run()
        .code(0);
    let waited = waiter.wait(Duration::from_secs(20));
    waited.code(0);
    let second = waited.stdout.trim().to_owned();
    as_locker(&["release", "--key", "k", "--token", &second])
        .run()
        .code(0);

    let no_del = add_user("nodel", &for_6_0.replace(" +del", ""));
    let as_no_del = |args: &[&str]| server.redlock(args).env("REDLOCK_URL", &no_del);
    let held = as_no_del(&["acquire", "--key", "h", "--ttl", "5s"]).run();
    held.code(0);
    as_no_del(&["release", "--key", "h", "--token", held.stdout.trim()])
        .run()
        .code(77);
    as_locker(&["inspect", "--key", "h"]).run().code(0);
    let ttl: i64 = server.cmd(&["PTTL", "redlock:{h}:holders"]);
    assert!(ttl > 0 && ttl <= 5_000, "PTTL {ttl}");
}
