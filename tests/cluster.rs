//! Redis Cluster: every key of a lock shares one hash slot, so scripts go to that slot's
//! master; redlock reaches it from any seed by following MOVED (a silent or dead seed costing
//! one connect timeout at most), follows ASK during a slot's migration, lists the locks of
//! every master (a lock whose slot is stuck migrating shown as unreadable), bounds a request
//! with its redirections by the command timeout, keeps a held lock through a migration and
//! through a master's failover, and stops the command when a failover lost the lock.

use std::time::Duration;

use crate::bad_input::MINIMAL_ACL;
use crate::util::cluster::Cluster;
use crate::util::{RedisServer, Redlock, TempDir, send_signal, wait_until};

fn redlock(cluster: &Cluster, args: &[&str]) -> Redlock {
    Redlock::new(args).env("REDLOCK_URL", &cluster.url())
}

/// `redlock` as a user with the README's ACL plus what a Cluster needs (`+asking`,
/// `+cluster|slots`), created on every node.
fn as_locker(cluster: &Cluster, args: &[&str]) -> Redlock {
    for node in &cluster.nodes {
        let mut rules = vec!["ACL", "SETUSER", "locker", "on", ">pw"];
        rules.extend(MINIMAL_ACL.split_whitespace());
        rules.extend(["+asking", "+cluster|slots"]);
        node.cmd::<()>(&rules);
    }
    Redlock::new(args).env(
        "REDLOCK_URL",
        &cluster
            .url()
            .replace("redis+cluster://", "redis+cluster://locker:pw@"),
    )
}

/// Lock names whose slots are served by three different masters.
fn names_on_every_master(cluster: &Cluster) -> Vec<String> {
    let mut names = Vec::new();
    let mut ports = Vec::new();
    for n in 0.. {
        let name = format!("lock-{n}");
        let port = cluster.node_of(&format!("redlock:{{{name}}}:holders")).port;
        if !ports.contains(&port) {
            ports.push(port);
            names.push(name);
        }
        if names.len() == 3 {
            return names;
        }
    }
    unreachable!()
}

#[test]
fn every_command_works_on_a_cluster() {
    let cluster = Cluster::start(0);
    for name in names_on_every_master(&cluster) {
        let token = redlock(&cluster, &["acquire", "--key", &name, "--ttl", "30s"]).run();
        token.code(0);
        let token = token.stdout.trim().to_owned();
        let node = cluster.node_of(&format!("redlock:{{{name}}}:holders"));
        assert_eq!(
            node.cmd::<i64>(&["EXISTS", &format!("redlock:{{{name}}}:holders")]),
            1
        );
        redlock(&cluster, &["inspect", "--key", &name])
            .run()
            .code(0);
        redlock(
            &cluster,
            &["extend", "--key", &name, "--token", &token, "--ttl", "20s"],
        )
        .run()
        .code(0);
        // Waiting: a queued run takes the lock when it is released.
        let waiter = redlock(
            &cluster,
            &["run", "--key", &name, "--wait", "20s", "--", "true"],
        )
        .spawn();
        assert!(wait_until(Duration::from_secs(10), || {
            let out = redlock(&cluster, &["inspect", "--key", &name, "--json"]).run();
            out.json()["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == 1)
        }));
        redlock(&cluster, &["release", "--key", &name, "--token", &token])
            .run()
            .code(0);
        waiter.wait(Duration::from_secs(10)).code(0);
        // Shared and semaphore modes, and a forced release.
        redlock(
            &cluster,
            &[
                "run",
                "--shared",
                "--key",
                &format!("{name}-r"),
                "--",
                "true",
            ],
        )
        .run()
        .code(0);
        redlock(
            &cluster,
            &[
                "acquire",
                "--limit",
                "2",
                "--key",
                &format!("{name}-s"),
                "--ttl",
                "9s",
            ],
        )
        .run()
        .code(0);
        redlock(
            &cluster,
            &["release", "--key", &format!("{name}-s"), "--force"],
        )
        .run()
        .code(0);
    }
    // `list` reads every master, not just the seed it reached first.
    let names = names_on_every_master(&cluster);
    for name in &names {
        redlock(&cluster, &["acquire", "--key", name, "--ttl", "30s"])
            .run()
            .code(0);
    }
    let listed = as_locker(&cluster, &["list", "--json"]).run();
    listed.code(0);
    let listed: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap().to_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(listed, names, "list missed locks on other masters");
}

/// Takes lock `k` and gives it back: its fence counter and history stay on the slot's owner,
/// its holders do not.
fn take_and_give_back_k(cluster: &Cluster) {
    let out = redlock(cluster, &["acquire", "--key", "k", "--ttl", "5s"]).run();
    out.code(0);
    redlock(
        cluster,
        &["release", "--key", "k", "--token", out.stdout.trim()],
    )
    .run()
    .code(0);
}

/// A slot stuck half-migrated (MIGRATING, with some of
/// the lock's keys there and others not) answers every script with TRYAGAIN. A request tries
/// again after 50 ms, doubling up to 800 ms, for 4 s of pauses in all, then fails (69): about
/// 2 refusals a second, where retrying at once sends them all within 10 ms.
#[test]
fn a_slot_that_answers_tryagain_is_retried_gently() {
    let cluster = Cluster::start(0);
    take_and_give_back_k(&cluster);
    let (owner, _) = set_slot_of_k(&cluster, "MIGRATING");
    let errors = owner.stat("total_error_replies");
    let connections = owner.stat("total_connections_received");
    let out = redlock(&cluster, &["acquire", "--key", "k", "--ttl", "5s"]).run();
    // Less the test's own INFO connection.
    let connections = owner.stat("total_connections_received") - connections - 1;
    let errors = owner.stat("total_error_replies") - errors;
    out.code(69).stderr_contains("TRYAGAIN");
    assert!(
        errors >= 5,
        "{errors} error replies: not what this test is about"
    );
    let per_second = errors as f64 / out.elapsed.as_secs_f64();
    assert!(
        per_second <= 5.0,
        "{errors} error replies in {:?}",
        out.elapsed
    );
    assert!(
        connections <= 6,
        "{connections} connections in {:?}",
        out.elapsed
    );
}

/// Two masters that disagree about a slot's owner (each
/// names the other: a reconfiguration under way, made here with CLUSTER SETSLOT ... NODE on
/// the owner) send a request back and forth. Each MOVED after the first is followed after a
/// pause that doubles, 100 ms to 800 ms, and after 5 redirections the request fails (69):
/// about 4 a second, where following at once makes all 6 requests within 10 ms.
#[test]
fn masters_that_send_a_request_back_and_forth_are_followed_gently() {
    let cluster = Cluster::start(0);
    let (owner, other) = set_slot_of_k(&cluster, "NODE");
    let redirected = || owner.stat("total_error_replies") + other.stat("total_error_replies");
    let errors = redirected();
    let out = redlock(&cluster, &["acquire", "--key", "k", "--ttl", "5s"]).run();
    let errors = redirected() - errors;
    out.code(69)
        .one_line_error("more than 5 redirections in the Cluster");
    assert!(
        errors >= 5,
        "{errors} redirections: not what this test is about"
    );
    let per_second = errors as f64 / out.elapsed.as_secs_f64();
    assert!(
        per_second <= 5.0,
        "{errors} redirections in {:?}",
        out.elapsed
    );
}

/// A slot whose migration has begun answers TRYAGAIN until the lock's keys are all on one side
/// (here it stays so for 2.2 s, then the migration is called off): the request waits it out,
/// with pauses of its own (up to 4 s in all), not counted against the 5 redirections.
#[test]
fn a_request_waits_out_a_slot_that_answers_tryagain() {
    let cluster = Cluster::start(0);
    take_and_give_back_k(&cluster);
    let (owner, _) = set_slot_of_k(&cluster, "MIGRATING");
    let slot: i64 = owner.cmd(&["CLUSTER", "KEYSLOT", "redlock:{k}:holders"]);
    let errors = owner.stat("total_error_replies");
    let acquiring = redlock(&cluster, &["acquire", "--key", "k", "--ttl", "5s"]).spawn();
    std::thread::sleep(Duration::from_millis(2200));
    owner.cmd::<()>(&["CLUSTER", "SETSLOT", &slot.to_string(), "STABLE"]);
    let out = acquiring.wait(Duration::from_secs(20));
    out.code(0);
    let errors = owner.stat("total_error_replies") - errors;
    assert!(
        errors >= 5,
        "{errors} TRYAGAIN: not what this test is about"
    );
}

/// A slot migrating to a node that never ran redlock's scripts (its cache is empty). While the
/// lock's keys are still on the old owner, `extend` runs there, and leaves every key it found
/// (a key that empties on the way cannot be written again there: the node refuses it half-way
/// through the script). Once they moved, the old owner answers ASK, and the new one serves a
/// command only right after ASKING: the script sent again as EVAL after its NOSCRIPT needs
/// ASKING too, or the node sends it back with MOVED. Both go through; the lease is on the slot's
/// new owner, and so is its history entry.
#[test]
fn an_extend_follows_ask_to_a_node_without_the_scripts() {
    let cluster = Cluster::start(0);
    let out = as_locker(&cluster, &["acquire", "--key", "k", "--ttl", "30s"]).run();
    out.code(0);
    let token = out.stdout.trim().to_owned();
    let slot: i64 = cluster.nodes[0].cmd(&["CLUSTER", "KEYSLOT", "redlock:{k}:holders"]);
    let from = cluster.node_of("redlock:{k}:holders");
    let to = cluster
        .nodes
        .iter()
        .find(|node| node.port != from.port)
        .unwrap();
    to.cmd::<()>(&["SCRIPT", "FLUSH"]);
    let extend = |ttl: &str| {
        as_locker(
            &cluster,
            &["extend", "--key", "k", "--token", &token, "--ttl", ttl],
        )
        .run()
        .code(0);
    };
    Cluster::mark_migration(slot, from, to);
    extend("60s");
    Cluster::move_keys(&slot.to_string(), from, to);
    extend("90s");
    cluster.end_migration(slot, to);
    let left: i64 = to.cmd(&["PTTL", "redlock:{k}:holders"]);
    assert!(left > 60_000, "{left} ms left on the new owner");
    let history = redlock(&cluster, &["history", "--key", "k", "--json"]).run();
    history.code(0);
    assert_eq!(history.json().as_array().map(Vec::len), Some(1));
}

/// A node that stops answering is named: the URL names only seeds. Repro: "no answer within
/// 5.0s" after the seeds' list, no word of which node.
#[test]
fn a_node_that_does_not_answer_is_named() {
    let cluster = Cluster::start(0);
    let node = cluster.node_of("k");
    crate::util::send_signal(node.pid(), "STOP");
    let out = redlock(
        &cluster,
        &["inspect", "--key", "k", "--command-timeout", "500ms"],
    )
    .run();
    crate::util::send_signal(node.pid(), "CONT");
    out.code(69)
        .one_line_error(&format!("(node 127.0.0.1:{}): no answer within", node.port));
}

/// A run's final release answered CLUSTERDOWN (the lock's node sees the Cluster down: one of
/// its slots unserved, as while a master fails over) did not run: it is sent again until the
/// Cluster is up, for up to the release timeout (5 s by default), longer than the 1 s a server
/// that does not answer at all is given. Down for 2.5 s: released, and the history says the
/// release was sent again. With `--release-timeout 1s` it is given up after a second, and the
/// lock is left to its lease.
#[test]
fn a_release_refused_while_the_cluster_is_down_is_sent_again() {
    let cluster = Cluster::start(0);
    let owner = cluster.node_of("redlock:{k}:holders");
    let out = release_while_the_cluster_is_down(&cluster, &[], Duration::from_millis(2500));
    out.code(0);
    if owner.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]) != 0 {
        out.fail("the lock is still held after run exited");
    }
    let history = redlock(&cluster, &["history", "--key", "k", "--json"]).run();
    history.code(0);
    let last = &history.json()[0];
    assert_eq!(last["outcome"], "released", "{}", history.stdout);
    assert!(
        last["why"]
            .as_str()
            .is_some_and(|why| why.contains("release sent again") && why.contains("CLUSTERDOWN")),
        "{}",
        history.stdout
    );

    let out = release_while_the_cluster_is_down(
        &cluster,
        &["--release-timeout", "1s"],
        Duration::from_millis(2500),
    );
    out.code(0).stderr_contains("could not release lock 'k'");
    assert!(
        out.elapsed < Duration::from_secs(4),
        "gave up after {:?}",
        out.elapsed
    );
    assert_eq!(owner.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]), 1);
}

/// A `run` of lock `k` (with `args`) whose command ends while the lock's node sees the Cluster
/// down (one of its other slots deleted), for `down`; how the run ended.
fn release_while_the_cluster_is_down(
    cluster: &Cluster,
    args: &[&str],
    down: Duration,
) -> crate::util::Output {
    let dir = TempDir::new("cluster-down");
    let owner = cluster.node_of("redlock:{k}:holders");
    let slot: i64 = owner.cmd(&["CLUSTER", "KEYSLOT", "redlock:{k}:holders"]);
    let other = [slot - 1, slot + 1]
        .into_iter()
        .find(|&other| (0..16384).contains(&other) && cluster.port_of_slot(other) == owner.port)
        .unwrap()
        .to_string();
    let running = redlock(cluster, &["run", "-v", "--key", "k", "--ttl", "30s"])
        .args(args)
        .args(&["--", "sh", "-c"])
        .arg(format!(
            "touch {d}/started; while [ ! -e {d}/go ]; do sleep 0.02; done",
            d = dir.path().display()
        ))
        .spawn();
    if !wait_until(Duration::from_secs(10), || {
        dir.path().join("started").exists()
    }) {
        running
            .wait(Duration::from_secs(1))
            .fail("the command did not start");
    }
    owner.cmd::<()>(&["CLUSTER", "DELSLOTS", &other]);
    assert!(wait_until(Duration::from_secs(5), || {
        owner
            .cmd::<String>(&["CLUSTER", "INFO"])
            .contains("cluster_state:fail")
    }));
    std::fs::write(dir.path().join("go"), "").unwrap();
    // The fault's length: the release is refused all that time.
    std::thread::sleep(down);
    owner.cmd::<()>(&["CLUSTER", "ADDSLOTS", &other]);
    running.wait(Duration::from_secs(15))
}

/// `run` holds a lock while its slot moves to another master: renewals follow MOVED (and ASK
/// while keys move), the lock moves with its keys, and nobody else gets it.
#[test]
fn a_run_keeps_its_lock_through_a_slot_migration() {
    let cluster = Cluster::start(0);
    let dir = TempDir::new("migration");
    let running = as_locker(
        &cluster,
        &["run", "-v", "--key", "k", "--ttl", "3s", "--", "sh", "-c"],
    )
    .arg(format!(
        "touch {d}/started; sleep 6; touch {d}/done",
        d = dir.path().display()
    ))
    .spawn();
    if !wait_until(Duration::from_secs(10), || {
        dir.path().join("started").exists()
    }) {
        running
            .wait(Duration::from_secs(1))
            .fail("the command did not start");
    }
    let slot: i64 = cluster.nodes[0].cmd(&["CLUSTER", "KEYSLOT", "redlock:{k}:holders"]);
    let from = cluster.node_of("redlock:{k}:holders");
    let to = cluster
        .nodes
        .iter()
        .find(|node| node.port != from.port)
        .unwrap();
    cluster.migrate(slot, from, to);
    assert_eq!(cluster.port_of_slot(slot), to.port);
    redlock(&cluster, &["acquire", "--key", "k", "--ttl", "5s"])
        .run()
        .code(75);
    let out = running.wait(Duration::from_secs(20));
    out.code(0);
    assert!(dir.path().join("done").exists());
    assert_eq!(to.cmd::<i64>(&["EXISTS", "redlock:{k}:holders"]), 0);
}

/// The master serving the lock fails over to its replica (CLUSTER FAILOVER): the lock had
/// reached the replica (`--replicas 1`: every renewal was acknowledged by it), and the run
/// goes on with it.
#[test]
fn a_run_keeps_its_lock_through_a_master_failover() {
    let cluster = Cluster::start(1);
    let dir = TempDir::new("cluster-failover");
    // A manual failover pauses writes on the old master while the replica catches up: the
    // lease must outlast that pause for the run to keep it.
    let running = redlock(
        &cluster,
        &[
            "run",
            "-v",
            "--key",
            "k",
            "--ttl",
            "10s",
            "--replicas",
            "1",
            "--",
            "sh",
            "-c",
        ],
    )
    .arg(format!(
        "touch {d}/started; sleep 6; touch {d}/done",
        d = dir.path().display()
    ))
    .spawn();
    if !wait_until(Duration::from_secs(10), || {
        dir.path().join("started").exists()
    }) {
        running
            .wait(Duration::from_secs(1))
            .fail("the command did not start");
    }
    fail_over(&cluster, "redlock:{k}:holders");
    let other = redlock(&cluster, &["acquire", "--key", "k", "--ttl", "5s"]).run();
    if other.status.code() != Some(75) {
        let run = running.wait(Duration::from_secs(20));
        run.fail(&format!(
            "another client got the lock (exit {:?})",
            other.status
        ));
    }
    running.wait(Duration::from_secs(20)).code(0);
    assert!(dir.path().join("done").exists());
}

/// The lock did not survive the failover (as when the master died before the key reached its
/// replica; here the key is deleted on the new master the moment it takes over): the run's
/// next renewal, redirected to the new master, finds the lock gone and stops the command
/// (125) while the lease on the old master has not yet lapsed.
#[test]
fn a_run_stops_its_command_when_a_failover_loses_the_lock() {
    let cluster = Cluster::start(1);
    let dir = TempDir::new("cluster-lost");
    let running = redlock(
        &cluster,
        &["run", "-v", "--key", "k", "--ttl", "10s", "--", "sh", "-c"],
    )
    .arg(format!(
        "touch {d}/started; sleep 30; touch {d}/done",
        d = dir.path().display()
    ))
    .spawn();
    if !wait_until(Duration::from_secs(10), || {
        dir.path().join("started").exists()
    }) {
        running
            .wait(Duration::from_secs(1))
            .fail("the command did not start");
    }
    let new_master = fail_over(&cluster, "redlock:{k}:holders");
    new_master.cmd::<()>(&["DEL", "redlock:{k}:holders", "redlock:{k}:leases"]);
    let out = running.wait(Duration::from_secs(20));
    out.code(125).stderr_contains("lost lock 'k'");
    assert!(!dir.path().join("done").exists());
}

/// Fails the master serving `key` over to its replica (CLUSTER FAILOVER, which waits for the
/// replica to catch up) and returns the new master.
fn fail_over<'a>(cluster: &'a Cluster, key: &str) -> &'a crate::util::RedisServer {
    let master = cluster.node_of(key);
    let master_id = Cluster::id(master);
    let replica = cluster
        .nodes
        .iter()
        .find(|node| {
            let role: Vec<redis::Value> = node.cmd(&["ROLE"]);
            redis::from_redis_value::<String>(role[0].clone()).unwrap() == "slave"
                && node
                    .cmd::<String>(&["CLUSTER", "NODES"])
                    .lines()
                    .any(|line| line.contains("myself") && line.contains(&master_id))
        })
        .expect("the master's replica");
    replica.cmd::<()>(&["CLUSTER", "FAILOVER"]);
    assert!(wait_until(Duration::from_secs(10), || {
        let role: Vec<redis::Value> = replica.cmd(&["ROLE"]);
        redis::from_redis_value::<String>(role[0].clone()).unwrap() == "master"
    }));
    replica
}

/// Three seeds: the first stopped (SIGSTOP: it still accepts connections, and never answers),
/// the second gone, the third a master. Each command reaches the Cluster through the third,
/// and pays the silent seed one connect timeout at most (a `run`, whose later connections try
/// it last, once). Repro: every command failed (69) after the command timeout, waiting on the
/// first seed's connection, and never tried the next seed.
#[test]
fn a_silent_seed_costs_one_timeout_and_the_next_seed_answers() {
    let mut cluster = Cluster::start(1);
    let role = |node: &RedisServer| {
        let role: Vec<redis::Value> = node.cmd(&["ROLE"]);
        redis::from_redis_value::<String>(role[0].clone()).unwrap()
    };
    // Replicas as the first two seeds: the masters go on serving every slot.
    let replicas: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&n| role(&cluster.nodes[n]) == "slave")
        .collect();
    let master = (0..cluster.nodes.len())
        .find(|&n| role(&cluster.nodes[n]) == "master")
        .unwrap();
    let seeds: Vec<String> = [replicas[0], replicas[1], master]
        .iter()
        .map(|&n| format!("127.0.0.1:{}", cluster.nodes[n].port))
        .collect();
    let url = format!("redis+cluster://{}", seeds.join(","));
    // The cluster's Drop continues the stopped node before it kills it.
    send_signal(cluster.nodes[replicas[0]].pid(), "STOP");
    cluster.nodes[replicas[1]].kill();
    // One timeout is 1 s; a silent seed may cost one, and a command's own time is small.
    let bound = Duration::from_secs(3);
    let redlock = |command: &str, args: &[&str]| {
        let mut full = vec![
            command,
            "--connect-timeout",
            "1s",
            "--command-timeout",
            "1s",
        ];
        full.extend(args);
        let out = Redlock::new(&full).env("REDLOCK_URL", &url).run();
        assert!(
            out.elapsed < bound,
            "{command} took {:?}: {}",
            out.elapsed,
            out.stderr
        );
        out
    };
    let out = redlock("acquire", &["--key", "k", "--ttl", "30s"]);
    out.code(0);
    let token = out.stdout.trim().to_owned();
    redlock("inspect", &["--key", "k"]).code(0);
    let listed = redlock("list", &["--json"]);
    listed.code(0);
    assert_eq!(listed.json()[0]["key"], "k");
    redlock("release", &["--key", "k", "--token", &token]).code(0);
    redlock("run", &["--key", "k", "--", "true"]).code(0);
}

/// A `run` whose only seed stops (SIGSTOP) while it holds the lock, and whose connection to the
/// lock's node is then closed: the renewal that reconnects gives the silent seed one connect
/// timeout, then reaches the node a redirection named earlier, and the run keeps its lock.
/// Repro: every reconnect went to the stopped seed and waited out the command timeout; no
/// renewal reached the lock's node again.
#[test]
fn a_run_whose_only_seed_stops_renews_through_a_node_it_learnt_of() {
    let cluster = Cluster::start(1);
    let seed = cluster
        .nodes
        .iter()
        .find(|node| {
            let role: Vec<redis::Value> = node.cmd(&["ROLE"]);
            redis::from_redis_value::<String>(role[0].clone()).unwrap() == "slave"
        })
        .unwrap();
    let owner = cluster.node_of("redlock:{k}:holders");
    let dir = TempDir::new("learnt");
    let running = Redlock::new(&[
        "run",
        "--connect-timeout",
        "1s",
        "--command-timeout",
        "1s",
        "--key",
        "k",
        "--ttl",
        "9s",
        "--",
        "sh",
        "-c",
    ])
    .arg(format!(
        "touch {d}/started; while [ ! -e {d}/go ]; do sleep 0.1; done",
        d = dir.path().display()
    ))
    .env(
        "REDLOCK_URL",
        &format!("redis+cluster://127.0.0.1:{}", seed.port),
    )
    .spawn();
    assert!(wait_until(Duration::from_secs(10), || {
        dir.path().join("started").exists()
    }));
    // The cluster's Drop continues the stopped node before it kills it.
    send_signal(seed.pid(), "STOP");
    owner.cmd::<()>(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    // From now on only a new connection renews the lease.
    let pttl = || owner.cmd::<i64>(&["PTTL", "redlock:{k}:holders"]);
    let (killed, left) = (std::time::Instant::now(), pttl());
    // Renewed since: more lease left than there was, less the time gone by.
    let reconnected = wait_until(Duration::from_secs(15), || {
        let gone = i64::try_from(killed.elapsed().as_millis()).unwrap();
        let now = pttl();
        // (Negative: no key, the lease lapsed.)
        now > 0 && now > left - gone + 500
    });
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = running.wait(Duration::from_secs(20));
    assert!(
        reconnected,
        "no renewal reached the lock's node: {}",
        out.stderr
    );
    out.code(0);
}

/// A slot stuck half-migrated (MIGRATING, some of lock k's keys there and others not) refuses
/// every read of k with TRYAGAIN; the locks of other slots are still read. `list` and `metrics`
/// show them, and k as unreadable, with a warning naming it (exit 0). Repro: both failed (69)
/// with TRYAGAIN, showing no lock at all.
#[test]
fn a_lock_whose_slot_is_stuck_migrating_is_listed_as_unreadable() {
    let cluster = Cluster::start(0);
    let k_slot: i64 = cluster.nodes[0].cmd(&["CLUSTER", "KEYSLOT", "redlock:{k}:holders"]);
    let others: Vec<String> = names_on_every_master(&cluster)
        .into_iter()
        .filter(|name| {
            let slot: i64 = cluster.nodes[0].cmd(&[
                "CLUSTER",
                "KEYSLOT",
                &format!("redlock:{{{name}}}:holders"),
            ]);
            slot != k_slot
        })
        .take(2)
        .collect();
    assert_eq!(others.len(), 2);
    for name in others.iter().map(String::as_str).chain(["k"]) {
        redlock(&cluster, &["acquire", "--key", name, "--ttl", "60s"])
            .run()
            .code(0);
    }
    // k's holders and fence are there, its queue is not: a read of all three is TRYAGAIN.
    set_slot_of_k(&cluster, "MIGRATING");
    let short = ["--command-timeout", "1s"];

    let mut args = vec!["list", "--json"];
    args.extend(short);
    let out = redlock(&cluster, &args).run();
    out.code(0)
        .stderr_contains("lock k could not be read")
        .stderr_contains("TRYAGAIN");
    let listed = out.json();
    let listed = listed.as_array().unwrap();
    let state_of = |name: &str| {
        listed
            .iter()
            .find(|lock| lock["key"] == name)
            .map(|lock| lock["state"].as_str().unwrap().to_owned())
    };
    for name in &others {
        assert_eq!(state_of(name).as_deref(), Some("held"), "{listed:?}");
    }
    assert_eq!(state_of("k").as_deref(), Some("unreadable"), "{listed:?}");

    let mut args = vec!["list", "--wide"];
    args.extend(short);
    let out = redlock(&cluster, &args).run();
    out.code(0);
    for name in &others {
        assert!(out.stdout.contains(name.as_str()), "{}", out.stdout);
    }
    assert!(
        out.stdout
            .lines()
            .any(|line| line.starts_with("k ") && line.contains("unreadable")),
        "{}",
        out.stdout
    );

    let mut args = vec!["metrics"];
    args.extend(short);
    let out = redlock(&cluster, &args).run();
    out.code(0).stderr_contains("lock k could not be read");
    let text = &out.stdout;
    let checked = crate::check::promtool(text);
    assert!(checked.status.success(), "promtool: {checked:?}\n{text}");
    let sample = |line: &str| {
        assert!(
            text.lines().any(|have| have == line),
            "no line {line:?} in\n{text}"
        );
    };
    sample(r#"redlock_lock_unreadable{key="k"} 1"#);
    for name in &others {
        sample(&format!(r#"redlock_lock_unreadable{{key="{name}"}} 0"#));
        sample(&format!(
            r#"redlock_lock_held{{key="{name}",mode="exclusive"}} 1"#
        ));
    }
    assert!(!text.contains(r#"redlock_lock_held{key="k""#), "{text}");
}

/// Two masters that send a request for lock k back and forth: with `--command-timeout 200ms`,
/// an acquire gives up within about 200 ms, its pauses and reconnects counted against it, and
/// says the request did not run (a renewal's request is bounded the same way). Repro: the
/// pauses before each MOVED (100 ms to 800 ms) came on top, 1.5 s in all.
#[test]
fn redirections_end_within_the_command_timeout() {
    let cluster = Cluster::start(0);
    set_slot_of_k(&cluster, "NODE");
    let out = redlock(
        &cluster,
        &[
            "acquire",
            "--key",
            "k",
            "--ttl",
            "60s",
            "--command-timeout",
            "200ms",
        ],
    )
    .run();
    out.code(69)
        .stderr_contains("past the command timeout (200ms)");
    // Generous: 5 times the timeout; the pauses alone were 1.5 s.
    assert!(
        out.elapsed < Duration::from_secs(1),
        "{:?}: {}",
        out.elapsed,
        out.stderr
    );
}

/// `CLUSTER SETSLOT <slot of lock k> <state> <another master>` on the slot's owner (MIGRATING:
/// every script answered TRYAGAIN; NODE: the owner sends requests to the other, which sends
/// them back); the owner and the other master.
fn set_slot_of_k<'a>(cluster: &'a Cluster, state: &str) -> (&'a RedisServer, &'a RedisServer) {
    let owner = cluster.node_of("redlock:{k}:holders");
    let other = cluster
        .nodes
        .iter()
        .find(|node| node.port != owner.port)
        .unwrap();
    let slot: i64 = owner.cmd(&["CLUSTER", "KEYSLOT", "redlock:{k}:holders"]);
    owner.cmd::<()>(&[
        "CLUSTER",
        "SETSLOT",
        &slot.to_string(),
        state,
        &Cluster::id(other),
    ]);
    (owner, other)
}

/// On a Cluster, as the README's user, a dead `run` waiter handed the lock costs the queue about
/// 0.6 s (its wake list read and deleted from the script, in the lock's slot), not its 5 s
/// grant.
#[test]
fn a_dead_run_waiters_grant_is_taken_back_on_a_cluster() {
    let cluster = Cluster::start(0);
    let token = as_locker(&cluster, &["acquire", "--key", "job", "--ttl", "60s"]).run();
    token.code(0);
    let token = token.stdout.trim().to_owned();
    let node = cluster.node_of("redlock:{job}:queue");
    let queued = || node.cmd::<usize>(&["ZCARD", "redlock:{job}:queue"]);
    let dead = as_locker(
        &cluster,
        &["run", "--key", "job", "--wait", "30s", "--", "sleep", "300"],
    )
    .spawn();
    assert!(wait_until(Duration::from_secs(10), || queued() == 1));
    let live = as_locker(
        &cluster,
        &["run", "--key", "job", "--wait", "30s", "--", "true"],
    )
    .spawn();
    assert!(wait_until(Duration::from_secs(10), || queued() == 2));
    dead.signal("KILL");
    let _ = dead.wait(Duration::from_secs(5));
    let released = std::time::Instant::now();
    as_locker(&cluster, &["release", "--key", "job", "--token", &token])
        .run()
        .code(0);
    live.wait(Duration::from_secs(20)).code(0);
    let took = released.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "the live run exited {took:?} after the release"
    );
}

/// Found in review: without TLS, a MOVED or ASK sends the password to whatever host it names,
/// and so does every node CLUSTER SLOTS names that the URL does not list (over TLS the host's
/// certificate is checked first: 77). `doctor` warns when the password goes without TLS to
/// nodes the user did not list, naming them; with every node listed, or a single server, it
/// has nothing to say of it.
#[test]
fn doctor_warns_of_a_password_sent_in_clear_to_nodes_the_url_does_not_list() {
    let cluster = Cluster::start(0);
    for node in &cluster.nodes {
        node.cmd::<()>(&["CONFIG", "SET", "requirepass", "pw"]);
    }
    let doctor = |url: &str| {
        Redlock::new(&["doctor"])
            .env("REDLOCK_URL", url)
            .env("REDLOCK_PASSWORD", "pw")
            .run()
    };
    let password_line = |out: &crate::util::Output| {
        out.stdout
            .lines()
            .find(|line| line.split_whitespace().nth(1) == Some("password"))
            .map(str::to_owned)
    };
    let out = doctor(&cluster.url());
    out.code(0);
    let line = password_line(&out).unwrap_or_else(|| out.fail("no password line"));
    assert!(line.starts_with("warning "), "{line}");
    for node in &cluster.nodes[1..] {
        assert!(
            line.contains(&format!("127.0.0.1:{}", node.port)),
            "names the unlisted node {}: {line}",
            node.port
        );
    }
    assert!(
        !line.contains(&format!("127.0.0.1:{},", cluster.nodes[0].port)),
        "{line}"
    );
    assert!(line.contains("rediss+cluster://"), "{line}");
    let json = Redlock::new(&["doctor", "--json"])
        .env("REDLOCK_URL", &cluster.url())
        .env("REDLOCK_PASSWORD", "pw")
        .run();
    json.code(0);
    assert!(
        json.json()
            .as_array()
            .unwrap()
            .iter()
            .any(|finding| finding["check"] == "password" && finding["verdict"] == "warning"),
        "{}",
        json.stdout
    );
    // (One node as a single server: its scripts meet MOVED, which doctor calls unsafe.)
    for (listed, code) in [
        (cluster.seeds_url(), 0),
        (format!("redis://127.0.0.1:{}", cluster.nodes[0].port), 1),
    ] {
        let out = doctor(&listed);
        out.code(code);
        if let Some(line) = password_line(&out) {
            out.fail(&format!("every node is listed: {line}"));
        }
    }
}
