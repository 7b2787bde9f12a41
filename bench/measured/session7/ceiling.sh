#!/bin/bash
# Seventh session: W1 rounds, interleaved, of BullMQ and of delayq on each store, plus delayq
# on the in-memory engine (memory-store.patch applied to a scratch build in $MEMBIN): what
# delayq's HTTP front end does when its store costs nothing. One JSON line per run on stdout,
# labelled. usage: ceiling.sh ROUNDS   env: MEMBIN (dir with the patched delayq + delayq-bench)
set -u
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
MEMBIN=${MEMBIN:-/tmp/b/mem}
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
label() { python3 -c 'import sys,json
for l in sys.stdin:
    if l.startswith("{"): j=json.loads(l); j["label"]=sys.argv[1]; print(json.dumps(j))' "$1"; }
bullmq() {
  local rp d; rp=$(port); d=$(mktemp -d)
  redis-server --port $rp --save "" --appendonly no --dir $d >/dev/null 2>&1 & local rpid=$!
  sleep 0.3
  (cd "$root/bench/peers/bullmq" && node bench.mjs w1 --redis-url redis://127.0.0.1:$rp/0 \
    --jobs 50000 --max-delay-s 3 --producers 8 --consumers 8 --json) | label bullmq
  kill $rpid; wait $rpid 2>/dev/null; rm -rf $d
}
for r in $(seq "${1:-3}"); do
  bullmq
  bash "$here/../session6/w1.sh" redis --json 2>/dev/null | label delayq-redis
  DQENV=TOKIO_WORKER_THREADS=1 bash "$here/../session6/w1.sh" redis --json 2>/dev/null | label delayq-redis-1thread
  bash "$here/../session6/w1.sh" emb --json 2>/dev/null | label delayq-embedded
  BIN=$MEMBIN DQENV=DQ_EXPERIMENT_MEMORY=1 bash "$here/../session6/w1.sh" emb --json 2>/dev/null | label delayq-memory
  BIN=$MEMBIN DQENV="DQ_EXPERIMENT_MEMORY=1 TOKIO_WORKER_THREADS=1" bash "$here/../session6/w1.sh" emb --json 2>/dev/null | label delayq-memory-1thread
done
