#!/usr/bin/env python3
"""Benchmark redlock against flock(1), measured in the same run on the same machine.

Starts a private redis-server on a free loopback port and measures, for both tools:
  1. uncontended overhead: median wall time of `TOOL -- true` minus that of bare `true`;
  2. hand-off gap with 8 workers x 25 iterations, each child holding the lock 10 ms:
     p50 / p99 of (next holder's start - previous holder's end), logged by the children;
  3. Redis round trips per contended acquisition (redlock only: INFO commandstats);
  4. peak RSS (VmHWM) of the wrapper process while its child runs.

The machine's speed drifts over seconds (other tenants of a VM, frequency), so the tools are
measured in alternation: the overhead runs interleave bare / flock / redlock, and the hand-off
runs alternate flock and redlock for --rounds rounds, pooling the gaps of each tool.

Usage: cargo build --release --target x86_64-unknown-linux-musl
       python3 benches/flock_vs_redlock.py [--runs N] [--rounds N] [--redlock PATH]
Measures the static musl build (the one released; docs/development.md, "Building") unless --redlock names
another binary. Prints a Markdown table. Nothing here asserts; the numbers go into the README.
"""

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASED = os.path.join(ROOT, "target", "x86_64-unknown-linux-musl", "release", "redlock")
WORKERS, ITERATIONS, HOLD = 8, 25, "0.01"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, directory):
        self.port = free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", directory, "--logfile", os.path.join(directory, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while self.cli("PING") != "PONG":
            if time.monotonic() > deadline:
                sys.exit("redis-server did not start")
            time.sleep(0.02)

    def cli(self, *args):
        result = subprocess.run(["redis-cli", "-p", str(self.port), *args],
                                capture_output=True, text=True)
        return result.stdout.strip()

    def stop(self):
        self.process.kill()
        self.process.wait()


def median_ms(commands, runs, env):
    """Median wall time in ms of each command, the commands run in turn `runs` times."""
    times = [[] for _ in commands]
    for _ in range(runs):
        for i, command in enumerate(commands):
            start = time.perf_counter_ns()
            subprocess.run(command, env=env, check=True)
            times[i].append((time.perf_counter_ns() - start) / 1e6)
    return [statistics.median(t) for t in times]


def handoff_gaps(worker_command, log, env):
    """Runs WORKERS loops of ITERATIONS each; returns gaps in ms between holders."""
    def loop():
        for _ in range(ITERATIONS):
            subprocess.run(worker_command, env=env, check=True)

    threads = [threading.Thread(target=loop) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = sorted((int(t), what) for t, what in
                    (line.split() for line in open(log).read().splitlines()))
    os.unlink(log)
    assert len(events) == 2 * WORKERS * ITERATIONS, "not every iteration ran"
    gaps, last_end, inside = [], None, 0
    for t, what in events:
        inside += 1 if what == "start" else -1
        assert inside in (0, 1), "overlapping holders"
        if what == "start" and last_end is not None:
            gaps.append((t - last_end) / 1e6)
        if what == "end":
            last_end = t
    return gaps


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def peak_rss_kib(command, env):
    """VmHWM of the wrapper, read while its child sleeps."""
    process = subprocess.Popen(command, env=env)
    time.sleep(0.6)
    with open(f"/proc/{process.pid}/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    process.wait()
    return peak


def print_machine(redlock_binary):
    """The lines that say what was measured, where."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    version = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout.split()[2].removeprefix("v=")
    print(f"Machine: {os.cpu_count()} × {cpu}, Linux {platform.release()}, redis {version}")
    print(f"redlock: {os.path.relpath(redlock_binary, ROOT)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per overhead median")
    parser.add_argument("--rounds", type=int, default=3, help="hand-off rounds per tool")
    parser.add_argument("--redlock", default=RELEASED, help="the redlock binary to measure")
    options = parser.parse_args()
    runs, rounds, redlock_binary = options.runs, options.rounds, options.redlock
    if not os.access(redlock_binary, os.X_OK):
        sys.exit(f"{redlock_binary} not found; build first: "
                 "cargo build --release --target x86_64-unknown-linux-musl")
    for tool in ("flock", "redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found")

    work = tempfile.mkdtemp(prefix="redlock-bench-")
    redis = Redis(work)
    # Only the private server: nothing may fall back to a Redis on the default port.
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("REDLOCK_") and key != "REDIS_URL"}
    env["REDLOCK_URL"] = f"redis://127.0.0.1:{redis.port}"
    lockfile = os.path.join(work, "flock")
    try:
        bare, flock_total, redlock_total = median_ms(
            [["true"], ["flock", lockfile, "true"],
             [redlock_binary, "run", "--key", "bench", "--", "true"]], runs, env)

        def child(log):
            return ["sh", "-c", f'echo "$(date +%s%N) start" >> {log}; sleep {HOLD}; '
                                f'echo "$(date +%s%N) end" >> {log}']

        log = os.path.join(work, "gaps.log")
        flock_gaps, redlock_gaps, sent = [], [], 0
        for _ in range(rounds):
            flock_gaps += handoff_gaps(["flock", lockfile, *child(log)], log, env)
            redis.cli("CONFIG", "RESETSTAT")
            redlock_gaps += handoff_gaps(
                [redlock_binary, "run", "-q", "--key", "bench", "--wait", "60s", "--", *child(log)],
                log, env)
            stats = redis.cli("INFO", "commandstats")
            sent += sum(int(line.split("calls=")[1].split(",")[0])
                        for line in stats.splitlines()
                        if line.split(":")[0] in ("cmdstat_evalsha", "cmdstat_eval",
                                                  "cmdstat_blpop", "cmdstat_script|load"))
        per_acquisition = sent / (rounds * WORKERS * ITERATIONS)

        flock_rss = peak_rss_kib(["flock", lockfile, "sleep", "1"], env)
        redlock_rss = peak_rss_kib([redlock_binary, "run", "--key", "rss", "--", "sleep", "1"], env)
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)

    flock_over, redlock_over = flock_total - bare, redlock_total - bare
    print_machine(redlock_binary)
    print(f"Overhead: median of {runs} runs; hand-off: {rounds} rounds of {WORKERS} workers × "
          f"{ITERATIONS}, child holds {float(HOLD) * 1000:.0f} ms\n")
    print("| measure | flock(1) | redlock | redlock / flock |")
    print("|---|---|---|---|")
    print(f"| uncontended overhead over bare `true` | {flock_over:.2f} ms | {redlock_over:.2f} ms "
          f"| {redlock_over / flock_over:.2f}× |")
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        f, r = percentile(flock_gaps, fraction), percentile(redlock_gaps, fraction)
        print(f"| hand-off gap {name} | {f:.2f} ms | {r:.2f} ms | {r / f:.2f}× |")
    # Every acquisition ends in one release; the rest is the acquirer's own path.
    print(f"| Redis round trips per contended acquisition (join, wake-ups) | – "
          f"| {per_acquisition - 1:.2f} | – |")
    print(f"| Redis commands per contended acquisition, release included | – "
          f"| {per_acquisition:.2f} | – |")
    print(f"| peak RSS of the wrapper | {flock_rss / 1024:.1f} MiB | {redlock_rss / 1024:.1f} MiB "
          f"| {redlock_rss / flock_rss:.2f}× |")


if __name__ == "__main__":
    main()
