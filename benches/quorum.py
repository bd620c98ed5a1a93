#!/usr/bin/env python3
"""Quorum mode (README, "Several masters") beside a single master, with flock(1) as the
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
     cannot overlap, whatever the client does in parallel.

Usage: cargo build --release --target x86_64-unknown-linux-musl
       python3 benches/quorum.py [--runs N] [--redlock PATH]
Prints a Markdown table; nothing here asserts. docs/performance.md quotes it with its date.
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flock_vs_redlock import (RELEASED, WORKERS, ITERATIONS, HOLD, Redis,  # noqa: E402
                              median_ms, handoff_gaps, percentile, print_machine)

COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_blpop", "cmdstat_script|load",
            "cmdstat_subscribe")


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
            commands.append([redlock, *urls, "run", "--key", "bench", "--", "true"])
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
                [redlock, "run", "-q", "--key", "bench", "--wait", "60s", "--", *child(log)],
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
    print("| Redis commands per contended acquisition, on each master (mean) | – | "
          + " | ".join(f"{sum(results[n][1]) / len(results[n][1]):.2f}" for n in configs)
          + " |")


if __name__ == "__main__":
    main()
