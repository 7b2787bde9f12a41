#!/usr/bin/env bash
# redis-functions.sh: what each of delayq's Redis functions costs Redis, in instructions
# counted by valgrind's callgrind, so a change to the Lua (lib.lua, push.lua, reserve.lua...)
# can be judged where wall time on a shared machine cannot.
#
# 1. Runs W1 with every job due at once (compat API, one job per request, 8 producers and 8
#    consumers, --jobs N) against delayq on a plain redis-server, and records every command
#    delayq sends with `redis-cli monitor`.
# 2. Starts a fresh redis-server under callgrind and has delayq load its function library.
# 3. Splits the capture by function (bench/redis_replay.py), calling this build's library:
#    push, reserve, remove (finish), plus empty (as many reserve calls on a topic with no job:
#    what a call costs before it does anything); replays each in turn with `redis-cli --pipe`,
#    counting each one's instructions alone.
#
# The replay runs every push first, then every reserve, then every finish, so each reserve
# finds all jobs ready (the batches are those of the capture, their jobs may differ); the
# counts are the same from one run of a build to the next for a given capture, so compare
# builds with one capture (--capture DIR reuses one).
#
# One line per function in $OUT/results.txt: calls, instructions per call and per W1 job.
#
# Usage: bench/redis-functions.sh [--jobs 5000] [--capture DIR] [--out DIR]
#   --capture  reuse an earlier run's $OUT/capture (skips step 1): compare builds on one capture
#   --out      default bench/results/<UTC date>-<git rev-parse --short HEAD>/redis-functions
# Environment: DELAYQ, the delayq binary whose library is measured (default
# target/release/delayq): another build's, to compare two builds on one capture. LUA_SRC, a
# directory of Lua sources (a copy of crates/delayq/src/store/redis, e.g. from `git archive`)
# whose library is measured instead (bench/redis_library.py builds it): a Lua change judged
# without building delayq.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
JOBS=5000
CAPTURE=""
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS="$2"; shift 2 ;;
    --capture) CAPTURE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
for tool in valgrind callgrind_control callgrind_annotate redis-server redis-cli python3; do
  need_cmd "$tool" "apt-get install -y valgrind redis-server python3"
done
BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="${DELAYQ:-$ROOT/target/release/delayq}"
need_built "cargo build --release -p delayq -p delayq-bench" "$BENCH" "$DELAYQ"

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir redis-functions
TMP="$(mktemp -d /tmp/delayq-redis-functions.XXXXXX)"

# Up to 60 s for each server to come up: redis-server under callgrind, and delayq loading its
# library into it, are slow.
WAIT_TRIES=600

{
  echo "machine: $(nproc) cores, $(cpu_model)"
  echo "versions: $(valgrind --version); $(redis-server --version | cut -d' ' -f1-3); $(delayq_build)"
  echo "command: ${LUA_SRC:+LUA_SRC=$LUA_SRC }bench/redis-functions.sh --jobs $JOBS${CAPTURE:+ --capture $CAPTURE}"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$OUT/machine.txt"

if [ -z "$CAPTURE" ]; then
  CAPTURE="$OUT/capture"
  mkdir -p "$CAPTURE"
  start_redis
  redis-cli -p "$REDIS_PORT" monitor >"$TMP/monitor.txt" &
  MPID=$!; PIDS+=("$MPID")
  start_delayq "$DELAYQ" --redis "redis://127.0.0.1:$REDIS_PORT/0"
  "$BENCH" w1 --api compat --addr "127.0.0.1:$DQ_PORT" --jobs "$JOBS" --max-delay-s 0 \
    --producers 8 --consumers 8 --no-progress --json >"$CAPTURE/w1.json"
  stop "$DQ_PID"
  stop "$MPID"
  stop "$REDIS_PID"
  cp "$TMP/monitor.txt" "$CAPTURE/monitor.txt"
fi

# The W1 job count of the capture (a reused one may differ from --jobs).
JOBS=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["params"]["jobs"])' \
  "$CAPTURE/w1.json")

UNDER=(valgrind --tool=callgrind --quiet --instr-atstart=no --callgrind-out-file="$TMP/cg.%p")
start_redis
UNDER=()
CG_PID="$REDIS_PID"
if [ -n "${LUA_SRC:-}" ]; then
  LIBRARY=delayq_0000000000000000
  python3 "$ROOT/bench/redis_library.py" "$LUA_SRC" "$LIBRARY" >"$TMP/library.lua"
  redis-cli -p "$REDIS_PORT" -x function load <"$TMP/library.lua" >/dev/null
else
  # delayq loads its function library at start.
  start_delayq "$DELAYQ" --redis "redis://127.0.0.1:$REDIS_PORT/0"
  stop "$DQ_PID"
  LIBRARY=$(redis-cli -p "$REDIS_PORT" function list | grep -m1 -o '^delayq_[0-9a-f]*$')
fi
python3 "$ROOT/bench/redis_replay.py" "$CAPTURE/monitor.txt" "$LIBRARY" "$TMP" | tee "$TMP/counts.txt"
for f in push reserve remove empty; do
  [ -f "$TMP/$f.resp" ] || { echo "no $f calls in $CAPTURE" >&2; exit 1; }
  callgrind_control -z "$CG_PID" >/dev/null
  callgrind_control -i on "$CG_PID" >/dev/null
  redis-cli -p "$REDIS_PORT" --pipe <"$TMP/$f.resp" >"$TMP/pipe-$f.txt"
  grep -q "errors: 0," "$TMP/pipe-$f.txt" || { echo "$f: replay failed:" >&2; cat "$TMP/pipe-$f.txt" >&2; exit 1; }
  callgrind_control -d "$f" "$CG_PID" >/dev/null
  callgrind_control -i off "$CG_PID" >/dev/null
done
kill -INT "$CG_PID"; wait "$CG_PID" 2>/dev/null || true

for f in push reserve remove empty; do
  dump=$(grep -l "^desc: Trigger: .*dump $f\$" "$TMP"/cg.* | head -1)
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  calls=$(awk -v f="$f" '$1 == f {print $2}' "$TMP/counts.txt")
  per_job=$((total / JOBS))
  [ "$f" = empty ] && per_job="-"
  printf '%-8s %6d calls %9d instructions per call %9s per W1 job\n' \
    "$f" "$calls" "$((total / calls))" "$per_job" | tee -a "$OUT/results.txt"
done
echo "results: $OUT"
