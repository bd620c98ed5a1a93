//! Long queues and large semaphores: the scripts' work does not grow with the queue or with the
//! holders they do not touch, FIFO order holds for hundreds of waiters, dead waiters and
//! expired holders are dropped lazily, and no key but the fence is ever left without an expiry.
//!
//! Long queues are set up through the library's lock engine (the same scripts the binary runs,
//! one call each) instead of hundreds of processes.

use std::time::Duration;

use redlock::conn::Session;
use redlock::keys::{LockName, Prefix};
use redlock::lock::{
    Acquisition, Ending, Identity, Lock, Mode, Queueing, Refreshed, Release, Request, Retention,
    Token, Waiter, Wake,
};

use crate::util::{RedisServer, wait_until};

const HOLDERS: &str = "redlock:{job}:holders";
const WAITERS: &str = "redlock:{job}:waiters";

/// Fails if any key but a fence counter has no expiry (PTTL -1).
#[track_caller]
pub(crate) fn assert_every_key_expires(server: &RedisServer, after: &str) {
    for key in server.keys() {
        if key.ends_with(":fence") {
            continue;
        }
        let pttl: i64 = server.cmd(&["PTTL", &key]);
        assert!(pttl != -1, "{key} has no expiry after {after}");
    }
}

/// A library session with the server (5 s to connect, 5 s per command).
pub(crate) fn session(server: &RedisServer) -> Session {
    server.session()
}

fn lock(name: &str) -> Lock {
    Lock::new(
        &Prefix::new("redlock:").unwrap(),
        LockName::new(name).unwrap(),
    )
}

fn request<'a>(token: &'a Token, ttl: Duration, mode: Mode, who: &'a Identity) -> Request<'a> {
    Request {
        token,
        ttl,
        mode,
        who,
        reenter: false,
        replicas: None,
        history: Retention::default(),
    }
}

/// The commands Redis ran inside each script call, from MONITOR lines in order.
fn calls_by_script(lines: &[(u64, String)]) -> Vec<Vec<String>> {
    let mut calls: Vec<Vec<String>> = Vec::new();
    for (_, line) in lines {
        let Some((client, command)) = line.split_once("] ") else {
            continue;
        };
        if client.ends_with("lua") {
            if let Some(call) = calls.last_mut() {
                call.push(command.to_owned());
            }
        } else if is_script_call(command) {
            calls.push(Vec::new());
        }
    }
    calls
}

/// Whether a MONITOR line's command is a script call.
fn is_script_call(command: &str) -> bool {
    let command = command.to_ascii_lowercase();
    command.starts_with("\"evalsha\"") || command.starts_with("\"eval\"")
}

/// Pops `waiter`'s wake-ups until its grant (a watch of the previous grant, and the word that
/// it moved into the head lease's places, may come first).
fn granted(lock: &Lock, con: &mut Session, waiter: &Waiter, i: usize) -> u64 {
    for _ in 0..4 {
        match lock
            .wait_for_wake(con, waiter, Duration::from_secs(2))
            .unwrap()
        {
            Some(Wake::Granted { fence, .. }) => return fence,
            Some(Wake::Watch { .. } | Wake::Head { .. } | Wake::Look) => {}
            other => panic!("waiter {i} woke with {other:?}"),
        }
    }
    panic!("waiter {i} was never handed the lock");
}

/// A command that reads a whole hash or sorted set, whatever its size.
fn reads_everything(command: &str) -> bool {
    let words: Vec<&str> = command.split(' ').map(|w| w.trim_matches('"')).collect();
    match words[0].to_ascii_uppercase().as_str() {
        "HGETALL" | "HVALS" | "HKEYS" | "SMEMBERS" | "LRANGE" => true,
        "ZRANGE" | "ZREVRANGE" => words.get(3) == Some(&"-1") && words.get(2) != Some(&"-1"),
        "ZRANGEBYSCORE" => !words.contains(&"LIMIT"),
        _ => false,
    }
}

/// A busy acquire that finds the lock free with a dead waiter at the head hands the lock to
/// that waiter; the holders hash it creates must get an expiry in the same script, or nobody
/// ever gives it one (the dead waiter never claims its grant).
#[test]
fn a_busy_acquire_that_hands_over_to_a_dead_head_leaves_no_key_without_expiry() {
    let server = RedisServer::start();
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "1s"])
        .run()
        .code(0);
    let waiter = server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s", "--wait", "60s"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || {
        server.cmd::<i64>(&["EXISTS", "redlock:{job}:queue"]) == 1
    }));
    // Killed: its entry stays for its full entry TTL.
    waiter.signal("KILL");
    let _ = waiter.wait(Duration::from_secs(5));
    // The holder's lease ends and Redis deletes the holders hash.
    assert!(wait_until(Duration::from_secs(5), || {
        server.cmd::<i64>(&["EXISTS", HOLDERS]) == 0
    }));
    // Free, but the dead waiter is first in line: the lock is handed to it, and this is busy.
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "10s"])
        .run()
        .code(75);
    assert_eq!(server.cmd::<i64>(&["EXISTS", HOLDERS]), 1, "no hand-over");
    assert_every_key_expires(&server, "a busy acquire handed the lock to a dead waiter");
    // The unclaimed grant lapses: the lock frees itself, leaving only the fence.
    assert!(
        wait_until(Duration::from_secs(10), || server.keys_but_history()
            == ["redlock:{job}:fence"]),
        "left behind: {:?}",
        server.keys_but_history()
    );
}

/// Every write a script can make is checked against the user's ACL before the first one: a
/// user denied any of them gets exit 77 and Redis is left exactly as it was (in particular, no
/// key is left without its expiry by a script stopped half-way).
#[test]
fn a_user_denied_any_write_changes_nothing() {
    let server = RedisServer::start();
    let full = "resetkeys ~redlock:* resetchannels -@all +evalsha +eval +script|load +blpop \
        +type +get +time +hgetall +hlen +hget +hmget +hset +hdel +zcard +zcount +zrange +zrangebyscore \
        +zrank +zadd +zrem +incr +set +pttl +pexpire +pexpireat +del +rpush +ping";
    for denied in [
        "hset",
        "hdel",
        "zadd",
        "zrem",
        "incr",
        "pexpire",
        "pexpireat",
        "del",
        "rpush",
    ] {
        server.cmd::<()>(&["FLUSHALL"]);
        let rules: Vec<&str> = full
            .split_whitespace()
            .filter(|rule| *rule != format!("+{denied}"))
            .collect();
        let mut args = vec!["ACL", "SETUSER", denied, "reset", "on", ">pw"];
        args.extend(rules);
        server.cmd::<()>(&args);
        let url = format!("redis://{denied}:pw@127.0.0.1:{}", server.port);
        let token = server
            .redlock(&["acquire", "--key", "job", "--ttl", "60s"])
            .run();
        token.code(0);
        let token = token.stdout.trim().to_owned();
        let before: Vec<String> = server.keys();
        let record: Vec<String> = server.cmd(&["HVALS", HOLDERS]);

        let release = ["release", "--key", "job", "--token", &token];
        let extend = ["extend", "--key", "job", "--token", &token, "--ttl", "5s"];
        let mut scenarios = vec![
            &["acquire", "--key", "job", "--ttl", "10s", "--wait", "1s"][..],
            &["acquire", "--key", "free", "--ttl", "10s"],
        ];
        // An acquisition asks about every write a hold may need; a release and a renewal only
        // about those they make. extend writes the holder's record and lease and its history
        // entry; the release of the only holder deletes both holder keys and closes its
        // history entry.
        if ["hset", "zadd", "zrem", "pexpireat"].contains(&denied) {
            scenarios.push(&extend);
        }
        let release_writes = ["del", "zadd", "zrem", "pexpire"].contains(&denied);
        if release_writes {
            scenarios.push(&release);
        }
        for args in scenarios {
            let out = server.redlock(args).env("REDLOCK_URL", &url).run();
            out.code(77)
                .stderr_contains("permission denied")
                .stderr_contains(&denied.to_ascii_uppercase());
            assert_every_key_expires(&server, &format!("{args:?} without +{denied}"));
            assert_eq!(server.keys(), before, "{args:?} without +{denied}");
            assert_eq!(
                server.cmd::<Vec<String>>(&["HVALS", HOLDERS]),
                record,
                "{args:?} without +{denied}"
            );
        }
        if !release_writes {
            server
                .redlock(&release)
                .env("REDLOCK_URL", &url)
                .run()
                .code(0);
            assert_every_key_expires(&server, &format!("release without +{denied}"));
            assert_eq!(
                server.keys_but_history(),
                ["redlock:{job}:fence"],
                "without +{denied}"
            );
        }
    }
}

/// Three hundred waiters queued one call each are handed the lock in arrival order. One of
/// them dies deep in the queue (its entry expires): no call touches its entry until it is at
/// the head, where it is dropped in passing, without a grant. No call reads the whole queue,
/// and a call at the back of the queue runs the same commands as one at the front.
#[test]
fn three_hundred_waiters_in_order_and_a_dead_one_costs_nothing_until_the_head() {
    const WAITERS_N: usize = 300;
    const DEAD: usize = 150;
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("job");
    let who = Identity::current("scale-test");
    let exclusive = |token| request(token, Duration::from_secs(60), Mode::Exclusive, &who);

    let holder = Token::generate();
    assert!(matches!(
        lock.acquire(&mut con, &exclusive(&holder), Queueing::No)
            .unwrap(),
        Acquisition::Acquired(_)
    ));
    let monitor = server.monitor();
    let waiters: Vec<Waiter> = (0..WAITERS_N).map(|_| Waiter::new()).collect();
    for (i, waiter) in waiters.iter().enumerate() {
        match lock
            .acquire(&mut con, &exclusive(&waiter.token), Queueing::Join(waiter))
            .unwrap()
        {
            Acquisition::Busy {
                position, length, ..
            } => assert_eq!((position, length), (i + 1, i + 1)),
            other => panic!("waiter {i}: {other:?}"),
        }
    }
    assert_every_key_expires(&server, "joining");
    let joins = calls_by_script(&monitor.stop_after_all(&server));
    assert_eq!(joins.len(), WAITERS_N);
    let names = |call: &Vec<String>| -> Vec<String> {
        call.iter()
            .map(|c| c.split(' ').next().unwrap().to_owned())
            .collect()
    };
    // (The queue's expiry is pushed back about once a second, by whichever call comes.)
    let names = |call: &Vec<String>| -> Vec<String> {
        names(call)
            .into_iter()
            .filter(|name| name != "\"PEXPIREAT\"")
            .collect()
    };
    assert_eq!(
        names(&joins[1]),
        names(&joins[WAITERS_N - 1]),
        "joining at the back of a long queue runs other commands than near the front"
    );

    // A refresh deep in the queue reads its own entry and place only.
    let monitor = server.monitor();
    assert!(matches!(
        lock.refresh(&mut con, &waiters[250]).unwrap(),
        Refreshed::Queued {
            position: 251,
            length: 300,
            ..
        }
    ));
    let refresh = calls_by_script(&monitor.stop_after_all(&server));
    assert!(refresh[0].len() <= 8, "refresh ran {:?}", refresh[0]);

    // inspect shows the head of a long queue and its length.
    let out = server.redlock(&["inspect", "--key", "job", "--json"]).run();
    let view = out.json();
    assert_eq!(view["waiters"].as_array().unwrap().len(), 100);
    assert_eq!(view["queue_length"], 300);
    assert_eq!(view["waiters"][0]["position"], 1);
    server
        .redlock(&["inspect", "--key", "job"])
        .run()
        .code(0)
        .stdout_contains("300 entries in the queue; the first 100 live waiters are shown");

    // Waiter DEAD dies: its entry's expiry passes (as if it had not refreshed in time).
    let dead = &waiters[DEAD];
    let entry: String = server.cmd(&["HGET", WAITERS, &dead.id]);
    let mut record: serde_json::Value = serde_json::from_str(&entry).unwrap();
    record["exp"] = serde_json::json!(1);
    let entry = record.to_string();
    server.cmd::<()>(&["HSET", WAITERS, &dead.id, &entry]);

    let monitor = server.monitor();
    assert_eq!(
        lock.release(&mut con, &holder, Duration::ZERO, &Ending::default())
            .unwrap(),
        Release::Released
    );
    let mut last_fence = 0;
    for (i, waiter) in waiters.iter().enumerate() {
        if i == DEAD {
            continue;
        }
        if i < DEAD - 1 {
            // Untouched while those ahead are served.
            assert_eq!(server.cmd::<String>(&["HGET", WAITERS, &dead.id]), entry);
        } else {
            // Dropped once at the head (when the one ahead of it was handed the lock), and
            // never handed the lock itself.
            assert_eq!(server.cmd::<i64>(&["HEXISTS", WAITERS, &dead.id]), 0);
            assert_eq!(
                server.cmd::<i64>(&["EXISTS", &format!("redlock:{{job}}:wake:{}", dead.id)]),
                0,
                "the dead waiter was handed the lock"
            );
        }
        let fence = granted(&lock, &mut con, waiter, i);
        assert!(
            fence > last_fence,
            "waiter {i}: fence {fence} after {last_fence}"
        );
        last_fence = fence;
        let lease = match lock
            .acquire(&mut con, &exclusive(&waiter.token), Queueing::Stay(waiter))
            .unwrap()
        {
            Acquisition::Acquired(lease) => lease,
            other => panic!("waiter {i} could not claim its grant: {other:?}"),
        };
        assert_eq!(lease.fence, fence);
        if i % 25 == 0 {
            assert_every_key_expires(&server, &format!("waiter {i} claimed"));
        }
        assert_eq!(
            lock.release(&mut con, &waiter.token, Duration::ZERO, &Ending::default())
                .unwrap(),
            Release::Released
        );
    }
    let lines = monitor.stop_after_all(&server);
    let dead_seen = lines
        .iter()
        .position(|(_, line)| line.contains(" lua] ") && line.contains(&dead.id))
        .expect("the dead entry is dropped at the head");
    let served_before = lines[..dead_seen]
        .iter()
        .filter(|(_, line)| {
            // Each call is one EVALSHA (followed by an EVAL when the script was not loaded).
            line.split_once("] ")
                .is_some_and(|(_, command)| command.to_ascii_lowercase().starts_with("\"evalsha\""))
                && line.contains("\"token\"")
        })
        .count();
    // The holder's release, and each release by a waiter ahead of it until the dead one moves
    // into the first 8 places, whose entries each call reads for the head lease (a lapsed one
    // is left as it is; it is dropped at the head, above).
    assert_eq!(
        served_before,
        DEAD - 7,
        "the dead entry was read before it reached the first places: {}",
        lines[dead_seen].1
    );
    for call in calls_by_script(&lines) {
        assert!(
            !call.iter().any(|command| reads_everything(command)),
            "a call read a whole collection: {call:?}"
        );
        // (The head lease may add 2 reads and, for each of the first 8 places, 3 writes.)
        assert!(
            call.len() <= 40 + 2 + 3 * 8,
            "{} commands in one call: {call:?}",
            call.len()
        );
    }
    assert_eq!(server.keys_but_history(), ["redlock:{job}:fence"]);
}

/// A semaphore of 10,000 with 9,000 expired holders: a new holder is admitted (the expired
/// ones are not counted), the expired ones are deleted a bounded chunk per call, and inspect
/// counts the live ones.
#[test]
fn a_semaphore_of_ten_thousand_with_nine_thousand_expired_holders() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("sem");
    let who = Identity::current("scale-test");
    let mode = Mode::Semaphore(10_000);
    let mut live = Vec::new();
    for n in 0..10_000 {
        let token = Token::generate();
        let ttl = Duration::from_secs(if n < 1000 { 120 } else { 10 });
        match lock
            .acquire(&mut con, &request(&token, ttl, mode, &who), Queueing::No)
            .unwrap()
        {
            Acquisition::Acquired(_) => {}
            other => panic!("holder {n}: {other:?}"),
        }
        if n < 1000 {
            live.push(token);
        }
    }
    assert_every_key_expires(&server, "10,000 acquisitions");
    assert!(
        wait_until(Duration::from_secs(25), || {
            lock.inspect(&mut con).unwrap().holder_count == 1000
        }),
        "the short leases did not expire"
    );
    let leases = || server.cmd::<usize>(&["ZCARD", "redlock:{sem}:leases"]);
    let before = leases();
    assert!(
        before > 8000,
        "expired holders were purged eagerly: {before}"
    );

    server
        .redlock(&[
            "acquire", "--key", "sem", "--limit", "10000", "--ttl", "60s",
        ])
        .run()
        .code(0);
    // One holder more, and at most one chunk of expired ones fewer.
    let after = leases();
    assert!(
        after < before && after + 100 >= before,
        "{before} leases before, {after} after one acquisition"
    );
    assert_every_key_expires(&server, "an acquisition among 9,000 expired holders");

    let out = server.redlock(&["inspect", "--key", "sem", "--json"]).run();
    let view = out.json();
    assert_eq!(view["holders"].as_array().unwrap().len(), 1000);
    assert_eq!(view["holder_count"], 1001);
    server
        .redlock(&["inspect", "--key", "sem"])
        .run()
        .code(0)
        .stdout_contains("semaphore, 1001 of 10000 permits taken")
        .stdout_contains("... and 1 more holders");

    assert_eq!(
        lock.release(&mut con, &live[0], Duration::ZERO, &Ending::default())
            .unwrap(),
        Release::Released
    );
    assert!(
        lock.extend(&mut con, &live[1], Duration::from_secs(30), None)
            .unwrap()
    );
    let (_, evicted, _) = lock.force_release(&mut con, "by the scale test").unwrap();
    assert_eq!(evicted.len(), 1000);
    assert_eq!(server.keys_but_history(), ["redlock:{sem}:fence"]);
}

/// A key changed by hand: the holders hash deleted to free a lock, one holder's field deleted
/// to evict it. The lease index is rebuilt from the records, and nothing is left stuck.
#[test]
fn holders_deleted_by_hand_are_gone_and_the_index_follows() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("job");
    let who = Identity::current("scale-test");
    let mode = Mode::Semaphore(2);
    let tokens: Vec<Token> = (0..2).map(|_| Token::generate()).collect();
    for token in &tokens {
        let asked = request(token, Duration::from_secs(60), mode, &who);
        assert!(matches!(
            lock.acquire(&mut con, &asked, Queueing::No).unwrap(),
            Acquisition::Acquired(_)
        ));
    }
    // Evict one by hand: its permit is free for a newcomer at once.
    server.cmd::<()>(&["HDEL", HOLDERS, tokens[0].as_str()]);
    assert_eq!(lock.inspect(&mut con).unwrap().holder_count, 1);
    let newcomer = Token::generate();
    let asked = request(&newcomer, Duration::from_secs(60), mode, &who);
    assert!(matches!(
        lock.acquire(&mut con, &asked, Queueing::No).unwrap(),
        Acquisition::Acquired(_)
    ));
    assert_eq!(server.cmd::<usize>(&["ZCARD", "redlock:{job}:leases"]), 2);
    // Free the whole lock by hand.
    server.cmd::<()>(&["DEL", HOLDERS]);
    assert_eq!(lock.inspect(&mut con).unwrap().holder_count, 0);
    assert!(
        !lock
            .extend(&mut con, &tokens[1], Duration::from_secs(5), None)
            .unwrap()
    );
    let again = Token::generate();
    let asked = request(&again, Duration::from_secs(5), mode, &who);
    assert!(matches!(
        lock.acquire(&mut con, &asked, Queueing::No).unwrap(),
        Acquisition::Acquired(_)
    ));
    assert_eq!(server.cmd::<usize>(&["ZCARD", "redlock:{job}:leases"]), 1);
    assert_every_key_expires(&server, "holders deleted by hand");
}

/// A release hands the lock to at most 100 queued readers in one call; the next one is told
/// to look, and its own call takes the lock and hands it on to the rest.
#[test]
fn a_long_run_of_readers_is_handed_the_lock_in_bounded_steps() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("job");
    let who = Identity::current("scale-test");
    let writer = Token::generate();
    let asked = request(&writer, Duration::from_secs(60), Mode::Exclusive, &who);
    assert!(matches!(
        lock.acquire(&mut con, &asked, Queueing::No).unwrap(),
        Acquisition::Acquired(_)
    ));
    let readers: Vec<Waiter> = (0..150).map(|_| Waiter::new()).collect();
    let shared = |token| request(token, Duration::from_secs(60), Mode::Shared, &who);
    for reader in &readers {
        assert!(matches!(
            lock.acquire(&mut con, &shared(&reader.token), Queueing::Join(reader))
                .unwrap(),
            Acquisition::Busy { .. }
        ));
    }
    let monitor = server.monitor();
    assert_eq!(
        lock.release(&mut con, &writer, Duration::ZERO, &Ending::default())
            .unwrap(),
        Release::Released
    );
    let release = calls_by_script(&monitor.stop_after_all(&server));
    let wake = |waiter: &Waiter, con: &mut Session| {
        lock.wait_for_wake(con, waiter, Duration::from_millis(100))
            .unwrap()
    };
    for (i, reader) in readers[..100].iter().enumerate() {
        assert!(
            matches!(wake(reader, &mut con), Some(Wake::Granted { .. })),
            "reader {i}"
        );
    }
    assert!(matches!(wake(&readers[100], &mut con), Some(Wake::Look)));
    // The head lease: the rest of the first places are told they moved up, to call within a
    // third of it (a second) and keep calling while there; nobody behind them.
    let now = server.time_ms();
    for reader in &readers[101..108] {
        match wake(reader, &mut con) {
            // (A second from the release, which came before `now`.)
            Some(Wake::Head { by }) => {
                assert!(by <= now + 1000 && by + 5000 > now, "{by} vs {now}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(wake(&readers[108], &mut con).is_none());
    // The hand-off is bounded: a few commands per reader, whatever the run's length.
    assert!(
        release[0].len() < 100 * 8 + 40,
        "{} commands in one release",
        release[0].len()
    );
    assert_every_key_expires(&server, "100 grants");
    // The 101st reader looks: it takes the lock and hands it to the other 49.
    assert!(matches!(
        lock.acquire(
            &mut con,
            &shared(&readers[100].token),
            Queueing::Stay(&readers[100])
        )
        .unwrap(),
        Acquisition::Acquired(_)
    ));
    for (i, reader) in readers[101..].iter().enumerate() {
        assert!(
            matches!(wake(reader, &mut con), Some(Wake::Granted { .. })),
            "reader {}",
            101 + i
        );
    }
    assert_eq!(lock.inspect(&mut con).unwrap().holder_count, 150);
    assert_eq!(server.cmd::<i64>(&["EXISTS", "redlock:{job}:queue"]), 0);
}

/// The grant a hand-over gives is never longer than the lease the waiter asked for: a waiter
/// that asked for 1 s and dies at once holds the lock 1 s, not the 5 s grant.
#[test]
fn a_grant_is_no_longer_than_the_lease_asked_for() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("short");
    let who = Identity::current("scale-test");
    let holder = Token::generate();
    let asked = request(&holder, Duration::from_secs(60), Mode::Exclusive, &who);
    assert!(matches!(
        lock.acquire(&mut con, &asked, Queueing::No).unwrap(),
        Acquisition::Acquired(_)
    ));
    let waiters: Vec<(Waiter, u64)> = [1, 60].map(|secs| (Waiter::new(), secs)).into();
    for (waiter, secs) in &waiters {
        let asked = request(
            &waiter.token,
            Duration::from_secs(*secs),
            Mode::Shared,
            &who,
        );
        assert!(matches!(
            lock.acquire(&mut con, &asked, Queueing::Join(waiter))
                .unwrap(),
            Acquisition::Busy { .. }
        ));
    }
    assert_eq!(
        lock.release(&mut con, &holder, Duration::ZERO, &Ending::default())
            .unwrap(),
        Release::Released
    );
    // Both readers are handed the lock, each with its own grant.
    let mut grants: Vec<u64> = lock
        .inspect(&mut con)
        .unwrap()
        .holders
        .iter()
        .map(|holder| holder.ttl)
        .collect();
    grants.sort_unstable();
    assert_eq!(grants, [1000, 5000]);
}

/// Takes `lock` exclusively, queues `count` `run` waiters (exclusive, 60 s) behind the
/// holder and releases it: the first waiter is handed the lock. Returns the waiters.
fn hand_over_to_queued_runs(
    con: &mut Session,
    lock: &Lock,
    who: &Identity,
    count: usize,
) -> Vec<Waiter> {
    let exclusive = |token| request(token, Duration::from_secs(60), Mode::Exclusive, who);
    let holder = Token::generate();
    assert!(matches!(
        lock.acquire(con, &exclusive(&holder), Queueing::No)
            .unwrap(),
        Acquisition::Acquired(_)
    ));
    let waiters: Vec<Waiter> = (0..count).map(|_| Waiter::new()).collect();
    for waiter in &waiters {
        assert!(matches!(
            lock.acquire(con, &exclusive(&waiter.token), Queueing::Join(waiter))
                .unwrap(),
            Acquisition::Busy { .. }
        ));
    }
    assert_eq!(
        lock.release(con, &holder, Duration::ZERO, &Ending::default())
            .unwrap(),
        Release::Released
    );
    waiters
}

/// A waiter next in line that is due to call before the new holder's grant ends (every waiter
/// in the first places calls within a second) is not woken to watch it: its call comes first,
/// and in a queue that drains faster it is handed the lock before then. That call tells it
/// when the grant ends.
#[test]
fn the_next_in_line_is_not_woken_to_watch_a_grant_it_outlives_by_its_own_call() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("next");
    let who = Identity::current("scale-test");
    let exclusive = |token| request(token, Duration::from_secs(60), Mode::Exclusive, &who);
    // `run` waiters: a grant of 5 s, past the second within which the next one calls.
    let waiters = hand_over_to_queued_runs(&mut con, &lock, &who, 2);
    let wake = |waiter: &Waiter, con: &mut Session| {
        lock.wait_for_wake(con, waiter, Duration::from_millis(100))
            .unwrap()
    };
    let Some(Wake::Granted { expires: grant, .. }) = wake(&waiters[0], &mut con) else {
        panic!("the first waiter was not handed the lock");
    };
    assert!(wake(&waiters[1], &mut con).is_none());
    // Its call: first in line, and to look again when a dead waiter's grant could be known
    // (600 ms after it was made), long before the grant ends.
    let now = server.time_ms();
    let Acquisition::Busy { position, hint, .. } = lock
        .acquire(
            &mut con,
            &exclusive(&waiters[1].token),
            Queueing::Stay(&waiters[1]),
        )
        .unwrap()
    else {
        panic!("the second waiter took a lock handed to the first");
    };
    assert_eq!(position, 1);
    let hint = u64::try_from(hint.as_millis()).unwrap();
    let made = grant - 5000;
    assert!(
        now + hint <= made + 600 + 50,
        "hint {hint} ms at {now}, grant made at {made}"
    );
    assert_every_key_expires(&server, "a grant not watched");
}

/// A semaphore with holders left after a hand-over: the waiter left behind is told to watch
/// the lease that ends first among *all* holders, here an older holder's lease that ends
/// before the new grant (a `run` grant, 5 s). Told only because its next call is due later (a
/// refresh put it a third of the entry ttl away). (Found in review: the test before could not
/// tell the first lease from the new grant's.)
#[test]
fn a_waiter_left_behind_a_semaphore_watches_the_first_lease_to_end() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("sem2");
    let who = Identity::current("scale-test");
    let mode = Mode::Semaphore(2);
    let short = Token::generate();
    let long = Token::generate();
    for (token, ttl) in [(&short, 2), (&long, 60)] {
        let asked = request(token, Duration::from_secs(ttl), mode, &who);
        assert!(matches!(
            lock.acquire(&mut con, &asked, Queueing::No).unwrap(),
            Acquisition::Acquired(_)
        ));
    }
    // `run` waiters: handed a 5 s grant.
    let waiters: Vec<Waiter> = (0..2).map(|_| Waiter::new()).collect();
    for waiter in &waiters {
        let asked = request(&waiter.token, Duration::from_secs(60), mode, &who);
        assert!(matches!(
            lock.acquire(&mut con, &asked, Queueing::Join(waiter))
                .unwrap(),
            Acquisition::Busy { .. }
        ));
    }
    assert!(matches!(
        lock.refresh(&mut con, &waiters[1]).unwrap(),
        Refreshed::Queued { position: 2, .. }
    ));
    let short_expiry = lock
        .inspect(&mut con)
        .unwrap()
        .holders
        .iter()
        .map(|holder| holder.exp)
        .min()
        .unwrap();
    assert_eq!(
        lock.release(&mut con, &long, Duration::ZERO, &Ending::default())
            .unwrap(),
        Release::Released
    );
    let wake = |waiter: &Waiter, con: &mut Session| {
        lock.wait_for_wake(con, waiter, Duration::from_millis(100))
            .unwrap()
    };
    let Some(Wake::Granted { expires: grant, .. }) = wake(&waiters[0], &mut con) else {
        panic!("the first waiter was not handed the permit");
    };
    assert!(grant > short_expiry, "grant {grant}, short {short_expiry}");
    let Some(Wake::Watch { expires, .. }) = wake(&waiters[1], &mut con) else {
        panic!("the waiter left behind was not told to watch");
    };
    assert_eq!(
        expires, short_expiry,
        "watched the grant, not the first lease to end"
    );
}

/// A `run` grant whose wake-up is still on its list 600 ms on is taken back by the next call,
/// with the wake-up: its waiter then finds nothing to start on (no wake-up) and its own call
/// neither the grant nor a place. A grant whose wake-up was taken is never taken back.
#[test]
fn an_unheard_grant_goes_with_its_wake_up_and_a_heard_one_stays() {
    let server = RedisServer::start();
    let mut con = session(&server);
    let lock = lock("unheard");
    let who = Identity::current("scale-test");
    let exclusive = |token| request(token, Duration::from_secs(60), Mode::Exclusive, &who);
    let waiters = hand_over_to_queued_runs(&mut con, &lock, &who, 3);
    // waiters[0] never listens; 650 ms on, waiters[1]'s look takes its grant back and, first
    // in line, the lock.
    std::thread::sleep(Duration::from_millis(650));
    assert!(matches!(
        lock.acquire(
            &mut con,
            &exclusive(&waiters[1].token),
            Queueing::Stay(&waiters[1])
        )
        .unwrap(),
        Acquisition::Acquired(_)
    ));
    assert!(
        lock.wait_for_wake(&mut con, &waiters[0], Duration::from_millis(50))
            .unwrap()
            .is_none(),
        "the unheard wake-up was left behind"
    );
    assert!(matches!(
        lock.acquire(
            &mut con,
            &exclusive(&waiters[0].token),
            Queueing::Stay(&waiters[0])
        )
        .unwrap(),
        Acquisition::Gone
    ));
    // waiters[1] lets go: waiters[2] is handed the lock and takes its wake-up at once; 650 ms
    // on, a newcomer's call leaves that grant alone.
    lock.release(
        &mut con,
        &waiters[1].token,
        Duration::ZERO,
        &Ending::default(),
    )
    .unwrap();
    assert!(matches!(
        lock.wait_for_wake(&mut con, &waiters[2], Duration::from_millis(100))
            .unwrap(),
        Some(Wake::Granted { .. })
    ));
    std::thread::sleep(Duration::from_millis(650));
    let newcomer = Token::generate();
    assert!(matches!(
        lock.acquire(&mut con, &exclusive(&newcomer), Queueing::No)
            .unwrap(),
        Acquisition::Busy { .. }
    ));
    let state = lock.inspect(&mut con).unwrap();
    assert_eq!(state.holders.len(), 1);
    assert!(state.holders[0].granted, "the heard grant was taken back");
    assert!(state.holders[0].exp > server.time_ms() + 3000);
}
