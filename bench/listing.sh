#!/usr/bin/env bash
# listing.sh: the dashboard's listing calls over many pending jobs (`delayq-bench listing`), on
# the embedded store and on a private Redis (its own redis-server on a free port, never the
# shared one), each against a fresh release delayq. Writes one JSON line per store and the
# tables to bench/results/<UTC date>-<commit>/listing/ (or --out DIR).
#
#   bench/listing.sh [--pending N] [--stores "embedded redis"] [--out DIR] [--skip-build]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

pending=1000000
stores="embedded redis"
out="bench/results/$(date -u +%Y-%m-%d)-$(git rev-parse --short HEAD)/listing"
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --pending) pending=$2; shift 2 ;;
    --stores) stores=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-build) build=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

TMP=$(mktemp -d)
[ "$build" = 0 ] || build_release
bin=target/release
mkdir -p "$out"
{
  echo "bench/listing.sh --pending $pending --stores \"$stores\""
  echo "commit $(git rev-parse HEAD)"
  uname -srm
  nproc
  grep -m1 'model name' /proc/cpuinfo || true
  redis-server --version
} > "$out/machine.txt"

for store in $stores; do
  case "$store" in embedded|redis) ;; *) echo "unknown store $store" >&2; exit 2 ;; esac
  start_store "$store" "$TMP/data"
  start_delayq "$bin/delayq" "${STORE_ARGS[@]}"
  "$bin/delayq-bench" listing --api v1 --addr "127.0.0.1:$DQ_PORT" --label "delayq-$store" \
    --batch 1000 --producers 4 --pending "$pending" --no-progress --json \
    | tee -a "$out/results.jsonl"
  stop_all
  rm -rf "$TMP/data"
done
