//! Lock modes: shared (read) locks with writer preference, semaphores, and re-entry by nested
//! invocations. Children log `<ns> start|end <label>` lines; the tests reconstruct intervals.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::util::{REDLOCK, RedisServer, Running, TempDir, wait_until};

/// `(start_ns, end_ns, label, fence)` per child run, from a log of start/end lines.
fn intervals(log: &Path) -> Vec<(u128, u128, String, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut open = std::collections::HashMap::new();
    let mut done = Vec::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (time, what, label, id) = (
            parts.next().unwrap().parse::<u128>().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap().to_owned(),
            parts.next().unwrap().to_owned(),
        );
        if what == "start" {
            open.insert(id, time);
        } else {
            let start = open.remove(&id).expect("end without start");
            done.push((start, time, label, id.parse().unwrap()));
        }
    }
    done.sort();
    done
}

/// A child that logs its interval (labelled, with its fence) and holds the lock `hold` seconds.
fn logging_child(log: &Path, label: &str, hold: &str) -> String {
    let log = log.display();
    format!(
        "echo \"$(date +%s%N) start {label} $REDLOCK_FENCE\" >> {log}; sleep {hold}; echo \"$(date +%s%N) end {label} $REDLOCK_FENCE\" >> {log}"
    )
}

/// Runs `loops` threads, each doing `runs` waiting `redlock run` with `mode_args`.
fn run_loops(
    server: &Arc<RedisServer>,
    loops: usize,
    runs: usize,
    mode_args: &[&str],
    script: &str,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..loops)
        .map(|_| {
            let server = Arc::clone(server);
            let mut args: Vec<String> = ["run", "-q", "--key", "job", "--wait", "60s"]
                .map(str::to_owned)
                .to_vec();
            args.extend(mode_args.iter().map(|arg| (*arg).to_owned()));
            args.extend(["--", "sh", "-c", script].map(str::to_owned));
            std::thread::spawn(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                for _ in 0..runs {
                    server.redlock(&args).run().code(0);
                }
            })
        })
        .collect()
}

fn overlaps(a: &(u128, u128, String, u64), b: &(u128, u128, String, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[test]
fn shared_holders_overlap() {
    let server = Arc::new(RedisServer::start());
    let dir = TempDir::new("readers");
    let log = dir.path().join("log");
    let readers = run_loops(
        &server,
        5,
        1,
        &["--shared"],
        &logging_child(&log, "r", "0.3"),
    );
    for reader in readers {
        reader.join().unwrap();
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), 5);
    let latest_start = runs.iter().map(|run| run.0).max().unwrap();
    let earliest_end = runs.iter().map(|run| run.1).min().unwrap();
    assert!(
        latest_start < earliest_end,
        "the 5 readers did not all overlap: {runs:?}"
    );
    assert_eq!(server.keys_but_history(), ["redlock:{job}:fence"]);
}

#[test]
fn exclusive_holders_overlap_nobody_among_readers() {
    let server = Arc::new(RedisServer::start());
    let dir = TempDir::new("readers-writers");
    let log = dir.path().join("log");
    let mut loops = run_loops(
        &server,
        6,
        5,
        &["--shared"],
        &logging_child(&log, "r", "0.02"),
    );
    loops.extend(run_loops(
        &server,
        3,
        5,
        &[],
        &logging_child(&log, "w", "0.02"),
    ));
    for handle in loops {
        handle.join().unwrap();
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), 45, "not every run ran");
    for (i, writer) in runs.iter().enumerate().filter(|(_, run)| run.2 == "w") {
        for (j, other) in runs.iter().enumerate() {
            assert!(
                i == j || !overlaps(writer, other),
                "exclusive {writer:?} overlaps {other:?}"
            );
        }
    }
    assert!(
        runs.iter()
            .filter(|run| run.2 == "r")
            .any(|a| runs.iter().any(|b| b.2 == "r" && a != b && overlaps(a, b))),
        "readers never shared the lock"
    );
}

#[test]
fn a_queued_writer_is_not_starved_by_a_stream_of_readers() {
    let server = Arc::new(RedisServer::start());
    let dir = TempDir::new("writer-preference");
    let log = dir.path().join("log");
    let readers = run_loops(
        &server,
        4,
        12,
        &["--shared"],
        &logging_child(&log, "r", "0.3"),
    );
    assert!(wait_until(Duration::from_secs(10), || {
        intervals(&log).len() >= 2
    }));
    let writer = server
        .redlock(&[
            "run", "-q", "--key", "job", "--wait", "60s", "--", "sh", "-c",
        ])
        .arg(logging_child(&log, "w", "0.05"))
        .spawn();
    // Fences are issued in acquisition order: the last one issued when the writer is seen
    // queued splits readers into those admitted before it queued and those after.
    let mut fence_when_queued = None;
    assert!(wait_until(Duration::from_secs(10), || {
        let out = server.redlock(&["inspect", "--key", "job", "--json"]).run();
        let view = out.json();
        let queued = view["waiters"]
            .as_array()
            .is_some_and(|waiters| waiters.iter().any(|w| w["mode"] == "exclusive"));
        if queued {
            fence_when_queued = view["fence"].as_u64();
        }
        queued || intervals(&log).iter().any(|run| run.2 == "w")
    }));
    let queued_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    writer.wait(Duration::from_secs(30)).code(0);
    for reader in readers {
        reader.join().unwrap();
    }
    let runs = intervals(&log);
    let writer_run = runs.iter().find(|run| run.2 == "w").unwrap();
    let Some(fence_when_queued) = fence_when_queued else {
        // The writer found the lock free between two readers: nothing to overtake it.
        return;
    };
    let jumped: Vec<_> = runs
        .iter()
        .filter(|run| run.2 == "r" && run.3 > fence_when_queued && run.3 < writer_run.3)
        .collect();
    assert!(
        jumped.is_empty(),
        "readers admitted after the writer queued: {jumped:?}"
    );
    // It got the lock within about one reader hold time (300 ms) of queueing.
    let waited_ms = writer_run.0.saturating_sub(queued_at) / 1_000_000;
    assert!(
        waited_ms < 2000,
        "the writer waited {waited_ms} ms after queueing"
    );
}

#[test]
fn a_semaphore_admits_exactly_its_limit() {
    let server = Arc::new(RedisServer::start());
    let dir = TempDir::new("semaphore");
    let log = dir.path().join("log");
    let loops = run_loops(
        &server,
        10,
        3,
        &["--limit", "3"],
        &logging_child(&log, "s", "0.2"),
    );
    for handle in loops {
        handle.join().unwrap();
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), 30);
    let mut events: Vec<(u128, i32)> = runs
        .iter()
        .flat_map(|run| [(run.0, 1), (run.1, -1)])
        .collect();
    events.sort_by_key(|&(time, delta)| (time, delta));
    let (mut now, mut most) = (0, 0);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    assert_eq!(most, 3, "maximum concurrency");
}

#[test]
fn mixing_modes_or_limits_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let holder = server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s", "--limit", "2"])
        .run();
    holder.code(0);
    let before: Vec<String> = server.cmd(&["HVALS", "redlock:{job}:holders"]);
    for (args, why) in [
        (
            vec!["--limit", "3"],
            "lock 'job': the lock is a semaphore of 2, not a semaphore of 3",
        ),
        (
            vec![],
            "the lock is a semaphore of 2, not an exclusive/shared lock",
        ),
        (vec!["--shared"], "not an exclusive/shared lock"),
    ] {
        let mut all = vec!["acquire", "--key", "job", "--ttl", "30s"];
        all.extend(args);
        server.redlock(&all).run().code(64).one_line_error(why);
    }
    assert_eq!(
        server.cmd::<Vec<String>>(&["HVALS", "redlock:{job}:holders"]),
        before
    );
    server
        .redlock(&["acquire", "--key", "job", "--ttl", "30s", "--limit", "0"])
        .run()
        .code(64);
    server
        .redlock(&[
            "acquire", "--key", "job", "--ttl", "30s", "--shared", "--limit", "2",
        ])
        .run()
        .code(64)
        .one_line_error("cannot be used with");
}

#[test]
fn inspect_and_list_show_modes_holders_and_limits() {
    let server = RedisServer::start();
    for _ in 0..2 {
        server
            .redlock(&["acquire", "--key", "sem", "--ttl", "30s", "--limit", "3"])
            .run()
            .code(0);
    }
    server
        .redlock(&["acquire", "--key", "rw", "--ttl", "30s", "--shared"])
        .run()
        .code(0);
    let out = server.redlock(&["inspect", "--key", "sem", "--json"]).run();
    let view = out.json();
    assert_eq!(view["mode"], "semaphore");
    assert_eq!(view["limit"], 3);
    assert_eq!(view["holders"].as_array().unwrap().len(), 2);
    assert_eq!(view["holders"][0]["mode"], "semaphore");
    assert_eq!(view["holders"][0]["holds"], 1);
    server
        .redlock(&["inspect", "--key", "sem"])
        .run()
        .code(0)
        .stdout_contains("sem: held (semaphore, 2 of 3 permits taken)");
    let out = server.redlock(&["list"]).run();
    out.code(0)
        .stdout_contains("shared by 1")
        .stdout_contains("semaphore, 2 of 3 permits taken");
    let out = server.redlock(&["inspect", "--key", "rw", "--json"]).run();
    assert_eq!(out.json()["mode"], "shared");
    assert_eq!(out.json()["limit"], serde_json::Value::Null);
}

#[test]
fn nested_runs_re_enter_and_the_outermost_release_frees_the_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("reenter");
    let inspect = |name: &str| {
        format!(
            "{REDLOCK} inspect --key job --json > {}/{name}",
            dir.path().display()
        )
    };
    // outer run > inner run > acquire + release; then, back in the outer command, a stranger.
    let inner = format!(
        "{} && {REDLOCK} acquire --key job --ttl 5s > /dev/null && {} && {REDLOCK} release --key job",
        inspect("inner"),
        inspect("nested-acquire")
    );
    let script = format!(
        "{REDLOCK} run --key job -- sh -c '{inner}' && {} && {REDLOCK} run --no-reenter --key job -- true; echo $? > {}/no-reenter",
        inspect("after-inner"),
        dir.path().display()
    );
    server
        .redlock(&["run", "--key", "job", "--", "sh", "-c", &script])
        .run()
        .code(0);
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
    };
    let inner = read("inner");
    assert_eq!(inner["holders"].as_array().unwrap().len(), 1, "{inner}");
    assert_eq!(inner["holders"][0]["holds"], 2);
    // One fence was ever issued for the name: re-entry took no new lock.
    assert_eq!(
        inner["holders"][0]["fence"], inner["fence"],
        "re-entry took a new lock"
    );
    assert_eq!(read("nested-acquire")["holders"][0]["holds"], 3);
    // The inner run has ended: the outer command still holds the lock.
    let after = read("after-inner");
    assert_eq!(after["state"], "held");
    assert_eq!(after["holders"][0]["holds"], 1);
    let no_reenter = std::fs::read_to_string(dir.path().join("no-reenter")).unwrap();
    assert_eq!(
        no_reenter.trim(),
        "75",
        "--no-reenter must behave like a stranger"
    );
    // The outermost run has ended: free at once.
    server.redlock(&["inspect", "--key", "job"]).run().code(1);
    assert_eq!(server.keys_but_history(), ["redlock:{job}:fence"]);
}

/// Keeps the server busy for ARGV[1] ms: requests wait in their sockets and run afterwards,
/// even those whose connection was closed meanwhile.
const BUSY: &str = "local s = redis.call('TIME') while true do local t = redis.call('TIME') \
     if (t[1] - s[1]) * 1000000 + (t[2] - s[2]) > ARGV[1] * 1000 then return 1 end end";

/// A nested run's release that Redis runs late (the server busy with a slow script) must count
/// down once: sent again on a new connection after the first went unanswered, it would count
/// the enclosing run's hold down too and free the lock under its command. Answered within the
/// release's bound (1 s after the command), it is simply waited for; answered later, it is left
/// to run, and the run says it could not release.
#[test]
fn a_nested_release_answered_late_counts_down_once() {
    for (busy_ms, said) in [
        (600, "released one hold"),
        (2500, "could not release lock 'job'"),
    ] {
        let server = RedisServer::start();
        let dir = TempDir::new("late-release");
        let (started, go, after) = (
            dir.path().join("started"),
            dir.path().join("go"),
            dir.path().join("after"),
        );
        let inner = format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            started.display(),
            go.display()
        );
        // The inspection waits until the late release has surely run.
        let outer = format!(
            "{REDLOCK} run -v --key job --ttl 3s -- sh -c '{inner}' && sleep 1.2 && {REDLOCK} inspect --key job --json > {}",
            after.display()
        );
        // Every script loaded, as on a server in use (else the late release would find its
        // script missing and be sent once more, whole, only on the connection that waited).
        server
            .redlock(&["run", "--key", "warm-up", "--", "true"])
            .run()
            .code(0);
        let running = server
            .redlock(&[
                "run", "--key", "job", "--ttl", "10s", "--", "sh", "-c", &outer,
            ])
            .spawn();
        assert!(wait_until(Duration::from_secs(5), || started.exists()));
        // Past the inner run's first renewal (every 1 s), whose connection the release reuses.
        std::thread::sleep(Duration::from_millis(1400));
        let busy = std::thread::spawn({
            let mut client = server.client();
            move || {
                let _: i64 = redis::cmd("EVAL")
                    .arg(BUSY)
                    .arg(0)
                    .arg(busy_ms)
                    .query(&mut client)
                    .unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        std::fs::write(&go, "").unwrap();
        busy.join().unwrap();
        running
            .wait(Duration::from_secs(15))
            .code(0)
            .stderr_contains(said);
        let after: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&after).unwrap()).unwrap();
        assert_eq!(after["state"], "held", "busy {busy_ms} ms: {after}");
        assert_eq!(
            after["holders"][0]["holds"], 1,
            "busy {busy_ms} ms: {after}"
        );
    }
}

#[test]
fn dead_holders_free_their_place_at_their_own_ttl_in_every_mode() {
    for mode in [&["--shared"][..], &["--limit", "2"]] {
        let server = RedisServer::start();
        let mut keep = vec!["acquire", "--key", "job", "--ttl", "60s"];
        keep.extend(mode);
        server.redlock(&keep).run().code(0);
        let mut dying = vec!["run", "--key", "job", "--ttl", "2s"];
        dying.extend(mode);
        dying.extend(["--", "sleep", "60"]);
        let dying: Running = server.redlock(&dying).spawn();
        let holders = || -> usize {
            let out = server.redlock(&["inspect", "--key", "job", "--json"]).run();
            out.json()["holders"].as_array().map_or(0, Vec::len)
        };
        assert!(wait_until(Duration::from_secs(10), || holders() == 2));
        dying.signal("KILL");
        let _ = dying.wait(Duration::from_secs(5));
        assert!(
            wait_until(Duration::from_secs(4), || holders() == 1),
            "the dead holder's place was not freed ({mode:?})"
        );
        // Its place is free for a newcomer; the live holder was untouched.
        let mut newcomer = vec!["acquire", "--key", "job", "--ttl", "5s"];
        newcomer.extend(mode);
        server.redlock(&newcomer).run().code(0);
        assert_eq!(holders(), 2);
    }
}
