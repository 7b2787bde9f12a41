#!/usr/bin/env bash
# compare.sh: delayq against its peers on one machine, in one run.
#
# Installs what is missing (apt beanstalkd and redis-server, npm bullmq in bench/peers/bullmq),
# builds delayq and delayq-bench in release, then for each run and each system starts a fresh
# server on free loopback ports, runs W1 (lifecycle) and W2 (memory) against it with its native
# protocol, and stops it. Systems:
#   delayq-redis       delayq serve --redis (its own redis-server), compat API
#   delayq-embedded    delayq serve --data-dir (temp dir), compat API
#   delayq-memory      delayq serve --memory (nothing kept: the ceiling of the stores above)
#   beanstalkd         in memory
#   beanstalkd-binlog  with -b DIR (fsync every 50 ms, the default)
#   bullmq             BullMQ 6 (Node driver bench/peers/bullmq/bench.mjs) on its own redis-server
# Every result is one JSON line in $OUT/results.jsonl; the end prints medians per system with
# ratios against delayq-redis ($OUT/summary.md), and $OUT/machine.txt records the machine, the
# versions, the delayq commit and the command. Only loopback addresses are used; every load
# loop in the drivers is bounded and every server started here is stopped on exit.
#
# Usage: bench/compare.sh [--runs 3] [--w2-runs N] [--jobs 50000] [--pending 1000000] [--big]
#                         [--systems "delayq-redis beanstalkd ..."] [--skip-build] [--out DIR]
#                         [--batch N] [--delayq-api compat|v1] [--workloads "w1 w2"]
#                         [--backlog 1000000]
#   --big         W2 with 10,000,000 pending jobs instead of --pending
#   --w2-runs     W2 runs per system (default: --runs); W2 at 1M+ jobs is the slow part
#   --batch       jobs per request for every system (/v1 batches, beanstalkd pipelining,
#                 BullMQ addBulk; cleanup: /v1/finish batches, Queue.obliterate); default 1
#   --delayq-api  API of the delayq rows: compat (the compat API, the default: one job per
#                 request, like the peers) or v1
#   --workloads   any of w1 w2 w3 w4 (default "w1 w2"); W3 (steady fire over --backlog
#                 far-future jobs) and W4 (100,000-job burst) have no BullMQ driver
#   --out         default bench/results/<UTC date>-<git rev-parse --short HEAD>/compare; a
#                 directory that already holds results is refused
#   --skip-build  use the binaries in target/release as they are (machine.txt still names HEAD)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS=3
W2_RUNS=""
JOBS=50000
PENDING=1000000
SYSTEMS="delayq-redis delayq-embedded delayq-memory beanstalkd beanstalkd-binlog bullmq"
SKIP_BUILD=0
OUT=""
BATCH=1
DELAYQ_API=compat
WORKLOADS="w1 w2"
BACKLOG=1000000
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --w2-runs) W2_RUNS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --pending) PENDING="$2"; shift 2 ;;
    --big) PENDING=10000000; shift ;;
    --systems) SYSTEMS="$2"; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --backlog) BACKLOG="$2"; shift 2 ;;
    --delayq-api) DELAYQ_API="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
W2_RUNS="${W2_RUNS:-$RUNS}"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
OUT="${OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-$COMMIT/compare}"
if [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  echo "$OUT already holds results: pass --out DIR" >&2
  exit 2
fi
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
TMP="$(mktemp -d /tmp/delayq-compare.XXXXXX)"

# ---------- install ----------
need_apt=()
command -v beanstalkd >/dev/null 2>&1 || need_apt+=(beanstalkd)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]}"
  apt-get update -qq
  # policy-rc.d may refuse to start system instances; this script starts its own on free ports.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -d "$ROOT/bench/peers/bullmq/node_modules/bullmq" ]; then
  echo "installing bullmq (npm ci)"
  # npm 11's `ci` rejects this lock file over optional platform packages of msgpackr-extract
  # ("Missing: @msgpackr-extract/...-darwin-arm64 from lock file") although `install` leaves it
  # unchanged; `install` still installs the locked versions.
  (cd "$ROOT/bench/peers/bullmq" && { npm ci --no-audit --no-fund >/dev/null 2>&1 ||
    npm install --no-audit --no-fund >/dev/null; })
fi

# ---------- build ----------
if [ "$SKIP_BUILD" = 0 ]; then
  (cd "$ROOT" && cargo build --release -p delayq -p delayq-bench)
fi
BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="$ROOT/target/release/delayq"

# ---------- processes ----------
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

free_port() { "$BENCH" free-port; }

# stop PID: end one server started here, and wait for it.
stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

start_redis() { # -> REDIS_PORT REDIS_PID
  REDIS_PORT=$(free_port)
  local dir="$TMP/redis-$REDIS_PORT"
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/log" &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  wait_port "$REDIS_PORT" "$REDIS_PID" "$dir/log"
}

start_delayq() { # args: extra serve flags -> DQ_PORT DQ_PID
  DQ_PORT=$(free_port)
  local log="$TMP/delayq-$DQ_PORT.log"
  "$DELAYQ" serve --listen "127.0.0.1:$DQ_PORT" "$@" >"$log" 2>&1 &
  DQ_PID=$!
  PIDS+=("$DQ_PID")
  wait_port "$DQ_PORT" "$DQ_PID" "$log"
}

start_beanstalkd() { # args: extra flags -> BS_PORT BS_PID
  BS_PORT=$(free_port)
  local log="$TMP/beanstalkd-$BS_PORT.log"
  beanstalkd -l 127.0.0.1 -p "$BS_PORT" "$@" >"$log" 2>&1 &
  BS_PID=$!
  PIDS+=("$BS_PID")
  wait_port "$BS_PORT" "$BS_PID" "$log"
}

# Probe delayq once: if `delayq serve` does not start, the delayq rows are skipped.
DELAYQ_OK=1
if [ ! -x "$DELAYQ" ]; then
  DELAYQ_OK=0
else
  probe_dir="$TMP/probe"
  mkdir -p "$probe_dir"
  if start_delayq --data-dir "$probe_dir" 2>/dev/null; then stop "$DQ_PID"; else DELAYQ_OK=0; fi
fi
[ "$DELAYQ_OK" = 1 ] || echo "NOTE: delayq serve did not start; delayq rows are skipped" | tee "$OUT/NOTE"

W1_ARGS=(--jobs "$JOBS" --max-delay-s 3 --producers 8 --consumers 8 --batch "$BATCH" --json)
W2_ARGS=(--pending "$PENDING" --delay-s 3600 --producers 8 --batch "$BATCH" --json)
W3_ARGS=(--backlog "$BACKLOG" --rate 2000 --duration-s 30 --fire-delay-s 2 --producers 8
  --consumers 8 --batch "$BATCH" --json)
W4_ARGS=(--jobs 100000 --lead-s 30 --producers 8 --consumers 8 --batch "$BATCH" --json)

# run_system NAME W1|W2: one fresh server, one workload, one JSON line appended.
run_system() {
  local sys="$1" wl="$2" line=""
  local -a wargs
  case "$wl" in
    w1) wargs=("${W1_ARGS[@]}") ;;
    w2) wargs=("${W2_ARGS[@]}") ;;
    w3) wargs=("${W3_ARGS[@]}") ;;
    w4) wargs=("${W4_ARGS[@]}") ;;
  esac
  case "$sys" in
    delayq-redis)
      [ "$DELAYQ_OK" = 1 ] || return 0
      start_redis
      start_delayq --redis "redis://127.0.0.1:$REDIS_PORT/0"
      line=$("$BENCH" "$wl" --api "$DELAYQ_API" --addr "127.0.0.1:$DQ_PORT" --label "$sys" \
        --server-pid "$DQ_PID" --redis-url "redis://127.0.0.1:$REDIS_PORT/0" "${wargs[@]}") || true
      stop "$DQ_PID"; stop "$REDIS_PID" ;;
    delayq-embedded)
      [ "$DELAYQ_OK" = 1 ] || return 0
      local dir="$TMP/embedded-$RANDOM$RANDOM"
      mkdir -p "$dir"
      start_delayq --data-dir "$dir"
      line=$("$BENCH" "$wl" --api "$DELAYQ_API" --addr "127.0.0.1:$DQ_PORT" --label "$sys" \
        --server-pid "$DQ_PID" --data-dir "$dir" "${wargs[@]}") || true
      stop "$DQ_PID"; rm -rf "$dir" ;;
    delayq-memory)
      [ "$DELAYQ_OK" = 1 ] || return 0
      start_delayq --memory
      line=$("$BENCH" "$wl" --api "$DELAYQ_API" --addr "127.0.0.1:$DQ_PORT" --label "$sys" \
        --server-pid "$DQ_PID" "${wargs[@]}") || true
      stop "$DQ_PID" ;;
    beanstalkd)
      start_beanstalkd
      line=$("$BENCH" "$wl" --target beanstalkd --addr "127.0.0.1:$BS_PORT" --label "$sys" \
        --server-pid "$BS_PID" "${wargs[@]}") || true
      stop "$BS_PID" ;;
    beanstalkd-binlog)
      local dir="$TMP/binlog-$RANDOM$RANDOM"
      mkdir -p "$dir"
      start_beanstalkd -b "$dir"
      line=$("$BENCH" "$wl" --target beanstalkd --addr "127.0.0.1:$BS_PORT" --label "$sys" \
        --server-pid "$BS_PID" --data-dir "$dir" "${wargs[@]}") || true
      stop "$BS_PID"; rm -rf "$dir" ;;
    bullmq)
      case "$wl" in w1|w2) ;; *) echo "bullmq: no $wl driver" >&2; return 0 ;; esac
      start_redis
      line=$(cd "$ROOT/bench/peers/bullmq" && node bench.mjs "$wl" \
        --redis-url "redis://127.0.0.1:$REDIS_PORT/0" --label "$sys" \
        --server-pid "$REDIS_PID" "${wargs[@]}") || true
      stop "$REDIS_PID" ;;
    *) echo "unknown system $sys" >&2; return 1 ;;
  esac
  if [ -n "$line" ]; then
    echo "$line" >> "$RESULTS"
  else
    echo "$sys $wl: no result (see above)" | tee -a "$OUT/NOTE" >&2
  fi
}

{
  echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "versions: $(beanstalkd -v 2>&1 | head -1); $(redis-server --version | cut -d' ' -f1-3);" \
    "node $(node --version); bullmq $(node -p "require('$ROOT/bench/peers/bullmq/node_modules/bullmq/package.json').version");" \
    "delayq $COMMIT$([ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.lock)" ] && echo ' (with uncommitted changes)')"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: bench/compare.sh --runs $RUNS --w2-runs $W2_RUNS --jobs $JOBS --pending $PENDING" \
    "--batch $BATCH --delayq-api $DELAYQ_API --workloads \"$WORKLOADS\" --backlog $BACKLOG" \
    "--systems \"$SYSTEMS\""
} | tee "$OUT/machine.txt"

for wl in $WORKLOADS; do
  n="$RUNS"
  [ "$wl" = w2 ] && n="$W2_RUNS"
  for run in $(seq "$n"); do
    for sys in $SYSTEMS; do
      echo "== run $run/$n: $sys $wl" >&2
      run_system "$sys" "$wl"
    done
  done
done

baseline=delayq-redis
[ "$DELAYQ_OK" = 1 ] || baseline=beanstalkd
"$BENCH" compare --baseline "$baseline" "$RESULTS" | tee "$OUT/summary.md"
echo "results: $OUT"
