# shellcheck shell=bash
# lib.sh: what the bench scripts share, sourced once they set ROOT (the checkout). Processes a
# script starts go in PIDS: on exit they are killed and waited for, and TMP (its scratch
# directory, once it sets one) is removed.

PIDS=()
# stop_all: ends every process started here so far (PIDS), waits for them and forgets them.
stop_all() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_all
  if [ -n "${TMP:-}" ]; then rm -rf "$TMP"; fi
}
trap cleanup EXIT

# For start_delayq, serve_delayq and start_redis: UNDER, a command their server runs behind
# (e.g. UNDER=(valgrind --tool=callgrind), or `local -a UNDER=(...)` in a function), and
# WAIT_TRIES, the TRIES they give wait_port (a server under valgrind wants more).
UNDER=()
WAIT_TRIES=100

# need_cmd CMD [HOW]: exits (1) unless CMD is on PATH, saying HOW to install it.
need_cmd() { command -v "$1" >/dev/null || { echo "$1 not on PATH${2:+: $2}" >&2; exit 1; }; }

# need_built HOW BIN...: exits (1) unless every BIN is executable, saying HOW to build it.
need_built() {
  local how=$1 b
  shift
  for b in "$@"; do
    [ -x "$b" ] || { echo "missing $b: $how" >&2; exit 1; }
  done
}

# build_release: builds delayq and delayq-bench in release.
build_release() { (cd "$ROOT" && cargo build --release -p delayq -p delayq-bench); }

# cpu_model: the CPU's model name; mem_gib: the machine's memory, "N GiB".
cpu_model() { grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
mem_gib() { awk '/MemTotal/{printf "%d GiB", $2/1048576}' /proc/meminfo; }

# delayq_build: "delayq COMMIT", with " (with uncommitted changes)" when crates/ or Cargo.lock
# differ from it.
delayq_build() {
  local dirty=""
  if [ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.lock)" ]; then dirty=" (with uncommitted changes)"; fi
  echo "delayq $COMMIT$dirty"
}

# rounds FUNC ITEM...: ROUNDS rounds, each running `FUNC ITEM ROUND` for every ITEM in turn,
# announced on stderr.
rounds() {
  local func=$1 round item
  shift
  for round in $(seq "$ROUNDS"); do
    for item in "$@"; do
      echo "== round $round/$ROUNDS: $item" >&2
      "$func" "$item" "$round"
    done
  done
}

# ticks PID: CPU time (user + system) of a process in clock ticks; 0 without a PID or once the
# process has exited.
ticks() { if [ -n "$1" ] && [ -r "/proc/$1/stat" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }

# wait_port PORT PID LOG [TRIES]: until PORT accepts connections (TRIES x 0.1 s, default 10 s),
# or fail with the log.
wait_port() {
  for _ in $(seq "${4:-100}"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "server on port $1 did not come up; log:" >&2
  tail -20 "$3" >&2
  return 1
}

# free_port: a loopback port free a moment ago (delayq-bench's: BENCH's if set, else
# target/release/delayq-bench).
free_port() { "${BENCH:-$ROOT/target/release/delayq-bench}" free-port; }

# stop PID: ends one process started here, and waits for it.
stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# start_delayq BIN ARGS...: `BIN serve` on a free loopback port with ARGS, its output in
# $TMP/delayq-<port>.log (TMP must be set), stopped on exit; returns once it accepts
# connections, with DQ_PORT, DQ_PID and DQ_LOG set.
start_delayq() {
  DQ_PORT=$(free_port)
  DQ_LOG="$TMP/delayq-$DQ_PORT.log"
  : >"$DQ_LOG"
  serve_delayq "$@"
  wait_port "$DQ_PORT" "$DQ_PID" "$DQ_LOG" "$WAIT_TRIES"
}

# serve_delayq BIN ARGS...: `BIN serve` with ARGS on DQ_PORT (start_delayq's: again after a
# kill), its output appended to DQ_LOG, stopped on exit; returns at once, with DQ_PID set.
serve_delayq() {
  local bin=$1
  shift
  "${UNDER[@]}" "$bin" serve --listen "127.0.0.1:$DQ_PORT" "$@" >>"$DQ_LOG" 2>&1 &
  DQ_PID=$!
  PIDS+=("$DQ_PID")
}

# start_redis: a private redis-server (no persistence) on a free loopback port, its dir and
# log in $TMP/redis-<port>/, stopped on exit; returns once it accepts connections, with
# REDIS_PORT and REDIS_PID set.
start_redis() {
  REDIS_PORT=$(free_port)
  local dir="$TMP/redis-$REDIS_PORT"
  mkdir -p "$dir"
  "${UNDER[@]}" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/log" &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  wait_port "$REDIS_PORT" "$REDIS_PID" "$dir/log" "$WAIT_TRIES"
}

# start_store STORE DIR: `delayq serve`'s flags for STORE in STORE_ARGS: memory --memory,
# embedded --data-dir DIR, redis --redis on a private redis-server (start_redis; REDIS_PID is
# empty for the other stores).
# shellcheck disable=SC2034 # STORE_ARGS is the caller's
start_store() {
  REDIS_PID=""
  case "$1" in
    memory) STORE_ARGS=(--memory) ;;
    embedded) STORE_ARGS=(--data-dir "$2") ;;
    redis) start_redis; STORE_ARGS=(--redis "redis://127.0.0.1:$REDIS_PORT/0") ;;
    *) echo "unknown store $1" >&2; exit 2 ;;
  esac
}

# results_dir NAME: the run's results directory, OUT: --out's if given, else
# bench/results/<UTC date>-<COMMIT>/NAME; one that already holds results is refused. Created,
# and made absolute (a server may change directory before it opens a file there).
results_dir() {
  OUT="${OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-$COMMIT/$1}"
  if [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    echo "$OUT already holds results: pass --out DIR" >&2
    exit 2
  fi
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
}
