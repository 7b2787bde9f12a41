#!/usr/bin/env bash
# amqp.sh: RabbitMQ delayed messages, delayq's intake against RabbitMQ's own TTL + dead-letter
# queues (the usual method without the delayed-message-exchange plugin, which Debian does not
# package), on the machine's broker (127.0.0.1:5672, guest/guest), in one run.
#
# Per round and per SYSTEM, with `delayq-bench amqp`:
#   steady   RATE messages/s for DURATION s, each delayed 2 s: lateness of the arrival at the
#            target queue against send + delay (p50/p99/max), lost, duplicates, early
#   spread   the same with delays uniform in 1-5 s (TTL queues expire only at their head)
#   burst    20,000 messages/s offered for 5 s, delay 0: messages per second reaching the target
#            (the intake-to-publish throughput)
# SYSTEM delayq: a fresh `delayq serve --amqp ... --amqp-intake <own queue>` per round on STORE
# (embedded: a fresh data dir; redis: its own redis-server, no persistence). SYSTEM ttl-dlx:
# RabbitMQ alone. Each run is one JSON line in $OUT/results.jsonl; the end prints a table.
#
# Usage: bench/amqp.sh [--rounds 1] [--rate 2000] [--duration-s 20] [--store embedded|redis]
#                      [--out DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
ROUNDS=1
RATE=2000
DURATION=20
STORE=embedded
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --duration-s) DURATION="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir amqp

BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="$ROOT/target/release/delayq"
need_built "cargo build --release -p delayq -p delayq-bench" "$BENCH" "$DELAYQ"
(exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null ||
  { echo "no RabbitMQ on 127.0.0.1:5672: apt-get install -y rabbitmq-server" >&2; exit 1; }
AMQP="amqp://guest:guest@127.0.0.1:5672/%2f"

TMP="$(mktemp -d /tmp/delayq-amqp.XXXXXX)"

# measure LABEL SHAPE ARGS...: one delayq-bench amqp run, one JSON line appended.
measure() {
  local label="$1" shape="$2" line
  shift 2
  "$BENCH" amqp --amqp "$AMQP" --json --label "$label" "$@" >"$TMP/out.json" 2>"$TMP/bench.err" ||
    { echo "$label $shape: the run failed:" >&2; tail -5 "$TMP/bench.err" >&2; }
  line=$(grep -m1 '^{' "$TMP/out.json" || true)
  if [ -z "$line" ]; then
    echo "$label $shape: no result" | tee -a "$OUT/NOTE" >&2
    return 0
  fi
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["workload"]="amqp-"+sys.argv[2]; print(json.dumps(r))' \
    "$line" "$shape" >>"$OUT/results.jsonl"
}

shapes() {
  local label="$1"
  shift
  measure "$label" steady "$@" --rate "$RATE" --seconds "$DURATION" --delay-ms 2000
  measure "$label" spread "$@" --rate "$RATE" --seconds "$DURATION" --delay-ms 1000 --max-delay-ms 5000
  measure "$label" burst "$@" --rate 20000 --seconds 5 --delay-ms 0
}

run() {
  local round="$1" intake
  local work="$TMP/run-$round"
  mkdir -p "$work"
  start_store "$STORE" "$work/data"
  intake="delayq-bench.intake.$COMMIT.$round.$$"
  start_delayq "$DELAYQ" "${STORE_ARGS[@]}" --amqp "$AMQP" --amqp-intake "$intake"
  sleep 1
  shapes "delayq-$STORE" --system delayq --intake "$intake"
  grep -m5 -E 'WARN|ERROR' "$DQ_LOG" >>"$OUT/server-warnings.txt" || true
  stop "$DQ_PID"
  if [ -n "$REDIS_PID" ]; then stop "$REDIS_PID"; fi
  # The intake queue delayq declared (durable) goes with the run.
  rabbitmqctl delete_queue "$intake" >/dev/null 2>&1 || true
  shapes "rabbitmq-ttl-dlx" --system ttl-dlx
  rm -rf "$work"
}

{
  echo "machine: $(nproc) cores, $(mem_gib), $(cpu_model)"
  echo "versions: RabbitMQ $(rabbitmqctl version 2>/dev/null || echo '?'); $(delayq_build)"
  echo "command: bench/amqp.sh --rounds $ROUNDS --rate $RATE --duration-s $DURATION --store $STORE"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$OUT/README.txt"
for round in $(seq "$ROUNDS"); do
  run "$round"
done
python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cols = ["sent_per_s", "arrived_per_s", "lateness_p50_ms", "lateness_p99_ms", "lateness_p999_ms",
        "lateness_max_ms", "early", "lost", "duplicates"]
print("| workload | system | params | " + " | ".join(cols) + " |")
print("|" + "---|" * (3 + len(cols)))
for r in rows:
    p = r["params"]
    ps = "rate=%s s=%s delay=%s..%s" % (p["rate"], p["seconds"], p["delay_ms"],
                                        p["max_delay_ms"] or p["delay_ms"])
    print("| %s | %s | %s | " % (r["workload"], r["label"], ps)
          + " | ".join("%.1f" % r["metrics"][c] for c in cols) + " |")
EOF
