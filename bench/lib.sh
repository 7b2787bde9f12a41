# lib.sh: what the bench scripts share, sourced once they set ROOT (the checkout). Processes a
# script starts go in PIDS: on exit they are killed and waited for, and TMP (its scratch
# directory, once it sets one) is removed.

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${TMP:-}" ]; then rm -rf "$TMP"; fi
}
trap cleanup EXIT

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

# free_port: a loopback port free a moment ago (delayq-bench's; needs
# target/release/delayq-bench).
free_port() { "$ROOT/target/release/delayq-bench" free-port; }

# stop PID: ends one process started here, and waits for it.
stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# start_delayq BIN ARGS...: `BIN serve` on a free loopback port with ARGS, its output in
# $TMP/delayq-<port>.log (TMP must be set), stopped on exit; returns once it accepts
# connections, with DQ_PORT, DQ_PID and DQ_LOG set.
start_delayq() {
  local bin=$1
  shift
  DQ_PORT=$(free_port)
  DQ_LOG="$TMP/delayq-$DQ_PORT.log"
  "$bin" serve --listen "127.0.0.1:$DQ_PORT" "$@" >"$DQ_LOG" 2>&1 &
  DQ_PID=$!
  PIDS+=("$DQ_PID")
  wait_port "$DQ_PORT" "$DQ_PID" "$DQ_LOG"
}

# start_redis: a private redis-server (no persistence) on a free loopback port, its dir and
# log in $TMP/redis-<port>/, stopped on exit; returns once it accepts connections, with
# REDIS_PORT and REDIS_PID set.
start_redis() {
  REDIS_PORT=$(free_port)
  local dir="$TMP/redis-$REDIS_PORT"
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/log" &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  wait_port "$REDIS_PORT" "$REDIS_PID" "$dir/log"
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
