#!/usr/bin/env bash
# w1-rounds.sh: W1 in interleaved rounds, to compare builds, stores and settings, with the CPU
# each process spends per job.
#
# Each round runs every SYSTEM once, in the order given, each on a fresh server on free loopback
# ports: W1 over the compat API, one job per request (50,000 jobs, delays 0-3 s, 8 producers,
# 8 consumers unless --clients says otherwise; BullMQ: Queue.add and a Worker of that
# concurrency). The speed of a shared 2-core machine drifts by more than most changes are
# worth, so a before/after comparison only means something within rounds: run the two builds
# side by side, several rounds, and compare pairs.
#
# Each run is one JSON line in $OUT/results.jsonl (delayq-bench's shape, labelled with its
# SYSTEM), with three metrics added: delayq_cpu_us_per_job, redis_cpu_us_per_job (the
# redis-server of that run; for BullMQ the one it uses) and bench_cpu_us_per_job (the load
# generator; for BullMQ its one Node process, producers and worker), from /proc/<pid>/stat and
# the shell's own accounting over the whole run. The end prints medians per label
# ($OUT/summary.txt).
#
# SYSTEM is STORE[@DIR][+VAR=VALUE...]:
#   STORE        redis (delayq serve --redis, its own redis-server), embedded (delayq serve
#                --data-dir, a fresh directory), memory (delayq serve --memory: the ceiling, no
#                store cost), bullmq (BullMQ 6 on its own redis-server)
#   @DIR         run the delayq binary in DIR (another build) instead of target/release
#   +VAR=VALUE   environment of that delayq serve, e.g. +TOKIO_WORKER_THREADS=1
# The load generator is always target/release/delayq-bench.
#
# Usage: bench/w1-rounds.sh [--rounds 4] [--jobs 50000] [--max-delay-s 3] [--clients 8] [--syscalls]
#                           [--out DIR] SYSTEM...
#   --max-delay-s  delays are 0 to this many seconds; 0 runs capacity (every job due at once)
#   --clients   producers, and as many consumers (BullMQ: a Worker of that concurrency)
#   --syscalls  count delayq's system calls (futex, epoll_wait, reads and writes, fdatasync) and
#               context switches during each run with `perf stat` ($OUT/<round>-<label>.perf.txt)
#   --out       default bench/results/<UTC date>-<git rev-parse --short HEAD>/w1-rounds
#
# Examples:
#   # the build before a change against the current one, both stores, 6 rounds
#   git worktree add /tmp/before HEAD~1 && (cd /tmp/before && cargo build --release -p delayq)
#   bench/w1-rounds.sh --rounds 6 redis@/tmp/before/target/release redis \
#     embedded@/tmp/before/target/release embedded
#   # BullMQ beside delayq on both stores, and one tokio worker thread
#   bench/w1-rounds.sh --rounds 4 bullmq redis redis+TOKIO_WORKER_THREADS=1 embedded
#   # what each store costs over the in-memory ceiling
#   bench/w1-rounds.sh --rounds 4 memory embedded redis
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
ROUNDS=4
JOBS=50000
MAX_DELAY_S=3
CLIENTS=8
SYSCALLS=0
OUT=""
SYSTEMS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --max-delay-s) MAX_DELAY_S="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --syscalls) SYSCALLS=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "unknown argument: $1" >&2; exit 2 ;;
    *) SYSTEMS+=("$1"); shift ;;
  esac
done
[ ${#SYSTEMS[@]} -gt 0 ] || { echo "no SYSTEM given (bench/w1-rounds.sh --help)" >&2; exit 2; }
case "$CLIENTS" in ''|*[!0-9]*|0) echo "--clients: $CLIENTS is not a count of clients" >&2; exit 2 ;; esac

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir w1-rounds

BENCH="$ROOT/target/release/delayq-bench"
need_built "cargo build --release -p delayq-bench" "$BENCH"
need_cmd redis-server "apt-get install -y redis-server"
for s in "${SYSTEMS[@]}"; do
  case "$s" in
    bullmq*)
      [ -d "$ROOT/bench/peers/bullmq/node_modules/bullmq" ] ||
        { echo "BullMQ is not installed: (cd bench/peers/bullmq && npm install)" >&2; exit 1; } ;;
    redis*|embedded*|memory*) ;;
    *) echo "unknown SYSTEM $s (redis, embedded, memory or bullmq)" >&2; exit 2 ;;
  esac
done

TMP="$(mktemp -d /tmp/delayq-w1-rounds.XXXXXX)"

# run SYSTEM ROUND: one fresh server, one W1 run, one JSON line appended to results.jsonl.
run() {
  local spec="$1" round="$2" store dir env_s var
  store="${spec%%[@+]*}"
  dir="$ROOT/target/release"
  if [[ "$spec" == *@* ]]; then dir="${spec#*@}"; dir="${dir%%+*}"; fi
  local -a env_args=()
  env_s="${spec#"${spec%%+*}"}"
  while [ -n "$env_s" ]; do
    env_s="${env_s#+}"; var="${env_s%%+*}"; env_args+=("$var"); env_s="${env_s#"$var"}"
  done
  local work="$TMP/run-$round-$RANDOM" rpid="" dpid=""
  mkdir -p "$work"
  local -a w1=(w1 --jobs "$JOBS" --max-delay-s "$MAX_DELAY_S" --producers "$CLIENTS" --consumers "$CLIENTS" --json)
  local -a load
  if [ "$store" = bullmq ]; then
    start_redis
    rpid=$REDIS_PID
    load=(node "$ROOT/bench/peers/bullmq/bench.mjs" "${w1[@]}"
      --redis-url "redis://127.0.0.1:$REDIS_PORT/0" --server-pid "$rpid")
  else
    [ -x "$dir/delayq" ] || { echo "missing $dir/delayq" >&2; return 1; }
    start_store "$store" "$work/data"
    rpid=$REDIS_PID
    local -a UNDER=(env "${env_args[@]}")
    start_delayq "$dir/delayq" "${STORE_ARGS[@]}"
    dpid=$DQ_PID
    load=("$BENCH" "${w1[@]}" --api compat --addr "127.0.0.1:$DQ_PORT" --server-pid "$dpid" --no-progress)
  fi
  local perf_pid="" safe="${spec//[^A-Za-z0-9_.=-]/_}"
  if [ "$SYSCALLS" = 1 ] && [ -n "$dpid" ]; then
    perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_sendto,syscalls:sys_enter_fdatasync,context-switches \
      -p "$dpid" -o "$OUT/$round-$safe.perf.txt" &
    perf_pid=$!
  fi
  local d0 r0 d1 r1 bench_cpu line
  d0=$(ticks "$dpid"); r0=$(ticks "$rpid")
  # `time` reports the load generator's user and system CPU, in seconds.
  bench_cpu=$( { TIMEFORMAT='%U %S'; time "${load[@]}" >"$work/out.json" 2>"$work/bench.err"; } 2>&1 ) ||
    { echo "$spec: the run failed:" >&2; tail -5 "$work/bench.err" >&2; }
  d1=$(ticks "$dpid"); r1=$(ticks "$rpid")
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; fi
  line=$(grep -m1 '^{' "$work/out.json" || true)
  if [ -n "$line" ]; then
    python3 - "$line" "$spec" "$JOBS" "$((d1 - d0))" "$((r1 - r0))" "$bench_cpu" >>"$OUT/results.jsonl" <<'EOF'
import json, sys
line, label, jobs, dq, rd, bench = sys.argv[1:]
r = json.loads(line)
r["label"] = label
per_job = lambda s: 1e6 * s / float(jobs)
m = r["metrics"]
if not label.startswith("bullmq"):
    m["delayq_cpu_us_per_job"] = per_job(int(dq) / 100)
if label.startswith(("redis", "bullmq")):
    m["redis_cpu_us_per_job"] = per_job(int(rd) / 100)
m["bench_cpu_us_per_job"] = per_job(sum(float(x) for x in bench.split()))
print(json.dumps(r))
EOF
  else
    echo "$spec round $round: no result" | tee -a "$OUT/NOTE" >&2
  fi
  if [ -n "$dpid" ]; then stop "$dpid"; fi
  if [ -n "$rpid" ]; then stop "$rpid"; fi
  rm -rf "$work"
}

{
  echo "machine: $(nproc) cores, $(mem_gib), $(cpu_model)"
  echo "versions: $(redis-server --version | cut -d' ' -f1-3); $(delayq_build)"
  echo "command: bench/w1-rounds.sh --rounds $ROUNDS --jobs $JOBS --max-delay-s $MAX_DELAY_S$([ "$SYSCALLS" = 1 ] && echo ' --syscalls') ${SYSTEMS[*]}"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$OUT/machine.txt"

rounds run "${SYSTEMS[@]}"

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
rows = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows.setdefault(r["label"], []).append(r["metrics"])
cols = ["push_jobs_per_s", "e2e_jobs_per_s", "lateness_p50_ms", "lateness_p99_ms",
        "delayq_cpu_us_per_job", "redis_cpu_us_per_job", "bench_cpu_us_per_job"]
print("W1, median of runs (every run in results.jsonl)")
print("| system | runs | " + " | ".join(cols) + " |")
print("|---|---:|" + "---:|" * len(cols))
for label, ms in rows.items():
    cells = []
    for c in cols:
        v = [m[c] for m in ms if c in m]
        cells.append(f"{statistics.median(v):,.1f}" if v else "-")
    print(f"| {label} | {len(ms)} | " + " | ".join(cells) + " |")
bad = sum(m.get("early", 0) + m.get("lost", 0) + m.get("duplicates", 0) for ms in rows.values() for m in ms)
print(f"early + lost + duplicates over every run: {bad:.0f}")
EOF
echo "results: $OUT"
