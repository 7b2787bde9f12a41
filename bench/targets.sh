#!/usr/bin/env bash
# targets.sh: the workloads compare.sh does not run, against delayq on Redis: the burst, the
# steady stream over a small and a huge backlog, 10,000,000 pending jobs, and batch push.
#
# For each run: a fresh redis-server (--save "" --appendonly no) and a fresh `delayq serve
# --redis` (default settings: one shard) on free loopback ports, one delayq-bench workload with
# --json, then both are stopped. Runs: W4 burst x3, W3 steady fire over 10,000 pending x3, W2
# with 10,000,000 pending x1 (/v1 batches of 100; ~2 GB of Redis), W3 over 10,000,000 pending
# x2 (backlog filled 100 per request, stream one job per request), W2 1,000,000 over /v1
# batches of 100 x2 (the batch-push figure). Each workload's JSON lines go to $OUT/<name>.jsonl,
# every command to $OUT/commands.txt, the machine, versions and delayq commit to
# $OUT/machine.txt. Needs a release build (cargo build --release --workspace); 10-35 minutes on
# a 2-core machine.
#
# Usage: bench/targets.sh [--out DIR]
#   default DIR: bench/results/<UTC date>-<git rev-parse --short HEAD>/targets; a directory that
#   already holds results is refused
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/target/release"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
OUT="$ROOT/bench/results/$(date -u +%Y-%m-%d)-$COMMIT/targets"
[ "${1:-}" = "--out" ] && OUT="$2"
if [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  echo "$OUT already holds results: pass --out DIR" >&2
  exit 2
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # redis-server opens its log file after changing to --dir
for b in delayq delayq-bench; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: run cargo build --release --workspace" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "redis-server not on PATH: apt-get install -y redis-server" >&2; exit 1; }
free_port() { "$BIN/delayq-bench" free-port; }
DQ=""; RP=""
cleanup() {
  [ -n "$DQ" ] && kill "$DQ" 2>/dev/null && wait "$DQ" 2>/dev/null
  [ -n "$RP" ] && redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1
  DQ=""; RP=""
}
trap cleanup EXIT
echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%d GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" > "$OUT/machine.txt"
echo "versions: $(redis-server --version | cut -d' ' -f3); delayq $COMMIT$([ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.lock)" ] && echo ' (with uncommitted changes)')" >> "$OUT/machine.txt"
echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$OUT/machine.txt"
one() { # name, then delayq-bench arguments
  local name=$1; shift
  RP=$(free_port); local HP; HP=$(free_port)
  redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --logfile "$OUT/redis-$name.log" --dir "$OUT"
  for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
  "$BIN/delayq" serve --redis "redis://127.0.0.1:$RP" --listen "127.0.0.1:$HP" >"$OUT/delayq-$name.log" 2>&1 &
  DQ=$!
  for _ in $(seq 50); do curl -fs "http://127.0.0.1:$HP/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "$name: delayq-bench $* --addr 127.0.0.1:$HP --redis-url redis://127.0.0.1:$RP --server-pid $DQ --json" | tee -a "$OUT/commands.txt"
  "$BIN/delayq-bench" "$@" --addr "127.0.0.1:$HP" --redis-url "redis://127.0.0.1:$RP" \
    --server-pid "$DQ" --json >>"$OUT/$name.jsonl" 2>>"$OUT/$name.err"
  cleanup
}
for _ in 1 2 3; do one w4 w4 --api v1 --batch 100 --label delayq-redis; done
for _ in 1 2 3; do one w3-10k w3 --api v1 --batch 1 --backlog 10000 --backlog-batch 100 --label delayq-redis; done
one w2-10m w2 --api v1 --batch 100 --pending 10000000 --label delayq-redis
for _ in 1 2; do one w3-10m w3 --api v1 --batch 1 --backlog 10000000 --backlog-batch 100 --label delayq-redis; done
for _ in 1 2; do one w2-1m-batch w2 --api v1 --batch 100 --label delayq-redis; done
echo "results: $OUT"
