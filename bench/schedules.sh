#!/usr/bin/env bash
# schedules.sh: recurring schedules at scale (`delayq-bench schedules`): --count schedules
# created over /v1, then --ticks minute ticks at which all of them fire, on the memory store,
# the embedded store and a private Redis (its own redis-server on a free port, never the shared
# one), each against a fresh release delayq. Per store: schedules created per second, each
# tick's push lateness (p50, p99, max), the server's CPU per tick (and redis-server's), and how
# idle the machine was. Writes one JSON line per store and machine.txt to
# bench/results/<UTC date>-<commit>/schedules/ (or --out DIR).
#
# --builds "NAME=DIR ...": compare builds side by side in one run: for each store, each build in
# turn (its delayq and delayq-bench from DIR, labelled delayq-<store>-<NAME>), instead of this
# checkout's target/release. E.g. --builds "before=/tmp/base/release after=target/release".
#
#   bench/schedules.sh [--count N] [--ticks N] [--producers N] [--stores "memory embedded redis"]
#                      [--builds "NAME=DIR ..."] [--out DIR] [--skip-build]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
COMMIT=$(git rev-parse --short HEAD)

count=100000
ticks=3
producers=16
stores="memory embedded redis"
OUT=
build=1
builds=
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count=$2; shift 2 ;;
    --ticks) ticks=$2; shift 2 ;;
    --producers) producers=$2; shift 2 ;;
    --stores) stores=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --builds) builds=$2; build=0; shift 2 ;;
    --skip-build) build=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v redis-server > /dev/null || case " $stores " in
  *" redis "*) echo "redis-server not found: apt-get install redis-server" >&2; exit 1 ;;
esac

TMP=$(mktemp -d)
results_dir schedules
[ "$build" = 0 ] || build_release
[ -n "$builds" ] || builds="=target/release"
{
  echo "bench/schedules.sh --count $count --ticks $ticks --producers $producers --stores \"$stores\" --builds \"$builds\""
  for b in $builds; do
    [ -z "${b%%=*}" ] || echo "build ${b%%=*}: ${b#*=} ($(sha256sum "${b#*=}/delayq" | cut -c1-12))"
  done
  echo "commit $(git rev-parse HEAD)"
  uname -srm
  nproc
  grep -m1 'model name' /proc/cpuinfo || true
  redis-server --version 2>/dev/null || true
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"

for store in $stores; do
for b in $builds; do
  name=${b%%=*}
  bin=${b#*=}
  label="delayq-$store${name:+-$name}"
  BENCH=$bin/delayq-bench # this build's, free_port's too
  start_store "$store" "$TMP/data"
  redis_pid=()
  if [ -n "$REDIS_PID" ]; then redis_pid=(--redis-pid "$REDIS_PID"); fi
  start_delayq "$bin/delayq" "${STORE_ARGS[@]}"
  echo "$label: load average at its start $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
  "$BENCH" schedules --api v1 --addr "127.0.0.1:$DQ_PORT" --label "$label" \
    --count "$count" --ticks "$ticks" --producers "$producers" --server-pid "$DQ_PID" \
    "${redis_pid[@]}" --keep --no-progress --json \
    | tee -a "$OUT/results.jsonl"
  stop_all
  rm -rf "$TMP/data"
done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
# One line per store: the figures docs/benchmarks.md quotes.
python3 - "$OUT/results.jsonl" <<'PY' | tee "$OUT/summary.txt"
import json, sys
cols = [("create_per_s", "created/s", 0), ("lateness_p50_ms_median", "p50 ms", 0),
        ("lateness_p99_ms_median", "p99 ms", 0), ("lateness_p99_ms_worst", "worst p99 ms", 0),
        ("lateness_max_ms_median", "max ms", 0), ("cpu_per_tick_s_median", "CPU s/tick", 2),
        ("redis_cpu_per_tick_s_median", "redis CPU s/tick", 2), ("machine_idle_pct", "idle %", 1),
        ("missing", "missing", 0), ("extra", "extra", 0)]
print("| store | " + " | ".join(c[1] for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    m = r["metrics"]
    cells = [f"{m[k]:,.{d}f}" if k in m else "" for k, _, d in cols]
    print(f"| {r['label']} | " + " | ".join(cells) + " |")
PY
