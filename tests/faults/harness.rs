//! The fault suite's oracles and fault injectors (docs/reliability.md says what each checks).
//!
//! - [`Probe`]: the command every faulted `redlock run` runs. It takes a non-blocking flock(2)
//!   on a referee file (held until it dies, however it dies: the kernel drops it), logs its
//!   start, end and fence, and bumps a counter file with a racy read-sleep-write. Two probes
//!   alive at once fail the referee; two probes inside the read-sleep-write lose an increment.
//! - [`Sampler`]: a thread that SCANs the server every 100 ms for redlock keys without an
//!   expiry (all but the fence counter must have one) or with a lease longer than the TTL.
//! - [`Proxy`]: a TCP proxy between redlock and redis-server that can delay, stall or cut
//!   every connection: network faults without root.
//! - [`Tally`] and [`record`]: what a scenario counted, checked and appended as one JSON line
//!   to `$REDLOCK_FAULTS_RESULTS/results.jsonl` when the full suite runs (`tests/faults/run`).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::util::TempDir;

/// The probe: `python3 -c PROBE DIR HOLD_SECONDS`.
const PROBE: &str = r#"
import fcntl, os, sys, time
where, hold = sys.argv[1], float(sys.argv[2])
fence = os.environ.get("REDLOCK_FENCE", "-")
referee = open(where + "/referee", "a")
try:
    fcntl.flock(referee, fcntl.LOCK_EX | fcntl.LOCK_NB)
    alone = 1
except OSError:
    alone = 0
start = time.monotonic_ns()
with open(where + "/log", "a") as log:
    log.write("S %d %s %d %d\n" % (start, fence, alone, os.getpid()))
path = where + "/counter"
try:
    value = int(open(path).read() or 0)
except FileNotFoundError:
    value = 0
time.sleep(hold)
# Written aside and renamed: a probe killed mid-write (kill -9 of its redlock) must not leave
# an empty counter, which the next probe would read as 0.
with open(path + ".%d" % os.getpid(), "w") as counter:
    counter.write(str(value + 1))
os.replace(path + ".%d" % os.getpid(), path)
end = time.monotonic_ns()
with open(where + "/log", "a") as log:
    log.write("E %d %s %d %d\n" % (end, fence, alone, os.getpid()))
"#;

/// A probe's directory; every run of one scenario shares it.
pub(super) struct Probe {
    dir: TempDir,
}

/// A probe's start, as it logged it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    /// Monotonic ns ([`monotonic_ns`]).
    pub(super) at: u64,
    pub(super) fence: Option<u64>,
    pub(super) pid: u32,
}

/// What a probe's log and counter say.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Verdict {
    /// Probes that started.
    pub(super) started: u64,
    /// Probes that ran to their end.
    pub(super) completed: u64,
    /// Probes that found another one alive (the referee), plus completed probes whose
    /// intervals overlap.
    pub(super) overlaps: u64,
    /// Probes whose fence was not above every fence that started before them.
    pub(super) stale_fences: u64,
    /// Increments the counter lost (completed probes minus the counter): overlaps inside the
    /// read-sleep-write.
    pub(super) lost_increments: u64,
}

impl Probe {
    pub(super) fn new() -> Self {
        Self {
            dir: TempDir::new("probe"),
        }
    }

    /// The command line that runs the probe, holding for `hold`.
    pub(super) fn command(&self, hold: Duration) -> Vec<String> {
        vec![
            "python3".to_owned(),
            "-c".to_owned(),
            PROBE.to_owned(),
            self.dir.path().display().to_string(),
            format!("{:.3}", hold.as_secs_f64()),
        ]
    }

    /// The probes of this directory alive now (host pids, from /proc: a probe in a PID
    /// namespace logs the pid it has there).
    pub(super) fn alive(&self) -> Vec<u32> {
        let dir = self.dir.path().display().to_string();
        crate::util::processes_matching(|words| {
            // `python3 -c PROBE DIR HOLD`, python3 by whatever path it was found
            // (redlock's own processes carry the same words further on).
            words
                .first()
                .is_some_and(|first| first.ends_with(b"python3"))
                && words.get(1) == Some(&b"-c".as_slice())
                && words.get(3) == Some(&dir.as_bytes())
        })
    }

    /// Waits until `count` probes have started, at most `limit`.
    pub(super) fn wait_started(&self, count: u64, limit: Duration) -> bool {
        crate::util::wait_until(limit, || self.verdict().started >= count)
    }

    /// The log lines around every probe that found another one alive, for a failure message.
    pub(super) fn overlap_report(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let mut report = String::new();
        for (at, line) in lines.iter().enumerate() {
            if line.starts_with('S') && line.split(' ').nth(3) == Some("0") {
                let from = at.saturating_sub(4);
                let to = (at + 3).min(lines.len());
                report.push_str(&lines[from..to].join("\n"));
                report.push_str("\n--\n");
            }
        }
        report
    }

    /// Every probe that started, in the log's order.
    pub(super) fn starts(&self) -> Vec<Start> {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        log.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                match fields[..] {
                    ["S", at, fence, _, pid] => Some(Start {
                        at: at.parse().ok()?,
                        fence: fence.parse().ok(),
                        pid: pid.parse().ok()?,
                    }),
                    _ => None,
                }
            })
            .collect()
    }

    pub(super) fn verdict(&self) -> Verdict {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        let mut verdict = Verdict::default();
        // pid -> (start, fence, alone), and the completed intervals.
        let mut starts: Vec<(u64, Option<u64>, bool, u64)> = Vec::new();
        let mut intervals: Vec<(u64, u64)> = Vec::new();
        for line in log.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [kind, at, fence, alone, pid] = fields[..] else {
                continue;
            };
            let (Ok(at), Ok(pid)) = (at.parse::<u64>(), pid.parse::<u64>()) else {
                continue;
            };
            match kind {
                "S" => {
                    verdict.started += 1;
                    if alone != "1" {
                        verdict.overlaps += 1;
                    }
                    starts.push((at, fence.parse().ok(), alone == "1", pid));
                }
                "E" => {
                    verdict.completed += 1;
                    // The latest start of that pid: pids are reused over a long soak.
                    if let Some(&(start, ..)) = starts.iter().rev().find(|s| s.3 == pid) {
                        intervals.push((start, at));
                    }
                }
                _ => {}
            }
        }
        intervals.sort_unstable();
        for pair in intervals.windows(2) {
            if pair[1].0 < pair[0].1 {
                verdict.overlaps += 1;
            }
        }
        starts.sort_unstable();
        let mut highest: Option<u64> = None;
        for (_, fence, ..) in &starts {
            if let Some(fence) = fence {
                if highest.is_some_and(|highest| *fence <= highest) {
                    verdict.stale_fences += 1;
                }
                highest = highest.max(Some(*fence));
            }
        }
        let counter: u64 = std::fs::read_to_string(self.dir.path().join("counter"))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0);
        verdict.lost_increments = verdict.completed.saturating_sub(counter);
        verdict
    }
}

/// What the sampler saw.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Sampled {
    pub(super) samples: u64,
    /// Distinct keys seen without an expiry (PTTL -1), the fence counter aside.
    pub(super) without_expiry: u64,
    /// Distinct lease keys (holders, leases) seen with more time left than the TTL allows.
    pub(super) above_ttl: u64,
}

/// SCANs a server every 100 ms for keys that could outlive every holder.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<(Sampled, Vec<String>)>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Samples the server on `port`; lease keys may have at most `ttl` (plus 100 ms) left.
    pub(super) fn start(port: u16, ttl: Duration) -> Self {
        Self::start_url(format!("redis://127.0.0.1:{port}"), ttl)
    }

    /// Samples the server at `url` (a server in a network namespace: its Unix socket).
    pub(super) fn start_url(url: String, ttl: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new((Sampled::default(), Vec::new())));
        let thread = {
            let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
            let limit = i64::try_from(ttl.as_millis()).unwrap() + 100;
            // Bounded: a sampler nobody stops ends after 30 minutes.
            let deadline = Instant::now() + Duration::from_secs(1800);
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    if let Some(found) = sample(&url, limit) {
                        let mut seen = seen.lock().unwrap();
                        seen.0.samples += 1;
                        for (key, kind) in found {
                            if !seen.1.contains(&key) {
                                match kind {
                                    Leak::NoExpiry => seen.0.without_expiry += 1,
                                    Leak::AboveTtl => seen.0.above_ttl += 1,
                                }
                                eprintln!("sampler: {key} {kind:?}");
                                seen.1.push(key);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    pub(super) fn stop(mut self) -> Sampled {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.seen.lock().unwrap().0
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy)]
enum Leak {
    NoExpiry,
    AboveTtl,
}

/// One pass over the server's redlock keys; None when it does not answer (a fault is on).
fn sample(url: &str, lease_limit_ms: i64) -> Option<Vec<(String, Leak)>> {
    let client = redis::Client::open(url).ok()?;
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(200))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .ok()?;
    let mut found = Vec::new();
    let mut cursor = 0u64;
    for _ in 0..100 {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("redlock:*")
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .ok()?;
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).ok()?;
            if pttl == -1 && !key.ends_with(":fence") {
                found.push((key, Leak::NoExpiry));
            } else if pttl > lease_limit_ms
                && (key.ends_with(":holders") || key.ends_with(":leases"))
            {
                found.push((key, Leak::AboveTtl));
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    Some(found)
}

/// What the proxy does to the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    Pass,
    /// Each chunk waits this many milliseconds before it is forwarded.
    Delay(u64),
    /// Nothing is forwarded (the bytes wait) until the link passes again.
    Stall,
}

/// A TCP proxy on a free loopback port in front of a Redis server.
pub(super) struct Proxy {
    pub(super) port: u16,
    state: Arc<ProxyState>,
    thread: Option<JoinHandle<()>>,
}

struct ProxyState {
    stop: AtomicBool,
    /// 0 pass, 1 stall, 2+N delay of N ms.
    link: AtomicU64,
    open: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    pub(super) fn start(upstream: u16) -> Self {
        Self::start_to(SocketAddr::from(([127, 0, 0, 1], upstream)))
    }

    /// A proxy on a free loopback port in front of `upstream`, in the network namespace of the
    /// calling thread (network.rs places one inside a host).
    pub(super) fn start_to(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState {
            stop: AtomicBool::new(false),
            link: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
        });
        let thread = {
            let state = Arc::clone(&state);
            // Bounded: a proxy nobody stops ends after 30 minutes.
            let deadline = Instant::now() + Duration::from_secs(1800);
            std::thread::spawn(move || {
                while !state.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((client, _)) => {
                            // Bounded: an upstream behind dropped packets would hold the accept loop for
                            // minutes.
                            let Ok(server) =
                                TcpStream::connect_timeout(&upstream, Duration::from_secs(2))
                            else {
                                continue;
                            };
                            let _ = client.set_nonblocking(false);
                            let _ = client.set_nodelay(true);
                            let _ = server.set_nodelay(true);
                            for (from, to) in [
                                (client.try_clone(), server.try_clone()),
                                (server.try_clone(), client.try_clone()),
                            ] {
                                if let (Ok(from), Ok(to)) = (from, to) {
                                    let state = Arc::clone(&state);
                                    std::thread::spawn(move || pump(from, to, &state));
                                }
                            }
                            let mut open = state.open.lock().unwrap();
                            open.push(client);
                            open.push(server);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
                for stream in state.open.lock().unwrap().drain(..) {
                    let _ = stream.shutdown(Shutdown::Both);
                }
            })
        };
        Self {
            port,
            state,
            thread: Some(thread),
        }
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(super) fn set(&self, link: Link) {
        let value = match link {
            Link::Pass => 0,
            Link::Stall => 1,
            Link::Delay(ms) => 2 + ms,
        };
        self.state.link.store(value, Ordering::SeqCst);
    }

    /// Closes every connection open through the proxy (both sides see the cut).
    pub(super) fn cut(&self) {
        for stream in self.state.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.set(Link::Pass);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Forwards `from` to `to` as the link allows, until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream, state: &ProxyState) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0 {
            break;
        }
        loop {
            match state.link.load(Ordering::SeqCst) {
                1 if !state.stop.load(Ordering::SeqCst) => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                delay if delay >= 2 => {
                    std::thread::sleep(Duration::from_millis(delay - 2));
                    break;
                }
                _ => break,
            }
        }
        if to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// What one scenario counted.
#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    /// The scenario's id (T1, T9, ...) and a few words on what ran.
    pub(super) id: &'static str,
    pub(super) name: &'static str,
    /// Acquisitions attempted (runs, acquires) and faults injected.
    pub(super) runs: u64,
    pub(super) faults: u64,
    pub(super) overlaps: u64,
    pub(super) stale_fences: u64,
    pub(super) leaked_keys: u64,
    /// Exit codes outside README's table, or 70 (a bug in redlock), or a code the scenario
    /// did not expect.
    pub(super) unexplained_exits: u64,
    /// Liveness bounds a row promises and missed: idle time of a key with a live waiter, delay
    /// of redlock's exit after its command (T39, T40).
    pub(super) missed_bounds: u64,
    /// Anything else worth a column: the scenario's own measurements.
    pub(super) notes: String,
}

impl Tally {
    pub(super) fn new(id: &'static str, name: &'static str) -> Self {
        Self {
            id,
            name,
            ..Self::default()
        }
    }

    pub(super) fn add_verdict(&mut self, verdict: Verdict) {
        self.overlaps += verdict.overlaps + verdict.lost_increments;
        self.stale_fences += verdict.stale_fences;
    }

    pub(super) fn add_sampled(&mut self, sampled: Sampled) {
        self.leaked_keys += sampled.without_expiry + sampled.above_ttl;
    }

    /// Counts an exit code as unexplained unless it is one of `expected`.
    pub(super) fn exit(&mut self, code: Option<i32>, expected: &[i32], what: &str) {
        if !code.is_some_and(|code| expected.contains(&code)) {
            eprintln!("unexplained exit {code:?} ({what}); expected one of {expected:?}");
            self.unexplained_exits += 1;
        }
    }

    /// For a fault outside the model (the lock itself is lost: a restart without
    /// persistence, eviction, FLUSHALL): a second holder may start before the first one knows,
    /// which is what fences are for. Records the tally and asserts 0 stale fences, 0 leaked
    /// keys, 0 unexplained exits; overlaps are counted, not failed.
    #[track_caller]
    pub(super) fn finish_out_of_model(self) {
        let missed = self.stale_fences + self.leaked_keys + self.unexplained_exits;
        record(
            &self,
            if missed > 0 {
                "fail"
            } else {
                "pass (out of model)"
            },
        );
        assert_eq!(
            (self.stale_fences, self.leaked_keys, self.unexplained_exits),
            (0, 0, 0),
            "{} {}: stale fences, leaked keys, unexplained exits ({})",
            self.id,
            self.name,
            self.notes
        );
    }

    /// Records the tally (when the full suite collects results) and asserts the targets:
    /// 0 overlaps, 0 stale fences, 0 leaked keys, 0 unexplained exits, 0 missed bounds.
    #[track_caller]
    pub(super) fn finish(self) {
        record(&self, "pass");
        assert_eq!(
            (
                self.overlaps,
                self.stale_fences,
                self.leaked_keys,
                self.unexplained_exits,
                self.missed_bounds
            ),
            (0, 0, 0, 0, 0),
            "{} {}: overlaps, stale fences, leaked keys, unexplained exits, missed bounds ({})",
            self.id,
            self.name,
            self.notes
        );
    }
}

/// Appends one JSON line to `$REDLOCK_FAULTS_RESULTS/results.jsonl`, if that is set. The
/// result is rewritten to "fail" when a target is missed.
pub(super) fn record(tally: &Tally, result: &str) {
    let Some(dir) = std::env::var_os("REDLOCK_FAULTS_RESULTS") else {
        return;
    };
    let missed = tally.overlaps
        + tally.stale_fences
        + tally.leaked_keys
        + tally.unexplained_exits
        + tally.missed_bounds;
    let line = serde_json::json!({
        "id": tally.id,
        "name": tally.name,
        "runs": tally.runs,
        "faults": tally.faults,
        "overlaps": tally.overlaps,
        "stale_fences": tally.stale_fences,
        "leaked_keys": tally.leaked_keys,
        "unexplained_exits": tally.unexplained_exits,
        "missed_bounds": tally.missed_bounds,
        "result": if missed > 0 && result == "pass" { "fail" } else { result },
        "notes": tally.notes,
    });
    let path = PathBuf::from(dir).join("results.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    writeln!(file, "{line}").unwrap();
}

/// A scenario that cannot run here says so, and is recorded as skipped.
pub(super) fn skip(id: &'static str, name: &'static str, needs: &str) {
    println!("SKIPPED: needs {needs} ({id} {name})");
    let mut tally = Tally::new(id, name);
    tally.notes = format!("SKIPPED: needs {needs}");
    record(&tally, "skipped");
}

/// CLOCK_MONOTONIC in ns, the clock the probes (Python's `time.monotonic_ns`) log with.
pub(super) fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    u64::try_from(now.tv_sec()).unwrap() * 1_000_000_000 + u64::try_from(now.tv_nsec()).unwrap()
}

/// Polls `key` on the server on `port` about once a millisecond until it is gone, at most
/// `limit`; returns when it was first seen gone ([`monotonic_ns`]), or `None`.
pub(super) fn gone_at(port: u16, key: &str, limit: Duration) -> Option<u64> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut con = client.get_connection().ok()?;
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut con).ok()?;
        if exists == 0 {
            return Some(monotonic_ns());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// The largest of `lags_ns`, in ms with one decimal, for a note ("-" when none).
pub(super) fn max_ms(lags_ns: &[i64]) -> String {
    lags_ns
        .iter()
        .max()
        .map_or("-".to_owned(), |ns| format!("{:.1} ms", *ns as f64 / 1e6))
}

/// Whether the full suite is running (`tests/faults/run`): longer and heavier scenarios.
pub(super) fn full() -> bool {
    std::env::var_os("REDLOCK_FAULTS_FULL").is_some()
}

/// The oracles themselves: each must see the violation it exists for, or every scenario's
/// zero would mean nothing.
#[test]
fn the_oracles_catch_what_they_are_for() {
    use std::process::Command;
    // Two probes at once, with no lock: the referee and the counter both see it; fences given
    // out of order are stale.
    // The second starts once the first has, and ends long before it: no timing luck needed.
    let probe = Probe::new();
    let spawn = |fence: &str, hold: Duration| {
        let command = probe.command(hold);
        Command::new(&command[0])
            .args(&command[1..])
            .env("REDLOCK_FENCE", fence)
            .spawn()
            .expect("python3")
    };
    let mut first = spawn("20", Duration::from_secs(3));
    assert!(probe.wait_started(1, Duration::from_secs(20)));
    let mut second = spawn("10", Duration::from_millis(300));
    first.wait().unwrap();
    second.wait().unwrap();
    let verdict = probe.verdict();
    assert_eq!(verdict.started, 2);
    assert!(verdict.overlaps >= 2, "{verdict:?}");
    assert_eq!(verdict.lost_increments, 1, "{verdict:?}");
    assert_eq!(verdict.stale_fences, 1, "{verdict:?}");

    // A key without expiry, and a lease longer than the TTL.
    let server = crate::util::RedisServer::start();
    let _: () = server.cmd(&["SET", "redlock:{x}:holders", "1"]);
    let _: () = server.cmd(&["SET", "redlock:{y}:leases", "1", "PX", "60000"]);
    let _: () = server.cmd(&["SET", "redlock:{x}:fence", "1"]);
    let sampler = Sampler::start(server.port, Duration::from_secs(6));
    std::thread::sleep(Duration::from_millis(300));
    let sampled = sampler.stop();
    assert_eq!(
        (sampled.without_expiry, sampled.above_ttl),
        (1, 1),
        "{sampled:?}"
    );

    // The proxy really stalls: a PING through a stalled link gets no answer.
    let proxy = Proxy::start(server.port);
    proxy.set(Link::Stall);
    let ping = || -> redis::RedisResult<String> {
        let mut con = redis::Client::open(proxy.url())?
            .get_connection_with_timeout(Duration::from_millis(500))?;
        con.set_read_timeout(Some(Duration::from_millis(300)))?;
        redis::cmd("PING").query(&mut con)
    };
    assert!(ping().is_err(), "a stalled link answered");
    proxy.set(Link::Pass);
    assert_eq!(ping().unwrap(), "PONG");
}
