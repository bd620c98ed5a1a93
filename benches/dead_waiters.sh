#!/bin/bash
# Dead waiters versus a live one: how long a key sits idle with a live
# waiter queued behind N waiters killed with SIGKILL. Holds `dx`, queues N `acquire --wait 20s`
# and kills them (-9), queues one live `acquire --wait 120s`, releases, and prints the seconds
# from the release to the live waiter's exit (and its exit code: 75 = it timed out without
# ever holding the lock). A redis-server of its own on a random loopback port (its log in
# /tmp/dead_waiters.redis.log).
#
# With KIND=run, the dead and the live waiters are `run --ttl 10s` (of `sleep 300` and `true`),
# which start on their grant instead of claiming it.
#
#   [KIND=run] benches/dead_waiters.sh REDLOCK_BINARY N...
set -u
BIN=$1
shift
KIND=${KIND:-acquire}
case $KIND in
  acquire) DEAD_TAIL=(); LIVE_TAIL=() ;;
  run) DEAD_TAIL=(-- sleep 300); LIVE_TAIL=(-- true) ;;
  *) echo "KIND must be acquire or run" >&2; exit 2 ;;
esac
# Polls `redis-cli -p PORT ARGS...` until it prints WANT, for 10 s at most.
await() {
  local want=$1
  shift
  for _ in $(seq 1 500); do
    [ "$(redis-cli -p "$PORT" "$@" 2>/dev/null)" = "$want" ] && return 0
    sleep 0.02
  done
  echo "gave up waiting for $* = $want" >&2
  exit 1
}
for N in "$@"; do
  PORT=$((20000 + RANDOM % 20000))
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no >/tmp/dead_waiters.redis.log 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null' EXIT
  await PONG PING
  export REDLOCK_URL=redis://127.0.0.1:$PORT
  TOKEN=$("$BIN" acquire -q --key dx --ttl 300s)
  DEAD=()
  for i in $(seq 1 "$N"); do
    "$BIN" "$KIND" -q --key dx --ttl 10s --wait 20s "${DEAD_TAIL[@]}" >/dev/null 2>&1 &
    DEAD+=($!)
    await "$i" ZCARD 'redlock:{dx}:queue'
  done
  "$BIN" "$KIND" -q --key dx --ttl 10s --wait 120s "${LIVE_TAIL[@]}" >/dev/null 2>&1 &
  LIVE=$!
  await "$((N + 1))" ZCARD 'redlock:{dx}:queue'
  kill -9 "${DEAD[@]}"
  wait "${DEAD[@]}" 2>/dev/null
  START=$(date +%s.%N)
  "$BIN" release -q --key dx --token "$TOKEN"
  wait "$LIVE"
  CODE=$?
  END=$(date +%s.%N)
  echo "kind=$KIND dead=$N exit=$CODE idle=$(echo "$END - $START" | bc) s"
  kill "$SERVER"
  wait "$SERVER" 2>/dev/null
done
