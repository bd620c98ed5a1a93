#!/usr/bin/env python3
"""Quorum mode (docs/servers.md, "Several masters") beside a single master, with flock(1) as the
yardstick, all measured in the same run on the same machine.

Starts 5 private redis-servers on free loopback ports and measures redlock against one of
them, against 3 and against all 5 (quorum mode), with the harness of flock_vs_redlock.py:
  1. uncontended overhead: median wall time of `redlock run -- true` minus that of bare
     `true`, the configurations interleaved run by run (flock(1) too);
  2. hand-off gap with 8 workers x 25 iterations, each child holding the lock 10 ms, p50/p99;
  3. Redis commands per contended acquisition, release included, on each master (INFO
     commandstats);
  4. CPU time (user + system) of redlock itself per uncontended run, and of all the
     redis-servers together: on a machine with fewer cores than masters, the servers' work
     cannot overlap, whatever the client does in parallel;
  5. the same uncontended run with every master behind a proxy that delays each chunk by
     --delay-ms each way, as masters on other hosts are (a process per proxy, one thread
     each, so that accepting a connection costs the proxy no thread start): the overhead, its
     ratio to the single master's, and the round trips it takes (the extra wall time over
     loopback, in round trips). Where the network, not the local CPU, is the cost, this shows
     whether the masters are asked in parallel: N masters asked in turn would take N times the
     single master's round trips.

Usage: cargo build --release --target x86_64-unknown-linux-musl
       python3 benches/quorum.py [--runs N] [--redlock PATH] [--delay-ms D] [--delay-runs M]
Prints a Markdown table; nothing here asserts. docs/performance.md quotes it with its date.
"""

import argparse
import heapq
import os
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flock_vs_redlock import (RELEASED, WORKERS, ITERATIONS, HOLD, Redis,  # noqa: E402
                              median_ms, handoff_gaps, percentile, print_machine)

COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_blpop", "cmdstat_script|load",
            "cmdstat_subscribe")


def proxy_main(target_port, delay):
    """A loopback proxy to `target_port` that delays every chunk by `delay` seconds each way,
    order kept; prints its port, then serves until its standard input closes (the benchmark
    ends)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ, "accept")
    events.register(sys.stdin, selectors.EVENT_READ, "stop")
    pending = []  # (due, sequence, sink, data): chunks on their way
    sequence = 0
    while True:
        timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else None
        for key, _ in events.select(timeout):
            if key.data == "stop":
                return
            if key.data == "accept":
                client, _ = listener.accept()
                server = socket.create_connection(("127.0.0.1", target_port))
                for a, b in ((client, server), (server, client)):
                    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    events.register(a, selectors.EVENT_READ, b)
                continue
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            if not data:
                events.unregister(key.fileobj)
            sequence += 1
            heapq.heappush(pending, (time.monotonic() + delay, sequence, key.data, data))
        while pending and pending[0][0] <= time.monotonic():
            _, _, sink, data = heapq.heappop(pending)
            try:
                if data:
                    sink.sendall(data)
                else:
                    sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass


class Proxy:
    """proxy_main in a process of its own."""

    def __init__(self, target_port, delay):
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--proxy", str(target_port), str(delay)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def stop(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def key_of(count):
    """The lock each configuration takes: one of its own. The configurations share servers
    (the single master is the first of the quorums), and a key one configuration used would
    reach the next with its fence counters out of step: each acquisition would then write the
    fence back, a round quorum mode makes only when the masters disagree (docs/safety.md, "Fences
    over a quorum"), which masters used by one quorum alone do not."""
    return f"bench-{count}"


def calls(server):
    stats = server.cli("INFO", "commandstats")
    return sum(int(line.split("calls=")[1].split(",")[0]) for line in stats.splitlines()
               if line.split(":")[0] in COMMANDS)


def server_cpu(server):
    info = dict(line.split(":", 1) for line in server.cli("INFO", "cpu").splitlines()
                if ":" in line)
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per overhead median")
    parser.add_argument("--redlock", default=RELEASED, help="the redlock binary to measure")
    parser.add_argument("--delay-ms", type=float, default=5.0,
                        help="one-way delay of the proxies in front of the masters (measure 5)")
    parser.add_argument("--delay-runs", type=int, default=30,
                        help="runs per median behind the proxies")
    options = parser.parse_args()
    redlock = options.redlock
    if not os.access(redlock, os.X_OK):
        sys.exit(f"{redlock} not found; build first: "
                 "cargo build --release --target x86_64-unknown-linux-musl")
    work = tempfile.mkdtemp(prefix="redlock-quorum-bench-")
    servers = []
    for index in range(5):
        directory = os.path.join(work, str(index))
        os.mkdir(directory)
        servers.append(Redis(directory))
    base = {key: value for key, value in os.environ.items()
            if not key.startswith("REDLOCK_") and key != "REDIS_URL"}
    configs = {"single master": 1, "quorum of 3": 3, "quorum of 5": 5}
    envs = {}
    for name, count in configs.items():
        env = dict(base)
        env["REDLOCK_URL"] = " ".join(f"redis://127.0.0.1:{s.port}" for s in servers[:count])
        envs[name] = env
    lockfile = os.path.join(work, "flock")
    try:
        # One env for the interleaved medians: each command names its own URLs.
        commands = [["true"], ["flock", lockfile, "true"]]
        for name, count in configs.items():
            urls = []
            for server in servers[:count]:
                urls += ["--redis", f"redis://127.0.0.1:{server.port}"]
            commands.append([redlock, *urls, "run", "--key", key_of(count), "--", "true"])
        medians = median_ms(commands, options.runs, base)
        bare, flock_total, totals = medians[0], medians[1], medians[2:]
        cpu_runs = 100
        cpu_times = []
        for command, count in zip(commands[2:], configs.values()):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            servers_before = sum(server_cpu(server) for server in servers[:count])
            for _ in range(cpu_runs):
                subprocess.run(command, env=base, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            servers_after = sum(server_cpu(server) for server in servers[:count])
            own = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            cpu_times.append((own / cpu_runs * 1000, (servers_after - servers_before) / cpu_runs * 1000))

        # 5. Behind delaying proxies, one per master; the configurations interleaved.
        proxies = [Proxy(server.port, options.delay_ms / 1000) for server in servers]
        delayed_commands = [["true"]]
        for count in configs.values():
            urls = []
            for proxy in proxies[:count]:
                urls += ["--redis", f"redis://127.0.0.1:{proxy.port}"]
            delayed_commands.append([redlock, *urls, "run", "--key", key_of(count), "--",
                                     "true"])
        delayed = median_ms(delayed_commands, options.delay_runs, base)
        for proxy in proxies:
            proxy.stop()
        delayed_bare, delayed_totals = delayed[0], delayed[1:]

        def child(log):
            return ["sh", "-c", f'echo "$(date +%s%N) start" >> {log}; sleep {HOLD}; '
                                f'echo "$(date +%s%N) end" >> {log}']

        log = os.path.join(work, "gaps.log")
        results = {}
        flock_gaps = handoff_gaps(["flock", lockfile, *child(log)], log, base)
        for name, count in configs.items():
            for server in servers:
                server.cli("CONFIG", "RESETSTAT")
            gaps = handoff_gaps(
                [redlock, "run", "-q", "--key", key_of(count), "--wait", "60s", "--",
                 *child(log)],
                log, envs[name])
            per_master = [calls(server) / (WORKERS * ITERATIONS) for server in servers[:count]]
            results[name] = (gaps, per_master)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print_machine(redlock)
    print(f"Overhead: median of {options.runs} runs; hand-off: {WORKERS} workers × "
          f"{ITERATIONS}, child holds {float(HOLD) * 1000:.0f} ms\n")
    flock_over = flock_total - bare
    single_over = totals[0] - bare
    print("| measure | flock(1) | " + " | ".join(configs) + " |")
    print("|---|---|" + "---|" * len(configs))
    print(f"| uncontended overhead over bare `true` | {flock_over:.2f} ms | "
          + " | ".join(f"{t - bare:.2f} ms" for t in totals) + " |")
    print("| ... / single master's | – | "
          + " | ".join(f"{(t - bare) / single_over:.2f}×" for t in totals) + " |")
    print("| ... / flock's | 1.00× | "
          + " | ".join(f"{(t - bare) / flock_over:.2f}×" for t in totals) + " |")
    print("| CPU per uncontended run: redlock (user + system) | – | "
          + " | ".join(f"{own:.2f} ms" for own, _ in cpu_times) + " |")
    print("| CPU per uncontended run: the redis-servers, together | – | "
          + " | ".join(f"{servers:.2f} ms" for _, servers in cpu_times) + " |")
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        print(f"| hand-off gap {label} | {percentile(flock_gaps, fraction):.2f} ms | "
              + " | ".join(f"{percentile(results[n][0], fraction):.2f} ms" for n in configs)
              + " |")
    rtt = 2 * options.delay_ms
    delayed_single = delayed_totals[0] - delayed_bare
    print(f"| uncontended overhead, masters behind a {rtt:g} ms round trip | – | "
          + " | ".join(f"{t - delayed_bare:.2f} ms" for t in delayed_totals) + " |")
    print("| ... / single master's | – | "
          + " | ".join(f"{(t - delayed_bare) / delayed_single:.2f}×" for t in delayed_totals)
          + " |")
    print("| ... round trips (extra wall time over loopback / round trip) | – | "
          + " | ".join(f"{((d - delayed_bare) - (t - bare)) / rtt:.2f}"
                       for d, t in zip(delayed_totals, totals)) + " |")
    print("| Redis commands per contended acquisition, on each master (mean) | – | "
          + " | ".join(f"{sum(results[n][1]) / len(results[n][1]):.2f}" for n in configs)
          + " |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--proxy":
        proxy_main(int(sys.argv[2]), float(sys.argv[3]))
    else:
        main()
