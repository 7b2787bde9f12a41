//! BullMQ peer driver for delayq-bench: runs W1 (lifecycle) or W2 (memory) against BullMQ on a
//! redis-server of its own and prints the same result shape as `delayq-bench --json` (one JSON
//! line: workload, label, target, api, params, metrics, notes), or a short table without --json.
//! It measures the same way: the due time (Unix µs) and sequence number travel in the job body,
//! the worker computes pop − due, and a ledger counts lost and duplicate deliveries.
//! It does not start Redis (bench/compare.sh does) and touches only loopback addresses.
//!
//! Usage: node bench.mjs w1|w2 --redis-url redis://127.0.0.1:PORT/0 [--jobs 50000]
//!        [--max-delay-s 3] [--producers 8] [--consumers 8] [--batch 1] [--body-bytes 30]
//!        [--drain-timeout-s 30] [--pending 1000000] [--delay-s 3600] [--label bullmq]
//!        [--run-id ID] [--server-pid PID] [--json]

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

const usedMemory = async (redis) => {
  const info = await redis.info('memory');
  const m = info.match(/^used_memory:(\d+)/m);
  return m ? Number(m[1]) : null;
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** P producer loops over a shared counter, each on its own Queue (connection). */
const produce = async (n, dueOf, queues, onAck) => {
  let next = 0;
  let errors = 0;
  let firstError = null;
  const start = performance.now();
  await Promise.all(
    queues.map(async (q) => {
      for (;;) {
        const first = next;
        if (first >= n) break;
        const last = Math.min(first + common.batch, n);
        next = last;
        // Taken just before the request is sent: a delivery before now + delay is early, by
        // however little.
        const now = nowUs();
        const jobs = [];
        for (let seq = first; seq < last; seq++) {
          const delay = dueOf(seq);
          jobs.push({
            name: 'j',
            data: encode(now + delay * 1000, seq, common.body_bytes),
            opts: { jobId: `${runId}-${seq}`, delay, removeOnComplete: true, removeOnFail: true },
          });
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
  return { elapsedS: (performance.now() - start) / 1000, errors, firstError };
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

async function w1() {
  const n = num('jobs', 50000);
  const maxDelayS = num('max-delay-s', 3);
  const drainS = num('drain-timeout-s', 30);
  const r = result('w1', { jobs: n, max_delay_s: maxDelayS, drain_timeout_s: drainS });
  const acked = new Uint8Array(n);
  const delivered = new Uint8Array(n);
  let ackedTotal = 0;
  let deliveredUnique = 0;
  let foreign = 0;
  let lastDeliveryUs = 0;
  const late = [];
  const early = [];

  const cpu0 = process.cpuUsage();
  const srv0 = serverPid ? cpuS(serverPid) : null;
  const startUs = nowUs();
  const worker = new Worker(
    qname,
    async (job) => {
      const popUs = nowUs();
      const d = decode(String(job.data));
      if (!d) {
        foreign++;
        return;
      }
      const [due, seq] = d;
      const x = popUs - due;
      if (x >= 0) late.push(Math.max(x, 1));
      else early.push(-x);
      if (seq < n) {
        if (delivered[seq] === 0) {
          deliveredUnique++;
          lastDeliveryUs = Math.max(lastDeliveryUs, popUs);
        }
        if (delivered[seq] < 255) delivered[seq]++;
      } else foreign++;
    },
    { connection, concurrency: common.consumers, lockDuration: 3600_000 },
  );
  await worker.waitUntilReady();
  const queues = await Promise.all(
    Array.from({ length: common.producers }, async () => {
      const q = new Queue(qname, { connection });
      await q.waitUntilReady();
      return q;
    }),
  );
  const pushed = await produce(
    n,
    () => Math.floor(Math.random() * (maxDelayS * 1000 + 1)),
    queues,
    (seq) => {
      if (!acked[seq]) {
        acked[seq] = 1;
        ackedTotal++;
      }
    },
  );
  const deadline = Date.now() + maxDelayS * 1000 + 1000 + drainS * 1000;
  while (deliveredUnique < ackedTotal && Date.now() < deadline) await sleep(20);
  const wallS = (nowUs() - startUs) / 1e6;
  const cpu = process.cpuUsage(cpu0);
  const srv1 = serverPid ? cpuS(serverPid) : null;
  await worker.close();
  for (const q of queues) await q.obliterate({ force: true }).catch(() => {});
  await Promise.all(queues.map((q) => q.close()));

  let lost = 0;
  let dups = 0;
  let unexpected = foreign;
  for (let i = 0; i < n; i++) {
    if (acked[i] && delivered[i] === 0) lost++;
    if (!acked[i] && delivered[i] > 0) unexpected++;
    if (delivered[i] > 1) dups += delivered[i] - 1;
  }
  const totalS = lastDeliveryUs > startUs ? (lastDeliveryUs - startUs) / 1e6 : wallS;
  const L = summary(late);
  const E = summary(early);
  Object.assign(r.metrics, {
    push_jobs_per_s: ackedTotal / pushed.elapsedS,
    push_s: pushed.elapsedS,
    total_s: totalS,
    e2e_jobs_per_s: deliveredUnique / totalS,
    lateness_p50_ms: L.p50,
    lateness_p99_ms: L.p99,
    lateness_p999_ms: L.p999,
    lateness_max_ms: L.max,
    early: E.count,
    acked: ackedTotal,
    delivered: deliveredUnique,
    lost,
    duplicates: dups,
    unexpected,
    push_errors: pushed.errors,
    bench_cpu_pct: (100 * (cpu.user + cpu.system)) / 1e6 / wallS,
  });
  if (E.count > 0) {
    Object.assign(r.metrics, {
      early_p50_ms: E.p50,
      early_p99_ms: E.p99,
      early_p999_ms: E.p999,
      early_max_ms: E.max,
    });
  }
  if (srv0 !== null && srv1 !== null) r.metrics.server_cpu_pct = (100 * (srv1 - srv0)) / wallS;
  if (pushed.firstError) r.notes.push(`${pushed.errors} push errors, first: ${pushed.firstError}`);
  r.notes.push('one Node process: producers and the worker share one event loop; delays in ms');
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
  const pushed = await produce(m, () => delayS * 1000, queues, () => ackedTotal++);
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

const r = workload === 'w1' ? await w1() : workload === 'w2' ? await w2() : null;
if (!r) {
  console.error('usage: node bench.mjs w1|w2 --redis-url redis://127.0.0.1:PORT/0 [...] [--json]');
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
