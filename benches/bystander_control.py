#!/usr/bin/env python3
"""Control run for the bystander of benches/queue_scale.py: how much of a bystander's latency
is the machine's process load rather than Redis.

Starts a private redis-server on a free loopback port, then measures a bystander
(`redlock run -q --key bystander -- true` at real-time priority, every 20 ms, --runs times):
  1. alone;
  2. beside N idle processes of --neighbours kind, started 8 s before: `sleep` (processes that
     do nothing), or `redlock` (waiters: `run --wait 600s` queued behind a held lock).
Prints p50 / p99 / max of each. Nothing here asserts; docs/queue-scale.md quotes the figures.

Usage: cargo build --release --target x86_64-unknown-linux-musl
       python3 benches/bystander_control.py [--n 2000] [--neighbours sleep|redlock] [--runs 300]
                                            [--redlock PATH]
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASED = os.path.join(ROOT, "target", "x86_64-unknown-linux-musl", "release", "redlock")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(directory):
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", directory, "--logfile", os.path.join(directory, "log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True,
                         text=True).stdout.strip() != "PONG":
        if time.monotonic() > deadline:
            process.kill()
            sys.exit("redis-server did not start")
        time.sleep(0.02)
    return process, port


def bystander(binary, env, runs):
    latencies = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["chrt", "-f", "10", binary, "run", "-q", "--key", "bystander", "--",
                        "true"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        latencies.append((time.perf_counter() - start) * 1000)
        time.sleep(0.02)
    latencies.sort()
    return (f"p50 {latencies[len(latencies) // 2]:.1f} ms, "
            f"p99 {latencies[int(len(latencies) * 0.99)]:.1f} ms, max {latencies[-1]:.1f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="idle neighbour processes")
    parser.add_argument("--neighbours", choices=("sleep", "redlock"), default="redlock")
    parser.add_argument("--runs", type=int, default=300, help="bystander runs per measurement")
    parser.add_argument("--redlock", default=RELEASED, help="the redlock binary")
    options = parser.parse_args()

    work = tempfile.mkdtemp(prefix="redlock-control-")
    redis, port = start_redis(work)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("REDLOCK_") and key != "REDIS_URL"}
    env["REDLOCK_URL"] = f"redis://127.0.0.1:{port}"
    neighbours = []
    try:
        print(f"alone: {bystander(options.redlock, env, options.runs)}", flush=True)
        subprocess.run([options.redlock, "acquire", "--key", "queue", "--ttl", "600s"], env=env,
                       capture_output=True, check=True)
        for _ in range(options.n):
            command = (["sleep", "600"] if options.neighbours == "sleep" else
                       [options.redlock, "run", "-q", "--wait", "600s", "--key", "queue", "--",
                        "true"])
            neighbours.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL,
                                               start_new_session=True))
        time.sleep(8)
        print(f"beside {options.n} idle {options.neighbours}: "
              f"{bystander(options.redlock, env, options.runs)}", flush=True)
    finally:
        for process in neighbours:
            process.kill()
        for process in neighbours:
            process.wait()
        redis.kill()
        redis.wait()


if __name__ == "__main__":
    main()
