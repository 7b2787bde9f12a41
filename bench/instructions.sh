#!/usr/bin/env bash
# instructions.sh: instructions per W1 job for each process (delayq, its redis-server, the load
# generator), counted by valgrind's callgrind: unlike wall time and CPU time on a shared machine,
# the count is the same from one run to the next, so it judges a change where timings cannot.
#
# For each STORE (memory, embedded, redis), W1 runs twice against a fresh server, once with
# --jobs N and once with 2N jobs (compat API, one job per request, delays 0-1 s, 8 producers and
# 8 consumers), every process under callgrind; the instructions per job are the difference
# between the two runs over N, so start-up and shutdown cancel out. Under callgrind each process
# runs one thread at a time about 50 times slower, so requests meet in batches differently from
# a native run: compare builds and stores with it, not with native CPU figures.
#
# Time-driven work (the timer's passes, a checkpoint a second) grows with a run's length, not
# its jobs, so it is counted in the difference too: a floor on what a job costs, not a profile.
#
# The beanstalkd protocol: STORE memory-beanstalk or embedded-beanstalk is delayq on that store
# driven over its beanstalkd port (--beanstalk-listen; W1's beanstalkd driver: put, then
# reserve-with-timeout and delete), beside the peers beanstalkd and beanstalkd-binlog (-b DIR)
# driven the same way; their server process is named `beanstalkd`.
#
# One line per store and process in $OUT/results.txt, each run's JSON in $OUT/runs.jsonl.
#
# Usage: bench/instructions.sh [--jobs 2000] [--keep] [--out DIR] [STORE...]
#   STORE  memory, embedded, redis (default: all three); memory-beanstalk, embedded-beanstalk,
#          beanstalkd, beanstalkd-binlog
#   --keep keep the callgrind files ($OUT/<store>-<jobs>.<process>.cg.gz, for callgrind_annotate)
#   --out  default bench/results/<UTC date>-<git rev-parse --short HEAD>/instructions
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
JOBS=2000
KEEP=0
OUT=""
STORES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "unknown argument: $1" >&2; exit 2 ;;
    *) STORES+=("$1"); shift ;;
  esac
done
[ ${#STORES[@]} -gt 0 ] || STORES=(memory embedded redis)
for s in "${STORES[@]}"; do
  case "$s" in
    memory|embedded|redis|memory-beanstalk|embedded-beanstalk|beanstalkd|beanstalkd-binlog) ;;
    *) echo "unknown STORE $s (memory, embedded, redis, memory-beanstalk, embedded-beanstalk, beanstalkd or beanstalkd-binlog)" >&2; exit 2 ;;
  esac
  case "$s" in beanstalkd*) need_cmd beanstalkd "apt-get install -y beanstalkd" ;; esac
done
need_cmd valgrind "apt-get install -y valgrind"
need_cmd redis-server "apt-get install -y redis-server"
BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="${DELAYQ:-$ROOT/target/release/delayq}"
need_built "cargo build --release -p delayq -p delayq-bench" "$BENCH" "$DELAYQ"

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir instructions
TMP="$(mktemp -d /tmp/delayq-instructions.XXXXXX)"

CG=(valgrind --tool=callgrind --quiet)

# total FILE: the instructions a callgrind output file counted.
total() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }

# run STORE JOBS: one fresh server under callgrind, one W1 run of JOBS jobs, also under it;
# leaves $OUT/<store>-<jobs>.{delayq,redis,bench}.cg.
run() {
  local store="$1" n="$2" work rpid="" dpid port
  work="$TMP/$store-$n"; mkdir -p "$work"
  # Servers under callgrind start slowly.
  local WAIT_TRIES=600
  local -a UNDER=() target
  case "$store" in
    beanstalkd|beanstalkd-binlog)
      local -a flags=()
      if [ "$store" = beanstalkd-binlog ]; then mkdir -p "$work/binlog"; flags=(-b "$work/binlog"); fi
      port=$(free_port)
      "${CG[@]}" --callgrind-out-file="$OUT/$store-$n.beanstalkd.cg" beanstalkd -l 127.0.0.1 \
        -p "$port" "${flags[@]}" >"$work/beanstalkd.log" 2>&1 &
      dpid=$!; PIDS+=("$dpid")
      wait_port "$port" "$dpid" "$work/beanstalkd.log" "$WAIT_TRIES"
      target=(--target beanstalkd --addr "127.0.0.1:$port") ;;
    *)
      UNDER=("${CG[@]}" --callgrind-out-file="$OUT/$store-$n.redis.cg")
      start_store "${store%-beanstalk}" "$work/data"
      rpid=$REDIS_PID
      UNDER=("${CG[@]}" --callgrind-out-file="$OUT/$store-$n.delayq.cg")
      case "$store" in
        *-beanstalk)
          port=$(free_port)
          start_delayq "$DELAYQ" "${STORE_ARGS[@]}" --beanstalk-listen "127.0.0.1:$port"
          wait_port "$port" "$DQ_PID" "$DQ_LOG" "$WAIT_TRIES"
          target=(--target beanstalkd --addr "127.0.0.1:$port") ;;
        *)
          start_delayq "$DELAYQ" "${STORE_ARGS[@]}"
          target=(--api compat --addr "127.0.0.1:$DQ_PORT") ;;
      esac
      dpid=$DQ_PID ;;
  esac
  "${CG[@]}" --callgrind-out-file="$OUT/$store-$n.bench.cg" "$BENCH" w1 "${target[@]}" \
    --jobs "$n" --max-delay-s 1 --producers 8 --consumers 8 \
    --drain-timeout-s 120 --no-progress --json >"$work/out.json" 2>"$work/bench.err" ||
    { echo "$store $n: the run failed:" >&2; tail -5 "$work/bench.err" >&2; return 1; }
  grep -m1 '^{' "$work/out.json" >>"$OUT/runs.jsonl"
  # SIGINT: delayq and redis-server shut down and callgrind writes its counts; beanstalkd
  # ignores SIGINT and exits on SIGTERM.
  case "$store" in beanstalkd*) kill -TERM "$dpid" ;; *) kill -INT "$dpid" ;; esac
  wait "$dpid" 2>/dev/null || true
  if [ -n "$rpid" ]; then kill -INT "$rpid"; wait "$rpid" 2>/dev/null || true; fi
  rm -rf "$work"
}

{
  echo "machine: $(nproc) cores, $(cpu_model)"
  echo "versions: $(valgrind --version); $(redis-server --version | cut -d' ' -f1-3); $(delayq_build)"
  echo "command: bench/instructions.sh --jobs $JOBS$([ "$KEEP" = 1 ] && echo ' --keep') ${STORES[*]}"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$OUT/machine.txt"

for store in "${STORES[@]}"; do
  echo "== $store" >&2
  run "$store" "$JOBS"
  run "$store" "$((2 * JOBS))"
  for proc in delayq beanstalkd redis bench; do
    a="$OUT/$store-$JOBS.$proc.cg"; b="$OUT/$store-$((2 * JOBS)).$proc.cg"
    if [ ! -f "$a" ] || [ ! -f "$b" ]; then continue; fi
    echo "$store $proc $(( ($(total "$b") - $(total "$a")) / JOBS )) instructions per job" |
      tee -a "$OUT/results.txt"
  done
done
if [ "$KEEP" = 1 ]; then gzip -9 "$OUT"/*.cg; else rm -f "$OUT"/*.cg; fi
echo "results: $OUT"
