#!/usr/bin/env python3
"""Benchmark redlock's queue at scale: N waiter processes behind one holder on one key.

Starts a private redis-server per point (free loopback port) and, for each N:
  1. takes the lock with `acquire --ttl 600s`;
  2. spawns N processes `redlock run -q --wait 600s --key queue -- bash -c LOG` at once and
     times until all N are queued ("join");
  3. measures Redis's CPU while they all wait (INFO cpu, over --idle seconds, nothing else
     running);
  4. releases the lock and waits for all N to run and exit ("drain"): each child logs its start
     and end ($EPOCHREALTIME) and its parent's pid, so the hand-off gaps (next start - previous
     end), the order (against the queue's order read from Redis before the release) and any
     overlap come from the log;
  5. in a second pass of the same workload (its idle window at most 10 s), a bystander runs
     `redlock run -q --key bystander -- true` every 20 ms and a PING goes out every 10 ms on a
     connection of its own, each in its own process, from the first spawn to at least 3 s
     after the release; their latencies are reported overall and per phase: while the
     waiters join (at least 3 s), while they wait, while they drain. Redis's slow log records
     every command that took over 1 ms.
Redis's own figures come from INFO commandstats: microseconds per script call (EVALSHA/EVAL),
round trips per acquisition (EVALSHA, EVAL, BLPOP sent by the waiters, their release excluded,
as docs/performance.md counts them) and commands Redis ran per acquisition (inside scripts
too, the release included); the commands of the waiting time (the idle window, and the
second of settling before it: the waiters' periodic refreshes and looks) are left out of
these, and the idle window's are reported as idle CPU and script calls per second. Make the idle window
longer than the refresh period (a third of QUEUE_ENTRY_TTL) to see the refreshes. Each point runs twice: once with nothing else (Redis's figures, the idle CPU),
once with the bystander (its latencies; INFO commandstats are server-wide, so its calls would
blur the first pass's figures). Both passes report order, overlaps and exit codes.

`--semaphore N` adds a point: N holders of a `--limit N` semaphore (each `run` holds until the
benchmark lets go of a flock(1) its command waits for) plus N/10 queued behind them, and a
control pass of the same commands without redlock (N `flock` started at once, then N/10 `bash`
when the gate opens) with the bystander: what those processes cost the machine on their own.
Where the kernel's DAMON threads run (kdamond: some virtual machines use them to give cold
memory back to the host), their CPU is sampled while the bystander runs and its runs over 5 ms
are matched against their bursts (`Reclaim`); benches/sched_stalls.py reads a scheduler trace
for the rest.
`--idle-simulation W` adds 10,000 idle waiters simulated on sockets (no processes): each joins
with the acquire script, then loops like src/waiting.rs: BLPOP its wake list for a third of
QUEUE_ENTRY_TTL, then one script call; once with `acquire` (stay) as the waiting code does
today, once with the `refresh` script. Reports Redis CPU over W seconds.

Without options, thousands of client processes and the server share the machine, and the
latencies measure its scheduling as much as Redis. `--isolate` runs redis-server and the
bystander processes at real-time priority (chrt -f), as a server and a client on hosts of
their own would run: then the bystander's latency is Redis's answer under the waiters' load.
`--pin 1:0` runs redis-server on CPU 1 and everything else on CPU 0.

Usage: cargo build --release
       python3 benches/queue_scale.py [--redlock PATH] [--n 10,100,1000,2000]
           [--semaphore 1000] [--idle 10] [--idle-simulation 60] [--timeout 300] [--isolate]
`--redlock` may name the build of another commit (the layout is detected: sorted-set queue or
the older hash). Prints a Markdown table and writes the raw figures as JSON (--json PATH).
Nothing here asserts; a point that does not finish within --timeout is reported as such.
"""

import argparse
import fcntl
import hashlib
import json
import math
import os
import platform
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BINARY = os.path.join(ROOT, "target", "release", "redlock")
KEY = "queue"
PREFIX = "redlock:"


def private_env(port):
    """The environment for redlock against the private server on `port` only: nothing may fall
    back to a Redis named elsewhere."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("REDLOCK_") and key != "REDIS_URL"}
    env["REDLOCK_URL"] = f"redis://127.0.0.1:{port}"
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Reader:
    """Incremental RESP2 parser."""

    def __init__(self):
        self.buffer = b""

    def feed(self, data):
        self.buffer += data

    def parse(self):
        """One reply, or raises IndexError when incomplete."""
        reply, at = self._parse(0)
        self.buffer = self.buffer[at:]
        return reply

    def _line(self, at):
        end = self.buffer.index(b"\r\n", at) if b"\r\n" in self.buffer[at:] else -1
        if end < 0:
            raise IndexError
        return self.buffer[at:end], end + 2

    def _parse(self, at):
        if at >= len(self.buffer):
            raise IndexError
        kind = self.buffer[at:at + 1]
        line, at = self._line(at + 1)
        if kind == b"+":
            return line.decode(), at
        if kind == b"-":
            return RuntimeError(line.decode()), at
        if kind == b":":
            return int(line), at
        if kind == b"$":
            size = int(line)
            if size < 0:
                return None, at
            if len(self.buffer) < at + size + 2:
                raise IndexError
            return self.buffer[at:at + size].decode(errors="replace"), at + size + 2
        if kind == b"*":
            size = int(line)
            if size < 0:
                return None, at
            items = []
            for _ in range(size):
                item, at = self._parse(at)
                items.append(item)
            return items, at
        raise ValueError(f"bad reply {kind!r}")


class Client:
    """A blocking Redis connection; counts the commands it sends (to subtract them later)."""

    sent = {}

    def __init__(self, port, timeout=30):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = Reader()

    def call(self, *args):
        name = str(args[0]).lower()
        Client.sent[name] = Client.sent.get(name, 0) + 1
        self.sock.sendall(encode(*args))
        while True:
            try:
                reply = self.reader.parse()
            except IndexError:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("closed")
                self.reader.feed(data)
                continue
            if isinstance(reply, RuntimeError):
                raise reply
            return reply

    def close(self):
        self.sock.close()


class Redis:
    # CPUs for the server (--pin), else it shares the machine with the clients.
    cpus = None
    # Real-time priority for the server (--isolate).
    realtime = False

    def __init__(self, directory):
        self.port = free_port()
        self.dir = directory
        pin = ["taskset", "-c", Redis.cpus] if Redis.cpus else []
        if Redis.realtime:
            pin = ["chrt", "-f", "20", *pin]
        self.process = subprocess.Popen(
            [*pin, "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", directory, "--maxclients", "12000",
             "--logfile", os.path.join(directory, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client = Client(self.port)
                self.client.call("PING")
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("redis-server did not start")
                time.sleep(0.02)

    def info(self, section):
        text = self.client.call("INFO", section)
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def cpu(self):
        info = self.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def commandstats(self):
        stats = {}
        for name, value in self.info("commandstats").items():
            fields = dict(part.split("=") for part in value.split(","))
            stats[name.removeprefix("cmdstat_")] = (int(fields["calls"]), float(fields["usec"]))
        return stats

    def stop(self):
        self.process.kill()
        self.process.wait()


def percentile(values, fraction):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def stats_delta(after, before):
    return {name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
            for name, (calls, usec) in after.items()}


OWN = ("info", "config|resetstat", "config|set", "config", "ping", "echo", "slowlog|get",
       "slowlog|reset")
# Seconds the bystander runs at least, from the first spawn and from the release.
MIN_SAMPLING = 3
# The idle window of the pass with the bystander, at most.
BYSTANDER_IDLE = 10
PHASES = ("joining", "waiting", "draining")


BYSTANDER = r"""
import json, os, signal, socket, subprocess, sys, time
mode, out, binary, port = sys.argv[1:5]
stopped, samples = [False], []
signal.signal(signal.SIGTERM, lambda *_: stopped.__setitem__(0, True))
if mode == "ping":
    sock = socket.create_connection(("127.0.0.1", int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
open(out + ".ready", "w").close()
while not stopped[0]:
    at, start = time.monotonic(), time.perf_counter()
    if mode == "ping":
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += sock.recv(64)
        pause = 0.01
    else:
        subprocess.run([binary, "run", "-q", "--key", "bystander", "--", "true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pause = 0.02
    samples.append((at, (time.perf_counter() - start) * 1000))
    time.sleep(pause)
with open(out, "w") as f:
    json.dump(samples, f)
"""


class Bystander:
    """`redlock run -- true` on another key every 20 ms, and a PING every 10 ms on a
    connection of its own: each in a process of its own, so the benchmark's own work (it
    spawns the waiters) does not delay them."""

    def __init__(self, binary, env, port, work):
        self.processes, self.outputs = {}, {}
        for mode in ("run", "ping"):
            self.outputs[mode] = os.path.join(work, f"bystander-{mode}.json")
            realtime = ["chrt", "-f", "10"] if Redis.realtime else []
            self.processes[mode] = subprocess.Popen(
                [*realtime, sys.executable, "-c", BYSTANDER, mode, self.outputs[mode], binary,
                 str(port)], env=env)
        self.runs, self.pings, self.count = [], [], 0
        # Signals before the handlers are installed would kill them.
        deadline = time.monotonic() + 10
        while not all(os.path.exists(out + ".ready") for out in self.outputs.values()):
            if time.monotonic() > deadline:
                sys.exit("the bystander processes did not start")
            time.sleep(0.01)

    def stop(self):
        if not self.processes:
            return
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for mode, process in self.processes.items():
            try:
                process.wait(timeout=30)
                with open(self.outputs[mode]) as samples:
                    values = json.load(samples)
            except (subprocess.TimeoutExpired, OSError, ValueError):
                process.kill()
                values = []
            if mode == "run":
                self.runs, self.count = values, len(values)
            else:
                self.pings = values
        self.processes = {}

    @staticmethod
    def within(samples, phase):
        """The latencies of the samples taken in `phase` (start, end), or all of them."""
        return [ms for at, ms in samples if phase is None or phase[0] <= at < phase[1]]

    def figures(self, phases):
        """Its latencies: p50/p99 of the runs, p99/max of the PINGs, and each one's p99 per
        phase (name: (start, end))."""
        runs, pings = self.within(self.runs, None), self.within(self.pings, None)
        figures = {"bystander_runs": self.count,
                   "bystander_p50_ms": percentile(runs, .5),
                   "bystander_p99_ms": percentile(runs, .99),
                   "ping_p99_ms": percentile(pings, .99),
                   "ping_max_ms": max(pings, default=float("nan"))}
        for name, phase in phases.items():
            figures[f"bystander_{name}_p99_ms"] = percentile(self.within(self.runs, phase), .99)
            figures[f"ping_{name}_p99_ms"] = percentile(self.within(self.pings, phase), .99)
        return figures


class Reclaim:
    """CPU time of the kernel's DAMON threads (kdamond), sampled every millisecond while the
    bystander runs. Some virtual machines run DAMON to give cold memory back to the host: every
    sampling interval it checks the pages it samples in every process that maps them, so its
    work grows with the number of processes sharing the same files (libc, the redlock binary),
    and a kernel without preemption lets it keep a CPU for tens of milliseconds. The bystander's
    runs that overlap such a burst show how much of its tail is that daemon's. Nothing is
    sampled where DAMON is not running."""

    BURST_NS = 1_000_000

    def __init__(self):
        self.files, self.samples = [], []
        for pid in self.pids():
            try:
                self.files.append(open(f"/proc/{pid}/schedstat", "rb", buffering=0))
            except OSError:
                pass
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        if self.files:
            self.thread.start()

    @staticmethod
    def pids():
        pids = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/comm") as comm:
                    if comm.read().startswith("kdamond"):
                        pids.append(pid)
            except OSError:
                pass
        return pids

    def runtime_ns(self):
        total = 0
        for file in self.files:
            file.seek(0)
            total += int(file.read().split()[0])
        return total

    def sample(self):
        while not self.stopped.is_set():
            self.samples.append((time.monotonic(), self.runtime_ns()))
            time.sleep(0.001)

    def stop(self):
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()

    def bursts(self):
        """(start, end, CPU ns) of each stretch of at least BURST_NS of DAMON CPU."""
        found, current = [], None
        for (t1, r1), (t2, r2) in zip(self.samples, self.samples[1:]):
            if r2 <= r1:
                continue
            if current and t1 - current[1] < 0.003:
                current[1], current[2] = t2, current[2] + r2 - r1
            else:
                if current:
                    found.append(current)
                current = [t1, t2, r2 - r1]
        if current:
            found.append(current)
        return [tuple(b) for b in found if b[2] >= self.BURST_NS]

    def report(self, runs, slow_ms=5):
        """Figures for the bystander's `runs` (start, ms) against this daemon's bursts."""
        if not self.files or len(self.samples) < 2:
            return {}
        wall = self.samples[-1][0] - self.samples[0][0]
        bursts = self.bursts()

        def in_burst(at, ms):
            return any(start < at + ms / 1000 and end > at for start, end, _ in bursts)

        slow = [(at, ms) for at, ms in runs if ms > slow_ms]
        fast = [(at, ms) for at, ms in runs if ms <= slow_ms]
        return {"kdamond_cpu_ms_per_s": (self.samples[-1][1] - self.samples[0][1]) / 1e6 / wall,
                "kdamond_bursts": len(bursts),
                "slow_runs": len(slow),
                "slow_runs_in_burst": sum(in_burst(*run) for run in slow),
                "fast_runs_in_burst": sum(in_burst(*run) for run in fast)}


class NoReclaim:
    def stop(self):
        pass

    def report(self, runs):
        return {}


def queue_count(redis, layout):
    key = f"{PREFIX}{{{KEY}}}:queue"
    if layout == "zset":
        return redis.client.call("ZLEXCOUNT", key, "-", "+")
    return redis.client.call("HLEN", key)


def detect_layout(redis):
    kind = redis.client.call("TYPE", f"{PREFIX}{{{KEY}}}:queue")
    return "zset" if kind == "zset" else "hash"


def queue_pids(redis, layout):
    """The waiters' pids in queue order, read from Redis."""
    if layout == "zset":
        ids = redis.client.call("ZRANGE", f"{PREFIX}{{{KEY}}}:queue", 0, -1)
        entries = []
        for i in range(0, len(ids), 1000):
            entries += redis.client.call("HMGET", f"{PREFIX}{{{KEY}}}:waiters", *ids[i:i + 1000])
        return [json.loads(e)["pid"] for e in entries if e]
    fields = redis.client.call("HGETALL", f"{PREFIX}{{{KEY}}}:queue")
    entries = [json.loads(fields[i + 1]) for i in range(0, len(fields), 2)]
    return [e["pid"] for e in sorted(entries, key=lambda e: e["seq"])]


def kill_all(processes):
    for process in processes:
        if process.poll() is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def summarize(stats, acquisitions):
    """Per-acquisition figures from commandstats, the benchmark's own commands left out."""
    def calls(name):
        return stats.get(name, (0, 0.0))[0]

    script_calls = calls("evalsha") + calls("eval")
    script_usec = stats.get("evalsha", (0, 0.0))[1] + stats.get("eval", (0, 0.0))[1]
    sent = script_calls + calls("blpop") + calls("script|load")
    everything = sum(calls(name) for name in stats if name not in OWN)
    everything -= sum(count for name, count in Client.sent.items() if name not in OWN)
    return {
        "usec_per_script_call": script_usec / script_calls if script_calls else float("nan"),
        # Every acquisition ends in one release; the rest is the acquirer's own path.
        "round_trips_per_acquisition": sent / acquisitions - 1,
        "commands_per_acquisition": everything / acquisitions,
    }


class NoBystander(Bystander):
    """No bystander: no samples, every figure NaN."""

    def __init__(self):
        self.processes, self.runs, self.pings, self.count = {}, [], [], 0


def run_point(binary, n, options, semaphore=False, bystanding=False):
    """One pass of one point. Without `bystanding`, Redis's figures (nothing else runs); with
    it, the bystander's latencies, in three phases: while the waiters join, while they wait
    (an idle window of at most BYSTANDER_IDLE seconds) and while they drain."""
    work = tempfile.mkdtemp(prefix="redlock-scale-")
    redis = Redis(work)
    env = private_env(redis.port)
    log = os.path.join(work, "log")
    gate = os.path.join(work, "gate")
    open(gate, "w").close()
    Client.sent = {}
    result = {"n": n, "kind": f"semaphore --limit {n}" if semaphore else "exclusive"}
    processes = []
    phases = {}
    bystander, reclaim = NoBystander(), NoReclaim()
    try:
        child = ["bash", "-c", f'echo "$EPOCHREALTIME s $PPID $REDLOCK_FENCE" >> {log}; '
                               f'echo "$EPOCHREALTIME e $PPID" >> {log}']
        if semaphore:
            # The holders' commands wait for a shared flock(1) on this file while we hold it.
            gate_fd = os.open(gate, os.O_RDONLY)
            fcntl.flock(gate_fd, fcntl.LOCK_EX)
            holders, waiters = n, n // 10
            holder_child = ["flock", "-s", gate, "true"]
        else:
            token = subprocess.run([binary, "acquire", "--key", KEY, "--ttl", "600s"], env=env,
                                   capture_output=True, text=True, check=True).stdout.strip()
            holders, waiters = 0, n
        # Scripts loaded before the figures start (the first EVAL compiles each).
        subprocess.run([binary, "run", "-q", "--key", "warm-up", "--", "true"], env=env,
                       check=True)
        redis.client.call("CONFIG", "SET", "slowlog-log-slower-than", "1000")
        redis.client.call("CONFIG", "SET", "slowlog-max-len", "100000")
        redis.client.call("SLOWLOG", "RESET")
        redis.client.call("CONFIG", "RESETSTAT")
        Client.sent = {}
        cpu_start = redis.cpu()
        if bystanding:
            bystander = Bystander(binary, env, redis.port, work)
            reclaim = Reclaim()
        lock_args = ["--limit", str(n)] if semaphore else []
        started = time.monotonic()
        deadline = started + options.timeout

        def spawn(count, command):
            for _ in range(count):
                # Each one's messages kept: a failure is reported with what redlock said.
                with open(os.path.join(work, f"stderr-{len(processes)}"), "w") as stderr:
                    processes.append(subprocess.Popen(
                        [binary, "run", "-q", "--wait", "600s", "--key", KEY, *lock_args,
                         "--", *command], env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                        start_new_session=True))

        if semaphore:
            spawn(holders, holder_child)
            while time.monotonic() < deadline:
                held = redis.client.call("HLEN", f"{PREFIX}{{{KEY}}}:holders")
                if held >= holders:
                    break
                time.sleep(0.05)
            result["hold_s"] = time.monotonic() - started
        joined_at = time.monotonic()
        spawn(waiters, child)
        layout = None
        while time.monotonic() < deadline:
            if layout is None and redis.client.call("EXISTS", f"{PREFIX}{{{KEY}}}:queue"):
                layout = detect_layout(redis)
            if layout and queue_count(redis, layout) >= waiters:
                break
            time.sleep(0.05)
        else:
            result["timed_out"] = "join"
            raise TimeoutError
        result["join_s"] = time.monotonic() - joined_at
        result["layout"] = layout
        # Enough bystander samples for a p99 however short the join was.
        if bystanding:
            time.sleep(max(0, started + MIN_SAMPLING - time.monotonic()))

        phases = {"joining": (started, time.monotonic())}
        # Idle: nothing but the waiters (and the semaphore's holders renewing), and in the
        # bystander's pass the bystander.
        # (The settling second is waiting too: its calls, the first places' looks every second,
        # are left out of the per-acquisition figures like the idle window's.)
        settle_stats = redis.commandstats()
        if not bystanding:
            time.sleep(1)
        before_cpu, before_stats, idle_started = redis.cpu(), redis.commandstats(), time.monotonic()
        time.sleep(min(options.idle, BYSTANDER_IDLE) if bystanding else options.idle)
        idle_wall = time.monotonic() - idle_started
        phases["waiting"] = (idle_started, time.monotonic())
        idle_stats = stats_delta(redis.commandstats(), before_stats)
        idle_stats = {name: value for name, value in idle_stats.items() if name not in OWN}
        waited_stats = stats_delta(redis.commandstats(), settle_stats)
        waited_stats = {name: value for name, value in waited_stats.items() if name not in OWN}
        result["idle_cpu_pct"] = 100 * (redis.cpu() - before_cpu) / idle_wall
        result["idle_script_calls_per_s"] = (
            idle_stats.get("evalsha", (0, 0))[0] + idle_stats.get("eval", (0, 0))[0]) / idle_wall
        order = queue_pids(redis, layout)

        released = time.monotonic()
        if semaphore:
            fcntl.flock(gate_fd, fcntl.LOCK_UN)
        else:
            subprocess.run([binary, "release", "--key", KEY, "--token", token], env=env, check=True)
        for process in processes:
            process.wait(timeout=max(1, deadline - time.monotonic()))
        result["drain_s"] = time.monotonic() - released
        if bystanding:
            time.sleep(max(0, released + MIN_SAMPLING - time.monotonic()))
        phases["draining"] = (released, time.monotonic())
        bystander.stop()
        reclaim.stop()
        slow = redis.client.call("SLOWLOG", "GET", "-1")
        result["slow_commands"] = len(slow)
        result["slowest_ms"] = max((entry[2] for entry in slow), default=0) / 1000
        result["slowest"] = [(entry[2] / 1000, " ".join(entry[3][:4]))
                             for entry in sorted(slow, key=lambda e: -e[2])[:5]]
        result["exit_codes"] = sorted({process.returncode for process in processes})
        failed = [index for index, process in enumerate(processes) if process.returncode]
        result["failures"] = [
            f"exit {processes[index].returncode}: "
            + open(os.path.join(work, f"stderr-{index}")).read().strip()[-500:]
            for index in failed[:5]]
        for failure in result["failures"]:
            print(f"  a redlock failed, {failure}", file=sys.stderr, flush=True)
        # Per acquisition: the join, the wake-ups and the hand-offs; the refreshes and looks of
        # the waiting time are a cost per second of waiting, reported as such.
        stats = stats_delta(redis.commandstats(), waited_stats)
        result.update(summarize(stats, holders + waiters))
        result["cpu_s_total"] = redis.cpu() - cpu_start

        events = {}
        for line in open(log).read().splitlines():
            parts = line.split()
            events.setdefault(int(parts[2]), {})[parts[1]] = float(parts[0])
        runs = sorted((e["s"], e["e"], pid) for pid, e in events.items() if "s" in e and "e" in e)
        result["ran"] = len(runs)
        result["overlaps"] = sum(1 for a, b in zip(runs, runs[1:]) if b[0] < a[1])
        if not semaphore:
            gaps = [(b[0] - a[1]) * 1000 for a, b in zip(runs, runs[1:])]
            result["gap_p50_ms"] = percentile(gaps, .5)
            result["gap_p99_ms"] = percentile(gaps, .99)
        started_order = [pid for _, _, pid in runs]
        result["in_queue_order"] = started_order == order
        result["out_of_order"] = sum(1 for a, b in zip(started_order, order) if a != b)
    except (TimeoutError, subprocess.TimeoutExpired):
        result.setdefault("timed_out", "drain")
    finally:
        bystander.stop()
        reclaim.stop()
        kill_all(processes)
        result.update(reclaim.report(bystander.runs))
        result.update(bystander.figures(phases))
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def run_control(binary, n, options):
    """The semaphore point's workload without redlock, with the bystander: its n holders'
    commands (`flock -s GATE true`) started at once, the same waiting window, then the gate
    opened and the n/10 waiters' commands started. What the bystander measures here is what
    those processes cost the machine, whatever runs them; the point's own pass adds redlock."""
    work = tempfile.mkdtemp(prefix="redlock-control-")
    redis = Redis(work)
    env = private_env(redis.port)
    gate = os.path.join(work, "gate")
    open(gate, "w").close()
    gate_fd = os.open(gate, os.O_RDONLY)
    fcntl.flock(gate_fd, fcntl.LOCK_EX)
    result = {"n": n, "kind": "control"}
    processes, phases = [], {}
    bystander, reclaim = NoBystander(), NoReclaim()
    try:
        subprocess.run([binary, "run", "-q", "--key", "warm-up", "--", "true"], env=env,
                       check=True)
        bystander, reclaim = Bystander(binary, env, redis.port, work), Reclaim()
        started = time.monotonic()
        for _ in range(n):
            processes.append(subprocess.Popen(["flock", "-s", gate, "true"],
                                              start_new_session=True))
        time.sleep(max(0, started + MIN_SAMPLING - time.monotonic()))
        phases["joining"] = (started, time.monotonic())
        idle_started = time.monotonic()
        time.sleep(min(options.idle, BYSTANDER_IDLE))
        phases["waiting"] = (idle_started, time.monotonic())
        released = time.monotonic()
        fcntl.flock(gate_fd, fcntl.LOCK_UN)
        for _ in range(n // 10):
            processes.append(subprocess.Popen(["bash", "-c", "true"], start_new_session=True))
        for process in processes:
            process.wait(timeout=options.timeout)
        result["drain_s"] = time.monotonic() - released
        time.sleep(max(0, released + MIN_SAMPLING - time.monotonic()))
        phases["draining"] = (released, time.monotonic())
    except subprocess.TimeoutExpired:
        result["timed_out"] = "drain"
    finally:
        bystander.stop()
        reclaim.stop()
        kill_all(processes)
        os.close(gate_fd)
        result.update(reclaim.report(bystander.runs))
        result.update(bystander.figures(phases))
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def joined_prelude():
    """lua/prelude/'s files joined in file-name order."""
    directory = os.path.join(ROOT, "lua", "prelude")
    parts = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".lua"):
            with open(os.path.join(directory, name)) as part:
                parts.append(part.read())
    return "".join(parts)


def prelude_text():
    """The prelude as redlock compiles it in: lua/prelude/'s files joined in file-name order,
    each use of a constant written as its value (src/lua_constants.rs, which this follows; the
    benchmarks that replay scripts check their text against the build's SHA-1)."""
    constants = {}
    out = []
    for line in joined_prelude().splitlines(keepends=True):
        defined = re.fullmatch(r"local ([A-Z][A-Z0-9_]*) = ([0-9A-Z_ *+]+)", line.rstrip())
        factors = [[factor.strip() for factor in addend.split(" * ")]
                   for addend in defined.group(2).split(" + ")] if defined else []
        if defined and all(factor.isdigit() or factor in constants
                           for addend in factors for factor in addend):
            if defined.group(1) in constants:
                raise RuntimeError(f"lua/prelude: the constant {defined.group(1)} is defined twice")
            constants[defined.group(1)] = sum(
                math.prod(int(factor) if factor.isdigit() else constants[factor]
                          for factor in addend) for addend in factors)
            out.append(line)
            continue
        # Outside strings and comments, a constant's name that is not a field becomes its value.
        pieces = re.split(r"""(--.*|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")""", line)
        for index in range(0, len(pieces), 2):
            piece = pieces[index]

            def value(match, piece=piece):
                before = piece[:match.start()].rstrip()
                field = before.endswith(":") or (before.endswith(".") and not before.endswith(".."))
                name = match.group(0)
                return str(constants[name]) if name in constants and not field else name
            pieces[index] = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b", value, piece)
        out.append("".join(piece or "" for piece in pieces))
    return "".join(out)


def script_text(name):
    with open(os.path.join(ROOT, "lua", name)) as own:
        return prelude_text() + own.read()


def declared_inputs(text):
    """The key and argument names of a script's `inputs(n, m, {name = KEYS[1], ...}, {...})`
    call, in order."""
    call = text.split("= inputs(", 1)[1]
    lists = re.findall(r"\{([^}]*)\}", call)[:2]
    return [[entry.split("=")[0].strip() for entry in part.split(",") if entry.strip()]
            for part in lists]


def simulate_idle(options, count=10_000):
    """`count` idle waiters on sockets: join, then BLPOP for a third of the entry TTL and one
    script call, in a loop. Returns Redis CPU % per refresh style."""
    entry_ttl_ms = options.entry_ttl_ms
    results = {}
    for style in ("acquire-stay", "refresh"):
        work = tempfile.mkdtemp(prefix="redlock-idle-")
        redis = Redis(work)
        try:
            texts = {name: script_text(name) for name in ("acquire.lua", "refresh.lua")}
            shas = {name: redis.client.call("SCRIPT", "LOAD", text) for name, text in texts.items()}
            names = {name: declared_inputs(text) for name, text in texts.items()}
            base = f"{PREFIX}{{{KEY}}}"
            holder = "f" * 32
            common = {"holders": f"{base}:holders", "leases": f"{base}:leases",
                      "fence": f"{base}:fence", "queue": f"{base}:queue",
                      "waiters": f"{base}:waiters"}

            def acquire_args(waiter, token, stay):
                values = dict(common, wake=f"{base}:wake:{waiter}",
                              cancel=f"{base}:cancel:{token}", history=f"{base}:history",
                              token=token, ttl_ms=600_000, mode="exclusive", limit=0,
                              host="sim", pid=1, user="sim", command="sim", note="",
                              waiter=waiter, stay=stay, entry_ttl_ms=entry_ttl_ms,
                              grant_ms=2000, wake_ttl_ms=5000, reenter=0, claim_ms=0,
                              history_keep="", history_keep_ms="")
                keys, args = names["acquire.lua"]
                return ["EVALSHA", shas["acquire.lua"], len(keys),
                        *[values[k] for k in keys], *[values[a] for a in args]]

            def refresh_args(waiter):
                values = dict(common, waiter=waiter, entry_ttl_ms=entry_ttl_ms)
                keys, args = names["refresh.lua"]
                return ["EVALSHA", shas["refresh.lua"], len(keys),
                        *[values[k] for k in keys], *[values[a] for a in args]]

            redis.client.call(*acquire_args("", holder, 0))
            selector = selectors.DefaultSelector()
            waiters = []
            for i in range(count):
                sock = socket.create_connection(("127.0.0.1", redis.port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
                waiter = {"id": f"{i:016x}", "token": f"{i:032x}", "sock": sock,
                          "reader": Reader(), "state": "script"}
                waiters.append(waiter)
                selector.register(sock, selectors.EVENT_READ, waiter)
                sock.sendall(encode(*acquire_args(waiter["id"], waiter["token"], 0)))
            block = entry_ttl_ms / 3000

            def next_step(waiter):
                if waiter["state"] == "script":
                    waiter["state"] = "blpop"
                    waiter["sock"].sendall(encode("BLPOP", f"{base}:wake:{waiter['id']}",
                                                  f"{block:.3f}"))
                else:
                    waiter["state"] = "script"
                    if style == "refresh":
                        waiter["sock"].sendall(encode(*refresh_args(waiter["id"])))
                    else:
                        waiter["sock"].sendall(
                            encode(*acquire_args(waiter["id"], waiter["token"], 1)))

            def pump(until):
                while time.monotonic() < until:
                    for selected, _ in selector.select(timeout=0.2):
                        waiter = selected.data
                        data = waiter["sock"].recv(65536)
                        if not data:
                            raise ConnectionError("a simulated waiter was disconnected")
                        waiter["reader"].feed(data)
                        while True:
                            try:
                                reply = waiter["reader"].parse()
                            except IndexError:
                                break
                            if isinstance(reply, RuntimeError):
                                raise reply
                            next_step(waiter)

            pump(time.monotonic() + 5)
            queued = redis.client.call("ZCARD", common["queue"])
            before_cpu, started = redis.cpu(), time.monotonic()
            before = redis.commandstats()
            pump(started + options.idle_simulation)
            wall = time.monotonic() - started
            delta = stats_delta(redis.commandstats(), before)
            calls = delta.get("evalsha", (0, 0))
            results[style] = {
                "queued": queued,
                "cpu_pct": 100 * (redis.cpu() - before_cpu) / wall,
                "script_calls_per_s": calls[0] / wall,
                "usec_per_script_call": calls[1] / calls[0] if calls[0] else float("nan"),
                "blpop_per_s": delta.get("blpop", (0, 0))[0] / wall,
                "window_s": wall,
            }
            for waiter in waiters:
                waiter["sock"].close()
        finally:
            redis.stop()
            shutil.rmtree(work, ignore_errors=True)
    return results


def fmt(value, spec):
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return format(value, spec)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redlock", default=DEFAULT_BINARY, help="the redlock binary")
    parser.add_argument("--n", default="10,100,1000,2000", help="waiter counts, comma-separated")
    parser.add_argument("--semaphore", type=int, default=0, help="holders of a semaphore point")
    parser.add_argument("--idle", type=float, default=10, help="idle window, seconds")
    parser.add_argument("--timeout", type=float, default=300, help="bound per point, seconds")
    parser.add_argument("--idle-simulation", type=float, default=0,
                        help="window for 10,000 simulated idle waiters, seconds (0: skip)")
    parser.add_argument("--entry-ttl-ms", type=int, default=120_000,
                        help="QUEUE_ENTRY_TTL of the build, for the simulation")
    parser.add_argument("--json", help="write the raw figures here")
    parser.add_argument("--pin", metavar="SERVER_CPUS:CLIENT_CPUS",
                        help="run redis-server on some CPUs and everything else on others "
                             "(taskset lists, e.g. 1:0), as a server on a host of its own")
    parser.add_argument("--isolate", action="store_true",
                        help="redis-server and the bystanders at real-time priority (chrt -f), "
                             "so neither waits for a CPU behind the waiter processes")
    options = parser.parse_args()
    Redis.realtime = options.isolate
    if options.pin:
        Redis.cpus, clients = options.pin.split(":")
        os.sched_setaffinity(0, {int(cpu) for cpu in clients.split(",")})
    binary = os.path.abspath(options.redlock)
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} not found; build first: cargo build --release")
    for tool in ("redis-server", "bash", "flock"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    results = []
    points = [(int(n), False) for n in options.n.split(",") if n]
    if options.semaphore:
        points.append((options.semaphore, True))
    for n, semaphore in points:
        print(f"N = {n}{' (semaphore)' if semaphore else ''} ...", file=sys.stderr, flush=True)
        result = run_point(binary, n, options, semaphore)
        print(json.dumps(result), file=sys.stderr, flush=True)
        # A second pass of the same workload, with the bystander: commandstats are global, so
        # its calls would blur Redis's figures in the first.
        by = run_point(binary, n, options, semaphore, bystanding=True)
        print(json.dumps(by), file=sys.stderr, flush=True)
        for name in ("bystander_runs", "bystander_p50_ms", "bystander_p99_ms", "ping_p99_ms",
                     "ping_max_ms", "slow_commands", "slowest_ms", "kdamond_cpu_ms_per_s",
                     "kdamond_bursts", "slow_runs", "slow_runs_in_burst", "fast_runs_in_burst",
                     *(f"{who}_{phase}_p99_ms" for who in ("bystander", "ping")
                       for phase in PHASES)):
            result[name] = by.get(name)
        result["with_bystander"] = {name: by.get(name) for name in
                                    ("join_s", "drain_s", "gap_p50_ms", "gap_p99_ms",
                                     "in_queue_order", "overlaps", "exit_codes", "timed_out")}
        results.append(result)
        if semaphore:
            print(f"N = {n} (control: the same commands without redlock) ...", file=sys.stderr,
                  flush=True)
            control = run_control(binary, n, options)
            print(json.dumps(control), file=sys.stderr, flush=True)
            results.append(control)
    simulation = simulate_idle(options) if options.idle_simulation else None
    if simulation:
        print(json.dumps(simulation), file=sys.stderr, flush=True)

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    version = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout.split()[2].removeprefix("v=")
    load = os.getloadavg()
    print(f"Machine: {os.cpu_count()} × {cpu}, Linux {platform.release()}, redis {version}; "
          f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"redlock: {binary}; idle window {options.idle:g} s; "
          + (f"redis-server on CPU {Redis.cpus}, everything else on CPU {options.pin.split(':')[1]}"
             if options.pin else "redis-server and clients share every CPU")
          + ("; redis-server and the bystanders at real-time priority" if options.isolate else "")
          + "\n")
    print("| waiters | Redis µs / script call | round trips / acquisition | Redis commands / "
          "acquisition | idle Redis CPU (script calls / s) | gap p50 / p99 | all joined | drain | bystander "
          "`run` p50 / p99 | bystander `run` p99 joining / waiting / draining | PING p99 / max "
          "| PING p99 joining / waiting / draining | Redis commands > 1 ms (slowest) "
          "| in order, overlaps, exits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if r["kind"] == "control":
            continue
        label = r["n"] if r["kind"] == "exclusive" else \
            f"{r['kind']}: {r['n']} holders + {r['n'] // 10} waiting"
        done = "timed out in " + r["timed_out"] if "timed_out" in r else \
            f"{'yes' if r.get('in_queue_order') else 'no (%d)' % r.get('out_of_order', -1)}, " \
            f"{r.get('overlaps')}, {r.get('exit_codes')}"
        if r["kind"] != "exclusive" and "timed_out" not in r:
            done = f"–, –, {r.get('exit_codes')}"
        print(f"| {label} | {fmt(r.get('usec_per_script_call'), '.0f')} "
              f"| {fmt(r.get('round_trips_per_acquisition'), '.2f')} "
              f"| {fmt(r.get('commands_per_acquisition'), '.1f')} "
              f"| {fmt(r.get('idle_cpu_pct'), '.1f')} % "
              f"({fmt(r.get('idle_script_calls_per_s'), '.0f')}) "
              f"| {fmt(r.get('gap_p50_ms'), '.1f')} / {fmt(r.get('gap_p99_ms'), '.1f')} ms "
              f"| {fmt(r.get('join_s'), '.1f')} s | {fmt(r.get('drain_s'), '.1f')} s "
              f"| {fmt(r.get('bystander_p50_ms'), '.1f')} / {fmt(r.get('bystander_p99_ms'), '.1f')} ms "
              f"| {' / '.join(fmt(r.get(f'bystander_{p}_p99_ms'), '.1f') for p in PHASES)} ms "
              f"| {fmt(r.get('ping_p99_ms'), '.1f')} / {fmt(r.get('ping_max_ms'), '.1f')} ms "
              f"| {' / '.join(fmt(r.get(f'ping_{p}_p99_ms'), '.1f') for p in PHASES)} ms "
              f"| {r.get('slow_commands', '–')} ({fmt(r.get('slowest_ms'), '.1f')} ms) "
              f"| {done} |")
    print("\nThe bystander against the kernel's DAMON threads (kdamond; see `Reclaim`):\n")
    print("| pass | bystander `run` p50 / p99 | p99 joining / waiting / draining | kdamond CPU "
          "| runs > 5 ms: in a kdamond burst | runs ≤ 5 ms: in a burst |")
    print("|---|---|---|---|---|---|")
    for r in results:
        label = {"exclusive": f"{r['n']} waiting",
                 "control": f"control: {r['n']} commands + {r['n'] // 10} without redlock"}.get(
            r["kind"], f"{r['kind']}: {r['n']} holders + {r['n'] // 10} waiting")
        print(f"| {label} "
              f"| {fmt(r.get('bystander_p50_ms'), '.1f')} / {fmt(r.get('bystander_p99_ms'), '.1f')} ms "
              f"| {' / '.join(fmt(r.get(f'bystander_{p}_p99_ms'), '.1f') for p in PHASES)} ms "
              f"| {fmt(r.get('kdamond_cpu_ms_per_s'), '.1f')} ms/s ({r.get('kdamond_bursts', '–')} bursts) "
              f"| {r.get('slow_runs_in_burst', '–')} of {r.get('slow_runs', '–')} "
              f"| {r.get('fast_runs_in_burst', '–')} of "
              f"{(r.get('bystander_runs') or 0) - (r.get('slow_runs') or 0)} |")
    if simulation:
        print("\n| 10,000 simulated idle waiters | Redis CPU | script calls / s | µs / call |")
        print("|---|---|---|---|")
        for style, s in simulation.items():
            print(f"| {style} ({s['queued']} queued, {s['window_s']:.0f} s) | "
                  f"{s['cpu_pct']:.1f} % | {s['script_calls_per_s']:.0f} | "
                  f"{s['usec_per_script_call']:.0f} |")
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"results": results, "simulation": simulation}, out, indent=1)


if __name__ == "__main__":
    main()
