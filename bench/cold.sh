#!/usr/bin/env bash
# cold.sh: the embedded store beyond RAM (docs/operations.md, "Sizing"): a fresh release delayq
# with `--memory-window`, filled with --pending jobs (30-byte bodies, 15-character ids, due at
# pseudo-random times over the next 30 days, pushed in /v1 batches of 100), then:
#   1. the fill: push rate, server RSS and data directory size after each tenth (w2.json);
#   2. the dashboard's calls over that backlog: stats, pages, "what fires next" (listing.json);
#   3. W3 over it: 2,000 jobs/s due 2 s after their push, one per request (w3.json);
#   4. kill -9 and restart: seconds to /readyz, and to a job pushed and delivered (restart.txt);
#   5. the dashboard's calls again after the restart (listing-after-restart.json).
# Writes them and machine.txt to bench/results/<UTC date>-<commit>/cold/ (or --out DIR).
#
#   bench/cold.sh [--pending N] [--window SECS] [--out DIR] [--skip-build]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
COMMIT=$(git rev-parse --short HEAD)

pending=100000000
window=3600
OUT=
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --pending) pending=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --skip-build) build=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

TMP=$(mktemp -d)
results_dir cold
[ "$build" = 0 ] || build_release
bin=$ROOT/target/release
{
  echo "bench/cold.sh --pending $pending --window $window"
  echo "commit $(git rev-parse HEAD)"
  uname -srm
  nproc
  grep -m1 'model name' /proc/cpuinfo || true
  grep MemTotal /proc/meminfo
  df -h "$TMP" | tail -1
} > "$OUT/machine.txt"

data=$TMP/data
start_delayq "$bin/delayq" --data-dir "$data" --memory-window "$window"
port=$DQ_PORT
server=$DQ_PID
bench() { "$bin/delayq-bench" "$@" --addr "127.0.0.1:$port" --no-progress --json; }

echo "fill: $pending jobs" >&2
bench w2 --api v1 --batch 100 --body-bytes 30 --pending "$pending" --spread-h 720 --marks 10 \
  --id-digits 14 --topic backlog --server-pid "$server" --data-dir "$data" --no-cleanup \
  > "$OUT/w2.json"
echo "listing" >&2
bench listing --api v1 --pending 0 --others 0 --topic backlog --rounds 20 > "$OUT/listing.json"
echo "w3" >&2
bench w3 --api v1 --batch 1 --backlog 0 --rate 2000 --fire-delay-s 2 --duration-s 30 \
  --topic stream > "$OUT/w3.json"
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")

echo "kill -9 and restart" >&2
kill -9 "$server"
wait "$server" 2>/dev/null || true
killed=$(date +%s.%N)
# Again on the same port and log, without waiting: the time to /readyz is measured below.
serve_delayq "$bin/delayq" --data-dir "$data" --memory-window "$window"
server=$DQ_PID
until curl -sf "http://127.0.0.1:$port/readyz" > /dev/null; do
  kill -0 "$server" || { tail -20 "$DQ_LOG" >&2; exit 1; }
  sleep 0.05
done
ready=$(date +%s.%N)
# A job due now, pushed and delivered: the store takes pushes and hands out jobs again.
until curl -sf -X POST "http://127.0.0.1:$port/v1/jobs" -H 'content-type: application/json' \
  -d '{"topic":"after-restart","id":"first-after-restart","body":"x"}' > /dev/null; do sleep 0.05; done
until curl -sf -X POST "http://127.0.0.1:$port/v1/reserve" -H 'content-type: application/json' \
  -d '{"topics":["after-restart"],"timeout_ms":100}' | grep -q first-after-restart; do sleep 0.05; done
delivered=$(date +%s.%N)
{
  echo "RSS before the kill: $((rss_kb / 1024)) MiB"
  echo "data directory: $(du -sm "$data" | cut -f1) MiB ($(du -sm "$data/cold" | cut -f1) MiB cold tier)"
  echo "kill -9 to /readyz: $(awk "BEGIN {printf \"%.2f\", $ready - $killed}") s"
  echo "kill -9 to a job pushed and delivered: $(awk "BEGIN {printf \"%.2f\", $delivered - $killed}") s"
} > "$OUT/restart.txt"
bench listing --api v1 --pending 0 --others 0 --topic backlog --rounds 5 \
  > "$OUT/listing-after-restart.json"
"$bin/delayq-bench" compare "$OUT"/w2.json "$OUT"/w3.json "$OUT"/listing*.json \
  > "$OUT/tables.md" 2>&1 || true
cat "$OUT/restart.txt"
echo "results in $OUT" >&2
