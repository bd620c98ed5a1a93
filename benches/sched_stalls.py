#!/usr/bin/env python3
"""Where a real-time bystander's slow runs spend their time, from a scheduler trace.

benches/queue_scale.py --isolate runs its bystander (`redlock run -- true`) at real-time
priority. When its tail is slow, this tells apart the two causes that look alike from outside:
waiting for a CPU (the delay from a wake-up to running) and sleeping in the kernel
(uninterruptible "D" sleeps: a page fault waiting for a page lock, say). It reads a trace taken
while the benchmark runs:

    perf sched record -g -o sched.data -- sleep 10     # during a point of queue_scale.py
    python3 benches/sched_stalls.py sched.data

and prints, for the tasks at real-time priority: the wake-up-to-run delays (p50, p99, max); per
command name, the lifetimes of its processes (p50, p98, max) with the uninterruptible sleeps of
the slowest; the longest stretches the kernel's DAMON threads (kdamond) held a CPU; and, for
a trace taken with -g, where in the kernel the uninterruptible sleeps waited.
Nothing here asserts; docs/queue-scale.md quotes what it printed.
"""

import collections
import re
import subprocess
import sys

# `chrt -f 10` is kernel priority 99 - 10.
REALTIME_PRIO = "89"
LINE = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:(\w+): (.*)")
FIELD = re.compile(r"(\w+)=(\S+)")


# Frames of the scheduler and of the lock or wait itself: the caller below them says why.
WAITING = re.compile(r"^(__schedule|schedule|schedule_\w+|io_schedule\w*|__wait_for_common|"
                     r"wait_for_completion\w*|rwsem_down_\w+|down_(read|write)\w*|"
                     r"folio_wait_bit\w*|__folio_lock\w*|mutex_lock\w*|__mutex_lock\w*)$")

# Frames of the wake-up itself: the caller below them is who let the sleeper go.
WAKING = re.compile(r"^(try_to_wake_up|wake_up_\w+|__wake_up\w*|rwsem_wake\S*|up_read|up_write|"
                    r"complete\w*|folio_wake_bit|folio_unlock|mutex_unlock\w*)$")


def events(path):
    """(time, event, fields, kernel stack) per event; the stack is empty without -g."""
    text = subprocess.run(["perf", "script", "-i", path, "-F", "cpu,time,event,trace,ip,sym"],
                          capture_output=True, text=True, check=True).stdout
    current = None
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            if current:
                yield current
            current = (float(match[2]), match[3], dict(FIELD.findall(match[4])), [])
        elif current and line.startswith("\t") and len(line.split()) >= 2:
            current[3].append(line.split()[1])
    if current:
        yield current


def quantile(values, fraction):
    values = sorted(values)
    return values[min(len(values) - 1, int(fraction * len(values)))] if values else float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    woken = {}          # pid -> when a sleeping real-time task was woken
    delays = []         # wake-up to running, seconds (where the trace has both)
    asleep = {}         # pid -> (since, state) of a real-time task switched out
    sleeps = collections.defaultdict(list)   # pid -> [(state, seconds)]
    seen = {}           # pid -> [first, last, comm]
    kdamond_in, kdamond_runs = {}, []
    stalls = []         # (from, to) of each uninterruptible sleep of a real-time task
    why = collections.Counter()   # (command, kernel callers) of those sleeps, traced with -g
    woken_by = collections.Counter()   # the waker's kernel callers: seconds of sleep it ended
    for at, kind, field, stack in events(sys.argv[1]):
        if kind == "sched_waking" and field.get("prio") == REALTIME_PRIO:
            woken.setdefault(field["pid"], at)
            # A sleep ends at its wake-up (a trace may miss the switch back in).
            if field["pid"] in asleep:
                since, state = asleep.pop(field["pid"])
                sleeps[field["pid"]].append((state, at - since))
                if state == "D":
                    stalls.append((since, at))
                    if stack:
                        callers = [frame for frame in stack if not WAKING.match(frame)][:3]
                        woken_by[" < ".join(callers)] += at - since
        if kind != "sched_switch":
            continue
        prev, nxt = field["prev_pid"], field["next_pid"]
        if field["prev_comm"].startswith("kdamond") and prev in kdamond_in:
            kdamond_runs.append((kdamond_in.pop(prev), at))
        if field["next_comm"].startswith("kdamond"):
            kdamond_in[nxt] = at
        if field["prev_prio"] == REALTIME_PRIO:
            seen.setdefault(prev, [at, at, ""])[1:] = [at, field["prev_comm"]]
            if field["prev_state"] == "D" and stack:
                callers = [frame for frame in stack if not WAITING.match(frame)][:3]
                why[(field["prev_comm"], " < ".join(callers))] += 1
            if not field["prev_state"].startswith("R"):
                # A wake-up seen while it still ran is not the one that ends this sleep.
                woken.pop(prev, None)
                asleep[prev] = (at, field["prev_state"])
        if field["next_prio"] == REALTIME_PRIO:
            seen.setdefault(nxt, [at, at, field["next_comm"]])
            if nxt in woken:
                delays.append(at - woken.pop(nxt))

    ms = [d * 1000 for d in delays]
    print(f"real-time wake-ups: {len(ms)}; delay to run p50 {quantile(ms, .5):.3f} ms, "
          f"p99 {quantile(ms, .99):.3f} ms, max {max(ms, default=float('nan')):.3f} ms")
    by_comm = collections.defaultdict(list)
    for pid, (first, last, comm) in seen.items():
        by_comm[comm].append(((last - first) * 1000, pid))
    for comm, lives in sorted(by_comm.items()):
        if len(lives) < 20:
            continue
        lives.sort()
        print(f"{comm}: {len(lives)} tasks, lifetime p50 {quantile([l for l, _ in lives], .5):.2f}"
              f" / p98 {quantile([l for l, _ in lives], .98):.2f} / max {lives[-1][0]:.2f} ms")
        for life, pid in lives[-3:]:
            d = [s for state, s in sleeps[pid] if state == "D"]
            print(f"  {life:.2f} ms: {len(d)} uninterruptible sleeps, {sum(d) * 1000:.2f} ms in all")
    runs = sorted((end - start for start, end in kdamond_runs), reverse=True)[:5]
    print("kdamond's longest stretches on a CPU: "
          + (", ".join(f"{r * 1000:.1f} ms" for r in runs) if runs else "none seen"))
    stalled = sum(end - start for start, end in stalls)
    during = sum(max(0.0, min(end, k_end) - max(start, k_start))
                 for start, end in stalls for k_start, k_end in kdamond_runs)
    print(f"uninterruptible sleeps of real-time tasks: {len(stalls)}, {stalled * 1000:.1f} ms "
          f"in all, {during * 1000:.1f} ms of it while kdamond was on a CPU")
    if why:
        print("where they slept (command: kernel callers, innermost first), most frequent:")
        for (comm, callers), count in why.most_common(8):
            print(f"  {count:5} {comm}: {callers}")
    if woken_by:
        print("who ended them (the waker's kernel callers), by time slept:")
        for callers, seconds in woken_by.most_common(6):
            print(f"  {seconds * 1000:8.1f} ms: {callers}")


if __name__ == "__main__":
    main()
