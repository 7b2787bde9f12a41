#!/usr/bin/env bash
# flame.sh: CPU flame graphs of delayq (and of its redis-server on the Redis store) at capacity.
#
# For each STORE (memory, embedded, redis), starts one fresh `delayq serve` on free loopback
# ports (redis: its own redis-server, no persistence; embedded: a fresh data dir; memory:
# --memory), then runs capacity against it: W1 with every job due at once (`delayq-bench w1
# --api compat --jobs N --max-delay-s 0 --producers 8 --consumers 8`, one job per request) while
# `perf record` samples the server processes (on-CPU time only: where the CPU goes, not the waits
# between requests). Writes per store and process, in $OUT:
#   <store>-delayq.svg, <store>-redis-server.svg   the flame graph (inferno-flamegraph)
#   <store>-delayq.folded, ...                      the collapsed stacks (inferno-collapse-perf;
#                                                   compare two with inferno-diff-folded)
#   <store>-delayq.layers.md                        where delayq's samples go: user code by layer,
#                                                   kernel time by system call, CPU per job
#                                                   (bench/flame_layers.py)
#   <store>.json                                    the run's result line (e2e_jobs_per_s, ...)
# and machine.txt (machine, versions, commit, command). Sampling costs the server CPU, so the
# run's rates are below an unprofiled run's: quote rates from bench/compare.sh, not from here.
# redis-server's frames are named as far as its binary keeps symbols: Debian's is stripped, so
# its graph names libc, kernel and Redis's exported functions (processCommand, luaCallFunction,
# lua_pcall, ...) and folds the others into [redis-check-rdb], the file it is linked to.
#
# Needs perf (apt-get install -y linux-perf) and inferno (cargo install inferno), and a build of
# the `profiling` profile (cargo build --profile profiling -p delayq -p delayq-bench: the release
# build with line tables, which let dwarf unwinding name inlined Rust frames).
#
# Usage: bench/flame.sh [--jobs 30000] [--freq 999] [--call-graph dwarf,65528] [--out DIR]
#                       [STORE...]
#   STORE         memory, embedded, redis (default: all three)
#   --freq        samples per second per CPU (perf record -F)
#   --call-graph  how perf unwinds stacks (perf record --call-graph): dwarf,BYTES copies BYTES of
#                 each sampled stack (the default, 65528, the most perf takes: async Rust stacks
#                 are deep, and perf's own default of 8192 cuts most of them short); fp follows
#                 frame pointers, which the profiling build and redis-server do not keep
#   --out         default bench/results/<UTC date>-<git rev-parse --short HEAD>/flame
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
JOBS=30000
FREQ=999
CALL_GRAPH=dwarf,65528
OUT=""
STORES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS="$2"; shift 2 ;;
    --freq) FREQ="$2"; shift 2 ;;
    --call-graph) CALL_GRAPH="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "unknown argument: $1" >&2; exit 2 ;;
    *) STORES+=("$1"); shift ;;
  esac
done
[ ${#STORES[@]} -gt 0 ] || STORES=(memory embedded redis)
for s in "${STORES[@]}"; do
  case "$s" in memory|embedded|redis) ;; *) echo "unknown STORE $s (memory, embedded or redis)" >&2; exit 2 ;; esac
done
case "$CALL_GRAPH" in dwarf|dwarf,[0-9]*|fp) ;; *) echo "--call-graph: dwarf[,BYTES] or fp" >&2; exit 2 ;; esac
need_cmd perf "apt-get install -y linux-perf"
need_cmd inferno-collapse-perf "cargo install inferno"
need_cmd inferno-flamegraph "cargo install inferno"
need_cmd redis-server "apt-get install -y redis-server"
BENCH="$ROOT/target/profiling/delayq-bench"
DELAYQ="$ROOT/target/profiling/delayq"
need_built "cargo build --profile profiling -p delayq -p delayq-bench" "$BENCH" "$DELAYQ"

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir flame
TMP="$(mktemp -d /tmp/delayq-flame.XXXXXX)"

# graph STORE PROC PID DATA: the flame graph and folded stacks of one process from perf's DATA.
graph() {
  local store="$1" proc="$2" pid="$3" data="$4"
  # --no-inline: perf would otherwise run addr2line per frame, which takes hours here.
  perf script -i "$data" --pid "$pid" --no-inline 2>/dev/null |
    inferno-collapse-perf >"$OUT/$store-$proc.folded"
  if [ ! -s "$OUT/$store-$proc.folded" ]; then
    echo "$store $proc: no samples" | tee -a "$OUT/NOTE" >&2
    return 0
  fi
  inferno-flamegraph --title "$proc ($store store), capacity: W1, $JOBS jobs due at once, $COMMIT" \
    --subtitle "perf record -F $FREQ --call-graph $CALL_GRAPH; on-CPU samples" \
    <"$OUT/$store-$proc.folded" >"$OUT/$store-$proc.svg"
  if [ "$proc" = delayq ]; then
    python3 "$ROOT/bench/flame_layers.py" "$OUT/$store-$proc.folded" "$JOBS" >"$OUT/$store-$proc.layers.md"
  fi
  echo "$OUT/$store-$proc.svg"
}

# run STORE: one fresh server, capacity under perf, the graphs.
run() {
  local store="$1" work rpid dpid ppid
  work="$TMP/$store"; mkdir -p "$work"
  start_store "$store" "$work/data"
  start_delayq "$DELAYQ" "${STORE_ARGS[@]}"
  dpid=$DQ_PID rpid=$REDIS_PID
  perf record -q -F "$FREQ" --call-graph "$CALL_GRAPH" -o "$work/perf.data" \
    -p "$dpid${rpid:+,$rpid}" 2>"$work/perf.err" &
  ppid=$!; PIDS+=("$ppid")
  sleep 1 # perf attaches before the load starts
  kill -0 "$ppid" 2>/dev/null || { echo "perf record failed:" >&2; cat "$work/perf.err" >&2; exit 1; }
  "$BENCH" w1 --api compat --addr "127.0.0.1:$DQ_PORT" --jobs "$JOBS" --max-delay-s 0 --producers 8 \
    --consumers 8 --server-pid "$dpid" --label "delayq-$store" --no-progress --json \
    >"$work/out.json" 2>"$work/bench.err" ||
    { echo "$store: the run failed:" >&2; tail -5 "$work/bench.err" >&2; }
  # SIGINT: perf stops sampling and writes its data.
  kill -INT "$ppid" 2>/dev/null || true; wait "$ppid" 2>/dev/null || true
  grep -m1 '^{' "$work/out.json" >"$OUT/$store.json" || echo "$store: no result" | tee -a "$OUT/NOTE" >&2
  graph "$store" delayq "$dpid" "$work/perf.data"
  if [ -n "$rpid" ]; then graph "$store" redis-server "$rpid" "$work/perf.data"; fi
  stop "$dpid"
  if [ -n "$rpid" ]; then stop "$rpid"; fi
  rm -rf "$work"
}

{
  echo "machine: $(nproc) cores, $(cpu_model)"
  echo "versions: $(perf --version); $(redis-server --version | cut -d' ' -f1-3); $(delayq_build)"
  echo "command: bench/flame.sh --jobs $JOBS --freq $FREQ --call-graph $CALL_GRAPH ${STORES[*]}"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$OUT/machine.txt"

for store in "${STORES[@]}"; do
  echo "== $store" >&2
  run "$store"
done
echo "results: $OUT"
