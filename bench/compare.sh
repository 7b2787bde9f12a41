#!/usr/bin/env bash
# compare.sh: delayq against its peers on one machine, in one run.
#
# Installs what is missing (apt beanstalkd and redis-server, npm bullmq in bench/peers/bullmq),
# builds delayq as the package does (--profile dist) and delayq-bench in release, then for each
# workload, run and system starts a fresh server on free loopback ports, runs the workload
# against it with its native protocol, and stops it. Workloads (--workloads):
#   w1        lifecycle: --jobs jobs with delays uniform in [0, 3] s, pushed while consumed
#   capacity  W1 with every job due at once (delay 0): jobs pushed, delivered and finished per
#             second end to end; recorded as workload "capacity"
#   w2        memory: --pending jobs an hour out, bytes per job, then deleted
#   w3        steady fire: --backlog far-future jobs, then 2,000 jobs/s for --w3-duration-s s,
#             each due 2 s after its push; lateness
#   capsweep  capacity once per client count of --clients (that many producers and as many
#             consumers; systems interleaved within each count); recorded as workload
#             "capacity@<clients>". Capacity above runs 8 and 8, each waiting for its answer, so
#             it also measures each system's round trip; the sweep offers more load until the
#             rate stops rising. The summary gives, per system and count, the end-to-end rate
#             against BullMQ's at the same count, and each system's highest median rate over
#             the sweep (its capacity), against BullMQ's highest
#   w1sweep   the same for W1, recorded as "w1@<clients>", judged by the push rate
#   w3sweep   W3 once per rate of --w3-rates for every run and system (systems interleaved
#             within each rate); recorded as workload "w3@<rate>". The summary gives, per system
#             and rate, lateness p50/p99, delivered/s, early, lost and duplicates, and the
#             highest rate held at p99 <= 10 ms and <= 100 ms (held: median p99 within the
#             bound, at least 95 % of the rate pushed, and no run lost, duplicated or delivered
#             early a job). A stream is rate x --w3-duration-s jobs: against a system that
#             cannot take them at the rate it lasts longer
#   w4        burst: --w4-jobs jobs due in the same millisecond, --w4-lead-s ahead (on the
#             whole-second compat API and beanstalkd: each --w4-lead-s after its push); time
#             from then until the last is delivered
# Systems (each runs every workload):
#   delayq-redis       delayq serve --redis (its own redis-server), compat API
#   delayq-embedded    delayq serve --data-dir (temp dir), compat API
#   delayq-embedded-window  the same with --memory-window 3600: jobs due an hour or more ahead
#                      (W2's, W3's backlog) on disk only
#   delayq-memory      delayq serve --memory (nothing kept: the ceiling of the stores above)
#   delayq-memory-beanstalk    delayq serve --memory, over its beanstalkd port (--beanstalk-listen)
#   delayq-embedded-beanstalk  delayq serve --data-dir (temp dir), over its beanstalkd port: each
#                      put fsynced before INSERTED
#   delayq-redis-beanstalk     delayq serve --redis (its own redis-server), over its beanstalkd
#                      port: the same store as delayq-redis without HTTP on either side
#   beanstalkd         in memory
#   beanstalkd-binlog  with -b DIR (fsync every 50 ms, the default)
#   bullmq             BullMQ 6 (Node driver bench/peers/bullmq/bench.mjs) on its own redis-server
# Every result is one JSON line in $OUT/results.jsonl; the end prints medians per system
# ($OUT/summary.md): with ratios against delayq-redis, for capacity the end-to-end rate
# against delayq-memory and bullmq, and for w3sweep the tables above. $OUT/machine.txt records
# the machine, the versions, the delayq commit and the command. Only loopback addresses are
# used; every load loop in the drivers is bounded and every server started here is stopped on
# exit.
#
# Usage: bench/compare.sh [--runs 3] [--w2-runs N] [--jobs 50000] [--pending 1000000] [--big]
#                         [--systems "delayq-redis beanstalkd ..."] [--skip-build] [--out DIR]
#                         [--batch N] [--delayq-api compat|v1] [--workloads "w1 capacity w2"]
#                         [--backlog 1000000] [--backlog-batch N] [--w3-duration-s 30]
#                         [--w3-rates "2000 5000 10000 20000"] [--w3-drain-timeout-s 30]
#                         [--w4-jobs 100000] [--w4-lead-s 30] [--clients "8 16 32"]
#                         [--profile dist|release]
#   --big         W2 with 10,000,000 pending jobs instead of --pending
#   --w2-runs     W2 runs per system (default: --runs); W2 at 1M+ jobs is the slow part
#   --batch       jobs per request for every system (/v1 batches, beanstalkd pipelining,
#                 BullMQ addBulk; cleanup: /v1/finish batches, Queue.obliterate); default 1
#   --delayq-api  API of the delayq rows: compat (the compat API, the default: one job per
#                 request, like the peers) or v1
#   --workloads   any of w1 capacity capsweep w1sweep w2 w3 w3sweep w4 (default "w1 capacity
#                 w2")
#   --backlog-batch  jobs per request while filling W3's backlog (default --batch); set-up only
#   --w3-duration-s, --w4-jobs, --w4-lead-s  W3's stream length, W4's burst size and lead time
#                 (smaller values for smoke runs)
#   --w3-rates    w3sweep's stream rates, jobs/s (default "2000 5000 10000 20000")
#   --clients     capsweep's and w1sweep's producer counts, each with as many consumers
#                 (default "8 16 32")
#   --w3-drain-timeout-s  W3 and w3sweep: how long consumers wait for missing jobs after the
#                 last one fell due (default 30); what is still missing then counts as lost, so
#                 a system that falls behind ends its run in bounded time
#   --out         default bench/results/<UTC date>-<git rev-parse --short HEAD>/compare; a
#                 directory that already holds results is refused
#   --profile     the build of delayq measured: dist (the default: fat LTO over one codegen
#                 unit, what the package ships, docs/operations.md) or release (quicker to
#                 build: for a smoke run). The load generator is always the release build.
#   --skip-build  use the binaries as they are, target/release/delayq-bench and
#                 target/<profile>/delayq (machine.txt still names HEAD)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
RUNS=3
W2_RUNS=""
JOBS=50000
PENDING=1000000
SYSTEMS="delayq-redis delayq-embedded delayq-memory beanstalkd beanstalkd-binlog bullmq"
SKIP_BUILD=0
PROFILE=dist
OUT=""
BATCH=1
DELAYQ_API=compat
WORKLOADS="w1 capacity w2"
BACKLOG=1000000
BACKLOG_BATCH=""
W3_DURATION_S=30
W3_RATES="2000 5000 10000 20000"
W3_DRAIN_S=30
W4_JOBS=100000
W4_LEAD_S=30
CLIENTS="8 16 32"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --w2-runs) W2_RUNS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --pending) PENDING="$2"; shift 2 ;;
    --big) PENDING=10000000; shift ;;
    --systems) SYSTEMS="$2"; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --profile) PROFILE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --backlog) BACKLOG="$2"; shift 2 ;;
    --backlog-batch) BACKLOG_BATCH="$2"; shift 2 ;;
    --w3-duration-s) W3_DURATION_S="$2"; shift 2 ;;
    --w3-rates) W3_RATES="$2"; shift 2 ;;
    --w3-drain-timeout-s) W3_DRAIN_S="$2"; shift 2 ;;
    --w4-jobs) W4_JOBS="$2"; shift 2 ;;
    --w4-lead-s) W4_LEAD_S="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --delayq-api) DELAYQ_API="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
for wl in $WORKLOADS; do
  case "$wl" in w1|capacity|capsweep|w1sweep|w2|w3|w3sweep|w4) ;; *) echo "unknown workload: $wl" >&2; exit 2 ;; esac
done
[ -n "$CLIENTS" ] || { echo "--clients: no count given" >&2; exit 2; }
for n in $CLIENTS; do
  case "$n" in ''|*[!0-9]*|0) echo "--clients: $n is not a count of clients" >&2; exit 2 ;; esac
done
[ -n "$W3_RATES" ] || { echo "--w3-rates: no rate given" >&2; exit 2; }
for rate in $W3_RATES; do
  case "$rate" in ''|*[!0-9]*|0) echo "--w3-rates: $rate is not a rate in jobs/s" >&2; exit 2 ;; esac
done
case "$PROFILE" in dist|release) ;; *) echo "--profile: $PROFILE is not dist or release" >&2; exit 2 ;; esac
W2_RUNS="${W2_RUNS:-$RUNS}"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
results_dir compare
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
TMP="$(mktemp -d /tmp/delayq-compare.XXXXXX)"

# ---------- install ----------
need_apt=()
command -v beanstalkd >/dev/null 2>&1 || need_apt+=(beanstalkd)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
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
  (cd "$ROOT" && cargo build --release -p delayq-bench && cargo build --profile "$PROFILE" -p delayq)
fi
BENCH="$ROOT/target/release/delayq-bench"
DELAYQ="$ROOT/target/$PROFILE/delayq"
need_built "cargo build --release -p delayq-bench && cargo build --profile $PROFILE -p delayq" \
  "$BENCH" "$DELAYQ"

# ---------- processes ----------

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
  if start_delayq "$DELAYQ" --data-dir "$probe_dir" 2>/dev/null; then stop "$DQ_PID"; else DELAYQ_OK=0; fi
fi
[ "$DELAYQ_OK" = 1 ] || echo "NOTE: delayq serve did not start; delayq rows are skipped" | tee "$OUT/NOTE"

W1_ARGS=(--jobs "$JOBS" --max-delay-s 3 --producers 8 --consumers 8 --batch "$BATCH" --json)
W2_ARGS=(--pending "$PENDING" --delay-s 3600 --producers 8 --batch "$BATCH" --json)
# Capacity: W1 with every job due at once.
CAP_ARGS=(--jobs "$JOBS" --max-delay-s 0 --producers 8 --consumers 8 --batch "$BATCH" --json)
# W3 without its --rate (2,000/s for w3, each of --w3-rates for w3sweep).
W3_ARGS=(--backlog "$BACKLOG" --duration-s "$W3_DURATION_S" --fire-delay-s 2
  --drain-timeout-s "$W3_DRAIN_S" --producers 8 --consumers 8 --batch "$BATCH" --json)
if [ -n "$BACKLOG_BATCH" ]; then W3_ARGS+=(--backlog-batch "$BACKLOG_BATCH"); fi
W4_ARGS=(--jobs "$W4_JOBS" --lead-s "$W4_LEAD_S" --producers 8 --consumers 8 --batch "$BATCH"
  --json)

# run_system NAME WORKLOAD [STEP]: one fresh server, one workload, one JSON line appended
# (w3sweep: W3 at STEP jobs/s, recorded as workload "w3@STEP"; capsweep and w1sweep: capacity
# and W1 with STEP producers and STEP consumers, recorded as "capacity@STEP" and "w1@STEP").
run_system() {
  local sys="$1" wl="$2" rate="${3:-}" line=""
  # drv: the drivers' workload (capacity and capsweep are their w1 with --max-delay-s 0,
  # w1sweep their w1, w3sweep their w3).
  local drv="$2"
  local -a wargs
  case "$wl" in
    w1) wargs=("${W1_ARGS[@]}") ;;
    capacity) drv=w1; wargs=("${CAP_ARGS[@]}") ;;
    capsweep) drv=w1; wl="capacity@$rate"
      wargs=(--jobs "$JOBS" --max-delay-s 0 --producers "$rate" --consumers "$rate"
        --batch "$BATCH" --json) ;;
    w1sweep) drv=w1; wl="w1@$rate"
      wargs=(--jobs "$JOBS" --max-delay-s 3 --producers "$rate" --consumers "$rate"
        --batch "$BATCH" --json) ;;
    w2) wargs=("${W2_ARGS[@]}") ;;
    w3) wargs=("${W3_ARGS[@]}" --rate 2000) ;;
    w3sweep) drv=w3; wl="w3@$rate"; wargs=("${W3_ARGS[@]}" --rate "$rate") ;;
    w4) wargs=("${W4_ARGS[@]}") ;;
  esac
  case "$sys" in
    delayq-redis)
      [ "$DELAYQ_OK" = 1 ] || return 0
      start_redis
      start_delayq "$DELAYQ" --redis "redis://127.0.0.1:$REDIS_PORT/0"
      line=$("$BENCH" "$drv" --api "$DELAYQ_API" --addr "127.0.0.1:$DQ_PORT" --label "$sys" \
        --server-pid "$DQ_PID" --redis-url "redis://127.0.0.1:$REDIS_PORT/0" "${wargs[@]}") || true
      stop "$DQ_PID"; stop "$REDIS_PID" ;;
    delayq-embedded|delayq-embedded-window)
      [ "$DELAYQ_OK" = 1 ] || return 0
      local dir="$TMP/embedded-$RANDOM$RANDOM"
      local -a window=()
      if [ "$sys" = delayq-embedded-window ]; then window=(--memory-window 3600); fi
      mkdir -p "$dir"
      start_delayq "$DELAYQ" --data-dir "$dir" "${window[@]}"
      line=$("$BENCH" "$drv" --api "$DELAYQ_API" --addr "127.0.0.1:$DQ_PORT" --label "$sys" \
        --server-pid "$DQ_PID" --data-dir "$dir" "${wargs[@]}") || true
      stop "$DQ_PID"; rm -rf "$dir" ;;
    delayq-memory)
      [ "$DELAYQ_OK" = 1 ] || return 0
      start_delayq "$DELAYQ" --memory
      line=$("$BENCH" "$drv" --api "$DELAYQ_API" --addr "127.0.0.1:$DQ_PORT" --label "$sys" \
        --server-pid "$DQ_PID" "${wargs[@]}") || true
      stop "$DQ_PID" ;;
    delayq-memory-beanstalk)
      [ "$DELAYQ_OK" = 1 ] || return 0
      local bport
      bport=$(free_port)
      start_delayq "$DELAYQ" --memory --beanstalk-listen "127.0.0.1:$bport"
      wait_port "$bport" "$DQ_PID" "$DQ_LOG"
      line=$("$BENCH" "$drv" --target beanstalkd --addr "127.0.0.1:$bport" --label "$sys" \
        --server-pid "$DQ_PID" "${wargs[@]}") || true
      stop "$DQ_PID" ;;
    delayq-redis-beanstalk)
      [ "$DELAYQ_OK" = 1 ] || return 0
      local bport
      bport=$(free_port)
      start_redis
      start_delayq "$DELAYQ" --redis "redis://127.0.0.1:$REDIS_PORT/0" --beanstalk-listen "127.0.0.1:$bport"
      wait_port "$bport" "$DQ_PID" "$DQ_LOG"
      line=$("$BENCH" "$drv" --target beanstalkd --addr "127.0.0.1:$bport" --label "$sys" \
        --server-pid "$DQ_PID" --redis-url "redis://127.0.0.1:$REDIS_PORT/0" "${wargs[@]}") || true
      stop "$DQ_PID"; stop "$REDIS_PID" ;;
    delayq-embedded-beanstalk)
      [ "$DELAYQ_OK" = 1 ] || return 0
      local bport dir="$TMP/embedded-$RANDOM$RANDOM"
      bport=$(free_port)
      mkdir -p "$dir"
      start_delayq "$DELAYQ" --data-dir "$dir" --beanstalk-listen "127.0.0.1:$bport"
      wait_port "$bport" "$DQ_PID" "$DQ_LOG"
      line=$("$BENCH" "$drv" --target beanstalkd --addr "127.0.0.1:$bport" --label "$sys" \
        --server-pid "$DQ_PID" --data-dir "$dir" "${wargs[@]}") || true
      stop "$DQ_PID"; rm -rf "$dir" ;;
    beanstalkd)
      start_beanstalkd
      line=$("$BENCH" "$drv" --target beanstalkd --addr "127.0.0.1:$BS_PORT" --label "$sys" \
        --server-pid "$BS_PID" "${wargs[@]}") || true
      stop "$BS_PID" ;;
    beanstalkd-binlog)
      local dir="$TMP/binlog-$RANDOM$RANDOM"
      mkdir -p "$dir"
      start_beanstalkd -b "$dir"
      line=$("$BENCH" "$drv" --target beanstalkd --addr "127.0.0.1:$BS_PORT" --label "$sys" \
        --server-pid "$BS_PID" --data-dir "$dir" "${wargs[@]}") || true
      stop "$BS_PID"; rm -rf "$dir" ;;
    bullmq)
      start_redis
      line=$(cd "$ROOT/bench/peers/bullmq" && node bench.mjs "$drv" \
        --redis-url "redis://127.0.0.1:$REDIS_PORT/0" --label "$sys" \
        --server-pid "$REDIS_PID" "${wargs[@]}") || true
      stop "$REDIS_PID" ;;
    *) echo "unknown system $sys" >&2; return 1 ;;
  esac
  if [ -n "$line" ] && [ "$wl" != "$drv" ]; then
    line=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["workload"]=sys.argv[2]; print(json.dumps(r, separators=(",", ":")))' \
      "$line" "$wl") || line=""
  fi
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
    "${BACKLOG_BATCH:+--backlog-batch $BACKLOG_BATCH }--w3-duration-s $W3_DURATION_S" \
    "--w3-rates \"$W3_RATES\" --w3-drain-timeout-s $W3_DRAIN_S" \
    "--w4-jobs $W4_JOBS --w4-lead-s $W4_LEAD_S --clients \"$CLIENTS\" --systems \"$SYSTEMS\"" \
    "--profile $PROFILE"
} | tee "$OUT/machine.txt"

for wl in $WORKLOADS; do
  n="$RUNS"
  [ "$wl" = w2 ] && n="$W2_RUNS"
  rates=-
  [ "$wl" = w3sweep ] && rates="$W3_RATES"
  case "$wl" in capsweep|w1sweep) rates="$CLIENTS" ;; esac
  for run in $(seq "$n"); do
    for rate in $rates; do
      for sys in $SYSTEMS; do
        if [ "$rate" = - ]; then
          echo "== run $run/$n: $sys $wl" >&2
          run_system "$sys" "$wl"
        elif [ "$wl" = capsweep ] || [ "$wl" = w1sweep ]; then
          echo "== run $run/$n: $sys $wl $rate producers, $rate consumers" >&2
          run_system "$sys" "$wl" "$rate"
        else
          echo "== run $run/$n: $sys $wl $rate/s" >&2
          run_system "$sys" "$wl" "$rate"
        fi
      done
    done
  done
done

baseline=delayq-redis
[ "$DELAYQ_OK" = 1 ] || baseline=beanstalkd
# W1-W4: delayq-bench compare, ratios against $baseline. Capacity and the sweeps (tables of
# their own, which compare has no columns for): capacity's end-to-end jobs/s with ratios
# against delayq-memory and bullmq; the capacity and W1 sweeps' rows per system and client
# count, and each system's highest rate; the W3 sweep's rows per system and rate, and the
# highest rate each system held.
python3 -c 'import json, sys
for l in open(sys.argv[1]):
    wl = json.loads(l)["workload"]
    if not wl.startswith(("capacity", "w1@", "w3@")): print(l, end="")' "$RESULTS" >"$TMP/compare.jsonl"
{
  if [ -s "$TMP/compare.jsonl" ]; then "$BENCH" compare --baseline "$baseline" "$TMP/compare.jsonl"; fi
  python3 - "$RESULTS" <<'EOF'
import json, statistics, sys

results = [json.loads(l) for l in open(sys.argv[1])]


def fmt_num(v):  # as delayq-bench's tables
    if v is None:
        return "-"
    a = abs(v)
    return f"{v:,.0f}" if a >= 100 else "0" if a == 0 else f"{v:.2f}" if a >= 1 else f"{v:.3f}"


def fmt_count(v):
    return "-" if v is None else f"{v:,.0f}"


def fmt_ratio(x):
    return f"{x:.1f}x" if abs(x) >= 10 else f"{x:.2f}x" if abs(x) >= 0.1 or x == 0 else f"{x:.2e}x"


def median(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def table(header, rows):
    w = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(
        c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(cells)) + " |"
    print(line(header))
    print("|" + "|".join(":" + "-" * (n + 1) if i == 0 else "-" * (n + 1) + ":"
                         for i, n in enumerate(w)) + "|")
    for r in rows:
        print(line(r))


def params_and_notes(runs, labels, omit=()):
    print("parameters:")
    for l in labels:
        p = next(r for r in runs if r["label"] == l)["params"]
        print(f"- {l}: " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(p.items())
                                    if k not in omit))
    notes = sorted({f"- {r['label']}: {n}" for r in runs for n in r.get("notes", [])})
    if notes:
        print("notes:\n" + "\n".join(notes))


# Who used the machine over a run (W3: over its stream): the server's and the load generator's
# CPU in % of one core, and the machine's idle and stolen shares in % of all cores.
MACHINE_COLS = ["server_cpu_pct", "bench_cpu_pct", "server_cpu_wait_pct", "bench_cpu_wait_pct",
                "machine_idle_pct", "machine_steal_pct", "machine_busiest_core_pct"]
MACHINE_NOTE = ("*_cpu_pct: % of one core (BullMQ: server = redis-server, bench = its Node"
                " process);\n*_cpu_wait_pct: the same processes' threads runnable but waiting for a"
                " core, in % of one core (delayq-bench runs only);\nmachine_idle_pct,"
                " machine_steal_pct: % of all cores idle, and taken by the hypervisor for other"
                " guests;\nmachine_busiest_core_pct: % of the busiest core's time it was not idle")

# ---- capacity ----
runs = [r for r in results if r["workload"] == "capacity"]
labels = list(dict.fromkeys(r["label"] for r in runs))


def med(label, metric):
    return median([r["metrics"].get(metric) for r in runs if r["label"] == label])


cols = ["push_jobs_per_s", "total_s", "lateness_p50_ms", "lateness_p99_ms", "early", "lost",
        "duplicates"] + MACHINE_COLS
refs = [x for x in ("delayq-memory", "bullmq") if med(x, "e2e_jobs_per_s")]
header = ["capacity (median of runs)", "runs", "e2e_jobs_per_s"] + [f"vs {x}" for x in refs] + cols
rows = []
for l in labels:
    e2e = med(l, "e2e_jobs_per_s")
    row = [l, str(sum(r["label"] == l for r in runs)), fmt_num(e2e)]
    for x in refs:
        row.append("-" if l == x or e2e is None else fmt_ratio(e2e / med(x, "e2e_jobs_per_s")))
    rows.append(row + [fmt_num(med(l, c)) for c in cols])
if rows:
    table(header, rows)
    print("\ncapacity: W1 with every job due at once (max_delay_s=0); e2e_jobs_per_s: jobs pushed,"
          " delivered and\nfinished per second, first push to last delivery; vs X: e2e_jobs_per_s / X's\n"
          + MACHINE_NOTE)
    params_and_notes(runs, labels)
    print()

# ---- capacity and W1 sweeps ----
def client_sweep(prefix, name, metric, what):
    runs = [r for r in results if r["workload"].startswith(prefix)]
    labels = list(dict.fromkeys(r["label"] for r in runs))
    counts = sorted({r["params"]["producers"] for r in runs})
    groups = {}  # (label, N) -> the metrics of its runs
    for r in runs:
        groups.setdefault((r["label"], r["params"]["producers"]), []).append(r["metrics"])
    rate = {k: median([m.get(metric) for m in ms]) for k, ms in groups.items()}

    rows = []
    for l in labels:
        for n in counts:
            ms = groups.get((l, n))
            if not ms:
                continue
            v, ref = rate[(l, n)], rate.get(("bullmq", n))
            rows.append([l, str(n), str(len(ms)), fmt_num(v),
                         "-" if l == "bullmq" or not v or not ref else fmt_ratio(v / ref),
                         fmt_num(median([m.get("lateness_p50_ms") for m in ms])),
                         fmt_num(median([m.get("lateness_p99_ms") for m in ms])),
                         fmt_count(sum(m.get("early", 0) for m in ms)),
                         fmt_count(sum(m.get("lost", 0) for m in ms)),
                         fmt_count(sum(m.get("duplicates", 0) for m in ms))]
                        + [fmt_num(median([m.get(c) for m in ms])) for c in MACHINE_COLS])
    if not rows:
        return
    table([f"{name} sweep (median of runs)", "clients", "runs", metric, "vs bullmq",
           "lateness_p50_ms", "lateness_p99_ms", "early", "lost", "duplicates"] + MACHINE_COLS,
          rows)
    print()

    # Each system's highest median over the sweep, and the N it came at.
    best = {l: max(((v, n) for (x, n), v in rate.items() if x == l and v is not None),
                   default=(None, None)) for l in labels}
    top = best.get("bullmq", (None, None))[0]
    table([f"{name} sweep: highest rate", metric, "clients", "vs bullmq's highest"],
          [[l, fmt_num(v), str(n),
            "-" if l == "bullmq" or not top or v is None else fmt_ratio(v / top)]
           for l, (v, n) in best.items()])
    print(f"\n{name} sweep: {what} with N producers and N consumers for N in"
          f" {', '.join(str(n) for n in counts)}, one\nfresh server per run; clients: N (BullMQ: N"
          f" producers and one Worker of concurrency N); vs bullmq:\n{metric} / BullMQ's at the"
          " same N; highest rate: each system's highest median over the sweep;\nearly, lost,"
          " duplicates: sums over runs; the last columns over the run:\n" + MACHINE_NOTE)
    params_and_notes(runs, labels, omit=("producers", "consumers", "run_id"))
    print()


client_sweep("capacity@", "capacity", "e2e_jobs_per_s", "capacity (every job due at once)")
client_sweep("w1@", "w1", "push_jobs_per_s", "W1 (delays 0-3 s)")

# ---- W3 rate sweep ----
runs = [r for r in results if r["workload"].startswith("w3@")]
labels = list(dict.fromkeys(r["label"] for r in runs))
rates = sorted({r["params"]["rate"] for r in runs})
BOUNDS = (10, 100)  # ms, lateness p99
PUSHED_SHARE = 0.95  # of the rate, for the rate to count as offered


def delivered_per_s(m):
    # Deliveries over the stream's push time plus its largest lateness: the span from the first
    # due time to the last delivery is at most that, so this is a lower bound on the rate.
    if not m.get("fire_rate_per_s") or m.get("delivered") is None:
        return None
    span = m["fired"] / m["fire_rate_per_s"] + m.get("lateness_max_ms", 0) / 1000
    return m["delivered"] / span if span > 0 else None


def tolerated_early(r):
    # BullMQ counts a delay from its own clock read in whole ms: deliveries early by under 1 ms
    # are its resolution, shown in the table but not held against it.
    return r["target"] == "bullmq" and r["metrics"].get("early_max_ms", 0) < 1


held_at = {}  # (label, bound) -> highest rate held
marks = set()
rows = []
for l in labels:
    for rate in rates:
        rs = [r for r in runs if r["label"] == l and r["params"]["rate"] == rate]
        if not rs:
            continue
        ms = [r["metrics"] for r in rs]
        p99 = median([m.get("lateness_p99_ms") for m in ms])
        pushed = median([m.get("fire_rate_per_s") for m in ms])
        early = sum(m.get("early", 0) for m in ms)
        lost = sum(m.get("lost", 0) for m in ms)
        dups = sum(m.get("duplicates", 0) for m in ms)
        early_ok = all(m.get("early", 0) == 0 or tolerated_early(r) for m, r in zip(ms, rs))
        clean = (early_ok and lost == 0 and dups == 0 and pushed is not None
                 and pushed >= PUSHED_SHARE * rate)
        held = [b for b in BOUNDS if clean and p99 is not None and p99 <= b]
        for b in held:
            held_at[(l, b)] = max(held_at.get((l, b), 0), rate)
        early_cell = fmt_count(early)
        if early and early_ok:
            early_cell += " *"
            marks.add(l)
        rows.append([l, fmt_num(rate), str(len(rs)), fmt_num(pushed),
                     fmt_num(median([delivered_per_s(m) for m in ms])),
                     fmt_num(median([m.get("lateness_p50_ms") for m in ms])), fmt_num(p99),
                     early_cell, fmt_count(lost), fmt_count(dups),
                     f"<= {held[0]} ms" if held else "no"]
                    + [fmt_num(median([m.get(c) for m in ms])) for c in MACHINE_COLS])
if rows:
    table(["w3 sweep (median of runs)", "rate", "runs", "pushed/s", "delivered/s",
           "lateness_p50_ms", "lateness_p99_ms", "early", "lost", "duplicates", "held"]
          + MACHINE_COLS, rows)
    print()
    table(["w3 sweep: highest rate held"] + [f"p99 <= {b} ms" for b in BOUNDS],
          [[l] + [fmt_num(held_at[(l, b)]) if (l, b) in held_at else "none" for b in BOUNDS]
           for l in labels])
    print(f"\nw3 sweep: W3 at each rate in jobs/s ({', '.join(fmt_num(x) for x in rates)}), one"
          " fresh server per run; pushed/s: the stream's\npush rate; delivered/s: deliveries over"
          " the push time plus the largest lateness (a lower bound);\nlateness: medians of runs;"
          " early, lost, duplicates: sums over runs. A rate is held at p99 <= B ms\nwhen the median"
          f" p99 is within B, at least {PUSHED_SHARE:.0%} of the rate was pushed and no run lost,"
          " duplicated or\ndelivered early a job; the last four columns over the stream:\n"
          + MACHINE_NOTE)
    if marks:
        print("*: early by under 1 ms, BullMQ's whole-millisecond clock; not held against it")
    params_and_notes(runs, labels, omit=("rate", "run_id"))
    print()
EOF
} | tee "$OUT/summary.md"
echo "results: $OUT"
