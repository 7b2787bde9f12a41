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

# start_delayq BIN ARGS...: `BIN serve` on a free loopback port with ARGS, its output in
# $TMP/delayq.log (TMP must be set), stopped on exit; returns once it accepts connections, with
# DQ_PORT and DQ_PID set. Needs target/release/delayq-bench (for the free port).
start_delayq() {
  local bin=$1
  shift
  DQ_PORT=$("$ROOT/target/release/delayq-bench" free-port)
  "$bin" serve --listen "127.0.0.1:$DQ_PORT" "$@" >"$TMP/delayq.log" 2>&1 &
  DQ_PID=$!
  PIDS+=("$DQ_PID")
  wait_port "$DQ_PORT" "$DQ_PID" "$TMP/delayq.log"
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
