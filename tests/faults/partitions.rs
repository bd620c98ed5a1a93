//! Faults of the network and of the clock, with real packets and a real clock jump: Redis
//! unreachable under a holder and its waiters (T7), a flapping link under contention (T8), the
//! first SYN of each connection lost (T8b), a quorum client cut off from masters (T16 T17),
//! split brain after a Sentinel failover (T22), and wall-clock jumps on the Redis host and on
//! a client host (T26). The network rows run servers and clients in network namespaces of
//! their own (network.rs) and are skipped, saying why, where the machine cannot make them; the
//! clock rows run servers and clients under libfaketime and are skipped without it.

use std::time::{Duration, Instant};

use super::harness::{self, Link, Probe, Tally, monotonic_ns};
use super::network::{Host, Net, NetRedis, REDIS_PORT, SENTINEL_PORT};
use crate::util::fake_clock::FakeClock;
use crate::util::{Output, RedisServer, Redlock, TempDir, wait_until};

/// How much past its `--wait` a waiter may take to exit: giving up its place is bounded by
/// 400 ms, and reading who holds the lock for its last line by 400 ms more.
const WAIT_SLACK: Duration = Duration::from_secs(1);

/// Nanoseconds as whole milliseconds, for the notes.
fn ms(ns: i64) -> String {
    format!("{} ms", ns / 1_000_000)
}

/// An exit code for the notes ("-" for none: killed by a signal).
fn code(code: Option<i32>) -> String {
    code.map_or("-".to_owned(), |code| code.to_string())
}

/// The network, or the row recorded as skipped with what this machine lacks.
fn network_or_skip(id: &'static str, name: &'static str) -> Option<Net> {
    match Net::start() {
        Ok(net) => Some(net),
        Err(needs) => {
            harness::skip(id, name, &needs);
            None
        }
    }
}

/// `redlock run ARGS -- PROBE HOLD`.
fn probe_run(redlock: Redlock, probe: &Probe, hold: Duration) -> Redlock {
    let command = probe.command(hold);
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    redlock.arg("--").args(&words)
}

/// A redlock process watched from a thread of its own, so that its end is seen when it comes.
struct Watched {
    spawned: u64,
    thread: std::thread::JoinHandle<(Output, u64)>,
}

/// How a watched process ended.
struct Ended {
    output: Output,
    /// Monotonic ns ([`monotonic_ns`]) of the spawn and of the exit (seen within 5 ms).
    spawned: u64,
    exited: u64,
}

impl Ended {
    fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// From the spawn to the exit.
    fn took(&self) -> Duration {
        Duration::from_nanos(self.exited.saturating_sub(self.spawned))
    }
}

/// Starts `redlock`; it must exit within `limit` (else the test fails with its output).
fn watch(redlock: Redlock, limit: Duration) -> Watched {
    let spawned = monotonic_ns();
    let running = redlock.spawn();
    Watched {
        spawned,
        thread: std::thread::spawn(move || {
            let output = running.wait(limit);
            (output, monotonic_ns())
        }),
    }
}

/// A `run --key job --ttl 3s` holder on `host` against `url`, its command holding for `hold`,
/// watched for 20 s; returns once its command has started.
fn started_holder(host: &Host, url: &str, probe: &Probe, hold: Duration) -> Watched {
    let holder = watch(
        probe_run(
            host.redlock(&["run", "--key", "job", "--ttl", "3s"])
                .env("REDLOCK_URL", url),
            probe,
            hold,
        ),
        Duration::from_secs(20),
    );
    assert!(probe.wait_started(1, Duration::from_secs(10)));
    holder
}

impl Watched {
    fn finished(&self) -> bool {
        self.thread.is_finished()
    }

    fn join(self) -> Ended {
        let (output, exited) = self
            .thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ended {
            output,
            spawned: self.spawned,
            exited,
        }
    }
}

/// Polls until `held` is false, at most `limit`; when it was first seen false (monotonic ns).
fn lapsed_at(limit: Duration, held: impl FnMut() -> bool) -> Option<u64> {
    gone_and_lapsed(None, limit, held).1
}

/// Polls every 2 ms, at most `limit`, until process `command` (if any) is gone and `held` is
/// false; when each was first seen so (monotonic ns). The command's end is what must come
/// first: redlock's own exit may follow later (it releases what it can, or gives up on it).
fn gone_and_lapsed(
    command: Option<u32>,
    limit: Duration,
    mut held: impl FnMut() -> bool,
) -> (Option<u64>, Option<u64>) {
    let deadline = Instant::now() + limit;
    let (mut gone, mut lapsed) = (None, None);
    while Instant::now() < deadline && (lapsed.is_none() || (command.is_some() && gone.is_none())) {
        if gone.is_none() && command.is_some_and(|pid| !crate::util::alive(pid)) {
            gone = Some(monotonic_ns());
        }
        if lapsed.is_none() && !held() {
            lapsed = Some(monotonic_ns());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (gone, lapsed)
}

fn queued(server: &NetRedis, key: &str) -> usize {
    server
        .try_cmd(&["ZCARD", &format!("redlock:{{{key}}}:queue")])
        .unwrap_or(0)
}

/// How Redis becomes unreachable in a T7 round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreachable {
    /// The clients' host drops every packet.
    Dropped,
    /// The clients' host refuses every packet (resets, unreachables).
    Refused,
    /// The clients' host's link goes down.
    LinkDown,
    /// The clients reach Redis through a proxy in their host, which stops forwarding.
    Stalled,
}

/// T7: Redis becomes unreachable for a host where `run` holds the lock and another `run`
/// waits, while a third waits on another host. The holder's command is stopped before its
/// lease lapses on the server (exit 125), the cut-off waiter exits within its `--wait` (75,
/// or 69), the other waiter takes the lock once the lease lapsed (0), and nothing stays locked
/// past the TTL. The smoke tier drops packets once; the full suite drops them twice, then
/// refuses them, takes the link down and stalls a proxy.
#[test]
fn redis_unreachable_stops_the_holder_before_its_lease_lapses() {
    let (id, name) = ("T7", "Redis unreachable under a holder and waiters");
    let Some(mut net) = network_or_skip(id, name) else {
        return;
    };
    let mut tally = Tally::new(id, name);
    let redis_host = net.host();
    let cut_off = net.host();
    let elsewhere = net.host();
    let server = NetRedis::start(&redis_host, REDIS_PORT, &[]);
    let ttl = Duration::from_secs(3);
    let sampler = server.sampler(ttl);
    let rounds: &[Unreachable] = if harness::full() {
        &[
            Unreachable::Dropped,
            Unreachable::Dropped,
            Unreachable::Refused,
            Unreachable::LinkDown,
            Unreachable::Stalled,
        ]
    } else {
        &[Unreachable::Dropped]
    };
    let mut figures = Vec::new();
    for &fault in rounds {
        figures.push(unreachable_round(
            &mut tally, &server, &cut_off, &elsewhere, fault,
        ));
    }
    tally.add_sampled(sampler.stop());
    tally.notes = format!(
        "--ttl 3s; times after the fault: {} (the cut-off waiter's --wait is 4 s from its start)",
        figures.join("; ")
    );
    tally.finish();
}

/// One T7 round; its figures for the notes.
fn unreachable_round(
    tally: &mut Tally,
    server: &NetRedis,
    cut_off: &Host,
    elsewhere: &Host,
    fault: Unreachable,
) -> String {
    let probe = Probe::new();
    let proxy = (fault == Unreachable::Stalled)
        .then(|| cut_off.proxy(std::net::SocketAddr::from((server.host.addr, REDIS_PORT))));
    let url = proxy
        .as_ref()
        .map_or_else(|| server.url(), |proxy| proxy.url());
    let holder = started_holder(cut_off, &url, &probe, Duration::from_secs(30));
    let token = server.holders("job").pop().expect("the holder's token");
    let wait = Duration::from_secs(4);
    let waiter = watch(
        probe_run(
            cut_off
                .redlock(&["run", "--key", "job", "--ttl", "3s", "--wait", "4s"])
                .env("REDLOCK_URL", &url),
            &probe,
            Duration::from_millis(200),
        ),
        Duration::from_secs(20),
    );
    assert!(wait_until(Duration::from_secs(10), || queued(
        server, "job"
    ) == 1));
    let other = watch(
        probe_run(
            elsewhere
                .redlock(&["run", "--key", "job", "--ttl", "3s", "--wait", "20s"])
                .env("REDLOCK_URL", &server.url()),
            &probe,
            Duration::from_millis(200),
        ),
        Duration::from_secs(30),
    );
    assert!(wait_until(Duration::from_secs(10), || queued(
        server, "job"
    ) == 2));

    let faulted = monotonic_ns();
    match (fault, &proxy) {
        (Unreachable::Dropped, _) => cut_off.drop_all(),
        (Unreachable::Refused, _) => cut_off.reject_all(),
        (Unreachable::LinkDown, _) => cut_off.cut(),
        (Unreachable::Stalled, Some(proxy)) => proxy.set(Link::Stall),
        (Unreachable::Stalled, None) => unreachable!("a stalled round has its proxy"),
    }
    tally.faults += 1;
    let command = probe.starts()[0].pid;
    let (gone, lapsed) = gone_and_lapsed(Some(command), Duration::from_secs(10), || {
        server.holds("job", &token)
    });
    let holder = holder.join();
    let waiter = waiter.join();
    let other = other.join();
    cut_off.heal();
    if let Some(proxy) = &proxy {
        proxy.set(Link::Pass);
    }
    tally.runs += 3;
    tally.exit(holder.code(), &[125], &format!("{fault:?}: the holder"));
    tally.exit(
        waiter.code(),
        &[69, 75],
        &format!("{fault:?}: the cut-off waiter"),
    );
    tally.exit(
        other.code(),
        &[0],
        &format!("{fault:?}: the waiter elsewhere"),
    );
    let (Some(gone), Some(lapsed)) = (gone, lapsed) else {
        panic!(
            "{fault:?}: the holder's command never ended ({gone:?}), or its lease never lapsed on the server ({lapsed:?})"
        );
    };
    // The lease lapses on the server's clock, at most the TTL after the last renewal.
    let lease_left = Duration::from_nanos(lapsed.saturating_sub(faulted));
    if lease_left > Duration::from_millis(3100) {
        eprintln!("{fault:?}: the lease lapsed {lease_left:?} after the fault");
        tally.missed_bounds += 1;
    }
    if gone >= lapsed {
        eprintln!(
            "{fault:?}: the holder's command ended {} after its lease lapsed",
            ms(gone as i64 - lapsed as i64)
        );
        tally.missed_bounds += 1;
    }
    if waiter.took() > wait + WAIT_SLACK {
        eprintln!("{fault:?}: the cut-off waiter took {:?}", waiter.took());
        tally.missed_bounds += 1;
    }
    let starts = probe.starts();
    let taken_over = starts
        .get(1)
        .map_or("-".to_owned(), |start| ms(start.at as i64 - faulted as i64));
    // Nothing stays locked: the last holder released, the cut-off waiters' places lapse.
    let free = wait_until(Duration::from_secs(10), || {
        server.holders("job").is_empty() && queued(server, "job") == 0
    });
    if !free {
        eprintln!("{fault:?}: still locked: {:?}", server.holders("job"));
        tally.leaked_keys += 1;
    }
    tally.add_verdict(probe.verdict());
    format!(
        "{fault:?}: command ended at {}, holder exit {} at {}, lease lapsed at {}, cut-off waiter exit {} after {:.1} s, taken over elsewhere at {taken_over}",
        ms(gone as i64 - faulted as i64),
        code(holder.code()),
        ms(holder.exited as i64 - faulted as i64),
        ms(lapsed as i64 - faulted as i64),
        code(waiter.code()),
        waiter.took().as_secs_f64(),
    )
}

/// Contenders for lock `flap<TTL>`: two on one host and one on another, each running the
/// probe for one TTL and queueing again (`--wait 60s`), until a deadline.
struct Contenders {
    ttl: u64,
    probe: Probe,
    workers: Vec<std::thread::JoinHandle<Vec<Option<i32>>>>,
}

impl Contenders {
    fn start(hosts: &[Host; 2], url: &str, ttl: u64, until: Instant) -> Self {
        let probe = Probe::new();
        let workers = [&hosts[0], &hosts[0], &hosts[1]]
            .into_iter()
            .map(|host| {
                let command = probe.command(Duration::from_secs(ttl));
                let host = host.clone();
                let url = url.to_owned();
                std::thread::spawn(move || {
                    let words: Vec<&str> = command.iter().map(String::as_str).collect();
                    let mut codes = Vec::new();
                    while Instant::now() < until {
                        let out = host
                            .redlock(&["run", "--key", &format!("flap{ttl}")])
                            .args(&["--ttl", &format!("{ttl}s"), "--wait", "60s", "--"])
                            .args(&words)
                            .env("REDLOCK_URL", &url)
                            .spawn()
                            .wait(Duration::from_secs(120));
                        codes.push(out.status.code());
                    }
                    codes
                })
            })
            .collect();
        Self {
            ttl,
            probe,
            workers,
        }
    }

    /// Every contender's exit codes, once the last has ended, and their probe.
    fn join(self) -> (Vec<Option<i32>>, Probe) {
        let codes = self
            .workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a contender"))
            .collect();
        (codes, self.probe)
    }
}

/// T8: the Redis host's link flaps (every packet dropped for 1 s, then passing again) while
/// contenders on two hosts take turns holding the lock for one TTL each. No two holders ever
/// overlap; a holder whose renewals fall into a flap may lose the lock (125, a spurious
/// loss: nobody took it), which the row counts per TTL. The smoke tier flaps 3 times under
/// `--ttl 3s`; the full suite 50 times in 5 minutes, under `--ttl 3s` and `--ttl 10s` at once
/// (two locks, the same flaps).
#[test]
fn a_flapping_link_never_lets_two_holders_overlap() {
    let (id, name) = ("T8", "flapping link (1 s drops) under contention");
    let Some(mut net) = network_or_skip(id, name) else {
        return;
    };
    let mut tally = Tally::new(id, name);
    let redis_host = net.host();
    let clients = [net.host(), net.host()];
    let server = NetRedis::start(&redis_host, REDIS_PORT, &[]);
    let (ttls, flaps, period): (&[u64], u64, Duration) = if harness::full() {
        (&[3, 10], 50, Duration::from_secs(6))
    } else {
        (&[3], 3, Duration::from_secs(4))
    };
    let down = Duration::from_secs(1);
    let sampler = server.sampler(Duration::from_secs(*ttls.iter().max().unwrap()));
    let until = Instant::now() + period * u32::try_from(flaps).unwrap();
    let flapper = redis_host.flap(down, period - down, flaps);
    let groups: Vec<Contenders> = ttls
        .iter()
        .map(|&ttl| Contenders::start(&clients, &server.url(), ttl, until))
        .collect();
    let mut figures = Vec::new();
    for group in groups {
        let ttl = group.ttl;
        let (codes, probe) = group.join();
        let count = |code: i32| codes.iter().filter(|&&c| c == Some(code)).count();
        for code in &codes {
            tally.exit(*code, &[0, 69, 75, 125], &format!("--ttl {ttl}s"));
        }
        tally.runs += codes.len() as u64;
        let verdict = probe.verdict();
        tally.add_verdict(verdict);
        figures.push(format!(
            "--ttl {ttl}s: {} runs, {} lost the lock (125), {} ran (0), {} found Redis unreachable (69), {} waited in vain (75)",
            codes.len(),
            count(125),
            count(0),
            count(69),
            count(75),
        ));
    }
    let flapped = flapper.join();
    tally.faults = flapped;
    tally.add_sampled(sampler.stop());
    tally.notes = format!(
        "{flapped} drops of 1 s, one every {} s; {}",
        period.as_secs(),
        figures.join("; ")
    );
    tally.finish();
}

/// The bound T8b holds each command to when the first SYN of its connection is lost: under
/// the kernel's own retransmission of it, a second later (RFC 6298), which is what a command
/// took before, and well over the 250 ms redlock's first connect attempt waits (a loaded
/// machine's debug build needs the room).
const LOST_SYN_BOUND: Duration = Duration::from_millis(950);

/// T8b: the first SYN each command sends to Redis is dropped (and only that one). redlock
/// gives up on a connect attempt after 250 ms and sends a new SYN on a new socket, so the
/// command ends well within [`LOST_SYN_BOUND`]; waiting for the kernel to send it again would
/// take a second. `acquire`, `inspect` and `release` with `--connect-timeout 2s`, ten times
/// each: a command at the bound or over it is a missed bound.
#[test]
fn a_lost_first_syn_costs_a_short_attempt_not_a_second() {
    let (id, name) = ("T8b", "first SYN of each command dropped");
    let Some(mut net) = network_or_skip(id, name) else {
        return;
    };
    let mut tally = Tally::new(id, name);
    let redis_host = net.host();
    let client = net.host();
    let server = NetRedis::start(&redis_host, REDIS_PORT, &[]);
    let url = server.url();
    let mut slowest = Duration::ZERO;
    let mut over = Vec::new();
    for _ in 0..10 {
        let mut token = String::new();
        for command in ["acquire", "inspect", "release"] {
            let mut redlock = client
                .redlock(&[command, "--key", "syn", "--connect-timeout", "2s"])
                .env("REDLOCK_URL", &url);
            redlock = match command {
                "acquire" => redlock.args(&["--ttl", "60s"]),
                "release" => redlock.env("REDLOCK_TOKEN", &token),
                _ => redlock,
            };
            redis_host.drop_first_syn(REDIS_PORT);
            let out = redlock.run();
            out.code(0);
            assert!(
                redis_host.syns_dropped() >= 1,
                "{command}: no SYN was dropped, the fault did not happen"
            );
            if command == "acquire" {
                token = out.stdout.trim().to_owned();
            }
            tally.runs += 1;
            tally.faults += 1;
            slowest = slowest.max(out.elapsed);
            if out.elapsed >= LOST_SYN_BOUND {
                tally.missed_bounds += 1;
                over.push(format!("{command} {} ms", out.elapsed.as_millis()));
            }
        }
        assert!(
            server.holders("syn").is_empty(),
            "the release left a holder"
        );
    }
    redis_host.heal();
    tally.notes = format!(
        "acquire, inspect, release with --connect-timeout 2s, the first SYN of each dropped: \
         slowest {} ms (bound {} ms){}",
        slowest.as_millis(),
        LOST_SYN_BOUND.as_millis(),
        if over.is_empty() {
            String::new()
        } else {
            format!("; over it: {}", over.join(", "))
        }
    );
    println!("{id}: {}", tally.notes);
    tally.finish();
}

/// What guards a T22 round: settings on the servers and flags on the clients.
#[derive(Debug, Clone, Copy)]
struct Guards {
    /// `min-replicas-to-write 1` and `min-replicas-max-lag 2` on every server.
    min_replicas: bool,
    /// `--replicas 1` on every client.
    replicas_flag: bool,
}

impl Guards {
    fn server_args(self) -> Vec<&'static str> {
        if self.min_replicas {
            vec![
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "2",
            ]
        } else {
            Vec::new()
        }
    }

    fn client_args(self) -> Vec<&'static str> {
        if self.replicas_flag {
            vec!["--replicas", "1"]
        } else {
            Vec::new()
        }
    }
}

/// Three hosts, each with one Redis and one sentinel: the master on the first, a replica on
/// each of the others.
struct SplitBrain {
    hosts: Vec<Host>,
    /// Kept running until the set is dropped.
    _servers: Vec<NetRedis>,
    sentinels: Vec<NetRedis>,
}

impl SplitBrain {
    fn start(net: &mut Net, guards: Guards) -> Self {
        let hosts: Vec<Host> = (0..3).map(|_| net.host()).collect();
        let server_args = guards.server_args();
        let master = NetRedis::start(&hosts[0], REDIS_PORT, &server_args);
        let master_addr = master.host.addr.to_string();
        let port = REDIS_PORT.to_string();
        let mut servers = vec![master];
        for host in &hosts[1..] {
            let mut args = vec!["--replicaof", &master_addr, &port];
            args.extend(&server_args);
            servers.push(NetRedis::start(host, REDIS_PORT, &args));
        }
        let sentinels: Vec<NetRedis> = hosts
            .iter()
            .map(|host| NetRedis::start_sentinel(host, &servers[0]))
            .collect();
        let ready = wait_until(Duration::from_secs(30), || {
            let replication: String = servers[0].cmd(&["INFO", "replication"]);
            replication.matches(",state=online,").count() == 2
                && sentinels.iter().all(|sentinel| {
                    let info: String = sentinel.cmd(&["INFO", "sentinel"]);
                    info.contains("slaves=2,sentinels=3")
                })
        });
        assert!(
            ready,
            "the sentinels did not find each other and the replicas"
        );
        Self {
            hosts,
            _servers: servers,
            sentinels,
        }
    }

    /// The Sentinel URL a client on host `index` uses: its own host's sentinel first.
    fn url(&self, index: usize) -> String {
        let mut order: Vec<usize> = (0..3).collect();
        order.rotate_left(index);
        let sentinels: Vec<String> = order
            .iter()
            .map(|&at| format!("{}:{SENTINEL_PORT}", self.hosts[at].addr))
            .collect();
        format!("redis+sentinel://{}/mymaster", sentinels.join(","))
    }

    /// The master's address as the sentinel on host `index` names it.
    fn master_seen_from(&self, index: usize) -> Option<String> {
        self.sentinels[index]
            .try_cmd::<(String, u16)>(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
            .ok()
            .map(|(addr, _)| addr)
    }
}

/// What one T22 round measured.
struct SplitBrainRound {
    overlaps: u64,
    failover: Duration,
    /// From the partition to the start of the command on the majority's side.
    other_start: Duration,
    /// From the partition to the isolated holder's exit.
    isolated_exit: Duration,
    /// Whether it exited before the partition healed.
    by_itself: bool,
    /// How long both commands ran at once.
    overlap: Duration,
}

/// How long a T22 partition lasts at most.
const PARTITION: Duration = Duration::from_secs(12);

/// One T22 round: a holder runs on the master's host; that host (master, sentinel and holder)
/// is cut off from the other two; their sentinels promote a replica; a client there takes the
/// lock for 5 s; the partition heals once the isolated holder stopped, or after 12 s.
fn split_brain_round(tally: &mut Tally, guards: Guards) -> SplitBrainRound {
    let mut net = Net::start().expect("the network (checked by the caller)");
    let set = SplitBrain::start(&mut net, guards);
    let probe = Probe::new();
    let client_args = guards.client_args();
    let isolated = watch(
        probe_run(
            set.hosts[0]
                .redlock(&["run", "--key", "job", "--ttl", "3s"])
                .args(&client_args)
                .env("REDLOCK_URL", &set.url(0)),
            &probe,
            Duration::from_secs(40),
        ),
        Duration::from_secs(90),
    );
    assert!(probe.wait_started(1, Duration::from_secs(10)));
    // Renewals reach the replicas for a second before the partition.
    std::thread::sleep(Duration::from_secs(1));
    let old_master = set.hosts[0].addr.to_string();
    let partitioned = monotonic_ns();
    set.hosts[0].drop_all();
    tally.faults += 1;
    let promoted = wait_until(Duration::from_secs(30), || {
        set.master_seen_from(1)
            .is_some_and(|master| master != old_master)
    });
    assert!(promoted, "no replica was promoted within 30 s");
    let failover = Duration::from_nanos(monotonic_ns() - partitioned);
    let majority_side = watch(
        probe_run(
            set.hosts[1]
                .redlock(&["run", "--key", "job", "--ttl", "3s", "--wait", "30s"])
                .args(&client_args)
                .env("REDLOCK_URL", &set.url(1)),
            &probe,
            Duration::from_secs(5),
        ),
        Duration::from_secs(60),
    );
    let majority_side = majority_side.join();
    // The partition lasts until the isolated holder stopped by itself, or 12 s: then it heals,
    // and a holder still running meets a demoted master or a lock that is not its own.
    let since = Duration::from_nanos(monotonic_ns() - partitioned);
    wait_until(PARTITION.saturating_sub(since), || isolated.finished());
    let healed = monotonic_ns();
    set.hosts[0].heal();
    let isolated = isolated.join();
    tally.runs += 2;
    tally.exit(
        isolated.code(),
        &[125],
        &format!("{guards:?}: the isolated holder"),
    );
    tally.exit(
        majority_side.code(),
        &[0],
        &format!("{guards:?}: the holder on the majority's side"),
    );
    let verdict = probe.verdict();
    tally.add_verdict(verdict);
    let other_start = probe.starts().get(1).map_or(u64::MAX, |start| start.at);
    SplitBrainRound {
        overlaps: verdict.overlaps + verdict.lost_increments,
        failover,
        other_start: Duration::from_nanos(other_start.saturating_sub(partitioned)),
        isolated_exit: Duration::from_nanos(isolated.exited.saturating_sub(partitioned)),
        by_itself: isolated.exited < healed,
        overlap: Duration::from_nanos(
            isolated
                .exited
                .min(majority_side.exited)
                .saturating_sub(other_start),
        ),
    }
}

/// Runs T22 under `guards` for `rounds` rounds and records its row.
fn split_brain_row(name: &'static str, guards: Guards, rounds: usize, in_model: bool) {
    let id = "T22";
    // The rounds make networks of their own; this one only asks whether they can.
    if network_or_skip(id, name).is_none() {
        return;
    }
    let mut tally = Tally::new(id, name);
    let results: Vec<SplitBrainRound> = (0..rounds)
        .map(|_| split_brain_round(&mut tally, guards))
        .collect();
    let seconds = |pick: fn(&SplitBrainRound) -> Duration| {
        results
            .iter()
            .map(|round| format!("{:.1}", pick(round).as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let by_itself = results.iter().filter(|round| round.by_itself).count();
    tally.notes = format!(
        "--ttl 3s, {rounds} rounds: {} overlapping probes, both commands at once for {} s; seconds after the partition: replica promoted {}, the other side's 5 s command started {}, the isolated holder exited {} ({by_itself} of {rounds} before the partition healed, at most {} s after it began)",
        results.iter().map(|round| round.overlaps).sum::<u64>(),
        seconds(|round| round.overlap),
        seconds(|round| round.failover),
        seconds(|round| round.other_start),
        seconds(|round| round.isolated_exit),
        PARTITION.as_secs(),
    );
    if in_model {
        tally.finish();
    } else {
        tally.finish_out_of_model();
    }
}

/// T22: split brain. The master's host (master, sentinel and a holder) is cut off; the
/// sentinels of the other two hosts promote a replica, and a client there takes the lock while
/// the old master still takes writes. With `min-replicas-to-write 1` (and a small
/// `min-replicas-max-lag`) on the servers and `--replicas 1` on the clients, the isolated
/// holder's renewals are not acknowledged and it stops before its lease can lapse on the
/// promoted replica: no overlap. The smoke tier runs that once.
#[test]
fn split_brain_is_safe_with_min_replicas_and_acknowledged_renewals() {
    split_brain_row(
        "split brain, min-replicas-to-write 1 and --replicas 1",
        Guards {
            min_replicas: true,
            replicas_flag: true,
        },
        if harness::full() { 3 } else { 1 },
        true,
    );
}

/// T22 with one guard or none, full suite only. `--replicas 1` alone keeps the holders apart
/// (the row asserts it). Without it, the isolated holder renews on the old master, and the
/// other side's command starts while it runs: with the defaults until the partition heals, with
/// `min-replicas-to-write 1` alone until the old master refuses writes (about
/// `min-replicas-max-lag` + 1 s after the partition) and the holder's last lease runs out.
/// Those two are out of model (asynchronous replication, docs/safety.md "Safety"): counted, not failed.
#[test]
#[ignore = "the full fault suite runs it (tests/faults/run)"]
fn split_brain_with_fewer_guards_is_measured() {
    for (name, guards, in_model) in [
        (
            "split brain, defaults (out of model)",
            Guards {
                min_replicas: false,
                replicas_flag: false,
            },
            false,
        ),
        (
            "split brain, min-replicas-to-write 1 only (out of model)",
            Guards {
                min_replicas: true,
                replicas_flag: false,
            },
            false,
        ),
        (
            "split brain, --replicas 1 only",
            Guards {
                min_replicas: false,
                replicas_flag: true,
            },
            true,
        ),
    ] {
        split_brain_row(name, guards, 3, in_model);
    }
}

/// T16 T17 under partitions: a client of a quorum of 3 masters, each on a host of its own.
/// Cut off from 2 of them mid-run, it stops its command before its leases there can lapse
/// (125), and a client elsewhere takes the lock after them; once the partition heals no master
/// has a holder left from the cut-off client. A client that reaches only 1 master never starts
/// its command (69) and leaves nothing on it. The full suite also cuts a running client off from
/// 1 master, which it survives (0).
#[test]
fn a_quorum_client_cut_off_from_a_majority_stops_in_time_and_leaves_nothing() {
    let (id, name) = ("T16 T17", "quorum of 3: a client cut off from masters");
    let Some(mut net) = network_or_skip(id, name) else {
        return;
    };
    let mut tally = Tally::new(id, name);
    let hosts: Vec<Host> = (0..3).map(|_| net.host()).collect();
    let client = net.host();
    let elsewhere = net.host();
    let masters: Vec<NetRedis> = hosts
        .iter()
        .map(|host| NetRedis::start(host, REDIS_PORT, &[]))
        .collect();
    let urls = masters
        .iter()
        .map(NetRedis::url)
        .collect::<Vec<_>>()
        .join(" ");
    let samplers: Vec<_> = masters
        .iter()
        .map(|master| master.sampler(Duration::from_secs(3)))
        .collect();
    let rounds = if harness::full() { 3 } else { 1 };
    let mut figures = Vec::new();
    for _ in 0..rounds {
        // Cut off from a majority mid-run.
        let probe = Probe::new();
        let holder = started_holder(&client, &urls, &probe, Duration::from_secs(30));
        let token = masters[0].holders("job").pop().expect("the holder's token");
        let other = watch(
            probe_run(
                elsewhere
                    .redlock(&["run", "--key", "job", "--ttl", "3s", "--wait", "20s"])
                    .env("REDLOCK_URL", &urls),
                &probe,
                Duration::from_millis(200),
            ),
            Duration::from_secs(30),
        );
        std::thread::sleep(Duration::from_millis(300));
        let cut = monotonic_ns();
        client.drop_between(&[&hosts[1], &hosts[2]]);
        tally.faults += 1;
        let command = probe.starts()[0].pid;
        let (gone, lapsed) = gone_and_lapsed(Some(command), Duration::from_secs(10), || {
            masters[1].holds("job", &token) && masters[2].holds("job", &token)
        });
        let (Some(gone), Some(lapsed)) = (gone, lapsed) else {
            panic!(
                "the cut-off holder's command never ended ({gone:?}), or its leases never lapsed ({lapsed:?})"
            );
        };
        let holder = holder.join();
        let other = other.join();
        tally.runs += 2;
        tally.exit(holder.code(), &[125], "the client cut off from 2 of 3");
        tally.exit(other.code(), &[0], "the client elsewhere");
        if gone >= lapsed {
            eprintln!(
                "the cut-off holder's command ended {} after its first lease lapsed",
                ms(gone as i64 - lapsed as i64)
            );
            tally.missed_bounds += 1;
        }
        client.heal();
        let stale: Vec<usize> = (0..3)
            .filter(|&at| masters[at].holds("job", &token))
            .collect();
        if !stale.is_empty() {
            eprintln!("after the heal, masters {stale:?} still name the cut-off holder");
            tally.leaked_keys += stale.len() as u64;
        }
        let again = client
            .redlock(&["acquire", "--key", "job", "--ttl", "3s"])
            .env("REDLOCK_URL", &urls)
            .run();
        tally.runs += 1;
        tally.exit(
            again.status.code(),
            &[0],
            "the healed client acquiring at once",
        );
        let token = again.stdout.trim();
        client
            .redlock(&["release", "--key", "job", "--token", token])
            .env("REDLOCK_URL", &urls)
            .run()
            .code(0);
        tally.add_verdict(probe.verdict());
        figures.push(format!(
            "cut off from 2: command ended at {}, exit {} at {}, first lease lapsed at {}",
            ms(gone as i64 - cut as i64),
            code(holder.code()),
            ms(holder.exited as i64 - cut as i64),
            ms(lapsed as i64 - cut as i64)
        ));

        // Reaching 1 master of 3: nothing starts, nothing is left.
        client.drop_between(&[&hosts[1], &hosts[2]]);
        tally.faults += 1;
        let dir = TempDir::new("minority");
        let marker = dir.path().join("ran");
        let minority = client
            .redlock(&["run", "--key", "job", "--ttl", "3s", "--", "touch"])
            .arg(&marker)
            .env("REDLOCK_URL", &urls)
            .run();
        client.heal();
        tally.runs += 1;
        tally.exit(minority.status.code(), &[69], "the client reaching 1 of 3");
        if marker.exists() {
            eprintln!("the client reaching 1 master of 3 ran its command");
            tally.overlaps += 1;
        }
        if !masters[0].holders("job").is_empty() {
            eprintln!("the client reaching 1 master of 3 left a holder on it");
            tally.leaked_keys += 1;
        }
        figures.push(format!(
            "reaching 1: exit {} after {} ms",
            code(minority.status.code()),
            minority.elapsed.as_millis()
        ));

        if harness::full() {
            // Cut off from 1 master of 3 mid-run: the majority keeps the lock.
            let probe = Probe::new();
            let holder = started_holder(&client, &urls, &probe, Duration::from_secs(5));
            client.drop_between(&[&hosts[2]]);
            tally.faults += 1;
            let holder = holder.join();
            client.heal();
            tally.runs += 1;
            tally.exit(holder.code(), &[0], "the client cut off from 1 of 3");
            tally.add_verdict(probe.verdict());
        }
    }
    for sampler in samplers {
        tally.add_sampled(sampler.stop());
    }
    tally.notes = format!(
        "--ttl 3s; {}; no holder of the cut-off client left once healed",
        figures.join("; ")
    );
    tally.finish();
}

/// T26 on the Redis host: its wall clock jumps forward by more than the TTL while `run` holds
/// the lock and another waits. The lease, measured on that clock, is gone at once; the waiter
/// takes the lock and starts while the holder's command still runs, until the holder's next
/// renewal finds the lock taken and stops it (125). Out of model (docs/safety.md, "Safety": let NTP
/// slew on Redis hosts): the overlap is measured; the fences still rise from one holder to the
/// next, so a resource that checks them rejects the older holder's writes.
#[test]
fn a_clock_jump_on_the_redis_host_ends_leases_early_and_fences_still_order_holders() {
    let (id, name) = (
        "T26",
        "wall clock of the Redis host jumps 20 s forward (out of model)",
    );
    let clock = match FakeClock::new() {
        Ok(clock) => clock,
        Err(needs) => return harness::skip(id, name, &needs),
    };
    let mut tally = Tally::new(id, name);
    let mut figures = Vec::new();
    for _ in 0..if harness::full() { 3 } else { 1 } {
        clock.set(0);
        let server = match clock.server() {
            Ok(server) => server,
            Err(needs) => return harness::skip(id, name, &needs),
        };
        let probe = Probe::new();
        let holder = watch(
            probe_run(
                server.redlock(&["run", "--key", "job", "--ttl", "6s"]),
                &probe,
                Duration::from_secs(20),
            ),
            Duration::from_secs(40),
        );
        assert!(probe.wait_started(1, Duration::from_secs(10)));
        let holders: Vec<String> = server.cmd(&["HKEYS", "redlock:{job}:holders"]);
        let token = holders.first().expect("the holder's token").clone();
        let waiter = watch(
            probe_run(
                server.redlock(&["run", "--key", "job", "--ttl", "6s", "--wait", "30s"]),
                &probe,
                Duration::from_secs(1),
            ),
            Duration::from_secs(40),
        );
        assert!(wait_until(Duration::from_secs(10), || {
            server.cmd::<usize>(&["ZCARD", "redlock:{job}:queue"]) == 1
        }));
        let jumped = monotonic_ns();
        clock.set(20);
        tally.faults += 1;
        let gone = lapsed_at(Duration::from_secs(10), || {
            server.cmd::<bool>(&["HEXISTS", "redlock:{job}:holders", &token])
        })
        .expect("the lease ends after the jump");
        let holder = holder.join();
        let waiter = waiter.join();
        tally.runs += 2;
        tally.exit(
            holder.code(),
            &[125],
            "the holder whose lease the jump ended",
        );
        tally.exit(waiter.code(), &[0], "the waiter");
        let verdict = probe.verdict();
        tally.add_verdict(verdict);
        let starts = probe.starts();
        let fences: Vec<String> = starts
            .iter()
            .map(|start| {
                start
                    .fence
                    .map_or("-".to_owned(), |fence| fence.to_string())
            })
            .collect();
        let second = starts.get(1).map_or(u64::MAX, |start| start.at);
        figures.push(format!(
            "lease gone {} after the jump, the waiter started at {}, the holder stopped ({}) at {}; fences {}",
            ms(gone as i64 - jumped as i64),
            ms(second as i64 - jumped as i64),
            code(holder.code()),
            ms(holder.exited as i64 - jumped as i64),
            fences.join(" < "),
        ));
    }
    tally.notes = format!("--ttl 6s: {}", figures.join("; "));
    tally.finish_out_of_model();
}

/// T26 on a client host: its wall clock jumps an hour forward, then back, while `run` holds
/// the lock, and forward while another waits with `--wait 2s`. redlock's deadlines are on
/// CLOCK_BOOTTIME: the holder renews throughout and its command ends by itself (0), the waiter
/// gives up after its 2 s (75), no sooner and not much later. libfaketime reaches only a
/// dynamically linked redlock (a glibc build): the full suite (`tests/faults/run`) builds one
/// and names it in `REDLOCK_DYNAMIC_BIN`; without it, a static build skips the row, saying so.
/// The commands run without libfaketime: the jump is redlock's alone.
#[test]
fn a_clock_jump_on_a_client_host_changes_nothing() {
    let (id, name) = (
        "T26",
        "wall clock of a client host jumps an hour, both ways",
    );
    let clock = match FakeClock::new() {
        Ok(clock) => clock,
        Err(needs) => return harness::skip(id, name, &needs),
    };
    let mut tally = Tally::new(id, name);
    let server = RedisServer::start();
    let sampler = harness::Sampler::start(server.port, Duration::from_secs(3));
    let probe = Probe::new();
    let command = probe.command(Duration::from_secs(6));
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    let dynamic = std::env::var_os("REDLOCK_DYNAMIC_BIN").map(std::path::PathBuf::from);
    let build = |redlock: crate::util::Redlock| match &dynamic {
        Some(binary) => redlock.with_binary(binary),
        None => redlock,
    };
    let running = clock
        .redlock(build(server.redlock(&[
            "run",
            "--key",
            "job",
            "--ttl",
            "3s",
            "--",
            "env",
            "-u",
            "LD_PRELOAD",
        ])))
        .args(&words)
        .spawn();
    assert!(probe.wait_started(1, Duration::from_secs(10)));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", running.pid())).unwrap_or_default();
    if !maps.contains("libfaketime") {
        running.signal("TERM");
        let _ = running.wait(Duration::from_secs(20));
        return harness::skip(
            id,
            name,
            "a dynamically linked redlock (this build is static: libfaketime cannot reach it; tests/faults/run builds one, and so does cargo test without --target x86_64-unknown-linux-musl)",
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    clock.set(3600);
    std::thread::sleep(Duration::from_millis(1500));
    clock.set(-3600);
    let out = running.wait(Duration::from_secs(30));
    clock.set(0);
    tally.faults += 2;
    tally.runs += 1;
    tally.exit(out.status.code(), &[0], "the holder across two jumps");
    tally.add_verdict(probe.verdict());
    tally.add_sampled(sampler.stop());

    server
        .redlock(&["acquire", "--key", "busy", "--ttl", "60s"])
        .run()
        .code(0);
    let waiter = watch(
        clock.redlock(build(
            server.redlock(&["run", "--key", "busy", "--wait", "2s", "--", "true"]),
        )),
        Duration::from_secs(20),
    );
    std::thread::sleep(Duration::from_millis(300));
    clock.set(3600);
    let waiter = waiter.join();
    clock.set(0);
    tally.faults += 1;
    tally.runs += 1;
    tally.exit(waiter.code(), &[75], "the waiter across a jump");
    if !(Duration::from_secs(2)..Duration::from_secs(2) + WAIT_SLACK).contains(&waiter.took()) {
        eprintln!("--wait 2s across a jump took {:?}", waiter.took());
        tally.missed_bounds += 1;
    }
    tally.notes = format!(
        "+1 h then -1 h under a --ttl 3s holder: exit {}; --wait 2s across +1 h: exit {} after {:.2} s",
        code(out.status.code()),
        code(waiter.code()),
        waiter.took().as_secs_f64()
    );
    tally.finish();
}
