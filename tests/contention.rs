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
    let fence_counter = || -> u64 {
        server_for_fences
            .cmd::<String>(&["GET", "redlock:{counter}:fence"])
            .parse()
            .unwrap()
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let server = Arc::clone(&server);
            let intervals = Arc::clone(&intervals);
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut rng = seed(worker);
                for _ in 0..CYCLES {
                    let grant = (0..MAX_TRIES)
                        .find_map(|_| {
                            let out = server
                                .redlock(&[
                                    "acquire", "--key", "counter", "--ttl", "30s", "-q", "--json",
                                ])
                                .run();
                            match out.status.code() {
                                Some(0) => Some(out.json()),
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
                    let fence = grant["fence"].as_u64().unwrap();
                    intervals.lock().unwrap().push((start, end, fence));

                    let token = grant["token"].as_str().unwrap();
                    server
                        .redlock(&["release", "--key", "counter", "--token", token])
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
    // Each holder's fence is above the one before it, and a busy attempt issues none: the
    // counter ends at the last holder's.
    assert!(
        intervals.windows(2).all(|pair| pair[0].2 < pair[1].2),
        "fences out of order"
    );
    assert_eq!(fence_counter(), intervals.last().unwrap().2);
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
