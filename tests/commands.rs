//! Each subcommand's behaviour, output shape and exit codes against a real server.

use std::time::Duration;

use crate::util::{RedisServer, field_names, wait_until};

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

#[test]
fn acquire_prints_a_token_and_inspect_shows_the_holder() {
    let server = RedisServer::start();
    acquire(&server, "deploy", "30s");

    let out = server.redlock(&["inspect", "--key", "deploy"]).run();
    out.code(0)
        .stdout_contains("deploy: held (exclusive), last fence: 1")
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
            "fence", "holders", "key", "limit", "mode", "state", "waiters"
        ]
    );
    assert_eq!(view["key"], "deploy");
    assert_eq!(view["state"], "held");
    assert_eq!(view["mode"], "exclusive");
    assert_eq!(view["fence"], 1);
    let holder = &view["holders"][0];
    assert_eq!(
        field_names(holder),
        [
            "command",
            "fence",
            "held_ms",
            "holds",
            "host",
            "mode",
            "pid",
            "since",
            "since_ms",
            "ttl_left_ms",
            "ttl_ms",
            "user"
        ]
    );
    assert_eq!(holder["command"], "acquire");
    assert_eq!(holder["fence"], 1);
    assert_eq!(holder["ttl_ms"], 30000);
    assert!(holder["ttl_left_ms"].as_u64().unwrap() <= 30000);
    assert!(holder["pid"].as_u64().unwrap() > 0);
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

    let out = server
        .redlock(&["acquire", "--key", "deploy", "--ttl", "30s"])
        .run();
    out.code(75)
        .one_line_error("lock 'deploy' is busy: held by ")
        .stderr_contains("command 'acquire' fence 1");
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
    let fence: String = server.cmd(&["GET", FENCE]);
    assert_eq!(fence, "1");
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
    assert_eq!(last, 5);
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
    assert_eq!(server.keys(), [FENCE], "only the fence counter stays");

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
    assert_eq!(server.keys(), [FENCE]);
}

#[test]
fn a_stale_holder_cannot_release_or_extend_the_next_holders_lock() {
    let server = RedisServer::start();
    let stale = acquire(&server, "deploy", "200ms");
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
    assert_eq!(out.json()["holders"][0]["fence"], 2);
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

    let out = server
        .redlock(&["release", "--key", "deploy", "--force"])
        .run();
    out.code(0)
        .stdout_contains("released 'deploy' by force, evicting ")
        .stdout_contains("command 'acquire' fence 1");
    assert_eq!(server.keys(), [FENCE]);

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

    let out = server.redlock(&["list"]).run();
    out.code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[0].starts_with("KEY"));
    assert!(lines[1].starts_with("a-job "));
    assert!(lines[2].starts_with("b-job "));
    out.stderr_contains("skipping redlock:{foreign}:holders");

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
    assert_eq!(list[0]["holders"][0]["command"], "acquire");

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
    let mut keys = server.keys();
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
        .stderr_contains("acquired 'deploy' (fence 1, ttl 30.0s)");

    for shell in ["bash", "zsh", "fish"] {
        let out = crate::util::Redlock::new(&["completions", shell]).run();
        out.code(0).stdout_contains("acquire");
    }
}
