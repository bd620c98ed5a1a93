#!/usr/bin/env python3
"""The server's instructions per uncontended `redlock run -- true` cycle, beside the seed scripts'.

benches/script_cost.py reads Redis's own microseconds, which move with everything else the
machine does (a script preempted halfway counts the wait). This counts the instructions the
server executes instead, with valgrind's callgrind: the same total for the same binaries and
inputs whatever else runs, so two builds (or two versions of lua/) compare exactly. For each
build given, and for the seed (the same scripts as script_cost.py's, each cycle on a fresh
connection: connect, EVALSHA acquire, EVALSHA release, close), it starts a private
redis-server under callgrind twice, each time with --warm-up cycles first (so the lock's
history is full and the scripts are cached), then 0 or --runs measured cycles, and reports
(total of the second - total of the first) / --runs: what one cycle costs the server, its
connection's accept and close included. Nothing here asserts.

Usage: cargo build --release --locked --target x86_64-unknown-linux-musl
       python3 benches/script_instructions.py [--redlock PATH ...] [--runs N] [--redis-server PATH]
Prints a Markdown table. Needs valgrind. A run of the defaults takes about two minutes.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queue_scale import Client, free_port  # noqa: E402
from script_cost import RELEASED, SEED_ACQUIRE, SEED_RELEASE, SEED_TTL_MS  # noqa: E402

WARM_UP = 110


def connect(port, deadline=60.0):
    """A connection to the server at `port`, once it listens (under valgrind it starts slowly)."""
    started = time.monotonic()
    while True:
        try:
            return Client(port)
        except OSError:
            if time.monotonic() - started > deadline:
                raise
            time.sleep(0.1)


def server_instructions(server, cycle, cycles, workdir):
    """Instructions of a callgrind'ed redis-server that ran WARM_UP + `cycles` cycles."""
    port, out = free_port(), os.path.join(workdir, "callgrind.out")
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", server,
         "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        control = connect(port)
        for _ in range(WARM_UP + cycles):
            cycle(port)
        try:
            control.call("SHUTDOWN", "NOSAVE")
        except (ConnectionError, RuntimeError, OSError):
            pass
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with open(out) as profile:
        text = profile.read()
    found = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if not found:
        raise RuntimeError(f"no total in {out}")
    return int(found.group(1))


def redlock_cycle(binary):
    def cycle(port):
        done = subprocess.run(
            [binary, "run", "--key", "bench", "--", "true"],
            env=dict(os.environ, REDLOCK_URL=f"redis://127.0.0.1:{port}"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{binary} run exited {done.returncode}: {done.stderr.decode()}")
    return cycle


def seed_cycle():
    shas = {}

    def cycle(port):
        client = Client(port)
        try:
            if port not in shas:
                shas[port] = (client.call("SCRIPT", "LOAD", SEED_ACQUIRE),
                              client.call("SCRIPT", "LOAD", SEED_RELEASE))
            acquire, release = shas[port]
            client.call("EVALSHA", acquire, 1, "seedlock", "token", SEED_TTL_MS)
            client.call("EVALSHA", release, 1, "seedlock", "token")
        finally:
            client.close()
    return cycle


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redlock", action="append", help="a build to measure (repeatable)")
    parser.add_argument("--runs", type=int, default=50, help="measured cycles per build")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    args = parser.parse_args()
    builds = args.redlock or [RELEASED]
    if not shutil.which("valgrind"):
        sys.exit("script_instructions: valgrind is needed (Debian's valgrind package)")
    version = subprocess.run([args.redis_server, "--version"], capture_output=True,
                             text=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="redlock-instructions-") as workdir:
        for name, cycle in [("seed scripts (SET NX PX, GET + DEL)", seed_cycle)] + [
                (f"`redlock run -- true` ({build})", lambda build=build: redlock_cycle(build))
                for build in builds]:
            base = server_instructions(args.redis_server, cycle(), 0, workdir)
            total = server_instructions(args.redis_server, cycle(), args.runs, workdir)
            rows.append((name, (total - base) / args.runs))
            print(f"  {name}: {rows[-1][1]:,.0f}", file=sys.stderr, flush=True)
    seed = rows[0][1]
    print(f"\n{version}; {args.runs} measured cycles after {WARM_UP} warm-up cycles each, "
          "a fresh connection per cycle.\n")
    print("| cycle | server instructions per cycle | / seed's |")
    print("|---|---|---|")
    for name, instructions in rows:
        print(f"| {name} | {instructions:,.0f} | {instructions / seed:.1f}× |")


if __name__ == "__main__":
    main()
