//! Mutual exclusion under contention: many processes race for one lock and each does a racy
//! read-modify-write of a shared counter file while holding it. Any overlap loses an increment
//! or shows up as intersecting intervals.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::util::{RedisServer, TempDir};

const WORKERS: usize = 16;
const CYCLES: usize = 50;
/// Bound on busy retries per cycle, so a broken lock fails the test instead of hanging it.
const MAX_TRIES: usize = 2000;

#[test]
fn sixteen_processes_fifty_cycles_each_never_overlap() {
    let server = Arc::new(RedisServer::start());
    let server_for_fences = Arc::clone(&server);
    let dir = TempDir::new("contention");
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0").unwrap();
    let intervals = Arc::new(Mutex::new(Vec::with_capacity(WORKERS * CYCLES)));
    // The fence counter starts from the server's clock: note where, to count fences after.
    let fence = || -> u64 {
        server_for_fences
            .cmd::<Option<String>>(&["GET", "redlock:{counter}:fence"])
            .map_or(0, |fence| fence.parse().unwrap())
    };
    server
        .redlock(&["run", "--key", "counter", "--", "true"])
        .run()
        .code(0);
    let fences_before = fence();

    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let server = Arc::clone(&server);
            let intervals = Arc::clone(&intervals);
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut rng = seed(worker);
                for _ in 0..CYCLES {
                    let token = (0..MAX_TRIES)
                        .find_map(|_| {
                            let out = server
                                .redlock(&["acquire", "--key", "counter", "--ttl", "30s", "-q"])
                                .run();
                            match out.status.code() {
                                Some(0) => Some(out.stdout.trim().to_owned()),
                                Some(75) => {
                                    std::thread::sleep(Duration::from_millis(
                                        2 + next(&mut rng) % 8,
                                    ));
                                    None
                                }
                                _ => out.fail("acquire failed"),
                            }
                        })
                        .expect("never acquired within the retry bound");

                    let start = Instant::now();
                    let value: u64 = std::fs::read_to_string(&counter)
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                    std::fs::write(&counter, (value + 1).to_string()).unwrap();
                    let end = Instant::now();
                    intervals.lock().unwrap().push((start, end));

                    server
                        .redlock(&["release", "--key", "counter", "--token", &token])
                        .run()
                        .code(0);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker panicked");
    }

    let total: u64 = std::fs::read_to_string(&counter).unwrap().parse().unwrap();
    assert_eq!(
        total,
        (WORKERS * CYCLES) as u64,
        "lost increments: overlapping holders"
    );
    let mut intervals = intervals.lock().unwrap().clone();
    intervals.sort();
    let overlaps = intervals
        .windows(2)
        .filter(|pair| pair[1].0 < pair[0].1)
        .count();
    assert_eq!(overlaps, 0, "overlapping critical sections");
    assert_eq!(
        fence() - fences_before,
        (WORKERS * CYCLES) as u64,
        "one fence per acquisition"
    );
    assert_eq!(server.keys_but_history(), ["redlock:{counter}:fence"]);
}

fn seed(worker: usize) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    (u64::from(nanos) << 8 | worker as u64) | 1
}

/// xorshift64: jitter for retries, no dependency needed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
