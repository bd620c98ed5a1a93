//! Pins how many Redis commands each script path runs inside its script, so that a change
//! which adds (or removes) calls shows up in review as a change of the table below. Each path
//! is driven the way users drive it (the `redlock` binary against a private redis-server; the
//! one exception is the 40 s refresh of a waiter's place, see below), and counted from `INFO
//! commandstats` read before and after the operation: every command but the ones redlock sends
//! itself (`EVALSHA`, `EVAL`, `BLPOP`, `SCAN`, as MONITOR shows them) and the ones this test
//! sends (`INFO`, and the probes it polls with, which it counts and takes off).
//!
//! Nothing here is timed. Where a count could depend on timing, the scenario removes the
//! dependence: a fence issued on a lock with a counter waits for the next tenth of a second
//! (`next_tenth`), so it is always the clock's (SET) and never the counter's (INCR); a waiter
//! is stopped (SIGSTOP) between the calls measured, and each measured call of a queue comes
//! more than a second after the queue's expiry was last pushed back (`QUEUE_SLACK_MS` in the
//! prelude), so it always pushes it again; quorum masters get their fence counters set by hand.

use std::collections::BTreeMap;
use std::time::Duration;

use redlock::keys::{LockName, Prefix};
use redlock::lock::{Lock, Refreshed, Token, Waiter};

use crate::util::{Output, RedisServer, Redlock, Running, wait_until};

/// The measured counts, one row per path: `path | script calls | commands inside them |
/// each command`. When a script changes on purpose, replace this with the table the failure
/// prints (same format), and say in the commit why the counts moved.
const PINNED: &str = "
acquire: a free lock, no history                                     | 1 |  12 | EXISTS 1, GET 2, HSET 1, PEXPIRE 1, PEXPIREAT 2, SET 1, TIME 1, ZADD 2, ZCARD 1
release by token                                                     | 1 |  11 | DEL 1, EXISTS 1, HGET 1, HLEN 1, PEXPIRE 1, TIME 1, ZADD 1, ZCARD 2, ZRANGEBYSCORE 1, ZREM 1
acquire: a free lock with a history                                  | 1 |  13 | EXISTS 1, GET 2, HSET 1, PEXPIRE 1, PEXPIREAT 2, SET 1, TIME 1, ZADD 2, ZCARD 1, ZRANGE 1
acquire: busy, no --wait                                             | 1 |  11 | EXISTS 1, GET 2, HGET 2, HLEN 1, TIME 1, ZCARD 2, ZCOUNT 1, ZRANGEBYSCORE 1
extend by token                                                      | 1 |  13 | HGET 1, HLEN 1, HSET 1, PEXPIRE 1, PEXPIREAT 2, TIME 1, ZADD 2, ZCARD 2, ZRANGEBYSCORE 1, ZREM 1
inspect: held, 2 holds in the history                                | 1 |  11 | EXISTS 1, GET 1, HLEN 1, HMGET 1, TIME 1, ZCARD 2, ZCOUNT 1, ZRANGE 2, ZRANGEBYSCORE 1
history: 2 holds                                                     | 1 |   4 | TIME 1, ZCARD 1, ZRANGE 2
release --force                                                      | 1 |  14 | DEL 1, EXISTS 1, GET 1, HLEN 1, HMGET 1, PEXPIRE 1, TIME 1, ZADD 1, ZCARD 2, ZCOUNT 1, ZRANGEBYSCORE 2, ZREM 1
list: one held lock under the prefix                                 | 1 |  11 | EXISTS 1, GET 1, HLEN 1, HMGET 1, TIME 1, ZCARD 2, ZCOUNT 1, ZRANGE 2, ZRANGEBYSCORE 1
acquire --wait: joins the queue                                      | 1 |  23 | DEL 1, EXISTS 1, GET 2, HGET 3, HLEN 1, HMGET 1, HSET 1, PEXPIREAT 2, PTTL 2, TIME 1, TYPE 1, ZADD 1, ZCARD 2, ZCOUNT 1, ZRANGE 2, ZRANGEBYSCORE 1
refresh of a waiter's place (library call)                           | 1 |   9 | HGET 1, HSET 1, PEXPIREAT 2, PTTL 2, TIME 1, ZCARD 1, ZRANK 1
acquire --wait: a look at the lock while queued                      | 1 |  25 | GET 2, HGET 3, HLEN 2, HMGET 2, HSET 1, PEXPIREAT 2, PTTL 2, TIME 1, TYPE 1, ZCARD 3, ZCOUNT 1, ZRANGE 2, ZRANGEBYSCORE 1, ZRANK 2
release by token: hands the lock to the waiter                       | 1 |  28 | DEL 1, EXISTS 1, GET 1, HDEL 1, HGET 2, HLEN 2, HMGET 1, HSET 1, PEXPIRE 2, PEXPIREAT 2, RPUSH 1, SET 1, TIME 1, ZADD 3, ZCARD 3, ZRANGE 2, ZRANGEBYSCORE 1, ZREM 2
acquire --wait: claims the lock handed to it                         | 1 |  22 | DEL 1, GET 2, HGET 3, HLEN 2, HSET 1, PEXPIRE 1, PEXPIREAT 2, TIME 1, TYPE 1, ZADD 2, ZCARD 3, ZRANGEBYSCORE 2, ZREM 1
acquire --wait 500ms runs out: joins, leaves, reads the holder       | 3 |  49 | DEL 2, EXISTS 2, GET 4, HDEL 1, HGET 4, HLEN 4, HMGET 3, HSET 1, PEXPIREAT 2, PTTL 2, TIME 3, TYPE 2, ZADD 1, ZCARD 7, ZCOUNT 3, ZRANGE 5, ZRANGEBYSCORE 2, ZREM 1
acquire --shared: a second reader                                    | 1 |  20 | EXISTS 1, GET 2, HGET 2, HLEN 1, HSET 1, PEXPIRE 1, PEXPIREAT 2, SET 1, TIME 1, ZADD 2, ZCARD 2, ZCOUNT 1, ZRANGE 2, ZRANGEBYSCORE 1
acquire --limit 3: a second permit                                   | 1 |  20 | EXISTS 1, GET 2, HGET 2, HLEN 1, HSET 1, PEXPIRE 1, PEXPIREAT 2, SET 1, TIME 1, ZADD 2, ZCARD 2, ZCOUNT 1, ZRANGE 2, ZRANGEBYSCORE 1
acquire inside a holder of the lock: re-enters                       | 1 |  18 | EXISTS 1, GET 2, HGET 2, HLEN 1, HSET 1, PEXPIRE 1, PEXPIREAT 2, TIME 1, ZADD 2, ZCARD 2, ZRANGEBYSCORE 2, ZREM 1
release of a re-entered hold: counts down                            | 1 |  10 | EXISTS 1, HGET 1, HLEN 1, HSET 1, PEXPIREAT 2, TIME 1, ZADD 1, ZCARD 2
run -- true: acquire and release, a lock with a history              | 2 |  24 | DEL 1, EXISTS 2, GET 2, HGET 1, HLEN 1, HSET 1, PEXPIRE 2, PEXPIREAT 2, SET 1, TIME 2, ZADD 3, ZCARD 3, ZRANGE 1, ZRANGEBYSCORE 1, ZREM 1
run --min-hold 1m -- true: acquire, release kept                     | 2 |  26 | EXISTS 2, GET 2, HGET 1, HLEN 1, HSET 2, PEXPIRE 2, PEXPIREAT 4, SET 1, TIME 2, ZADD 4, ZCARD 3, ZRANGEBYSCORE 1, ZREM 1
run: a renewal                                                       | 1 |  13 | HGET 1, HLEN 1, HSET 1, PEXPIRE 1, PEXPIREAT 2, TIME 1, ZADD 2, ZCARD 2, ZRANGEBYSCORE 1, ZREM 1
a run whose lock is forced away: force, failed renewal, lost release | 3 |  27 | DEL 1, EXISTS 2, GET 1, HLEN 3, HMGET 1, PEXPIRE 2, TIME 3, ZADD 2, ZCARD 6, ZCOUNT 1, ZRANGEBYSCORE 3, ZREM 2
quorum acquire, 3 masters in step (summed)                           | 3 |  36 | EXISTS 3, GET 6, HSET 3, INCR 3, PEXPIRE 3, PEXPIREAT 6, TIME 3, ZADD 6, ZCARD 3
quorum acquire, 3 masters out of step, with raise (summed)           | 6 |  72 | EXISTS 3, GET 9, HGET 3, HLEN 3, HSET 5, INCR 3, PEXPIRE 5, PEXPIREAT 10, SET 2, TIME 6, ZADD 10, ZCARD 9, ZRANGEBYSCORE 2, ZREM 2
";

/// Commands that reach the server from outside a script: redlock's own (found with MONITOR:
/// script calls, a waiter's block on its wake list, `list`'s scan) and this test's `INFO`.
const SENT_FROM_OUTSIDE: &[&str] = &["evalsha", "eval", "blpop", "scan", "info"];

#[test]
fn each_script_path_runs_the_pinned_number_of_redis_commands() {
    let server = RedisServer::start();
    let mut meter = Meter::new(&[&server]);
    let mut table = Table::default();
    single_holder_paths(&server, &mut meter, &mut table);
    queue_paths(&server, &mut meter, &mut table);
    mode_and_reentry_paths(&server, &mut meter, &mut table);
    run_paths(&server, &mut meter, &mut table);
    quorum_paths(&mut table);
    table.compare_with(PINNED);
}

/// Acquire, busy, extend, inspect, history, release and force on a lock nobody waits for.
fn single_holder_paths(server: &RedisServer, meter: &mut Meter, table: &mut Table) {
    let key = "single";
    let mut token = String::new();
    table.add(
        "acquire: a free lock, no history",
        meter.measure(|_| token = acquire(server, key, &[])),
    );
    table.add(
        "release by token",
        meter.measure(|_| release(server, key, &token)),
    );
    next_tenth();
    table.add(
        "acquire: a free lock with a history",
        meter.measure(|_| token = acquire(server, key, &[])),
    );
    table.add(
        "acquire: busy, no --wait",
        meter.measure(|_| {
            server
                .redlock(&["acquire", "--key", key, "--ttl", "60s"])
                .run()
                .code(75);
        }),
    );
    table.add(
        "extend by token",
        meter.measure(|_| {
            server
                .redlock(&["extend", "--key", key, "--ttl", "60s"])
                .env("REDLOCK_TOKEN", &token)
                .run()
                .code(0);
        }),
    );
    table.add(
        "inspect: held, 2 holds in the history",
        meter.measure(|_| {
            server
                .redlock(&["inspect", "--key", key])
                .run()
                .code(0)
                .stdout_contains("held (exclusive)");
        }),
    );
    table.add(
        "history: 2 holds",
        meter.measure(|_| {
            let out = server.redlock(&["history", "--key", key, "--json"]).run();
            out.code(0);
            assert_eq!(
                out.json().as_array().map(Vec::len),
                Some(2),
                "{}",
                out.stdout
            );
        }),
    );
    table.add(
        "release --force",
        meter.measure(|_| {
            server
                .redlock(&["release", "--key", key, "--force", "--reason", "pinning"])
                .run()
                .code(0)
                .stdout_contains("by force");
        }),
    );
    // `list` reads every lock under the prefix: one of its own, so the count is fixed.
    server
        .redlock(&[
            "acquire", "--prefix", "listed:", "--key", key, "--ttl", "60s",
        ])
        .run()
        .code(0);
    table.add(
        "list: one held lock under the prefix",
        meter.measure(|_| {
            server
                .redlock(&["list", "--prefix", "listed:"])
                .run()
                .code(0);
        }),
    );
}

/// A waiter's life: it joins, its place is refreshed, it looks at the lock, is handed the lock
/// and claims it; then another waiter whose --wait runs out leaves.
fn queue_paths(server: &RedisServer, meter: &mut Meter, table: &mut Table) {
    const WAITERS: &str = "redlock:{queue}:waiters";
    let key = "queue";
    let holder = acquire(server, key, &[]);

    let mut waiter = None;
    let mut id = String::new();
    table.add(
        "acquire --wait: joins the queue",
        meter.measure(|meter| {
            let running = Background(Some(
                server
                    .redlock(&["acquire", "--key", key, "--ttl", "60s", "--wait", "30s"])
                    .spawn(),
            ));
            assert!(
                wait_until(Duration::from_secs(10), || {
                    let ids: Vec<String> = meter.probe(&["HKEYS", WAITERS]);
                    id = ids.into_iter().next().unwrap_or_default();
                    !id.is_empty()
                }),
                "the waiter did not join the queue"
            );
            // Its next call comes a second later at the earliest: stopped long before.
            running.signal("STOP");
            waiter = Some(running);
        }),
    );
    let waiter = waiter.expect("the waiter was started");

    // The binary refreshes a place only every 40 s (QUEUE_ENTRY_TTL / 3) and only deep in a
    // queue: the library call it makes, on the stopped waiter's place.
    let lock = Lock::new(
        &Prefix::new("redlock:").unwrap(),
        LockName::new(key).unwrap(),
    );
    let mut session = crate::scale::session(server);
    let place = Waiter {
        id: id.clone(),
        token: Token::generate(),
        claims: true,
    };
    past_queue_slack();
    table.add(
        "refresh of a waiter's place (library call)",
        meter.measure(|_| {
            let refreshed = lock.refresh(&mut session, &place).expect("refresh");
            assert!(
                matches!(refreshed, Refreshed::Queued { position: 1, .. }),
                "{refreshed:?}"
            );
        }),
    );

    // Continued, the stopped waiter looks at the lock at once (its block ended meanwhile).
    past_queue_slack();
    table.add(
        "acquire --wait: a look at the lock while queued",
        meter.measure(|meter| {
            let mut entry = || meter.probe::<Option<String>>(&["HGET", WAITERS, &id]);
            let seen = entry();
            waiter.signal("CONT");
            assert!(
                wait_until(Duration::from_secs(5), || entry() != seen),
                "the waiter did not look at the lock"
            );
            // Its next call is a second away.
            waiter.signal("STOP");
        }),
    );

    next_tenth();
    table.add(
        "release by token: hands the lock to the waiter",
        meter.measure(|_| release(server, key, &holder)),
    );
    table.add(
        "acquire --wait: claims the lock handed to it",
        meter.measure(|_| {
            // Within its claim grant (600 ms) of the release.
            waiter.signal("CONT");
            waiter.wait(Duration::from_secs(10)).code(0);
        }),
    );

    table.add(
        "acquire --wait 500ms runs out: joins, leaves, reads the holder",
        meter.measure(|_| {
            // Its first look would come a second after it joined: it leaves before.
            server
                .redlock(&["acquire", "--key", key, "--ttl", "60s", "--wait", "500ms"])
                .run()
                .code(75)
                .stderr_contains("still busy");
        }),
    );
}

/// Shared and semaphore holders joining one already there; a nested acquire and release.
fn mode_and_reentry_paths(server: &RedisServer, meter: &mut Meter, table: &mut Table) {
    acquire(server, "readers", &["--shared"]);
    next_tenth();
    table.add(
        "acquire --shared: a second reader",
        meter.measure(|_| {
            acquire(server, "readers", &["--shared"]);
        }),
    );
    acquire(server, "permits", &["--limit", "3"]);
    next_tenth();
    table.add(
        "acquire --limit 3: a second permit",
        meter.measure(|_| {
            acquire(server, "permits", &["--limit", "3"]);
        }),
    );

    // A nested invocation (REDLOCK_KEY and REDLOCK_TOKEN from the enclosing one) re-enters.
    let token = acquire(server, "nested", &[]);
    table.add(
        "acquire inside a holder of the lock: re-enters",
        meter.measure(|_| {
            let out = server
                .redlock(&["acquire", "--key", "nested", "--ttl", "60s"])
                .env("REDLOCK_KEY", "nested")
                .env("REDLOCK_TOKEN", &token)
                .run();
            out.code(0);
            assert_eq!(out.stdout.trim(), token, "a nested acquire keeps the token");
        }),
    );
    table.add(
        "release of a re-entered hold: counts down",
        meter.measure(|_| release(server, "nested", &token)),
    );
}

/// `run`: a whole short run, one with a minimum hold, a renewal, and a run whose lock is
/// forced away.
fn run_paths(server: &RedisServer, meter: &mut Meter, table: &mut Table) {
    server
        .redlock(&["run", "--key", "job", "--", "true"])
        .run()
        .code(0);
    next_tenth();
    table.add(
        "run -- true: acquire and release, a lock with a history",
        meter.measure(|_| {
            server
                .redlock(&["run", "--key", "job", "--", "true"])
                .run()
                .code(0);
        }),
    );
    table.add(
        "run --min-hold 1m -- true: acquire, release kept",
        meter.measure(|_| {
            server
                .redlock(&["run", "--key", "kept", "--min-hold", "1m", "--", "true"])
                .run()
                .code(0);
        }),
    );

    // Renewed every second (ttl/3): each window below opens just after a renewal, seen as a new
    // score of the lease, and the next one is a second away.
    let run = Background(Some(
        server
            .redlock(&[
                "run", "--key", "renewed", "--ttl", "3s", "--", "sleep", "30",
            ])
            .spawn(),
    ));
    let lease = |meter: &mut Meter| -> Vec<String> {
        meter.probe(&[
            "ZRANGE",
            "redlock:{renewed}:leases",
            "0",
            "-1",
            "WITHSCORES",
        ])
    };
    let renewal = |meter: &mut Meter| {
        let seen = lease(meter);
        assert!(
            wait_until(Duration::from_secs(5), || lease(meter) != seen),
            "the run did not renew its lease"
        );
    };
    assert!(
        wait_until(Duration::from_secs(10), || !lease(meter).is_empty()),
        "the run did not take the lock"
    );
    renewal(meter);
    table.add("run: a renewal", meter.measure(renewal));
    renewal(meter);
    table.add(
        "a run whose lock is forced away: force, failed renewal, lost release",
        meter.measure(|_| {
            server
                .redlock(&["release", "--key", "renewed", "--force"])
                .run()
                .code(0);
            run.wait(Duration::from_secs(10)).code(125);
        }),
    );
}

/// Quorum mode on three masters, whose fence counters are set above the clock by hand: equal
/// (every master issues the same fence), and unequal (the highest is written back: raise).
fn quorum_paths(table: &mut Table) {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls = masters
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(" ");
    let mut meter = Meter::new(&masters.iter().collect::<Vec<_>>());
    let acquire = |key: &str| {
        Redlock::new(&["acquire", "--key", key, "--ttl", "60s"])
            .env("REDLOCK_URL", &urls)
            .run()
            .code(0);
    };
    for server in &masters {
        server.cmd::<()>(&["SET", "redlock:{even}:fence", "8000000000000000"]);
    }
    table.add(
        "quorum acquire, 3 masters in step (summed)",
        meter.measure(|_| acquire("even")),
    );
    for (index, server) in masters.iter().enumerate() {
        let counter = (8_000_000_000_000_000u64 + 10 * index as u64).to_string();
        server.cmd::<()>(&["SET", "redlock:{uneven}:fence", &counter]);
    }
    table.add(
        "quorum acquire, 3 masters out of step, with raise (summed)",
        meter.measure(|_| acquire("uneven")),
    );
}

/// `redlock acquire --key KEY --ttl 60s EXTRA...`, which must succeed; its token.
fn acquire(server: &RedisServer, key: &str, extra: &[&str]) -> String {
    let out = server
        .redlock(&["acquire", "--key", key, "--ttl", "60s"])
        .args(extra)
        .run();
    out.code(0);
    out.stdout.trim().to_owned()
}

/// `redlock release --key KEY` with `token` in REDLOCK_TOKEN, which must succeed.
fn release(server: &RedisServer, key: &str, token: &str) {
    server
        .redlock(&["release", "--key", key])
        .env("REDLOCK_TOKEN", token)
        .run()
        .code(0);
}

/// Waits into the next tenth of a second: a fence issued on a lock whose counter holds one from
/// this tenth is the counter's (INCR), from a later tenth the clock's (SET) (`next_fence` in
/// the prelude). Every measured fence on a lock with a counter comes after this.
fn next_tenth() {
    std::thread::sleep(Duration::from_millis(110));
}

/// Waits past `QUEUE_SLACK_MS` (1 s) after the last call that pushed the queue's expiry back:
/// the next call that keeps a place then always pushes it again (PTTL, then two PEXPIREAT).
fn past_queue_slack() {
    std::thread::sleep(Duration::from_millis(1_200));
}

/// A `redlock` in the background, which may be stopped (SIGSTOP); killed if the test ends
/// before it does (`Running`'s drop: SIGKILL ends a stopped process too).
struct Background(Option<Running>);

impl Background {
    fn signal(&self, name: &str) {
        if let Some(running) = &self.0 {
            running.signal(name);
        }
    }

    fn wait(mut self, limit: Duration) -> Output {
        self.0.take().expect("still running").wait(limit)
    }
}

/// What one operation made the servers run: script calls, and the commands inside them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    scripts: u64,
    commands: BTreeMap<String, u64>,
}

impl Row {
    /// `script calls | total | CMD n, CMD n...` (commands in alphabetical order).
    fn cells(&self) -> [String; 3] {
        let total: u64 = self.commands.values().sum();
        let each = self
            .commands
            .iter()
            .map(|(name, count)| format!("{name} {count}"))
            .collect::<Vec<_>>()
            .join(", ");
        [self.scripts.to_string(), total.to_string(), each]
    }
}

/// Reads the servers' command statistics around operations.
struct Meter {
    connections: Vec<redis::Connection>,
    /// What this test sent in the current window, by command (lower case).
    probes: BTreeMap<String, u64>,
}

impl Meter {
    fn new(servers: &[&RedisServer]) -> Self {
        Self {
            connections: servers.iter().map(|server| server.client()).collect(),
            probes: BTreeMap::new(),
        }
    }

    /// A command on the first server, counted so that `measure` takes it off.
    fn probe<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> T {
        *self.probes.entry(args[0].to_ascii_lowercase()).or_default() += 1;
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        command
            .query(&mut self.connections[0])
            .unwrap_or_else(|err| panic!("{args:?}: {err}"))
    }

    /// Per command (lower case), calls and rejected calls summed over the servers; and the
    /// script calls that ran (EVAL and EVALSHA calls but those that failed: a NOSCRIPT reply
    /// before redlock sends the script itself).
    fn stats(&mut self) -> (BTreeMap<String, u64>, u64) {
        let mut commands = BTreeMap::new();
        let mut scripts = 0;
        for con in &mut self.connections {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(con)
                .expect("INFO commandstats");
            for line in info.lines() {
                let Some((name, fields)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|line| line.split_once(':'))
                else {
                    continue;
                };
                let field = |wanted: &str| -> u64 {
                    fields
                        .split(',')
                        .find_map(|field| field.strip_prefix(wanted)?.strip_prefix('='))
                        .and_then(|n| n.trim().parse().ok())
                        .unwrap_or(0)
                };
                *commands.entry(name.to_owned()).or_default() +=
                    field("calls") + field("rejected_calls");
                if name == "eval" || name == "evalsha" {
                    scripts += field("calls") - field("failed_calls");
                }
            }
        }
        (commands, scripts)
    }

    /// Runs `operation` and returns what it made the servers run inside scripts.
    fn measure(&mut self, operation: impl FnOnce(&mut Self)) -> Row {
        let (before, scripts_before) = self.stats();
        self.probes.clear();
        operation(self);
        let (after, scripts_after) = self.stats();
        let mut commands = BTreeMap::new();
        for (name, calls) in after {
            let sent = before.get(&name).copied().unwrap_or(0)
                + self.probes.get(&name).copied().unwrap_or(0);
            if calls > sent && !SENT_FROM_OUTSIDE.contains(&name.as_str()) {
                commands.insert(name.to_ascii_uppercase(), calls - sent);
            }
        }
        Row {
            scripts: scripts_after - scripts_before,
            commands,
        }
    }
}

/// The measured rows, in the order measured.
#[derive(Default)]
struct Table {
    rows: Vec<(&'static str, Row)>,
}

impl Table {
    fn add(&mut self, path: &'static str, row: Row) {
        self.rows.push((path, row));
    }

    /// The table as PINNED spells it, columns aligned.
    fn render(&self) -> String {
        let width = self
            .rows
            .iter()
            .map(|(path, _)| path.len())
            .max()
            .unwrap_or(0);
        let mut text = String::from("\n");
        for (path, row) in &self.rows {
            let [scripts, total, each] = row.cells();
            text.push_str(&format!(
                "{path:width$} | {scripts} | {total:>3} | {each}\n"
            ));
        }
        text
    }

    /// Fails, printing both tables and the paths that differ, unless the measured table is the
    /// pinned one (compared cell by cell, spaces around cells ignored, rows in order).
    fn compare_with(&self, pinned: &str) {
        let cells = |text: &str| -> Vec<Vec<String>> {
            text.lines()
                .filter(|line| !line.trim().is_empty())
                .map(|line| line.split('|').map(|cell| cell.trim().to_owned()).collect())
                .collect()
        };
        let measured_text = self.render();
        let (measured, pinned_rows) = (cells(&measured_text), cells(pinned));
        if measured == pinned_rows {
            return;
        }
        // Each path that differs: its pinned row above its measured one.
        let path_of = |row: &Vec<String>| row.first().cloned().unwrap_or_default();
        let mut differ = Vec::new();
        for row in &measured {
            let was = pinned_rows
                .iter()
                .find(|pinned| path_of(pinned) == path_of(row));
            if was != Some(row) {
                differ.push(match was {
                    Some(was) => format!("  pinned:   {}", was.join(" | ")),
                    None => "  pinned:   (no such path)".to_owned(),
                });
                differ.push(format!("  measured: {}", row.join(" | ")));
            }
        }
        for row in &pinned_rows {
            if !measured.iter().any(|now| path_of(now) == path_of(row)) {
                differ.push(format!("  pinned:   {}", row.join(" | ")));
                differ.push("  measured: (no such path)".to_owned());
            }
        }
        panic!(
            "the Redis commands run inside redlock's scripts differ from the pinned table \
             (path | script calls | commands inside them | each command).\n\
             --- measured ---{measured_text}--- pinned ---{pinned}--- paths that differ ---\n{}\n\
             If a script changed on purpose, replace PINNED in tests/script_calls.rs with the \
             measured table above and say in the commit why the counts moved.",
            differ.join("\n")
        );
    }
}
