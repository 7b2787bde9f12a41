#!/usr/bin/env bash
# flow.sh: how closely a topic's rate limit (docs/flow-control.md) holds with push delivery.
#
# For each STORE and each RATE, one fresh `delayq serve --callback-allow 127.0.0.1`; the bench's
# topic gets `rate_per_s` RATE with a burst of RATE x BURST_MS / 1000, at least 1 (PUT
# /v1/topics/{topic}/settings; default 10 ms of hand-outs: see docs/flow-control.md), then
# `delayq-bench callback --shape burst` pushes RATE x SECONDS callback jobs due in one
# millisecond, 10 s ahead, to the bench's own receiver. callbacks_per_s (from that instant to
# the last first call) against RATE is the limit's accuracy: 1.00 is exact, above 1 too many.
#
# One JSON line per run in $OUT/results.jsonl, the table in $OUT/results.txt.
#
# Usage: bench/flow.sh [--rates 10,1000,10000] [--seconds 10] [--burst-ms 10] [--out DIR] STORE...
#   STORE  redis, embedded or memory
#   --out  default bench/results/<UTC date>-<git rev-parse --short HEAD>/flow
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
RATES=10,1000,10000
SECONDS_PER_RUN=10
BURST_MS=10
OUT=""
STORES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) RATES="$2"; shift 2 ;;
    --seconds) SECONDS_PER_RUN="$2"; shift 2 ;;
    --burst-ms) BURST_MS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "unknown argument: $1" >&2; exit 2 ;;
    redis|embedded|memory) STORES+=("$1"); shift ;;
    *) echo "unknown STORE $1 (redis, embedded or memory)" >&2; exit 2 ;;
  esac
done
[ ${#STORES[@]} -gt 0 ] || { echo "no STORE given (bench/flow.sh --help)" >&2; exit 2; }

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir flow

BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="$ROOT/target/release/delayq"
need_built "cargo build --release -p delayq -p delayq-bench" "$BENCH" "$DELAYQ"
need_cmd redis-server "apt-get install -y redis-server"
need_cmd curl

TMP="$(mktemp -d /tmp/delayq-flow.XXXXXX)"

run() {
  local store="$1" rate="$2"
  local work="$TMP/run-$store-$rate" hp topic="flow-$rate"
  local jobs=$((rate * SECONDS_PER_RUN)) burst=$((rate * BURST_MS / 1000))
  [ "$burst" -ge 1 ] || burst=1
  mkdir -p "$work"
  start_store "$store" "$work/data"
  start_delayq "$DELAYQ" "${STORE_ARGS[@]}" --callback-allow 127.0.0.1
  hp=$DQ_PORT
  curl -sf -X PUT "http://127.0.0.1:$hp/v1/topics/$topic/settings" \
    -d "{\"rate_per_s\": $rate, \"burst\": $burst}" >/dev/null
  "$BENCH" callback --shape burst --api v1 --addr "127.0.0.1:$hp" --topic "$topic" \
    --jobs "$jobs" --lead-s 10 --producers 8 --batch 100 --drain-timeout-s 600 \
    --json --no-progress >"$work/out.json" 2>"$work/bench.err" ||
    { echo "$store $rate: the run failed:" >&2; tail -5 "$work/bench.err" >&2; }
  local line
  line=$(grep -m1 '^{' "$work/out.json" || true)
  if [ -n "$line" ]; then
    python3 - "$line" "$store" "$rate" "$burst" >>"$OUT/results.jsonl" <<'PY'
import json, sys
line, store, rate, burst = sys.argv[1:]
r = json.loads(line)
r["label"] = store
r["params"]["rate_per_s"] = int(rate)
r["params"]["burst"] = int(burst)
print(json.dumps(r))
PY
  else
    echo "$store $rate: no result" | tee -a "$OUT/NOTE" >&2
  fi
  stop "$DQ_PID"
  if [ -n "$REDIS_PID" ]; then stop "$REDIS_PID"; fi
  rm -rf "$work"
}

{
  echo "machine: $(nproc) cores, $(mem_gib), $(cpu_model)"
  echo "command: bench/flow.sh --rates $RATES --seconds $SECONDS_PER_RUN --burst-ms $BURST_MS ${STORES[*]}"
  echo "build: $COMMIT"
} >"$OUT/machine.txt"

IFS=, read -r -a rate_list <<<"$RATES"
for store in "${STORES[@]}"; do
  for rate in "${rate_list[@]}"; do
    echo "== $store, $rate/s" >&2
    run "$store" "$rate"
  done
done

python3 - "$OUT/results.jsonl" >"$OUT/results.txt" <<'PY'
import json, sys
print(f"{'store':10} {'rate/s':>8} {'burst':>6} {'jobs':>8} {'callbacks/s':>12} {'ratio':>6} {'lost':>5} {'dup':>5}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    m, rate = r["metrics"], r["params"]["rate_per_s"]
    got = m.get("callbacks_per_s", 0)
    print(f"{r['label']:10} {rate:>8} {r['params'].get('burst', 1):>6} {int(m.get('jobs', 0)):>8} {got:>12.1f} {got / rate:>6.3f}"
          f" {int(m.get('lost', 0)):>5} {int(m.get('duplicates', 0)):>5}")
PY
cat "$OUT/results.txt"
