#!/usr/bin/env python3
"""Writes docs/reliability.md from the fault suite's results (tests/faults/run calls it).

Every number in the table comes from one run: each scenario appends one JSON line with what
it counted (tests/faults/harness.rs, `record`), and the test log says which tests failed.
"""

import argparse
import json
import platform
import re
import subprocess

parser = argparse.ArgumentParser()
for name in ("results", "log", "started", "command", "seconds", "status"):
    parser.add_argument("--" + name, required=True)
args = parser.parse_args()

rows = []
try:
    with open(args.results) as results:
        rows = [json.loads(line) for line in results if line.strip()]
except FileNotFoundError:
    pass
log = open(args.log, errors="replace").read()
# Every test the suite ran: the scenarios (faults::), and the long tiers of the scripts' fuzzer
# and of the model's conformance walks and checker, which have no row.
failed = sorted(set(re.findall(r"^test (\S+::\S+) \.\.\. FAILED", log, re.M)))
passed = re.findall(r"^test (\S+::\S+) \.\.\. ok", log, re.M)
redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
redis = next((word.split("=")[1] for word in redis if word.startswith("v=")), "?")
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()

def cell(row, name):
    return str(row.get(name, ""))

print("# Reliability: what the fault suite measured")
print()
print(f"Run on {args.started} with `{args.command}` ({int(args.seconds) // 60} min "
      f"{int(args.seconds) % 60} s; exit status {args.status}). Machine: {cores} CPUs, "
      f"Linux {platform.release()}, redis-server {redis}; redlock's debug build, every "
      "process against its own redis-server on loopback, but in the network rows (T7, T8, "
      "T8b, T16 T17, T22), where servers and clients run in network namespaces of their own, "
      "linked by veth pairs, and nft drops their packets. The suite, its oracles and the "
      "scenarios are in `tests/faults/`; each has an id (T1-T43) that stays the same from run to run.")
print()
print("Every cell below comes from that run. **runs**: acquisitions attempted; **faults**: "
      "faults injected; **overlaps**: two probes alive at once (a flock referee), or a lost "
      "increment of the racy counter; **stale fences**: a holder whose fence was not above "
      "every earlier one; **leaked keys**: keys without an expiry (the fence counter aside) "
      "or a lease longer than the TTL, seen by a sampler every 100 ms; **unexplained exits**: "
      "an exit code outside README's table, or not the one the scenario expects, or another "
      "broken promise that the row's scenario checks (a password shown, a name not shown as "
      "itself, a crowd of waiters over the row's load budget); **missed bounds**: a liveness "
      "bound the row promises and missed (T39: a key idle with a live waiter queued behind N "
      "dead ones for 1 s per dead waiter or more, or longer than the TTL; T40: redlock exiting "
      "more than 1.5 s after its command with Redis stopped; T7, T16 T17: the command of a "
      "holder cut off from Redis ending after its lease lapsed on the server, a lease lapsing more than the "
      "TTL after the cut, or a cut-off waiter more than "
      "1 s past its --wait; T8b: a command whose first SYN was dropped taking 950 ms or more; T26: a waiter across a clock jump off its --wait by 1 s or more; "
      "T23: a lock free between holders for more than 3 s, the killed master's beyond the time "
      "until it could be taken again; T41: a release given up on across a Sentinel failover, or "
      "the waiter behind it starting more than 3 s after the promotion).")
print()
print("| id | scenario | runs | faults | overlaps | stale fences | leaked keys | unexplained exits | missed bounds | result | notes |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
def order(row):
    number = re.match(r"T(\d+)", row.get("id", ""))
    return (int(number.group(1)) if number else 99, row.get("name", ""))

for row in sorted(rows, key=order):
    print("| " + " | ".join([
        cell(row, "id"), cell(row, "name"), cell(row, "runs"), cell(row, "faults"),
        cell(row, "overlaps"), cell(row, "stale_fences"), cell(row, "leaked_keys"),
        cell(row, "unexplained_exits"), cell(row, "missed_bounds"), cell(row, "result"),
        cell(row, "notes").replace("|", "/"),
    ]) + " |")
print()
if failed:
    print("Tests that failed (a scenario's row is missing when its test stopped before counting; "
          "the fuzzer's, the walks' and the checker's have no row):")
    print()
    for name in failed:
        print(f"- `{name}`")
else:
    print(f"All {len(passed)} tests of the suite passed.")
print()
print("Out of the model (marked so): the lock itself is lost, by a restart without persistence, "
      "by eviction, by split brain without `--replicas` (T22) or by a jump of the Redis host's "
      "clock (T26). A second holder may then start before the first learns of the loss, which "
      "is what fences are for; those rows count overlaps but pass on 0 stale fences, 0 leaked "
      "keys and 0 unexplained exits. docs/safety.md says which Redis settings avoid them "
      "(`redlock doctor` checks them).")
print()
print("Latencies in the notes (signal, release, SIGKILL and SIGTERM timing) are measured and "
      "shown beside the row's target; what fails a row is an order that breaks the lock's "
      "promise (a release while a process of the command's group still runs), a key left "
      "behind, or an exit code the row did not expect.")
print()
print("Covered by the rest of the test suite (every `cargo test`, without counts): T21 "
      "Sentinel failover (tests/sentinel.rs), T23 Cluster failover and migration without "
      "faults (tests/cluster.rs; the T23 rows above count them under faults), T32 TLS "
      "(tests/tls.rs), T16/T17 quorum mode with masters down and "
      "stopped, and 300 acquisitions across 5 masters under a failing minority "
      "(tests/quorum.rs).")
