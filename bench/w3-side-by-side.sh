#!/usr/bin/env bash
# w3-side-by-side.sh: W3 (a paced stream of jobs due 2 s after their push, one per request on
# the compat API, 8 producers and 8 consumers unless --producers and --consumers say otherwise,
# over 10,000 far-future jobs) against several delayq binaries in turn, ROUNDS times, on one
# store: a before/after comparison where two separate runs of compare.sh would differ by the
# machine's drift. For each run it prints lateness p50/p99, the rate the producers kept and how
# far they fell behind their schedule, and, over 5 s in the middle of the stream, the CPU of
# delayq, its redis-server and the load generator (ticks of 10 ms: 500 are one core) and the
# machine's idle share, from /proc, and over the whole stream how long delayq's and the load
# generator's threads waited, runnable, for a core (% of one core, delayq-bench's schedstat).
# On Redis it also prints what Redis itself saw over the run: its longest latency event and its
# slowest command (latency monitor and slow log, both from 3 ms), so that a stall of Redis's
# shows apart from delayq's own lateness. --logs DIR keeps each run's delayq log as
# DIR/<round>-<binary's position>.log.
#
# Usage: bench/w3-side-by-side.sh [--rate 10000] [--duration-s 15] [--rounds 2]
#                                 [--store redis|embedded|memory] [--producers 8]
#                                 [--consumers 8] [--logs DIR] BINARY...
# Needs target/release/delayq-bench (cargo build --release -p delayq-bench) and, for redis,
# redis-server on PATH. Every server started here is stopped on exit; loopback only.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RATE=10000; DURATION=15; ROUNDS=2; STORE=redis; PRODUCERS=8; CONSUMERS=8; LOGS=""; BINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE="$2"; shift 2 ;;
    --duration-s) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    --producers) PRODUCERS="$2"; shift 2 ;;
    --consumers) CONSUMERS="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    *) BINS+=("$1"); shift ;;
  esac
done
[ ${#BINS[@]} -gt 0 ] || { echo "usage: $0 [options] BINARY..." >&2; exit 2; }
BENCH="$ROOT/target/release/delayq-bench"
[ -x "$BENCH" ] || { echo "build it first: cargo build --release -p delayq-bench" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TMP=$(mktemp -d)
# CPU is read over SPAN seconds in the middle of each run.
SPAN=5
# idle: the machine's idle ticks (idle + iowait, every core) from /proc/stat. Its share is taken
# of the wall time (SPAN s x cores x 100 ticks), not of the fields' sum, which counts busy time
# a tick at a time (probe.rs MachineTicks).
idle() { awk '/^cpu /{print $5+$6}' /proc/stat; }

# redis_stalls: Redis's longest latency event (ms) and slowest command (µs) since it started.
redis_stalls() {
  local lat slow
  lat=$(redis-cli -p "$REDIS_PORT" --csv latency latest |
    awk -F, 'BEGIN {m = 0} {gsub(/"/, "", $4); if ($4 + 0 > m) m = $4 + 0} END {print m}')
  # The slow log's entries are {id, time, µs, ...}: the largest µs.
  slow=$(redis-cli -p "$REDIS_PORT" eval "local m = 0
    for _, e in ipairs(redis.call('slowlog', 'get', -1)) do m = math.max(m, e[3]) end
    return m" 0)
  echo "Redis: longest latency event $lat ms, slowest command $slow us"
}

run() { # binary log
  local bin="$1" log="$2" rpid
  rm -rf "$TMP/data"
  start_store "$STORE" "$TMP/data"
  rpid=$REDIS_PID
  if [ -n "$rpid" ]; then
    redis-cli -p "$REDIS_PORT" config set latency-monitor-threshold 3 >/dev/null
    redis-cli -p "$REDIS_PORT" config set slowlog-log-slower-than 3000 >/dev/null
  fi
  start_delayq "$bin" "${STORE_ARGS[@]}"
  "$BENCH" w3 --api compat --addr "127.0.0.1:$DQ_PORT" --rate "$RATE" --duration-s "$DURATION" \
    --backlog 10000 --backlog-batch 100 --producers "$PRODUCERS" --consumers "$CONSUMERS" \
    --server-pid "$DQ_PID" --json \
    >"$TMP/out.json" 2>"$TMP/err" & local bp=$!
  sleep $((DURATION / 2))
  local d0 r0 b0 i0 d1 r1 b1 i1
  d0=$(ticks "$DQ_PID"); r0=$(ticks "$rpid"); b0=$(ticks "$bp"); i0=$(idle)
  sleep "$SPAN"
  d1=$(ticks "$DQ_PID"); r1=$(ticks "$rpid"); b1=$(ticks "$bp"); i1=$(idle)
  wait "$bp" || true
  python3 - "$TMP/out.json" "$bin" "$((d1 - d0))" "$((r1 - r0))" "$((b1 - b0))" \
    "$((100 * (i1 - i0) / (SPAN * 100 * $(nproc))))" "$SPAN" <<'PY'
import json, sys
path, bin_, d, r, b, idle, span = sys.argv[1:]
try:
    j = json.loads(open(path).read().strip().splitlines()[-1])
except Exception as e:
    print(f"{bin_}: no result ({e})"); sys.exit(0)
m = j.get("metrics", j)
print(f"{bin_}: lateness p50 {m.get('lateness_p50_ms')} ms, p99 {m.get('lateness_p99_ms')} ms, "
      f"delivered {int(m.get('delivered', 0))}, early {int(m.get('early', 0))}, "
      f"lost {int(m.get('lost', 0))}, pushed {round(m.get('fire_rate_per_s', 0))}/s, "
      f"producers behind by at most {round(m.get('producer_max_lag_ms', 0))} ms; "
      f"{span} s: delayq {d} ticks, redis-server {r}, load generator {b}, machine idle {idle} %; "
      f"waiting for a core over the stream: delayq {m.get('server_cpu_wait_pct', 0):.0f} %, "
      f"load generator {m.get('bench_cpu_wait_pct', 0):.0f} % of one")
PY
  if [ -n "$rpid" ]; then redis_stalls; fi
  stop "$DQ_PID"
  if [ -n "$log" ]; then cp "$DQ_LOG" "$log"; fi
  if [ -n "$rpid" ]; then stop "$rpid"; fi
}

echo "W3 at $RATE/s for $DURATION s on $STORE, $PRODUCERS producers, $CONSUMERS consumers," \
  "$ROUNDS rounds; $(nproc) cores; $(date -u +%FT%TZ)"
if [ -n "$LOGS" ]; then mkdir -p "$LOGS"; fi
for r in $(seq "$ROUNDS"); do
  for i in "${!BINS[@]}"; do
    run "${BINS[$i]}" "${LOGS:+$LOGS/$r-$((i + 1)).log}"
  done
done
