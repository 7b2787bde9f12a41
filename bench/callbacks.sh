#!/usr/bin/env bash
# callbacks.sh: push delivery (HTTP callbacks) beside pull, per store, on the same server.
#
# Each round starts, per STORE, one fresh `delayq serve --callback-allow 127.0.0.1` on free
# loopback ports (redis: its own redis-server, no persistence; embedded: a fresh data dir;
# memory: --memory) and runs against it, in this order:
#   w1                  W1 over the compat API, 8 producers and 8 consumers (the pull figure:
#                       e2e_jobs_per_s is what the consumers finish per second)
#   callback-lifecycle  W1's shape with callbacks instead of consumers (/v1, one job per
#                       request, 8 producers): callbacks_per_s from the start to the last call
#   callback-burst      N callback jobs due in one millisecond (/v1 batches of 100):
#                       callbacks_per_s from that instant to the last call
#   callback-steady     2,000 callback jobs/s for DURATION s, each due 2 s after its push (one
#                       job per request): lateness p50/p99 of the call
# The receiver is delayq-bench's own (hyper, 127.0.0.1, answers 200 at once). Each run is one
# JSON line in $OUT/results.jsonl, labelled with its STORE, with delayq_cpu_us_per_job and
# redis_cpu_us_per_job added (from /proc/<pid>/stat over the run). The end prints medians.
#
# Usage: bench/callbacks.sh [--rounds 1] [--jobs 50000] [--rate 2000] [--duration-s 20]
#                           [--server-args "..."] [--out DIR] STORE...
#   STORE          redis, embedded or memory
#   --server-args  more `delayq serve` flags, e.g. "--callback-max-in-flight-per-host 256"
#   --out          default bench/results/<UTC date>-<git rev-parse --short HEAD>/callbacks
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
ROUNDS=1
JOBS=50000
RATE=2000
DURATION=20
SERVER_ARGS=""
OUT=""
STORES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --duration-s) DURATION="$2"; shift 2 ;;
    --server-args) SERVER_ARGS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "unknown argument: $1" >&2; exit 2 ;;
    redis|embedded|memory) STORES+=("$1"); shift ;;
    *) echo "unknown STORE $1 (redis, embedded or memory)" >&2; exit 2 ;;
  esac
done
[ ${#STORES[@]} -gt 0 ] || { echo "no STORE given (bench/callbacks.sh --help)" >&2; exit 2; }

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir callbacks

BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="$ROOT/target/release/delayq"
need_built "cargo build --release -p delayq -p delayq-bench" "$BENCH" "$DELAYQ"
need_cmd redis-server "apt-get install -y redis-server"

TMP="$(mktemp -d /tmp/delayq-callbacks.XXXXXX)"

# measure LABEL JOBS DPID RPID WORK ARGS...: one delayq-bench run, one JSON line appended.
measure() {
  local label="$1" jobs="$2" dpid="$3" rpid="$4" work="$5" d0 r0 d1 r1 line
  shift 5
  d0=$(ticks "$dpid"); r0=$(ticks "$rpid")
  "$BENCH" "$@" --json --no-progress --server-pid "$dpid" >"$work/out.json" 2>"$work/bench.err" ||
    { echo "$label $1: the run failed:" >&2; tail -5 "$work/bench.err" >&2; }
  d1=$(ticks "$dpid"); r1=$(ticks "$rpid")
  line=$(grep -m1 '^{' "$work/out.json" || true)
  if [ -z "$line" ]; then
    echo "$label $1: no result" | tee -a "$OUT/NOTE" >&2
    return 0
  fi
  python3 - "$line" "$label" "$jobs" "$((d1 - d0))" "$((r1 - r0))" >>"$OUT/results.jsonl" <<'EOF'
import json, sys
line, label, jobs, dq, rd = sys.argv[1:]
r = json.loads(line)
r["label"] = label
m = r["metrics"]
n = float(m.get("delivered") or jobs)
m["delayq_cpu_us_per_job"] = 1e6 * int(dq) / 100 / n
if label.startswith("redis"):
    m["redis_cpu_us_per_job"] = 1e6 * int(rd) / 100 / n
print(json.dumps(r))
EOF
}

run() {
  local store="$1" round="$2"
  local work="$TMP/run-$round-$store" dpid rpid
  mkdir -p "$work"
  start_store "$store" "$work/data"
  # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
  start_delayq "$DELAYQ" "${STORE_ARGS[@]}" --callback-allow 127.0.0.1 $SERVER_ARGS
  dpid=$DQ_PID rpid=$REDIS_PID
  local addr="127.0.0.1:$DQ_PORT"
  measure "$store" "$JOBS" "$dpid" "$rpid" "$work" w1 --api compat --addr "$addr" \
    --jobs "$JOBS" --max-delay-s 3 --producers 8 --consumers 8
  measure "$store" "$JOBS" "$dpid" "$rpid" "$work" callback --shape lifecycle --api v1 \
    --addr "$addr" --jobs "$JOBS" --max-delay-s 3 --producers 8 --batch 1
  measure "$store" "$JOBS" "$dpid" "$rpid" "$work" callback --shape burst --api v1 \
    --addr "$addr" --jobs "$JOBS" --lead-s 10 --producers 8 --batch 100
  measure "$store" "$((RATE * DURATION))" "$dpid" "$rpid" "$work" callback --shape steady \
    --api v1 --addr "$addr" --rate "$RATE" --duration-s "$DURATION" --fire-delay-s 2 \
    --producers 8 --batch 1
  grep -m5 -E 'WARN|ERROR' "$DQ_LOG" >>"$OUT/server-warnings.txt" || true
  stop "$dpid"
  if [ -n "$rpid" ]; then stop "$rpid"; fi
  rm -rf "$work"
}

{
  echo "machine: $(nproc) cores, $(mem_gib), $(cpu_model)"
  echo "versions: $(redis-server --version | cut -d' ' -f1-3); $(delayq_build)"
  echo "command: bench/callbacks.sh --rounds $ROUNDS --jobs $JOBS --rate $RATE --duration-s $DURATION${SERVER_ARGS:+ --server-args \"$SERVER_ARGS\"} ${STORES[*]}"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$OUT/machine.txt"

rounds run "${STORES[@]}"

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
rows = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows.setdefault((r["label"], r["workload"]), []).append(r["metrics"])
cols = ["e2e_jobs_per_s", "callbacks_per_s", "lateness_p50_ms", "lateness_p99_ms",
        "lateness_max_ms", "early", "lost", "duplicates", "retried_calls",
        "delayq_cpu_us_per_job", "redis_cpu_us_per_job"]
print("Medians of runs (every run in results.jsonl)")
print("| store | workload | runs | " + " | ".join(cols) + " |")
print("|---|---|---:|" + "---:|" * len(cols))
for (label, workload), ms in rows.items():
    cells = []
    for c in cols:
        v = [m[c] for m in ms if c in m]
        cells.append(f"{statistics.median(v):,.2f}" if v else "-")
    print(f"| {label} | {workload} | {len(ms)} | " + " | ".join(cells) + " |")
EOF
echo "results: $OUT"
