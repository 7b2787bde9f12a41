// fivebeans (beanstalkd's Node client, from npm) against delayq's beanstalkd port: a producer
// and a worker as a Node application has them, through every command the client offers.
// Usage: node fivebeans_client.js PORT   (NODE_PATH names the node_modules holding fivebeans)
// Prints "ok" and exits 0, or prints what differed and exits 1.
'use strict';
const assert = require('assert');
const fivebeans = require('fivebeans');

const port = Number(process.argv[2]);
const tube = 'node-' + Math.random().toString(16).slice(2, 10);

function connect() {
  return new Promise((resolve, reject) => {
    const c = new fivebeans.client('127.0.0.1', port);
    c.on('connect', () => resolve(c)).on('error', reject).connect();
  });
}

// Calls a client method; resolves with the values its callback was given after the error.
function call(c, name, ...args) {
  return new Promise((resolve, reject) => {
    c[name](...args, (err, ...values) => (err ? reject(new Error(`${name}: ${err}`)) : resolve(values)));
  });
}

async function rejects(promise, word) {
  try {
    await promise;
  } catch (e) {
    assert.ok(String(e).includes(word), `expected ${word}, got ${e}`);
    return;
  }
  assert.fail(`expected ${word}`);
}

async function main() {
  const producer = await connect();
  const worker = await connect();
  assert.deepStrictEqual(await call(producer, 'use', tube), [tube]);
  assert.deepStrictEqual(await call(producer, 'list_tube_used'), [tube]);
  const [id] = await call(producer, 'put', 0, 0, 60, JSON.stringify({ hello: 'world' }));
  assert.match(String(id), /^\d+$/);
  const [later] = await call(producer, 'put', 10, 0, 60, 'second');

  // fivebeans hands numbers over as the strings read.
  assert.deepStrictEqual((await call(worker, 'watch', tube)).map(String), ['2']);
  assert.deepStrictEqual((await call(worker, 'ignore', 'default')).map(String), ['1']);
  const [watched] = await call(worker, 'list_tubes_watched');
  assert.deepStrictEqual(watched, [tube]);

  const [peekedId, peeked] = await call(producer, 'peek_ready');
  assert.strictEqual(String(peekedId), String(id));
  assert.strictEqual(peeked.toString(), '{"hello":"world"}');

  const [gotId, payload] = await call(worker, 'reserve');
  assert.strictEqual(String(gotId), String(id));
  assert.deepStrictEqual(JSON.parse(payload.toString()), { hello: 'world' });
  await call(worker, 'touch', gotId);
  const [job] = await call(worker, 'stats_job', gotId);
  assert.strictEqual(job.state, 'reserved');
  assert.strictEqual(job.tube, tube);
  assert.strictEqual(job.reserves, 1);
  await call(worker, 'release', gotId, 5, 0);
  const [again] = await call(worker, 'reserve_with_timeout', 1);
  assert.strictEqual(String(again), String(id));
  await call(worker, 'bury', again, 0);
  const [buried] = await call(producer, 'peek_buried');
  assert.strictEqual(String(buried), String(id));
  assert.deepStrictEqual((await call(producer, 'kick', 10)).map(String), ['1']);
  const [kickedAgain] = await call(worker, 'reserve_with_timeout', 1);
  assert.strictEqual(String(kickedAgain), String(id));
  await call(worker, 'destroy', kickedAgain);
  await rejects(call(worker, 'destroy', kickedAgain), 'NOT_FOUND');

  const [second] = await call(worker, 'reserve_with_timeout', 1);
  assert.strictEqual(String(second), String(later));
  await call(worker, 'destroy', second);
  await rejects(call(worker, 'reserve_with_timeout', 0), 'TIMED_OUT');

  const [delayed] = await call(producer, 'put', 0, 3600, 60, 'later');
  const [peekedDelayed] = await call(producer, 'peek_delayed');
  assert.strictEqual(String(peekedDelayed), String(delayed));
  await call(producer, 'kick_job', delayed);
  const [kicked] = await call(worker, 'reserve_with_timeout', 1);
  assert.strictEqual(String(kicked), String(delayed));
  await call(worker, 'destroy', kicked);

  const [stats] = await call(producer, 'stats_tube', tube);
  assert.strictEqual(stats.name, tube);
  assert.strictEqual(stats['current-jobs-ready'], 0);
  assert.strictEqual(stats['cmd-delete'], 3);
  const [server] = await call(producer, 'stats');
  assert.ok(server['current-connections'] >= 2);
  const [tubes] = await call(producer, 'list_tubes');
  assert.ok(tubes.includes(tube));
  await call(producer, 'pause_tube', tube, 0);

  producer.end();
  worker.end();
  console.log('ok');
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
