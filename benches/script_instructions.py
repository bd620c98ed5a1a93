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

Two more rows show how low redlock's cycle could go while its data stay what they are (the
floor). Both replay the two EVALSHA calls of the first build's cycle, as captured with MONITOR
(the same keys and arguments, a fresh token each cycle), with other scripts in place of lua/:
  - "inputs alone": scripts that only `return 1`, the cost of passing redlock's keys and
    arguments;
  - "the data's commands alone": scripts that make the commands of an uncontended run cycle
    on a lock with a history (tests/script_calls.rs, row "run -- true") on the same keys, with
    records of the same size, and nothing else: no check of what is there, no ACL question,
    no JSON, no prelude.
With --parts, lua/ replayed (whole; without its ACL questions; its prelude alone) and, on
Redis 7 and later, lua/ as a FUNCTION library called with FCALL (fcall_cycle): what the
prelude's definitions at every call cost, measured rather than estimated.

Usage: cargo build --release --locked --target x86_64-unknown-linux-musl
       python3 benches/script_instructions.py [--redlock PATH ...] [--runs N] [--redis-server PATH] [--no-floor] [--parts]
Prints a Markdown table. Needs valgrind. A run of the defaults takes about two minutes.
"""

import argparse
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queue_scale import Client, free_port, prelude_text  # noqa: E402
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


# The uncontended run cycle's commands (tests/script_calls.rs, "run -- true: acquire and
# release, a lock with a history"), on the keys of acquire.lua's inputs in their order (holders,
# leases, fence, queue, waiters, wake, cancel, history), with the same records redlock writes.
FLOOR_ACQUIRE = """
local time = redis.call('TIME')
local now, fence = time[1] .. string.sub(time[2], 1, 3), time[1] .. time[2]
redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4], KEYS[5])
redis.call('GET', KEYS[3])
redis.call('ZCARD', KEYS[8])
redis.call('ZRANGE', KEYS[8], -1, -1)
redis.call('GET', KEYS[7])
redis.call('SET', KEYS[3], fence)
local record = '{"tok":"' .. ARGV[1] .. '","mode":"exclusive","since":' .. now .. ',"exp":' ..
  now .. ',"fence":"' .. fence .. '","host":"vm","pid":32079,"user":"root","cmd":"true","ttl":30000}'
redis.call('HSET', KEYS[1], ARGV[1], record)
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], now + 30000)
redis.call('PEXPIREAT', KEYS[2], now + 30000)
redis.call('ZADD', KEYS[8], fence, record)
redis.call('PEXPIRE', KEYS[8], 2592000000)
return {1, fence, now}
"""
FLOOR_RELEASE = """
local time = redis.call('TIME')
redis.call('EXISTS', KEYS[4], KEYS[5])
redis.call('HLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('ZCARD', KEYS[8])
local record = redis.call('HGET', KEYS[1], ARGV[2]) or '{}'
local oldest = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', '+inf', 'LIMIT', 0, 1)
if oldest[1] then redis.call('ZREM', KEYS[8], oldest[1]) end
redis.call('ZADD', KEYS[8], time[1] .. time[2],
  string.sub(record, 1, -2) .. ',"ended":' .. time[1] .. ',"outcome":"released","exit":0}')
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PEXPIRE', KEYS[8], 2592000000)
return 1
"""


def captured_calls(binary, server):
    """The two EVALSHA calls (numkeys and what follows) of one `run -- true` cycle of `binary`,
    on a lock with a history, as MONITOR shows them; the token in them; and the two scripts'
    SHA-1s."""
    with tempfile.TemporaryDirectory(prefix="redlock-capture-") as workdir:
        port = free_port()
        process = subprocess.Popen(
            [server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            connect(port).close()
            cycle = redlock_cycle(binary)
            cycle(port)
            monitor = subprocess.Popen(["redis-cli", "-p", str(port), "MONITOR"],
                                       stdout=subprocess.PIPE, text=True)
            try:
                if monitor.stdout.readline().strip() != "OK":
                    raise RuntimeError("redis-cli MONITOR did not start")
                cycle(port)
                calls, shas = [], []
                while len(calls) < 2:
                    line = monitor.stdout.readline()
                    if not line:
                        raise RuntimeError("MONITOR ended before the cycle's two EVALSHA")
                    words = shlex.split(line.split("]", 1)[1])
                    if words[0].upper() == "EVALSHA":
                        calls.append(words[2:])
                        shas.append(words[1])
            finally:
                monitor.kill()
                monitor.wait()
        finally:
            process.kill()
            process.wait()
    acquire = calls[0]
    token = acquire[1 + int(acquire[0])]
    if not re.fullmatch(r"[0-9a-f]{32}", token):
        raise RuntimeError(f"acquire's first argument is not a token: {token!r}")
    return calls, token, shas


def replay_cycle(calls, token, acquire_text, release_text):
    """A cycle on a fresh connection that makes `calls` (captured_calls) with these scripts."""
    shas = {}

    def cycle(port):
        client = Client(port)
        try:
            if port not in shas:
                shas[port] = [client.call("SCRIPT", "LOAD", text)
                              for text in (acquire_text, release_text)]
            fresh = uuid.uuid4().hex
            for sha, call in zip(shas[port], calls):
                client.call("EVALSHA", sha, *[word.replace(token, fresh) for word in call])
        finally:
            client.close()
    return cycle


def fcall_cycle(calls, token, verify=False):
    """A cycle like replay_cycle's, with lua/ loaded as a Redis 7 FUNCTION library instead
    (FUNCTION LOAD once, then FCALL): the prelude at the library's top level, run once when
    it loads, and acquire.lua's and release.lua's own files as its two functions. What the
    prelude does at the top level of a script and cannot do while a library loads is left
    out (the server version check, redis.replicate_commands: neither makes a difference to
    Redis 7), and the calls' key and argument counts are not checked; the rest runs as
    written. `verify`: each connection first reads the library's code back (FUNCTION LIST
    LIBRARYNAME ... WITHCODE), as a client that checks what it is about to call would."""
    prelude = prelude_text()
    start = prelude.index("if redis.setresp == nil then")
    replicate = "if redis.replicate_commands then redis.replicate_commands() end"
    end = prelude.index(replicate) + len(replicate)
    prelude = (prelude[:start] + prelude[end:]).replace(
        "if #KEYS ~= key_count or #ARGV ~= arg_count then", "if false then").replace(
        "local acl_check_cmd = redis.acl_check_cmd", "local acl_check_cmd")
    lua = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lua")
    functions = ""
    for name in ("acquire", "release"):
        with open(os.path.join(lua, name + ".lua")) as own:
            # (KEYS and ARGV as the function's parameters; the ACL function read per call, as
            # a script reads it.)
            functions += (f"\nredis.register_function('redlock_bench_{name}', function(KEYS, ARGV)\n"
                          f"acl_check_cmd = redis.acl_check_cmd\n{own.read()}\nend)\n")
    library = "#!lua name=redlock_bench\n" + prelude + functions
    loaded = set()

    def cycle(port):
        client = Client(port)
        try:
            if port not in loaded:
                client.call("FUNCTION", "LOAD", "REPLACE", library)
                loaded.add(port)
            if verify:
                client.call("FUNCTION", "LIST", "LIBRARYNAME", "redlock_bench", "WITHCODE")
            fresh = uuid.uuid4().hex
            for name, call in zip(("redlock_bench_acquire", "redlock_bench_release"), calls):
                client.call("FCALL", name, *[word.replace(token, fresh) for word in call])
        finally:
            client.close()
    return cycle


def lua_texts(transform=lambda text: text, body=None):
    """acquire.lua's and release.lua's texts as redlock sends them (the prelude first), each
    file through `transform`; or the prelude followed by `body`."""
    lua = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lua")

    def read(name):
        with open(os.path.join(lua, name)) as file:
            return transform(file.read())
    prelude = transform(prelude_text())
    if body is not None:
        return prelude + body, prelude + body
    return prelude + read("acquire.lua"), prelude + read("release.lua")


def without_acl(text):
    return text.replace("redis.acl_check_cmd", "NO_ACL_CHECK").replace(
        "-- prelude:", "local NO_ACL_CHECK = nil\n-- prelude:", 1)


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
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the two floor rows (the first build's calls replayed)")
    parser.add_argument("--parts", action="store_true",
                        help="also replay lua/ whole, without ACL questions, its prelude alone, and "
                        "(Redis 7 and later) as a FUNCTION library")
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
        if not args.no_floor:
            calls, token, shas = captured_calls(builds[0], args.redis_server)
            if args.parts and [hashlib.sha1(text.encode()).hexdigest() for text in lua_texts()] != shas:
                print(f"  note: lua/ as replayed is not the text {builds[0]} sends (built from "
                      "another lua/?)", file=sys.stderr, flush=True)
            for name, texts in [
                    ("inputs alone: the same two calls, scripts that `return 1`",
                     ("return 1", "return 1")),
                    ("the data's commands alone (the floor)", (FLOOR_ACQUIRE, FLOOR_RELEASE)),
                    *([("lua/ replayed", lua_texts()),
                       ("lua/ replayed, no ACL questions", lua_texts(without_acl)),
                       ("lua/'s prelude alone, then `return 1`", lua_texts(body="\nreturn 1"))]
                      if args.parts else [])]:
                cycle = lambda texts=texts: replay_cycle(calls, token, *texts)
                base = server_instructions(args.redis_server, cycle(), 0, workdir)
                total = server_instructions(args.redis_server, cycle(), args.runs, workdir)
                rows.insert(len(rows) - len(builds), (name, (total - base) / args.runs))
                print(f"  {name}: {(total - base) / args.runs:,.0f}", file=sys.stderr, flush=True)
            for verify, name in [
                    (False, "lua/ as a FUNCTION library, called with FCALL (not what redlock does)"),
                    (True, "the same, each connection reading the library's code back first")]:
                if not (args.parts and re.search(r"v=([7-9]|\d\d)\.", version)):
                    break
                cycle = lambda verify=verify: fcall_cycle(calls, token, verify)
                base = server_instructions(args.redis_server, cycle(), 0, workdir)
                total = server_instructions(args.redis_server, cycle(), args.runs, workdir)
                rows.insert(len(rows) - len(builds), (name, (total - base) / args.runs))
                print(f"  {name}: {(total - base) / args.runs:,.0f}", file=sys.stderr, flush=True)
    seed = rows[0][1]
    print(f"\n{version}; {args.runs} measured cycles after {WARM_UP} warm-up cycles each, "
          "a fresh connection per cycle.\n")
    print("| cycle | server instructions per cycle | / seed's |")
    print("|---|---|---|")
    for name, instructions in rows:
        print(f"| {name} | {instructions:,.0f} | {instructions / seed:.1f}× |")


if __name__ == "__main__":
    main()
