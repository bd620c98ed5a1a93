#!/usr/bin/env python3
"""What a redlock lock costs a shared Redis, beside the scripts a hand-rolled lock uses.

Redis's own time is what other clients of a shared server wait behind, so this reads it from
the server itself (INFO commandstats), not from the client's clock. Starts a private
redis-server on a free loopback port and measures, per operation:
  - script µs: the usec of EVALSHA/EVAL, which include the commands a script runs inside it;
  - inner calls: every other command the server counted (TIME, HGET, ZADD, ...), which here
    only the scripts send;
  - every command the client sent (EVALSHA, EVAL, BLPOP, and HELLO, AUTH, CLIENT, PING, ...
    should a build send them): their usec together, and their calls by name (round trips).
Commandstats are server-wide, so the benchmark's own commands (the INFO calls that take the
figures, the polls that wait for a state) are counted as it sends them and subtracted.

The "seed" is what a hand-rolled lock runs, each on a fresh connection as a shell script
with redis-cli would:
  acquire: EVALSHA of  return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  release: EVALSHA of  if redis.call('GET', KEYS[1]) == ARGV[1] then
                           return redis.call('DEL', KEYS[1]) else return 0 end

Rows:
  1. an uncontended `redlock run --key K -- true` (acquire and release, history written, on a
     lock whose history is already full: warm-up runs first) against the seed cycle (connect,
     acquire, release, close), INFO before and after each single cycle; the two alternate in a
     random order per round, so drift hits both alike. Twice: "warm", cycles back to back
     (--runs), and "idle", a pause (--pause-ms) before each cycle (--idle-runs);
  2. a contended hand-off: --workers loops of `run --wait 60s -- true` on one key, so one holds
     while the others queue; per acquisition, and how many of them queued;
  3. a renewal: `run --ttl 3s -- sleep S` holders renew every second; a window in which only
     the renewals run (it opens after their first renewal), per renewal;
  4. a waiter joining a held lock's queue and leaving: `run --wait 60s`, SIGTERM 0.1 s after it
     says it is waiting (before its first refresh is due), one waiter at a time; apart from
     it, `acquire --wait 2s` that times out, its refreshes included;
  5. an acquire and a release of a `--limit 1000` semaphore that 999 holders fill (each taken by
     `redlock acquire`, which leaves its hold), --repetitions times, and of one that nobody
     else holds (its history full too).
Nothing here asserts. A row whose processes failed says so instead of a figure.

Usage: cargo build --release --locked --target x86_64-unknown-linux-musl
       python3 benches/script_cost.py [--redlock PATH] [--runs N] [--json PATH]
Prints a Markdown table; --json writes every figure, per cycle where there is one.
"""

import argparse
import json
import os
import platform
import random
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The private server's environment, the RESP client and encoder: queue_scale.py's.
import queue_scale  # noqa: E402
from queue_scale import encode, free_port, private_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASED = os.path.join(ROOT, "target", "x86_64-unknown-linux-musl", "release", "redlock")
PREFIX = "redlock:"

SEED_ACQUIRE = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"
SEED_RELEASE = ("if redis.call('GET', KEYS[1]) == ARGV[1] then "
                "return redis.call('DEL', KEYS[1]) else return 0 end")
SEED_TTL_MS = 30_000

# Commands a client sends itself (scripts cannot, or redlock's do not: lua/README.md lists
# what they run). Everything else commandstats counts was run inside a script.
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro")
CLIENT_COMMANDS = (*SCRIPT_COMMANDS, "blpop", "hello", "auth", "select", "ping", "wait", "scan",
                   "subscribe", "unsubscribe", "quit", "reset")
CLIENT_PREFIXES = ("client|", "script|", "command")

# Past the history's cap (HISTORY_CAP, 100, in lua/prelude/40-history.lua): every hold after these trims
# an entry, as on any lock that has run for a while.
WARM_UP_RUNS = 110
SEMAPHORE = 1000


def command_name(args):
    """The name commandstats files a command under: `info`, `config|resetstat`."""
    name = str(args[0]).lower()
    if name in ("config", "script", "client", "slowlog") and len(args) > 1:
        name += "|" + str(args[1]).lower()
    return name


class Client(queue_scale.Client):
    """A blocking Redis connection (queue_scale.py's). The benchmark's own connections (`own`)
    count what they send, to be subtracted from the server's figures; the seed's connections
    are measured."""

    own_sent = {}

    def __init__(self, port, own=True, timeout=30):
        super().__init__(port, timeout)
        self.own = own

    def call(self, *args):
        if self.own:
            name = command_name(args)
            Client.own_sent[name] = Client.own_sent.get(name, 0) + 1
        return super().call(*args)


class Redis(queue_scale.Redis):
    """queue_scale.py's private redis-server, asked over a connection that counts what it
    sends (see snapshot)."""

    def __init__(self, directory):
        super().__init__(directory)
        self.client.close()
        self.client = Client(self.port)

    def snapshot(self):
        """Commandstats, with what the benchmark had sent before asking for them: the INFO
        itself shows in the next snapshot, not in its own."""
        sent = dict(Client.own_sent)
        text = self.client.call("INFO", "commandstats")
        stats = {}
        for line in text.splitlines():
            if not line.startswith("cmdstat_"):
                continue
            name, value = line.split(":", 1)
            fields = dict(part.split("=") for part in value.split(","))
            # Errors (NOSCRIPT, for one) are counted as calls too; Redis 6 has no such fields.
            failed = int(fields.get("failed_calls", 0)) + int(fields.get("rejected_calls", 0))
            stats[name.removeprefix("cmdstat_")] = (int(fields["calls"]), int(fields["usec"]),
                                                    failed)
        return stats, sent


def is_client_command(name):
    return name in CLIENT_COMMANDS or name.startswith(CLIENT_PREFIXES)


def cost(before, after):
    """What the server ran between two snapshots, the benchmark's own commands left out."""
    (stats_before, sent_before), (stats_after, sent_after) = before, after
    calls, usec, failed = {}, {}, {}
    for name, (count, time_us, errors) in stats_after.items():
        old_count, old_usec, old_errors = stats_before.get(name, (0, 0, 0))
        own = sent_after.get(name, 0) - sent_before.get(name, 0)
        calls[name] = count - old_count - own
        # The benchmark's own commands are not the client's or a script's; their time goes.
        usec[name] = 0 if own else time_us - old_usec
        failed[name] = errors - old_errors
    sent = {name: n for name, n in calls.items() if n and is_client_command(name)}
    inner = {name: n for name, n in calls.items() if n and not is_client_command(name)}
    return {
        "script_calls": sum(calls.get(name, 0) for name in SCRIPT_COMMANDS),
        "script_usec": sum(usec.get(name, 0) for name in SCRIPT_COMMANDS),
        "sent": sent,
        "sent_calls": sum(sent.values()),
        "sent_usec": sum(usec[name] for name in sent),
        "inner": inner,
        "inner_calls": sum(inner.values()),
        # Calls answered with an error: an EVALSHA of a script the server had not loaded yet
        # (NOSCRIPT; the client then sends EVAL), none expected after the warm-up.
        "failed": {name: n for name, n in failed.items() if n},
        "failed_script_calls": sum(failed.get(name, 0) for name in SCRIPT_COMMANDS),
        # A negative count would mean something else used the server; never expected.
        "anomalies": {name: n for name, n in calls.items() if n < 0},
    }


def measure(redis, action):
    before = redis.snapshot()
    result = action()
    return cost(before, redis.snapshot()), result


def total(costs):
    """Several measured stretches added together."""
    out = {"script_calls": 0, "script_usec": 0, "sent": {}, "sent_calls": 0, "sent_usec": 0,
           "inner": {}, "inner_calls": 0, "failed": {}, "failed_script_calls": 0,
           "anomalies": {}}
    for c in costs:
        for field in ("script_calls", "script_usec", "sent_calls", "sent_usec", "inner_calls",
                      "failed_script_calls"):
            out[field] += c[field]
        for field in ("sent", "inner", "failed", "anomalies"):
            for name, n in c[field].items():
                out[field][name] = out[field].get(name, 0) + n
    return out


def per_op(costs, ops=None):
    """Per-operation figures: from a list of single-operation costs (medians and means), or
    from one cost spread over `ops` operations (means only)."""
    if ops is None:
        ops = len(costs)
        usec = [c["script_usec"] for c in costs]
        median = statistics.median(usec) if usec else None
        costs = total(costs)
    else:
        median = None
    if not ops:
        return None
    return {
        "ops": ops,
        "script_usec_median": median,
        "script_usec_mean": costs["script_usec"] / ops,
        "script_calls": costs["script_calls"] / ops,
        "inner_calls": costs["inner_calls"] / ops,
        "inner": {name: n / ops for name, n in sorted(costs["inner"].items())},
        "sent_usec": costs["sent_usec"] / ops,
        "sent_calls": costs["sent_calls"] / ops,
        "sent": {name: n / ops for name, n in sorted(costs["sent"].items())},
        "failed": costs["failed"],
        "anomalies": costs["anomalies"],
    }


class Bench:
    def __init__(self, binary, redis):
        self.binary, self.redis = binary, redis
        self.env = private_env(redis.port)
        self.failures = []

    def redlock(self, *args, check=True, token=None):
        """Runs redlock to its end; a token goes in REDLOCK_TOKEN, as the README advises."""
        env = self.env if token is None else dict(self.env, REDLOCK_TOKEN=token)
        done = subprocess.run([self.binary, *args], env=env, capture_output=True, text=True)
        if check and done.returncode:
            self.failures.append(f"redlock {' '.join(args)}: exit {done.returncode}: "
                                 f"{done.stderr.strip()[-300:]}")
        return done

    def warm_up(self, keys):
        """WARM_UP_RUNS holds of each key (name: extra flags), two keys at a time: their
        histories are full."""
        def loop(key, flags):
            for _ in range(WARM_UP_RUNS):
                self.redlock("run", "-q", "--key", key, *flags, "--", "true")
        threads = [threading.Thread(target=loop, args=item) for item in keys.items()]
        for i in range(0, len(threads), 2):
            for thread in threads[i:i + 2]:
                thread.start()
            for thread in threads[i:i + 2]:
                thread.join()

    # Row 1.
    def redlock_cycle(self):
        return self.redlock("run", "-q", "--key", "cycle", "--", "true").returncode

    def seed_cycle(self, shas):
        client = Client(self.redis.port, own=False)
        token = os.urandom(16).hex()
        acquired = client.call("EVALSHA", shas[0], 1, "seed", token, SEED_TTL_MS)
        released = client.call("EVALSHA", shas[1], 1, "seed", token)
        client.close()
        return 0 if acquired == "OK" and released == 1 else 1

    def cycles(self, runs, pause, rng):
        """`runs` rounds of one redlock cycle and one seed cycle, in a random order per round;
        with `pause`, the server idles that long before each cycle."""
        shas = [self.redis.client.call("SCRIPT", "LOAD", text)
                for text in (SEED_ACQUIRE, SEED_RELEASE)]
        measured = {"redlock": [], "seed": []}
        failed = {"redlock": 0, "seed": 0}
        actions = {"redlock": self.redlock_cycle, "seed": lambda: self.seed_cycle(shas)}
        for _ in range(runs):
            order = list(actions)
            rng.shuffle(order)
            for who in order:
                # The INFO that opens the figures comes before the pause: nothing reaches the
                # server between it and the cycle.
                def cycle(who=who):
                    if pause:
                        time.sleep(pause)
                    return actions[who]()
                c, status = measure(self.redis, cycle)
                measured[who].append(c)
                failed[who] += bool(status)
        return measured, failed

    # Row 2.
    def handoff(self, workers, acquisitions):
        key = "handoff"
        per_worker = acquisitions // workers
        outcomes = []

        def loop():
            for _ in range(per_worker):
                done = self.redlock("run", "--progress-every", "0", "--wait", "60s", "--key",
                                    key, "--", "true")
                outcomes.append((done.returncode, "waiting for lock" in done.stderr))

        def contend():
            threads = [threading.Thread(target=loop) for _ in range(workers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        c, _ = measure(self.redis, contend)
        acquired = sum(1 for status, _ in outcomes if status == 0)
        queued = sum(1 for status, waited in outcomes if status == 0 and waited)
        return {"cost": c, "acquisitions": acquired, "queued": queued,
                "attempts": len(outcomes)}

    # Row 3.
    def renewals(self, keys, window):
        # Past the first renewal (a second in): the one that may find the script not loaded.
        settle = 1.3
        hold = settle + window + 1.5
        holders = [subprocess.Popen(
            [self.binary, "run", "-q", "--ttl", "3s", "--key", key, "--", "sleep", f"{hold:.1f}"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for key in keys]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                self.redis.client.call("EXISTS", f"{PREFIX}{{{key}}}:holders") for key in keys):
            time.sleep(0.02)
        time.sleep(settle)
        c, _ = measure(self.redis, lambda: time.sleep(window))
        for key, holder in zip(keys, holders):
            if holder.wait() != 0:
                self.failures.append(f"renewing holder of {key}: exit {holder.returncode}: "
                                     f"{holder.stderr.read().strip()[-300:]}")
        return {"cost": c, "holders": len(keys), "window_s": window}

    # Row 4.
    def join_leave(self, waiters):
        key = "queue"
        token = self.redlock("acquire", "--key", key, "--ttl", "600s").stdout.strip()
        costs, statuses = [], []
        for _ in range(waiters):
            def waiter():
                process = subprocess.Popen(
                    [self.binary, "run", "--progress-every", "0", "--wait", "60s", "--key", key,
                     "--", "true"], env=self.env, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE)
                selector = selectors.DefaultSelector()
                selector.register(process.stderr, selectors.EVENT_READ)
                said = b""
                deadline = time.monotonic() + 5
                while b"waiting for lock" not in said and time.monotonic() < deadline:
                    if selector.select(timeout=0.1):
                        chunk = os.read(process.stderr.fileno(), 4096)
                        if not chunk:
                            break
                        said += chunk
                selector.close()
                # In its BLPOP by now; its first refresh is a second after it joined.
                time.sleep(0.1)
                process.send_signal(signal.SIGTERM)
                said += process.stderr.read()
                return process.wait(), said.decode(errors="replace")
            c, (status, said) = measure(self.redis, waiter)
            costs.append(c)
            statuses.append(status)
            if status != 128 + signal.SIGTERM:
                self.failures.append(f"waiter: exit {status}: {said.strip()[-300:]}")
        timeouts, timeout_statuses = [], []
        # Not measured: the first loads the scripts the wait uses that nothing before did.
        self.redlock("acquire", "-q", "--key", key, "--ttl", "30s", "--wait", "2s", check=False)
        for _ in range(3):
            c, done = measure(self.redis, lambda: self.redlock(
                "acquire", "-q", "--key", key, "--ttl", "30s", "--wait", "2s", check=False))
            timeouts.append(c)
            timeout_statuses.append(done.returncode)
        self.redlock("release", "--key", key, token=token)
        return {"sigterm": costs, "sigterm_exits": sorted(set(statuses)),
                "timeout": timeouts, "timeout_exits": sorted(set(timeout_statuses))}

    # Row 5.
    def semaphore(self, key, holders, repetitions):
        limit = ["--limit", str(SEMAPHORE)]
        per_thread = [holders // 2, holders - holders // 2]

        def fill(count):
            for _ in range(count):
                self.redlock("acquire", "-q", "--key", key, *limit, "--ttl", "600s")
        threads = [threading.Thread(target=fill, args=(n,)) for n in per_thread]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        held = self.redis.client.call("HLEN", f"{PREFIX}{{{key}}}:holders")
        acquires, releases, exits = [], [], set()
        for _ in range(repetitions):
            c, done = measure(self.redis, lambda: self.redlock(
                "acquire", "--key", key, *limit, "--ttl", "60s"))
            acquires.append(c)
            exits.add(done.returncode)
            token = done.stdout.strip()
            c, _ = measure(self.redis, lambda: self.redlock("release", "-q", "--key", key,
                                                            token=token))
            releases.append(c)
        return {"held": held, "acquire": acquires, "release": releases, "exits": sorted(exits)}


def fmt(value, spec=".0f"):
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return format(value, spec)


def usec_cell(figures):
    if figures["script_usec_median"] is not None:
        return (f"{fmt(figures['script_usec_median'])} "
                f"({fmt(figures['script_usec_mean'])})")
    return fmt(figures["script_usec_mean"])


def sent_cell(figures):
    names = ", ".join(f"{name.upper()} {n:.2f}" for name, n in figures["sent"].items())
    failed = ", ".join(f"{name.upper()} {n}" for name, n in figures["failed"].items())
    return (f"{fmt(figures['sent_usec'])} µs, {figures['sent_calls']:.2f} ({names or 'none'})"
            + (f"; answered with an error, in all: {failed}" if failed else ""))


def row(label, mine, seed=None, note=""):
    """One line of the table; `note` says what went wrong, in place of the figures when
    there are none."""
    if mine is None:
        return f"| {label} | not measured: {note} | – | – | – | – | – | – |"
    if note:
        label += f" ({note})"
    seed_usec = seed_inner = ratio = "–"
    if seed is not None:
        seed_usec, seed_inner = usec_cell(seed), fmt(seed["inner_calls"], ".1f")
        key = "script_usec_median" if mine["script_usec_median"] is not None else \
            "script_usec_mean"
        if seed[key]:
            ratio = f"{mine[key] / seed[key]:.1f}×"
    return (f"| {label} | {usec_cell(mine)} | {fmt(mine['script_calls'], '.2f')} "
            f"| {fmt(mine['inner_calls'], '.1f')} | {sent_cell(mine)} | {seed_usec} "
            f"| {seed_inner} | {ratio} |")


def machine_line(binary, load_start):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    version = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout.split()[2].removeprefix("v=")
    built = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    return (f"Machine: {os.cpu_count()} × {cpu}, Linux {platform.release()}, redis {version}; "
            f"load average at the start {load_start[0]:.2f}, at the end {load[0]:.2f}\n"
            f"redlock: {binary} ({built})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redlock", default=RELEASED, help="the redlock binary")
    parser.add_argument("--runs", type=int, default=200,
                        help="warm rounds (one redlock and one seed cycle each), and contended "
                             "acquisitions")
    parser.add_argument("--idle-runs", type=int,
                        help="idle rounds (default: half of --runs)")
    parser.add_argument("--pause-ms", type=float, default=300,
                        help="the server's idle time before each idle cycle")
    parser.add_argument("--workers", type=int, default=4,
                        help="processes contending for the hand-off row")
    parser.add_argument("--renew-window", type=float, default=6,
                        help="seconds in which only renewals run")
    parser.add_argument("--waiters", type=int, default=20,
                        help="waiters that join and leave, one at a time")
    parser.add_argument("--repetitions", type=int, default=20,
                        help="semaphore acquires measured at each fill")
    parser.add_argument("--seed", type=int, default=1, help="of the random order per round")
    parser.add_argument("--json", help="write every figure here")
    options = parser.parse_args()
    idle_runs = options.runs // 2 if options.idle_runs is None else options.idle_runs
    binary = os.path.abspath(options.redlock)
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} not found; build first: "
                 "cargo build --release --locked --target x86_64-unknown-linux-musl")
    if shutil.which("redis-server") is None:
        sys.exit("redis-server not found")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    load_start = os.getloadavg()
    started = time.monotonic()

    def progress(what):
        print(f"[{time.monotonic() - started:5.1f} s] {what}", file=sys.stderr, flush=True)

    work = tempfile.mkdtemp(prefix="redlock-script-cost-")
    redis = Redis(work)
    bench = Bench(binary, redis)
    raw = {}
    try:
        renew_keys = ["renew-0", "renew-1", "renew-2"]
        progress("warm-up: full histories")
        bench.warm_up({"cycle": [], "handoff": [], **{key: [] for key in renew_keys},
                       "semaphore-empty": ["--limit", str(SEMAPHORE)]})
        rng = random.Random(options.seed)
        progress(f"row 1: {options.runs} warm rounds")
        raw["warm"] = bench.cycles(options.runs, 0, rng)
        progress(f"row 1: {idle_runs} idle rounds, {options.pause_ms:g} ms pause")
        raw["idle"] = bench.cycles(idle_runs, options.pause_ms / 1000, rng)
        progress(f"row 2: {options.workers} workers, {options.runs} acquisitions")
        raw["handoff"] = bench.handoff(options.workers, options.runs)
        progress(f"row 3: {len(renew_keys)} renewing holders, {options.renew_window:g} s")
        raw["renewal"] = bench.renewals(renew_keys, options.renew_window)
        progress(f"row 4: {options.waiters} waiters join and leave; 3 time out")
        raw["join_leave"] = bench.join_leave(options.waiters)
        progress(f"row 5: {SEMAPHORE - 1} semaphore holders")
        raw["semaphore_full"] = bench.semaphore("semaphore", SEMAPHORE - 1, options.repetitions)
        raw["semaphore_empty"] = bench.semaphore("semaphore-empty", 0, options.repetitions)
        progress("done")
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)

    figures = {}
    for state in ("warm", "idle"):
        measured, failed = raw[state]
        figures[state] = {who: per_op(measured[who]) for who in measured}
        figures[state]["failed"] = failed
    handoff = raw["handoff"]
    figures["handoff"] = per_op(handoff["cost"], handoff["acquisitions"])
    renewal = raw["renewal"]
    renewed = renewal["cost"]["script_calls"] - renewal["cost"]["failed_script_calls"]
    figures["renewal"] = per_op(renewal["cost"], renewed)
    join_leave = raw["join_leave"]
    figures["join_leave"] = per_op(join_leave["sigterm"])
    figures["timeout"] = per_op(join_leave["timeout"])
    for fill in ("semaphore_full", "semaphore_empty"):
        sem = raw[fill]
        figures[fill] = {"held": sem["held"], "acquire": per_op(sem["acquire"]),
                         "release": per_op(sem["release"])}

    rows = []
    for state in ("warm", "idle"):
        failed = figures[state]["failed"]
        note = ", ".join(f"{n} {who} cycles failed" for who, n in failed.items() if n)
        rows.append((f"1. `run -- true` cycle, uncontended, {state}", figures[state]["redlock"],
                     figures[state]["seed"], note))
    if handoff["acquisitions"] < handoff["attempts"]:
        rows.append(("2. contended hand-off", None, None,
                     f"{handoff['attempts'] - handoff['acquisitions']} of "
                     f"{handoff['attempts']} runs failed"))
    else:
        rows.append((f"2. contended hand-off, per acquisition ({handoff['queued']} of "
                     f"{handoff['acquisitions']} queued, {options.workers} processes)",
                     figures["handoff"], None, ""))
    rows.append((f"3. renewal, per renewal ({renewed} in {renewal['window_s']:g} s, "
                 f"{renewal['holders']} holders)", figures["renewal"], None,
                 "" if figures["renewal"] else "no renewal in the window"))
    sigterm = 128 + signal.SIGTERM
    exits = join_leave["sigterm_exits"]
    rows.append(("4. waiter joins and leaves (SIGTERM), per waiter", figures["join_leave"],
                 None, "" if exits == [sigterm] else f"exits {exits}"))
    exits = join_leave["timeout_exits"]
    rows.append(("4. `acquire --wait 2s` timing out, per waiter, its refreshes included",
                 figures["timeout"], None, "" if exits == [75] else f"exits {exits}"))
    for fill, label in (("semaphore_full", f"{SEMAPHORE:,} holders"),
                        ("semaphore_empty", "no other holder")):
        sem, exits = figures[fill], raw[fill]["exits"]
        note = "" if exits == [0] else f"acquire exits {exits}"
        rows.append((f"5. `--limit {SEMAPHORE}` acquire at {label} ({sem['held']} held "
                     f"before)", sem["acquire"], None, note))
        rows.append(("5. ... its release", sem["release"], None, note))

    print(machine_line(binary, load_start))
    print(f"Warm: {options.runs} rounds back to back; idle: {idle_runs} rounds, "
          f"{options.pause_ms:g} ms of nothing before each cycle; redlock and the seed in a "
          f"random order per round (seed {options.seed}). Histories full "
          f"({WARM_UP_RUNS} holds before). {time.monotonic() - started:.0f} s in all.\n")
    print("| operation | redlock: Redis µs / op | script calls / op | inner calls / op "
          "| every command sent: µs, calls / op (by command) | seed: Redis µs / op "
          "| seed inner calls / op | redlock / seed |")
    print("|---|---|---|---|---|---|---|---|")
    for label, mine, seed, note in rows:
        print(row(label, mine, seed, note))
    print("\nRedis µs: the usec of EVALSHA/EVAL in INFO commandstats (the commands a script "
          "runs inside included); rows of single operations: median (mean), the others: mean "
          "over the window. Inner calls: the other commands the server counted, run by the "
          "scripts. The seed has no queue, renewal or semaphore (a hand-rolled waiter polls "
          "with its acquire): those rows have no seed figure.\n")
    print("| operation | inner calls / op, by command |")
    print("|---|---|")
    for label, mine, seed, _ in rows:
        for who, figures_of in (("redlock", mine), ("seed", seed)):
            if figures_of:
                inner = ", ".join(f"{name.upper()} {n:.1f}"
                                  for name, n in figures_of["inner"].items())
                print(f"| {label}{', seed' if who == 'seed' else ''} | {inner} |")
    anomalies = {label: mine["anomalies"] for label, mine, _, _ in rows
                 if mine and mine["anomalies"]}
    if anomalies:
        print(f"\nNegative counts (something else used the server): {anomalies}")
    for failure in bench.failures[:10]:
        print(f"\nA process failed: {failure}")
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"figures": figures, "raw": raw, "options": vars(options)}, out, indent=1)


if __name__ == "__main__":
    main()
