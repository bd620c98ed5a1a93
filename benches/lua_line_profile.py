#!/usr/bin/env python3
"""Where a run cycle's script time goes, line by line of lua/: CPU cycles per line and per
function of the acquire and release calls of an uncontended `redlock run -- true`.

script_instructions.py counts the server's instructions per cycle, exactly, but callgrind sees
only C functions: the Lua interpreter, cjson, the commands. This attributes time to the lines
of lua/ instead. It replays the cycle's two EVALSHA calls (captured with MONITOR, as
script_instructions.py does, a fresh token each cycle, the lock's history full) against a
redis-server built with benches/lua_line_profile.patch: the patch adds redis.prof_start(n),
which installs a line hook that reads the time-stamp counter at each new line and adds the
cycles since the last one to the line that was running (a command's or cjson's time to the line
that called it), and redis.prof_dump(). The replayed scripts are lua/'s with
`redis.prof_start(n) ` put before their first line (line numbers unchanged).

The hook costs time at every line event, which lands on the line before it: a line run many
times (a loop's) is inflated by its count (the `runs` column), one run once (a command, an
encode) is not. Compare lines with each other and builds with each other, not with
script_instructions.py's totals. Nothing here asserts.

Usage: apt-get source redis   # Debian 12: 7.0.15 (a deb-src line for bookworm-security)
       cd redis-7.0.15 && patch -p1 < .../benches/lua_line_profile.patch
       make -j2 BUILD_TLS=no USE_SYSTEMD=no MALLOC=libc redis-server
       python3 benches/lua_line_profile.py --redis-server redis-7.0.15/src/redis-server \\
           [--redlock BINARY] [--cycles N] [--share PERCENT]
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queue_scale import Client, free_port, joined_prelude  # noqa: E402
from script_instructions import WARM_UP, captured_calls, connect, lua_texts, replay_cycle  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPTS = ("acquire.lua", "release.lua")


def profile(server, binary, cycles):
    """{(script, line): (cycles, runs)} per call, over `cycles` replayed run cycles."""
    calls, token, _ = captured_calls(binary, server)
    texts = [f"redis.prof_start({n}) " + text for n, text in enumerate(lua_texts())]
    with tempfile.TemporaryDirectory(prefix="redlock-profile-") as workdir:
        port = free_port()
        process = subprocess.Popen(
            [server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            connect(port).close()
            cycle = replay_cycle(calls, token, *texts)
            for _ in range(WARM_UP):
                cycle(port)
            client = Client(port)
            if client.call("EVAL", "return type(redis.prof_dump)", 0) not in ("function", b"function"):
                raise RuntimeError(f"{server} is not built with benches/lua_line_profile.patch")
            client.close()
            for _ in range(cycles):
                cycle(port)
            client = Client(port)
            rows = client.call("EVAL", "return redis.prof_dump()", 0)
            client.close()
        finally:
            process.kill()
            process.wait()
    lines = {}
    for row in rows:
        script, line, spent, runs = (row.decode() if isinstance(row, bytes) else row).split()
        lines[(int(script), int(line))] = (float(spent) / cycles, float(runs) / cycles)
    return lines


def places():
    """For each line of each script as sent (the prelude's files, then the script's own): its
    file, its line there, and the function it is in."""
    files = []
    directory = os.path.join(ROOT, "lua", "prelude")
    for name in sorted(os.listdir(directory)):
        if name.endswith(".lua"):
            with open(os.path.join(directory, name)) as part:
                files.append((f"prelude/{name}", part.read().splitlines()))
    if "".join("\n".join(text) + "\n" for _, text in files) != joined_prelude():
        raise RuntimeError("lua/prelude/'s files do not join to the prelude")
    out = []
    for script in SCRIPTS:
        with open(os.path.join(ROOT, "lua", script)) as own:
            sent = files + [(script, own.read().splitlines())]
        table, function = [None], "(top level)"
        for name, text in sent:
            for number, line in enumerate(text, 1):
                defined = re.match(r"(?:local )?function ([\w.:]+)", line)
                if defined:
                    function = defined.group(1)
                elif re.match(r"[^\s-]", line) and not re.match(r"(end|}|\))\b", line):
                    function = "(top level)"
                table.append((name, number, function, line.strip()))
        out.append(table)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-server", required=True,
                        help="a redis-server built with benches/lua_line_profile.patch")
    parser.add_argument("--redlock", default=os.path.join(
        ROOT, "target", "x86_64-unknown-linux-musl", "release", "redlock"))
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--share", type=float, default=0.7,
                        help="show lines and functions with at least this percentage of a call")
    args = parser.parse_args()
    lines = profile(args.redis_server, args.redlock, args.cycles)
    where = places()
    print(f"`benches/lua_line_profile.py --cycles {args.cycles}`: CPU cycles per call in lua/'s "
          f"lines (the hook's own cost at each line event included), {args.cycles} replayed "
          "run cycles, the lock's history full.\n")
    for number, script in enumerate(SCRIPTS):
        mine = {line: figures for (n, line), figures in lines.items() if n == number}
        total = sum(spent for spent, _ in mine.values())
        functions = collections.Counter()
        for line, (spent, _) in mine.items():
            functions[where[number][line][2]] += spent
        print(f"**{script}**: {total:,.0f} cycles per call in its lines.\n")
        print("| function | cycles per call | share |\n|---|---|---|")
        for function, spent in functions.most_common():
            if 100 * spent / total >= args.share:
                print(f"| `{function}` | {spent:,.0f} | {100 * spent / total:.1f} % |")
        print("\n| line | runs per call | cycles per call | share |\n|---|---|---|---|")
        for line, (spent, runs) in sorted(mine.items(), key=lambda item: -item[1][0]):
            if 100 * spent / total >= args.share:
                name, at, _, text = where[number][line]
                text = text[:80].replace("|", "\\|")
                print(f"| {name}:{at} `{text}` | {runs:.0f} | {spent:,.0f} | "
                      f"{100 * spent / total:.1f} % |")
        print()


if __name__ == "__main__":
    main()
