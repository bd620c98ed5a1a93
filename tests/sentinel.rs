//! Redis Sentinel: redlock finds the master through the sentinels, survives a sentinel that
//! does not answer, refuses an unknown service, and keeps a held lock through a failover (the
//! key reaches the replica before the failover on loopback), rediscovering the master for each
//! request instead of renewing on a demoted one.

use std::time::Duration;

use crate::bad_input::MINIMAL_ACL;
use crate::util::sentinel::{SERVICE, Sentinels};
use crate::util::{
    RedisServer, Redlock, TempDir, free_port, send_signal, wait_for_file, wait_until,
};

/// A sentinel that names a replica as the master (stale,
/// or a failover under way) is asked again after 100 ms, then 200 ms, and then the request
/// fails (69), instead of three lookups back to back that would get the same answer.
#[test]
fn a_master_that_is_a_replica_is_looked_up_again_after_a_pause() {
    let dir = TempDir::new("stale-sentinel");
    // A replica of a server that is not there: ROLE says so for as long as the test lasts.
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &free_port().to_string()]);
    let config = dir.path().join("sentinel.conf");
    std::fs::write(
        &config,
        format!("sentinel monitor {SERVICE} 127.0.0.1 {} 1\n", replica.port),
    )
    .unwrap();
    let sentinel = RedisServer::start_sentinel(&config);
    let roles = replica.calls(&["role"]);
    let out = Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env(
            "REDLOCK_URL",
            &format!("redis+sentinel://127.0.0.1:{}/{SERVICE}", sentinel.port),
        )
        .run();
    let roles = replica.calls(&["role"]) - roles;
    out.code(69).one_line_error("a failover may be under way");
    assert_eq!(roles, 3, "ROLE asked {roles} times");
    // Back to back, the three lookups take a few milliseconds.
    assert!(
        out.elapsed >= Duration::from_millis(300),
        "three lookups in {:?}",
        out.elapsed
    );
}

/// A waiter whose sentinel answers every question with an
/// error (here a plain redis-server, which knows no SENTINEL command) asks again after a pause
/// that doubles from 200 ms to 2 s: a handful of questions while the wait lasts, where asking
/// again at once would make thousands.
#[test]
fn a_waiter_whose_sentinel_answers_with_an_error_asks_again_gently() {
    let not_a_sentinel = RedisServer::start();
    let errors = not_a_sentinel.stat("total_error_replies");
    let connections = not_a_sentinel.stat("total_connections_received");
    let out = Redlock::new(&["acquire", "--key", "k", "--ttl", "5s", "--wait", "3s"])
        .env(
            "REDLOCK_URL",
            &format!(
                "redis+sentinel://127.0.0.1:{}/{SERVICE}",
                not_a_sentinel.port
            ),
        )
        .run();
    // Less the test's own INFO connection.
    let connections = not_a_sentinel.stat("total_connections_received") - connections - 1;
    let errors = not_a_sentinel.stat("total_error_replies") - errors;
    out.code(69).stderr_contains("unknown command");
    // At 0, 0.2, 0.6, 1.4 and 3 s (less up to a quarter at random).
    assert!(
        (3..=8).contains(&errors),
        "{errors} error replies in {:?}",
        out.elapsed
    );
    assert!(
        connections <= 8,
        "{connections} connections in {:?}",
        out.elapsed
    );
}

#[test]
fn the_master_is_found_through_the_sentinels() {
    let set = Sentinels::start();
    let url = set.url();
    let out = Redlock::new(&[
        "acquire",
        "--key",
        "k",
        "--ttl",
        "30s",
        "-v",
        "--replicas",
        "1",
    ])
    .env("REDLOCK_URL", &url)
    .run();
    out.code(0);
    assert_eq!(
        set.master.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]),
        1,
        "not on the master"
    );
    assert_eq!(
        set.replicas[0].cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]),
        1,
        "acknowledged by the replica, yet not on it"
    );

    // The first sentinel stopped: the next ones are asked, within the connect timeout each.
    send_signal(set.sentinels[0].pid(), "STOP");
    let out = Redlock::new(&["inspect", "--key", "k", "--connect-timeout", "500ms"])
        .env("REDLOCK_URL", &url)
        .run();
    send_signal(set.sentinels[0].pid(), "CONT");
    out.code(0);
    assert!(out.elapsed < Duration::from_secs(3), "{:?}", out.elapsed);
    // ... and asked last from then on: a run's renewals and release, whose bound (1 s) is
    // shorter than the connect timeout it would wait out again, reach the master. Repro: "could
    // not release lock (no answer within 1.0s)", the lock held for its whole lease.
    send_signal(set.sentinels[0].pid(), "STOP");
    let out = Redlock::new(&["run", "--key", "r", "--ttl", "30s", "--", "true"])
        .env("REDLOCK_URL", &url)
        .run();
    send_signal(set.sentinels[0].pid(), "CONT");
    out.code(0);
    assert!(!out.stderr.contains("could not release"), "{}", out.stderr);
    assert_eq!(set.master.cmd::<i64>(&["EXISTS", "redlock:{r}:holders"]), 0);

    // A service no sentinel knows.
    Redlock::new(&["inspect", "--key", "k"])
        .env("REDLOCK_URL", &url.replace(SERVICE, "nosuchservice"))
        .run()
        .code(64)
        .one_line_error("no sentinel knows a master named 'nosuchservice'");

    // Credentials: the master's user has the README's ACL (plus ROLE); the sentinels have a
    // user and password of their own, and no default user.
    let mut rules = vec!["ACL", "SETUSER", "locker", "on", ">master-pw"];
    rules.extend(MINIMAL_ACL.split_whitespace());
    rules.push("+role");
    set.master.cmd::<()>(&rules);
    for sentinel in &set.sentinels {
        sentinel.cmd::<()>(&[
            "ACL",
            "SETUSER",
            "watcher",
            "on",
            ">sentinel-pw",
            "-@all",
            "+sentinel|get-master-addr-by-name",
        ]);
        sentinel.cmd::<()>(&["ACL", "SETUSER", "default", "off"]);
    }
    let secured = format!(
        "{}?sentinel_user=watcher",
        url.replace("redis+sentinel://", "redis+sentinel://locker@")
    );
    let as_locker = |args: &[&str]| {
        Redlock::new(args)
            .env("REDLOCK_URL", &secured)
            .env("REDLOCK_PASSWORD", "master-pw")
    };
    as_locker(&["acquire", "--key", "secured", "--ttl", "30s"])
        .env("REDLOCK_SENTINEL_PASSWORD", "sentinel-pw")
        .run()
        .code(0);
    assert_eq!(
        set.master
            .cmd::<i64>(&["EXISTS", "redlock:{secured}:holders"]),
        1
    );
    let out = as_locker(&["inspect", "--key", "secured"])
        .env("REDLOCK_SENTINEL_PASSWORD", "wrong")
        .run();
    out.code(77)
        .one_line_error("every sentinel answered: authentication failed")
        .stderr_contains("REDLOCK_SENTINEL_PASSWORD");
    assert!(!out.stderr.contains("sentinel-pw") && !out.stderr.contains("master-pw"));
    // No password for the sentinels: their user alone is refused before connecting.
    as_locker(&["inspect", "--key", "secured"])
        .env_remove("REDLOCK_SENTINEL_PASSWORD")
        .run()
        .code(64)
        .one_line_error("the URL names a sentinel user but no sentinel password is given");
    // The master's password is not the sentinels'.
    Redlock::new(&["inspect", "--key", "secured"])
        .env("REDLOCK_URL", &url)
        .env("REDLOCK_PASSWORD", "sentinel-pw")
        .run()
        .code(77)
        .stderr_contains("REDLOCK_SENTINEL_PASSWORD");
}

#[test]
fn a_run_keeps_its_lock_through_a_failover() {
    run_through_a_failover(1, &["--ttl", "3s"]);
}

/// With `--replicas 1` every renewal waits for a replica. Two replicas: after the failover the
/// other one follows the new master at once, while the old master becomes a replica only when
/// the sentinels get round to it (up to ten seconds). Until the other replica has synced with
/// the new master (seconds), renewals go unacknowledged: the lease must span that.
#[test]
fn a_run_with_replicas_keeps_its_lock_through_a_failover() {
    run_through_a_failover(2, &["--ttl", "12s", "--replicas", "1"]);
}

fn run_through_a_failover(replicas: usize, lock_args: &[&str]) {
    let set = Sentinels::start_with_replicas(replicas);
    let dir = TempDir::new("failover");
    let script = format!(
        "echo $REDLOCK_FENCE > {d}/fence; sleep 8; echo done > {d}/done",
        d = dir.path().display()
    );
    let running = Redlock::new(&["run", "-v", "--key", "k"])
        .args(lock_args)
        .args(&["--", "sh", "-c", &script])
        .env("REDLOCK_URL", &set.url())
        .spawn();
    wait_for_file(&dir.path().join("fence"), Duration::from_secs(10));
    // Failing over before every replica has the lock would test the promotion of one that
    // never saw it, which no setting prevents (docs/servers.md, "Replicas and failover"): the sentinels
    // may promote the replica that did not acknowledge.
    assert!(wait_until(Duration::from_secs(5), || {
        set.replicas
            .iter()
            .all(|replica| replica.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]) == 1)
    }));
    set.fail_over();
    // The lock is held on the new master, renewed there, and nobody else can take it.
    let new_master = set.server(set.master_port());
    let held = wait_until(Duration::from_secs(5), || {
        new_master.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]) == 1
    });
    if !held {
        running
            .wait(Duration::from_secs(20))
            .fail("the lock is not on the new master");
    }
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env("REDLOCK_URL", &set.url())
        .run()
        .code(75);
    let out = running.wait(Duration::from_secs(20));
    out.code(0);
    assert!(dir.path().join("done").exists());
    assert!(wait_until(Duration::from_secs(5), || {
        new_master.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]) == 0
    }));
}

#[test]
fn a_waiter_follows_a_failover() {
    let set = Sentinels::start();
    let url = set.url();
    let holder = Redlock::new(&["acquire", "--key", "k", "--ttl", "4s"])
        .env("REDLOCK_URL", &url)
        .run();
    holder.code(0);
    let waiter = Redlock::new(&["run", "--key", "k", "--wait", "30s", "--", "true"])
        .env("REDLOCK_URL", &url)
        .spawn();
    std::thread::sleep(Duration::from_millis(500));
    set.fail_over();
    // The holder never releases: its lease runs out on the new master, and the waiter, which
    // finds the master anew, takes the lock.
    waiter.wait(Duration::from_secs(30)).code(0);
}

/// Found in review: without TLS, the password goes to whatever master a sentinel names (over
/// TLS the master's certificate is checked first: 77). `doctor` warns of it, naming the master
/// the sentinels named; the sentinels themselves are listed in the URL.
#[test]
fn doctor_warns_of_a_password_sent_in_clear_to_the_master_the_sentinels_name() {
    let set = Sentinels::start_with_replicas(0);
    let master = set.master_port();
    set.master
        .cmd::<()>(&["CONFIG", "SET", "requirepass", "pw"]);
    for sentinel in &set.sentinels {
        sentinel.cmd::<()>(&["SENTINEL", "SET", SERVICE, "auth-pass", "pw"]);
    }
    let out = Redlock::new(&["doctor"])
        .env("REDLOCK_URL", &set.url())
        .env("REDLOCK_PASSWORD", "pw")
        .run();
    out.code(0);
    let line = out
        .stdout
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some("password"))
        .unwrap_or_else(|| out.fail("no password line"));
    assert!(line.starts_with("warning "), "{line}");
    assert!(line.contains(&format!("127.0.0.1:{master}")), "{line}");
    assert!(line.contains("rediss+sentinel://"), "{line}");
}

/// A holder whose master is killed (-9) as its command ends: its release finds the master
/// gone (connection refused, then a master the sentinels still name and that is not there),
/// which it cannot have run, and sends it again, asking the sentinels each time, until it runs
/// on the promoted master, within the release timeout (5 s by default). The history says it
/// was sent again. It used to give up after the 1 s the final release is given ("could not
/// release lock 'k' (no answer within 1.0s)", exit 0) and leave the lock on the promoted
/// master until its lease ended.
#[test]
fn a_release_across_a_failover_by_kill_9_lands_on_the_promoted_master() {
    let mut set = Sentinels::start();
    let dir = TempDir::new("release-failover");
    let script = format!(
        "echo go > {d}/started; while [ ! -e {d}/go ]; do sleep 0.02; done",
        d = dir.path().display()
    );
    let running = Redlock::new(&["run", "-v", "--key", "k", "--ttl", "12s"])
        .args(&["--", "sh", "-c", &script])
        .env("REDLOCK_URL", &set.url())
        .spawn();
    wait_for_file(&dir.path().join("started"), Duration::from_secs(10));
    // The replica has the lock before its master dies: the promoted master holds it.
    assert!(wait_until(Duration::from_secs(5), || {
        set.replicas[0].cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]) == 1
    }));
    send_signal(set.master.pid(), "KILL");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = running.wait(Duration::from_secs(20));
    out.code(0);
    if out.stderr.contains("could not release") || !out.stderr.contains("released lock 'k'") {
        out.fail("the release did not land on the promoted master");
    }
    let promoted = &set.replicas[0];
    assert_eq!(
        promoted.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]),
        0,
        "the lock is still held on the promoted master"
    );
    let history = Redlock::new(&["history", "--key", "k", "--json"])
        .env("REDLOCK_URL", &set.url())
        .run();
    history.code(0);
    let last = &history.json()[0];
    assert_eq!(last["outcome"], "released", "{}", history.stdout);
    assert!(
        last["why"]
            .as_str()
            .is_some_and(|why| why.contains("release sent again")),
        "{}",
        history.stdout
    );
    set.master.kill();
}
