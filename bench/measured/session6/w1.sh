#!/bin/bash
# The ad-hoc script behind the sixth and seventh sessions' W1 measurements (kept as a record, not
# maintained; the seventh added fdatasync to FSC's counters):
# a fresh redis-server (or an embedded data dir) and `delayq serve` on free ports, one W1 run,
# then the CPU ticks of delayq and redis-server during it. Hooks: SLOW=1 (Redis slowlog of every
# call to /tmp/b/slowlog.txt), PERFR=1 / PERFD=1 / PERFB=1 (perf record of redis / delayq / the
# bench), FSC=1 (perf stat of delayq's syscalls), DDIR=dir (reuse an embedded data dir),
# METRICS=1 (/metrics after the run to /tmp/b/metrics.txt).
# usage: w1.sh redis|emb [bench args...]   env: BIN (dir of binaries), DQENV, BENV, WL
set -u; DQENV=${DQENV:-}; BENV=${BENV:-}
mode=$1; shift
BIN=${BIN:-/work/main/target/release}
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
d=$(mktemp -d)
hp=$(port)
if [ "$mode" = redis ]; then
  rp=$(port)
  redis-server --port $rp --save "" --appendonly no --dir $d >/dev/null 2>&1 &
  rpid=$!
  sleep 0.3
  env $DQENV $BIN/delayq serve --listen 127.0.0.1:$hp --redis redis://127.0.0.1:$rp >$d/dq.log 2>&1 &
  dpid=$!
  rurl=redis://127.0.0.1:$rp
else
  env $DQENV $BIN/delayq serve --listen 127.0.0.1:$hp --data-dir ${DDIR:-$d/data} >$d/dq.log 2>&1 &
  dpid=$!; rpid=; rurl=
fi
for i in $(seq 50); do curl -sf http://127.0.0.1:$hp/healthz >/dev/null && break; sleep 0.1; done
ticks() { [ -n "$1" ] && awk '{print $14+$15}' /proc/$1/stat || echo 0; }
[ -n "$rurl" ] && [ -n "${SLOW:-}" ] && redis-cli -p $rp config set slowlog-log-slower-than 0 >/dev/null && redis-cli -p $rp config set slowlog-max-len 5000000 >/dev/null
[ -n "${PERFR:-}" ] && { perf record -F 2000 -g -o /tmp/b/perf.redis.data -p $rpid 2>/dev/null & ppid=$!; }
[ -n "${FSC:-}" ] && { perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_sendto,syscalls:sys_enter_fdatasync,context-switches -p $dpid -o /tmp/b/fsc.txt & ppid=$!; }
[ -n "${PERFD:-}" ] && { perf record -F 2000 -g -o /tmp/b/perf.dq.data -p $dpid 2>/dev/null & ppid=$!; }
d0=$(ticks $dpid); r0=$(ticks $rpid)
/usr/bin/time -f "bench_cpu %U+%S s wall %e" env $BENV ${PERFB:+perf record -F 2000 -g -o /tmp/b/perf.bench.data} $BIN/delayq-bench ${WL:-w1} --addr 127.0.0.1:$hp ${rurl:+--redis-url $rurl} --no-progress "$@" 2>&1
[ -n "${ppid:-}" ] && { kill -INT $ppid; sleep 1; }
[ -n "${METRICS:-}" ] && curl -s http://127.0.0.1:$hp/metrics > /tmp/b/metrics.txt
d1=$(ticks $dpid); r1=$(ticks $rpid)
[ -n "${SLOW:-}" ] && redis-cli -p $rp --raw slowlog get 5000000 > /tmp/b/slowlog.txt
[ -n "$rurl" ] && redis-cli -p $rp info commandstats | grep -v "^#" ; redis-cli -p ${rp:-0} info stats 2>/dev/null| grep -E "total_net|total_reads|total_writes|instantaneous" ; echo "delayq_cpu_ticks $((d1-d0)) redis_cpu_ticks $((r1-r0))"
kill $dpid $rpid 2>/dev/null; wait 2>/dev/null
rm -rf $d
