//! BullMQ peer driver for delayq-bench: runs W1 (lifecycle), W2 (memory), W3 (steady fire over a
//! backlog) or W4 (burst) against BullMQ on a redis-server of its own and prints the same result
//! shape as `delayq-bench --json` (one JSON line: workload, label, target, api, params, metrics,
//! notes), or a short table without --json. It measures the same way: the due time (Unix µs) and
//! sequence number travel in the job body, the worker computes pop − due, and a ledger counts
//! lost and duplicate deliveries. It does not start Redis (bench/compare.sh does) and touches
//! only loopback addresses.
//!
//! Usage: node bench.mjs w1|w2|w3|w4 --redis-url redis://127.0.0.1:PORT/0 [--producers 8]
//!        [--consumers 8] [--batch 1] [--body-bytes 30] [--drain-timeout-s 30] [--label bullmq]
//!        [--run-id ID] [--server-pid PID] [--json]
//!   w1: [--jobs 50000] [--max-delay-s 3]
//!   w2: [--pending 1000000] [--delay-s 3600] [--no-cleanup]
//!   w3: [--backlog 1000000] [--backlog-delay-s 3600] [--backlog-batch N (default --batch)]
//!       [--rate 2000] [--duration-s 30] [--fire-delay-s 2]
//!   w4: [--jobs 100000] [--lead-s 30]

import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';
import { readFileSync } from 'node:fs';

const argv = process.argv.slice(2);
const workload = argv[0];
const opt = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const flag = (name) => argv.includes(`--${name}`);
const num = (name, dflt) => Number(opt(name, dflt));

const redisUrl = opt('redis-url', 'redis://127.0.0.1:6379/0');
const u = new URL(redisUrl);
if (!['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname) && !u.hostname.startsWith('127.')) {
  throw new Error(`--redis-url ${redisUrl}: loopback only`);
}
const connection = { host: u.hostname, port: Number(u.port || 6379), maxRetriesPerRequest: null };
const runId = opt('run-id', Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, '0'));
const common = {
  producers: num('producers', 8),
  consumers: num('consumers', 8),
  batch: Math.max(1, num('batch', 1)),
  body_bytes: num('body-bytes', 30),
  run_id: runId,
};
const label = opt('label', 'bullmq');
const serverPid = opt('server-pid', null);
const json = flag('json');
const qname = `bench-${runId}`;

/** Wall clock in Unix µs, sub-millisecond. */
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

/** Same body as delayq-bench's body.rs: `<due_us>:<seq>:` padded with `x`. */
const encode = (dueUs, seq, size) => {
  const s = `${dueUs}:${seq}:`;
  return s.length >= size ? s : s + 'x'.repeat(size - s.length);
};
const decode = (body) => {
  const p = body.split(':', 3);
  if (p.length < 3) return null;
  return [Number(p[0]), Number(p[1])];
};

/** Nearest-rank percentiles of µs samples, reported in ms. */
const summary = (samples) => {
  if (samples.length === 0) return { count: 0, p50: 0, p99: 0, p999: 0, max: 0 };
  const a = Float64Array.from(samples).sort();
  const q = (x) => a[Math.max(0, Math.ceil(x * a.length) - 1)] / 1000;
  return { count: a.length, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: a[a.length - 1] / 1000 };
};

const cpuS = (pid) => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 1).trim().split(/\s+/);
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return null;
  }
};

/**
 * The machine's CPU ticks (`/proc/stat`): over every core idle + iowait, steal, total; and
 * each core's idle and total (its `cpuN` line).
 */
const machineTicks = () => {
  try {
    const fields = (line) => {
      const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
      return { idle: f[3] + (f[4] || 0), steal: f[7] || 0, total: f.reduce((a, b) => a + b, 0) };
    };
    const lines = readFileSync('/proc/stat', 'utf8').split('\n');
    const all = fields(lines.find((l) => l.startsWith('cpu ')));
    all.cores = lines.filter((l) => /^cpu\d/.test(l)).map(fields);
    return all;
  } catch {
    return null;
  }
};

/** Who used the machine over a span, as delayq-bench's CpuSpan: start it, then putCpu. */
const cpuSpan = () => ({
  cpu: process.cpuUsage(),
  srv: serverPid ? cpuS(serverPid) : null,
  machine: machineTicks(),
  startUs: nowUs(),
});

/**
 * bench_cpu_pct (this Node process: producers and worker), server_cpu_pct (--server-pid,
 * redis-server), in % of one core; machine_idle_pct and machine_steal_pct, in % of all cores;
 * machine_busiest_core_pct, the busiest core's time not idle, in % of that core.
 */
const putCpu = (r, span) => {
  const wallS = (nowUs() - span.startUs) / 1e6;
  if (wallS <= 0) return;
  const cpu = process.cpuUsage(span.cpu);
  r.metrics.bench_cpu_pct = (100 * (cpu.user + cpu.system)) / 1e6 / wallS;
  const srv1 = serverPid ? cpuS(serverPid) : null;
  if (span.srv !== null && srv1 !== null) r.metrics.server_cpu_pct = (100 * (srv1 - span.srv)) / wallS;
  // Shares of the wall time on every core, as delayq-bench's MachineTicks::since: the kernel
  // times idle periods exactly but counts busy time a tick (10 ms) at a time.
  const m = machineTicks();
  if (span.machine && m && m.total > span.machine.total) {
    const perCore = wallS * 100;
    const cores = m.cores.length === span.machine.cores.length ? m.cores.length : 0;
    const total = cores > 0 ? cores * perCore : m.total - span.machine.total;
    r.metrics.machine_idle_pct = Math.min(100, (100 * (m.idle - span.machine.idle)) / total);
    r.metrics.machine_steal_pct = Math.min(100, (100 * (m.steal - span.machine.steal)) / total);
    if (cores > 0) {
      const busy = m.cores.map((c, i) => (100 * (perCore - Math.min(c.idle - span.machine.cores[i].idle, perCore))) / perCore);
      r.metrics.machine_busiest_core_pct = Math.max(...busy);
    }
  }
};

const usedMemory = async (redis) => {
  const info = await redis.info('memory');
  const m = info.match(/^used_memory:(\d+)/m);
  return m ? Number(m[1]) : null;
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * P producer loops over a shared counter, each on its own Queue (connection), pushing jobs
 * `[0, n)` in batches of `batch` (addBulk above 1). The due time of a job is one of:
 * - `dueOf(seq)` ms after the clock read just before the request is sent (BullMQ counts the
 *   delay from its own millisecond clock read when it builds the job);
 * - `runAtMs` (Unix ms): every job due in that millisecond (W4). The job's timestamp is the
 *   clock read at push and its delay the rest, so BullMQ's due time (timestamp + delay) is
 *   exactly `runAtMs`.
 * `ratePerProducer` paces each producer: its k-th job is not sent before start + k / rate, and
 * the worst lag behind that pace is returned. `onAck(seq)` is called for every acknowledged job.
 */
const produce = async (n, queues, plan) => {
  const {
    dueOf = () => 0,
    runAtMs = null,
    idPrefix = `${runId}-`,
    name = 'j',
    batch = common.batch,
    ratePerProducer = null,
    onAck = () => {},
  } = plan;
  let next = 0;
  let errors = 0;
  let firstError = null;
  let maxLagMs = 0;
  const start = performance.now();
  await Promise.all(
    queues.map(async (q) => {
      let pushedHere = 0;
      for (;;) {
        const first = next;
        if (first >= n) break;
        const last = Math.min(first + batch, n);
        next = last;
        if (ratePerProducer) {
          const at = start + (pushedHere / ratePerProducer) * 1000;
          const t = performance.now();
          if (at > t) await sleep(at - t);
          else maxLagMs = Math.max(maxLagMs, t - at);
        }
        pushedHere += last - first;
        // Taken just before the request is sent: a delivery before now + delay is early, by
        // however little.
        const now = nowUs();
        const jobs = [];
        for (let seq = first; seq < last; seq++) {
          const opts = { jobId: `${idPrefix}${seq}`, removeOnComplete: true, removeOnFail: true };
          let dueUs;
          if (runAtMs !== null) {
            opts.timestamp = Date.now();
            opts.delay = Math.max(0, runAtMs - opts.timestamp);
            dueUs = runAtMs * 1000;
          } else {
            opts.delay = dueOf(seq);
            dueUs = now + opts.delay * 1000;
          }
          jobs.push({ name, data: encode(dueUs, seq, common.body_bytes), opts });
        }
        try {
          if (jobs.length === 1) await q.add(jobs[0].name, jobs[0].data, jobs[0].opts);
          else await q.addBulk(jobs);
          for (let seq = first; seq < last; seq++) onAck(seq);
        } catch (e) {
          errors++;
          firstError ??= String(e);
        }
      }
    }),
  );
  return { elapsedS: (performance.now() - start) / 1000, errors, firstError, maxLagMs };
};

/** `count` Queues on connections of their own, ready. */
const openQueues = (count) =>
  Promise.all(
    Array.from({ length: count }, async () => {
      const q = new Queue(qname, { connection });
      await q.waitUntilReady();
      return q;
    }),
  );

/**
 * The ledger of jobs `[0, n)`: which were acknowledged, how often each was delivered. `ack` is
 * the producers' onAck.
 */
const ledger = (n) => {
  const l = {
    n,
    acked: new Uint8Array(n),
    delivered: new Uint8Array(n),
    ackedTotal: 0,
    deliveredUnique: 0,
    ack: (seq) => {
      if (!l.acked[seq]) {
        l.acked[seq] = 1;
        l.ackedTotal++;
      }
    },
  };
  return l;
};

/**
 * One Worker of concurrency --consumers recording every delivery in `l`: lateness (pop − due
 * from the body), the last first-delivery, and jobs that are not the ledger's (backlog jobs,
 * named `b`, or unreadable bodies) as foreign.
 */
const consume = async (l) => {
  const st = { late: [], early: [], foreign: 0, lastDeliveryUs: 0, errors: 0, firstError: null };
  const worker = new Worker(
    qname,
    async (job) => {
      const popUs = nowUs();
      const d = job.name === 'j' ? decode(String(job.data)) : null;
      if (!d) {
        st.foreign++;
        return;
      }
      const [due, seq] = d;
      const x = popUs - due;
      if (x >= 0) st.late.push(Math.max(x, 1));
      else st.early.push(-x);
      if (seq < l.n) {
        if (l.delivered[seq] === 0) {
          l.deliveredUnique++;
          st.lastDeliveryUs = Math.max(st.lastDeliveryUs, popUs);
        }
        if (l.delivered[seq] < 255) l.delivered[seq]++;
      } else st.foreign++;
    },
    { connection, concurrency: common.consumers, lockDuration: 3600_000 },
  );
  worker.on('error', (e) => {
    st.errors++;
    st.firstError ??= String(e);
  });
  await worker.waitUntilReady();
  st.worker = worker;
  return st;
};

/** Waits until every acknowledged job was delivered, or until `deadlineMs` (Unix ms). */
const drain = async (l, deadlineMs) => {
  while (l.deliveredUnique < l.ackedTotal && Date.now() < deadlineMs) await sleep(20);
};

/** Lateness percentiles and the early count, as delayq-bench's put_lateness. */
const putLateness = (r, st) => {
  const L = summary(st.late);
  const E = summary(st.early);
  Object.assign(r.metrics, {
    lateness_p50_ms: L.p50,
    lateness_p99_ms: L.p99,
    lateness_p999_ms: L.p999,
    lateness_max_ms: L.max,
    early: E.count,
  });
  if (E.count > 0) {
    Object.assign(r.metrics, {
      early_p50_ms: E.p50,
      early_p99_ms: E.p99,
      early_p999_ms: E.p999,
      early_max_ms: E.max,
    });
    if (E.max < 1) {
      r.notes.push(
        `${E.count} early by under 1 ms: BullMQ counts a delay from its own clock read in whole ms`,
      );
    }
  }
};

/** acked, delivered, lost, duplicates, unexpected, as delayq-bench's put_accounting. */
const putAccounting = (r, l, st) => {
  let lost = 0;
  let dups = 0;
  let unexpected = st.foreign;
  for (let i = 0; i < l.n; i++) {
    if (l.acked[i] && l.delivered[i] === 0) lost++;
    if (!l.acked[i] && l.delivered[i] > 0) unexpected++;
    if (l.delivered[i] > 1) dups += l.delivered[i] - 1;
  }
  Object.assign(r.metrics, {
    acked: l.ackedTotal,
    delivered: l.deliveredUnique,
    lost,
    duplicates: dups,
    unexpected,
  });
};

/** `<what>_errors` and a note with the first one, as delayq-bench's Errors::report. */
const putErrors = (r, what, count, first) => {
  r.metrics[`${what}_errors`] = count;
  if (first) r.notes.push(`${count} ${what} errors, first: ${first}`);
};

const result = (wl, params) => ({
  workload: wl,
  label,
  target: 'bullmq',
  api: 'bullmq',
  params: { ...common, ...params },
  metrics: {},
  notes: [],
});

const oneLoop = 'one Node process: producers and the worker share one event loop; delays in ms';

async function w1() {
  const n = num('jobs', 50000);
  const maxDelayS = num('max-delay-s', 3);
  const drainS = num('drain-timeout-s', 30);
  const r = result('w1', { jobs: n, max_delay_s: maxDelayS, drain_timeout_s: drainS });
  const l = ledger(n);

  const span = cpuSpan();
  const startUs = span.startUs;
  const st = await consume(l);
  const queues = await openQueues(common.producers);
  const pushed = await produce(n, queues, {
    dueOf: () => Math.floor(Math.random() * (maxDelayS * 1000 + 1)),
    onAck: l.ack,
  });
  await drain(l, Date.now() + maxDelayS * 1000 + 1000 + drainS * 1000);
  const wallS = (nowUs() - startUs) / 1e6;
  putCpu(r, span);
  await st.worker.close();
  for (const q of queues) await q.obliterate({ force: true }).catch(() => {});
  await Promise.all(queues.map((q) => q.close()));

  const totalS = st.lastDeliveryUs > startUs ? (st.lastDeliveryUs - startUs) / 1e6 : wallS;
  Object.assign(r.metrics, {
    push_jobs_per_s: l.ackedTotal / pushed.elapsedS,
    push_s: pushed.elapsedS,
    total_s: totalS,
    e2e_jobs_per_s: l.deliveredUnique / totalS,
  });
  putLateness(r, st);
  putAccounting(r, l, st);
  r.metrics.push_errors = pushed.errors;
  putErrors(r, 'consume', st.errors, st.firstError);
  if (pushed.firstError) r.notes.push(`${pushed.errors} push errors, first: ${pushed.firstError}`);
  r.notes.push(oneLoop);
  return r;
}

/**
 * W3 steady fire over a backlog, as delayq-bench's: --backlog jobs due in --backlog-delay-s
 * (ids `<run>-b<seq>`, job name `b`, pushed --backlog-batch per addBulk), then a stream of --rate
 * jobs/s for --duration-s, each due --fire-delay-s after its push, spread over the producers;
 * lateness of each delivery. The backlog (and anything left) is then removed with obliterate.
 */
async function w3() {
  const backlogN = num('backlog', 1000000);
  const backlogDelayS = num('backlog-delay-s', 3600);
  const backlogBatch = Math.max(1, num('backlog-batch', common.batch));
  const rate = num('rate', 2000);
  const durationS = num('duration-s', 30);
  const fireDelayS = num('fire-delay-s', 2);
  const drainS = num('drain-timeout-s', 30);
  const r = result('w3', {
    backlog: backlogN,
    backlog_delay_s: backlogDelayS,
    backlog_batch: backlogBatch,
    rate,
    duration_s: durationS,
    fire_delay_s: fireDelayS,
  });
  const queues = await openQueues(common.producers);

  let backlogAcked = 0;
  const backlog = await produce(backlogN, queues, {
    dueOf: () => backlogDelayS * 1000,
    idPrefix: `${runId}-b`,
    name: 'b',
    batch: backlogBatch,
    onAck: () => backlogAcked++,
  });
  r.metrics.backlog = backlogAcked;
  putErrors(r, 'backlog_push', backlog.errors, backlog.firstError);

  const n = rate * durationS;
  const l = ledger(n);
  // From the stream's first push to its last delivery: the backlog's filling is not W3.
  const span = cpuSpan();
  const st = await consume(l);
  const stream = await produce(n, queues, {
    dueOf: () => fireDelayS * 1000,
    ratePerProducer: rate / Math.max(1, common.producers),
    onAck: l.ack,
  });
  await drain(l, Date.now() + fireDelayS * 1000 + 1000 + drainS * 1000);
  putCpu(r, span);
  await st.worker.close();
  Object.assign(r.metrics, {
    fired: l.ackedTotal,
    fire_rate_per_s: l.ackedTotal / stream.elapsedS,
    producer_max_lag_ms: stream.maxLagMs,
  });
  putLateness(r, st);
  putAccounting(r, l, st);
  putErrors(r, 'push', stream.errors, stream.firstError);
  putErrors(r, 'consume', st.errors, st.firstError);

  if (backlogN > 0) {
    const count = Math.max(100, common.batch);
    const left = await queues[0].getDelayedCount();
    const start = performance.now();
    let errors = 0;
    let first = null;
    try {
      await queues[0].obliterate({ force: true, count });
    } catch (e) {
      errors++;
      first = String(e);
    }
    r.metrics.cleanup_jobs_per_s = left / ((performance.now() - start) / 1000);
    putErrors(r, 'cleanup', errors, first);
    r.notes.push(`cleanup: Queue.obliterate (force, count ${count}) of ${left} delayed jobs`);
  } else {
    await queues[0].obliterate({ force: true }).catch(() => {});
  }
  await Promise.all(queues.map((q) => q.close()));
  r.notes.push(oneLoop);
  return r;
}

/**
 * W4 burst, as delayq-bench's on /v1: --jobs jobs all due in the same millisecond, --lead-s
 * after the start; the time from that instant until the last one was delivered, and lateness.
 */
async function w4() {
  const n = num('jobs', 100000);
  const leadS = num('lead-s', 30);
  const drainS = num('drain-timeout-s', 30);
  const r = result('w4', { jobs: n, lead_s: leadS });
  const l = ledger(n);
  const dueAt = Date.now() + leadS * 1000;
  const st = await consume(l);
  const queues = await openQueues(common.producers);
  const pushed = await produce(n, queues, { runAtMs: dueAt, onAck: l.ack });
  const pushedBy = Date.now();
  if (pushedBy > dueAt) {
    r.notes.push(`push phase ended ${pushedBy - dueAt} ms after the due time: raise --lead-s`);
  }
  await drain(l, dueAt + 1000 + drainS * 1000);
  await st.worker.close();
  for (const q of queues) await q.obliterate({ force: true }).catch(() => {});
  await Promise.all(queues.map((q) => q.close()));
  const lastMs = Math.floor(st.lastDeliveryUs / 1000);
  Object.assign(r.metrics, {
    jobs: l.ackedTotal,
    push_jobs_per_s: l.ackedTotal / pushed.elapsedS,
    deliver_all_s: Math.max(0, lastMs - dueAt) / 1000,
  });
  putLateness(r, st);
  putAccounting(r, l, st);
  putErrors(r, 'push', pushed.errors, pushed.firstError);
  putErrors(r, 'consume', st.errors, st.firstError);
  r.notes.push(oneLoop);
  return r;
}

async function w2() {
  const m = num('pending', 1000000);
  const delayS = num('delay-s', 3600);
  const r = result('w2', { pending: m, delay_s: delayS });
  const redis = new IORedis(redisUrl, { maxRetriesPerRequest: null });
  const before = await usedMemory(redis);
  const queues = Array.from({ length: common.producers }, () => new Queue(qname, { connection }));
  let ackedTotal = 0;
  const pushed = await produce(m, queues, {
    dueOf: () => delayS * 1000,
    onAck: () => ackedTotal++,
  });
  await sleep(2000);
  const after = await usedMemory(redis);
  Object.assign(r.metrics, {
    pending: ackedTotal,
    push_jobs_per_s: ackedTotal / pushed.elapsedS,
    push_errors: pushed.errors,
    redis_bytes_after_push: after,
    redis_bytes_per_job: (after - before) / Math.max(1, ackedTotal),
  });
  if (pushed.firstError) r.notes.push(`${pushed.errors} push errors, first: ${pushed.firstError}`);
  if (!flag('no-cleanup')) {
    const start = performance.now();
    let deleted = 0;
    if (common.batch > 1) {
      await queues[0].obliterate({ force: true, count: common.batch });
      deleted = ackedTotal;
      r.notes.push(`cleanup: Queue.obliterate (force, count ${common.batch})`);
    } else {
      let next = 0;
      await Promise.all(
        queues.map(async (q) => {
          for (;;) {
            const seq = next++;
            if (seq >= m) break;
            const k = await q.remove(`${runId}-${seq}`);
            deleted += k;
          }
        }),
      );
      r.notes.push('cleanup: Queue.remove per id');
    }
    r.metrics.deleted = deleted;
    r.metrics.cleanup_jobs_per_s = deleted / ((performance.now() - start) / 1000);
    r.metrics.redis_bytes_after_cleanup = await usedMemory(redis);
  }
  await Promise.all(queues.map((q) => q.close()));
  await redis.quit();
  return r;
}

const fmt = (v) =>
  Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en-US') : v === 0 ? '0' : v.toFixed(Math.abs(v) >= 1 ? 2 : 3);

const workloads = { w1, w2, w3, w4 };
const r = Object.hasOwn(workloads, workload) ? await workloads[workload]() : null;
if (!r) {
  console.error('usage: node bench.mjs w1|w2|w3|w4 --redis-url redis://127.0.0.1:PORT/0 [...] [--json]');
  process.exit(2);
}
if (json) console.log(JSON.stringify(r));
else {
  console.log(`${r.workload} ${r.label} (target bullmq)`);
  console.log(`parameters: ${Object.entries(r.params).map(([k, v]) => `${k}=${v}`).join(' ')}`);
  for (const [k, v] of Object.entries(r.metrics)) console.log(`| ${k.padEnd(26)} | ${fmt(v).padStart(14)} |`);
  for (const n of r.notes) console.log(`note: ${n}`);
}
process.exit(0);
