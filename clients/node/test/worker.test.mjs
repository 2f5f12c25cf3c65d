// The worker beyond the conformance suite (clients/conformance): its start and stop, hooks,
// tracing, per-queue slots, abandoned handlers and settles it gives up.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { admin, databaseOfThisFile } from './database.mjs';
import { CountingMetrics, createWorker, defineJob, enqueue, enqueueMany, getJob, silentLogger, useOpenTelemetry } from 'pg-jobs';
import { drain, performJob } from 'pg-jobs/testing';

let pool;
let dsn;
databaseOfThisFile((db) => ({ pool, dsn } = db));

test('a hook that throws is logged with its code and changes nothing', async () => {
  const picky = defineJob({ name: 'picky_hooked', queue: 'hooks', handler: () => { throw new RangeError('bad input'); } });
  await pool.query("insert into jobs.job_types (name, non_retryable_errors) values ('picky_hooked', array['RangeError'])");
  const job = await enqueue(pool, picky, {}, { maxAttempts: 5 });
  const told = [];
  const errors = [];
  await drain({
    pool, queues: ['hooks'], jobs: [picky],
    logger: { info() {}, warn() {}, error(msg, fields) { errors.push(fields.code); } },
    onSettled(settled, outcome) { told.push(outcome); throw new Error('the hook failed on purpose'); },
    onExhausted(dead) { told.push(...dead.map((j) => j.id)); },
  });
  assert.deepEqual(told, ['dead', job.id]);
  assert.deepEqual(errors, ['PGJOBS_ON_SETTLED_FAILED']);
  assert.deepEqual((await getJob(pool, job.id)).state, 'dead');
});

test('ctx.sleep parks the job once, with no attempt used, and returns at once when it runs again', async () => {
  let runs = 0;
  const job = defineJob({ name: 'napper', queue: 'naps', handler: async (_payload, ctx) => {
    runs += 1;
    await ctx.sleep('nap', 300);
    return { woke: true };
  } });
  const { id } = await enqueue(pool, job, {});
  const quiet = { info() {}, warn() {}, error() {} };
  await drain({ pool, queues: ['naps'], jobs: [job], logger: quiet });
  assert.equal((await getJob(pool, id)).state, 'suspended');
  await new Promise((resolve) => setTimeout(resolve, 400));
  await drain({ pool, queues: ['naps'], jobs: [job], logger: quiet });
  const done = await getJob(pool, id);
  assert.deepEqual([done.state, done.attempt, done.result, runs], ['completed', 1, { woke: true }, 2]);
});

test('a bad step timeout is refused before the step starts; enqueuedBy is kept beside the role', async () => {
  const bad = defineJob({ name: 'bad_step_timeout', async handler(_payload, ctx) {
    return ctx.step('never', () => 1, { timeoutMs: -5 });
  } });
  const done = await performJob({ pool, logger: silentLogger }, bad, {}, { maxAttempts: 1 });
  assert.match(done.lastError, /RangeError: step never: timeoutMs must be a positive number/);
  assert.equal((await pool.query('select count(*)::int as n from jobs.steps where run_id = $1', [done.id])).rows[0].n, 0);
  const made = await enqueue(pool, 'provenance', {}, { enqueuedBy: 'billing-api' });
  const { rows } = await pool.query('select enqueued_by from jobs.jobs where id = $1', [made.id]);
  assert.match(rows[0].enqueued_by, / \(billing-api\)$/);
});

test('a stop ends the claim sleeping in the server though its first cancel came too soon', async () => {
  // A cancel that reaches the server before the claim is under way cancels nothing: the stop
  // sends it again each second. Checked to fail with the cancel sent once: stop() waited out
  // the claim's 600 s (the test's 30 s bound).
  const worker = createWorker({ pool, jobs: [], queues: ['sleepers'], pollMs: 600_000, logger: silentLogger });
  await worker.start();
  const asleep = "select count(*)::int as n from pg_stat_activity where datname = current_database() and state = 'active' "
    + "and query like '%jobs.claim(%' and (wait_event_type = 'Extension' or wait_event = 'PgSleep') and pid <> pg_backend_pid()";
  const deadline = Date.now() + 20_000;
  while ((await pool.query(asleep)).rows[0].n === 0) {
    assert.ok(Date.now() < deadline, 'no claim slept in the server');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const control = worker.control;
  const query = control.query.bind(control);
  let lost = 0;
  control.query = (text, values) => (text.includes('pg_cancel_backend') && lost++ === 0 ? Promise.resolve([]) : query(text, values));
  let timer;
  const bound = new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error('stop() did not return within 30 s')), 30_000); });
  try {
    await Promise.race([worker.stop(), bound]);
  } finally {
    clearTimeout(timer);
  }
  assert.ok(lost >= 2, `the cancel was sent ${lost} time(s)`);
});

test('a connection lost while the worker starts is made again, and the start goes on', async () => {
  // Each question the start asks before the first claim (the server, the owners of schema jobs,
  // the largest payload) meets a lost connection once, as a pg_terminate_backend between them
  // would. Checked to fail without its guard: with only the first question tried again, start()
  // threw "Connection terminated unexpectedly".
  const worker = createWorker({ pool, jobs: [], queues: ['starting'], logger: silentLogger });
  const control = worker.control;
  const query = control.query.bind(control);
  const cut = new Set();
  control.query = (text, values) => {
    if (cut.has(text)) return query(text, values);
    cut.add(text);
    return Promise.reject(new Error('Connection terminated unexpectedly'));
  };
  await worker.start();
  await worker.stop();
  assert.equal(cut.size, 3);
  assert.equal(typeof worker.core.maxResultBytes, 'number');
});

test('run() resolves once stop() is called, and leaves the signals to the application', async () => {
  const idle = defineJob({ name: 'idle', queue: 'idle', handler: () => {} });
  const worker = createWorker({ connectionString: dsn, queues: ['idle'], jobs: [idle], logger: silentLogger });
  const signals = process.listenerCount('SIGTERM');
  const running = worker.run();
  await new Promise((resolve) => setTimeout(resolve, 300));
  await worker.stop();
  await running;
  assert.equal(process.listenerCount('SIGTERM'), signals);
});

test('a tracer gets a span per attempt, with its outcome', async () => {
  const spans = [];
  const tracer = {
    startSpan(spanName, options) {
      const span = { name: spanName, attributes: { ...options.attributes }, status: null, ended: false,
        setAttribute(k, v) { this.attributes[k] = v; }, setStatus(s) { this.status = s; }, end() { this.ended = true; } };
      spans.push(span);
      return span;
    },
  };
  const ok = defineJob({ name: 'traced_ok', queue: 'traced', handler: () => ({ fine: true }) });
  const bad = defineJob({ name: 'traced_bad', queue: 'traced', handler: () => { throw new Error('no'); } });
  await enqueueMany(pool, [{ job: ok }, { job: bad, maxAttempts: 1 }]);
  await drain({ pool, queues: ['traced'], concurrency: 1, jobs: [ok, bad], tracer,
    logger: { info() {}, warn() {}, error() {} } });
  const byName = Object.fromEntries(spans.map((s) => [s.name, s]));
  assert.deepEqual(Object.keys(byName).sort(), ['traced_bad process', 'traced_ok process']);
  assert.deepEqual([byName['traced_ok process'].status.code, byName['traced_ok process'].attributes['pg_jobs.outcome']], [1, 'completed']);
  assert.deepEqual([byName['traced_bad process'].status.code, byName['traced_bad process'].attributes['pg_jobs.outcome']], [2, 'dead']);
  assert.ok(spans.every((s) => s.ended && s.attributes['messaging.destination.name'] === 'traced'));
});

test('orderingKey: a key\'s jobs run one at a time, in enqueue order', async () => {
  const ran = [];
  let running = 0;
  let most = 0;
  const job = defineJob({
    name: 'ordered', queue: 'ordered',
    async handler(payload) {
      running += 1;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, 20));
      ran.push(payload.n);
      running -= 1;
    },
  });
  await enqueueMany(pool, [1, 2, 3, 4].map((n) => ({ job, payload: { n }, orderingKey: 'acct:1', priority: n })));
  await drain({ pool, queues: ['ordered'], jobs: [job], concurrency: 4, logger: { info() {}, warn() {}, error() {} } });
  assert.deepEqual([ran, most], [[1, 2, 3, 4], 1]);
});

test('useOpenTelemetry: an enqueue carries the active traceparent; the attempt span starts under it', async () => {
  // @opentelemetry/api's shape (context, propagation, ROOT_CONTEXT, trace), with a fixed active
  // trace: what an SDK with the W3C propagator does.
  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const spans = [];
  const api = {
    ROOT_CONTEXT: { root: true },
    context: { active: () => ({ active: true }) },
    propagation: {
      inject(ctx, carrier) { if (ctx.active) carrier.traceparent = traceparent; },
      extract(ctx, carrier) { return { ...ctx, remote: carrier.traceparent }; },
    },
    trace: {
      getTracer: (name) => ({
        startSpan(spanName, options, parent) {
          const span = { tracer: name, name: spanName, parent, setAttribute() {}, setStatus() {}, end() {} };
          spans.push(span);
          return span;
        },
      }),
    },
  };
  const job = defineJob({ name: 'carried', queue: 'carried', handler: () => null });
  useOpenTelemetry(api);
  try {
    const { id } = await enqueue(pool, job, {}, { meta: { other: 1 } });
    const own = await enqueue(pool, job, {}, { meta: { traceparent: 'mine' } });
    assert.deepEqual((await getJob(pool, id)).meta, { traceparent, other: 1 });
    assert.deepEqual((await getJob(pool, own.id)).meta, { traceparent: 'mine' });
    await drain({ pool, queues: ['carried'], jobs: [job], logger: { info() {}, warn() {}, error() {} } });
  } finally {
    useOpenTelemetry(undefined);
  }
  assert.deepEqual(spans.map((s) => [s.tracer, s.name, s.parent.remote]).sort(),
    [['pg-jobs', 'carried process', traceparent], ['pg-jobs', 'carried process', 'mine']]);
  const { id } = await enqueue(pool, 'untraced', {});
  assert.equal((await getJob(pool, id)).meta, null);
});

test('concurrency per queue: each queue gets its own slots', async () => {
  // Queue b's first jobs wait (at most 5 s) until three of them run at once, which only three
  // slots of b allow; queue a's one slot never runs two.
  let running = { a: 0, b: 0 };
  const most = { a: 0, b: 0 };
  const make = (queue) => defineJob({
    name: `per_${queue}`, queue,
    async handler() {
      running[queue] += 1;
      most[queue] = Math.max(most[queue], running[queue]);
      for (let waited = 0; queue === 'b' && most.b < 3 && waited < 5000; waited += 10) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
      running[queue] -= 1;
    },
  });
  const [a, b] = [make('a'), make('b')];
  await enqueueMany(pool, [...Array(6)].flatMap(() => [{ job: a }, { job: b }]));
  await drain({ pool, concurrency: { a: 1, b: 3 }, jobs: [a, b], logger: { info() {}, warn() {}, error() {} } });
  running = null;
  assert.deepEqual(most, { a: 1, b: 3 });
  const { rows } = await pool.query("select count(*)::int as n from jobs.jobs where name like 'per_%' and state = 'completed'");
  assert.equal(rows[0].n, 12);
});

/** A job whose handler ignores ctx.signal until `state.release`; `state` records it started and ended. */

function stubbornJob(name, queue, state) {
  return defineJob({
    name, queue,
    async handler() {
      state.started = true;
      while (!state.release) await new Promise((resolve) => setTimeout(resolve, 20));
      state.ended = true;
    },
  });
}

async function until(done, deadline, failure) {
  while (!done()) {
    assert.ok(Date.now() < deadline, failure);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test('a handler that ignores its cancellation is abandoned and its slot goes to the next job', async () => {
  // Guard checked: with Worker.abort no longer calling held.onAbort (the abandon timer), the
  // quick job waits for the stubborn handler and the test fails at its deadline.
  const deadline = Date.now() + 20_000;
  const state = { started: false, release: false, ended: false };
  const stubborn = stubbornJob('stubborn', 'abandon', state);
  const quick = defineJob({ name: 'quick', queue: 'abandon', handler: () => null });
  const metrics = new CountingMetrics();
  const worker = createWorker({ pool, queues: ['abandon'], concurrency: 1, jobs: [stubborn, quick], metrics,
    pollMs: 200, logger: silentLogger });
  const { id } = await enqueue(pool, stubborn);
  await worker.start();
  try {
    await until(() => state.started, deadline, 'the stubborn job never started');
    await enqueue(pool, quick);
    await pool.query('select jobs.cancel($1)', [id]);
    await until(() => metrics.count('completed', { name: 'quick' }) > 0, deadline, 'the stubborn handler kept its slot');
    assert.equal(state.ended, false);
    assert.equal(metrics.count('cancelled', { name: 'stubborn' }), 1);
    // What it counted is what it prints.
    assert.ok(JSON.stringify(metrics.toJSON().outcomes).includes('{"queue":"abandon","name":"stubborn","outcome":"cancelled","count":1}'));
    assert.match(String(metrics), /^CountingMetrics \{"running":\d,"outcomes":\[/);
  } finally {
    state.release = true;
    await worker.stop({ graceMs: 0 });
  }
  const { rows } = await pool.query("select name, state::text from jobs.jobs where queue = 'abandon' order by name");
  assert.deepEqual(rows, [{ name: 'quick', state: 'completed' }, { name: 'stubborn', state: 'cancelled' }]);
});

test('a handler that ignores a shutdown is abandoned and its job handed back', async () => {
  // Handed back as a shutdown hands back a job that stops (claimable at once, no attempt used),
  // not left running until its lease lapses. Checked: without the snooze in the worker's
  // abandon path (stoppedOutcome), the job stays running with its attempt used.
  const deadline = Date.now() + 20_000;
  const state = { started: false, release: false, ended: false };
  const stubborn = stubbornJob('stubborn_stop', 'abandon_stop', state);
  const metrics = new CountingMetrics();
  const worker = createWorker({ pool, queues: ['abandon_stop'], concurrency: 1, jobs: [stubborn], metrics,
    logger: silentLogger });
  await enqueue(pool, stubborn);
  await worker.start();
  try {
    await until(() => state.started, deadline, 'the stubborn job never started');
    await worker.stop({ graceMs: 0 });
    assert.equal(metrics.count('handed_back', { name: 'stubborn_stop' }), 1);
  } finally {
    state.release = true;
  }
  const { rows } = await pool.query(
    "select state::text, attempt, run_at <= now() as due from jobs.jobs where queue = 'abandon_stop'");
  assert.deepEqual(rows, [{ state: 'suspended', attempt: 0, due: true }]);
});

test('a stop that comes while held jobs start starts no more of them: they go back unused', async () => {
  // The first job's handler stops the worker and returns at once; its settle frees the slot
  // while the four others are still held. Checked: without the stopping test in
  // Dispatcher.startQueued the second job runs too.
  const ran = [];
  let worker;
  let stopped;
  const job = defineJob({ name: 'stop_among_held', queue: 'held_stop', handler: (payload) => {
    ran.push(payload.n);
    stopped ??= worker.stop({ graceMs: 5000 });
    return null;
  } });
  await enqueueMany(pool, [1, 2, 3, 4, 5].map((n) => ({ job, payload: { n }, priority: 10 - n })));
  worker = createWorker({ pool, queues: ['held_stop'], concurrency: 1, prefetch: 10, jobs: [job],
    logger: silentLogger });
  await worker.start();
  await until(() => stopped !== undefined, Date.now() + 20_000, 'no job started');
  await stopped;
  assert.deepEqual(ran, [1]);
  const { rows } = await pool.query(
    "select payload->>'n' as n, state::text, attempt from jobs.jobs where queue = 'held_stop' order by 1");
  assert.deepEqual(rows, [{ n: '1', state: 'completed', attempt: 1 },
    ...['2', '3', '4', '5'].map((n) => ({ n, state: 'ready', attempt: 0 }))]);
});

test('an attempt deadline past 24.8 days does not abort the handler at once', async () => {
  // A Node.js timer longer than 2^31-1 ms fires at once. Checked: with the deadline armed by a
  // plain setTimeout the handler's signal is aborted within its first 300 ms.
  let aborted;
  const job = defineJob({ name: 'long_deadline', queue: 'long_deadline', handler: async (_p, ctx) => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    aborted = ctx.signal.aborted;
  } });
  const { id } = await enqueue(pool, job, {}, { runTimeoutMs: 30 * 24 * 3600 * 1000 });
  await drain({ pool, queues: ['long_deadline'], concurrency: 1, jobs: [job], logger: silentLogger });
  assert.equal(aborted, false);
  assert.equal((await getJob(pool, id)).state, 'completed');
});

test('a stop gives up a settle the database refuses once its grace is over', async () => {
  // The handler completes, then the database takes no connections: the settle fails again and
  // again. stop() returns after its grace and the job is left to its lease (running, its attempt
  // used). Checked: with giveUpAt left at Infinity the settle is retried for ever and the test
  // never ends.
  const name = new URL(dsn).pathname.slice(1);
  let ran = false;
  const job = defineJob({ name: 'settled_never', queue: 'settled_never', handler: async () => {
    await admin(`alter database ${name} allow_connections false`);
    await admin("select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name like 'pg-jobs%'", [name]);
    ran = true;
    return { done: 1 };
  } });
  const { id } = await enqueue(pool, job);
  const worker = createWorker({ connectionString: dsn, queues: ['settled_never'], concurrency: 1, leaseMs: 60_000,
    jobs: [job], logger: silentLogger });
  await worker.start();
  try {
    await until(() => ran, Date.now() + 20_000, 'the handler never ran');
    await new Promise((resolve) => setTimeout(resolve, 500)); // the settle fails at least once
    await worker.stop({ graceMs: 1000 });
  } finally {
    await admin(`alter database ${name} allow_connections true`);
  }
  const { rows } = await pool.query('select state::text, attempt, result from jobs.jobs where id = $1', [id]);
  assert.deepEqual(rows, [{ state: 'running', attempt: 1, result: null }]);
});

test('a handler sees its job as the server has it, field for field, fetched ahead or not', async () => {
  for (const prefetch of [0, 5]) {
    const seen = [];
    const job = defineJob({ name: `fields_${prefetch}`, queue: 'fields', handler: (_payload, ctx) => { seen.push(ctx.job); } });
    const { id } = await enqueue(pool, job, { n: 1 },
      { priority: 3, tenantId: 't1', tags: ['a'], meta: { m: 2 }, timeoutMs: 60_000 });
    await drain({ pool, queues: ['fields'], jobs: [job], prefetch, logger: silentLogger });
    const { rows: [row] } = await pool.query(
      'select id, run_id, name, queue, payload, attempt, max_attempts, claim::text, tenant_id, parent_id, priority,'
      + ' last_error, tags, meta, floor(extract(epoch from enqueued_at) * 1000)::float8 as enqueued_ms,'
      + ' floor(extract(epoch from deadline) * 1000)::float8 as deadline_ms from jobs.jobs where id = $1', [id]);
    assert.equal(seen.length, 1);
    const { deadline, enqueuedAt, ...fields } = seen[0];
    assert.deepEqual(fields, {
      id: row.id, runId: row.run_id, name: row.name, queue: row.queue, payload: { n: 1 }, attempt: 1,
      maxAttempts: row.max_attempts, claim: row.claim, tenantId: 't1', parentId: null, priority: 3,
      lastError: null, tags: ['a'], meta: { m: 2 },
    });
    assert.equal(enqueuedAt.getTime(), row.enqueued_ms);
    // Fetched ahead, the deadline is the one a start at the claim would get; the start sets its own.
    assert.ok(deadline instanceof Date);
    if (prefetch === 0) assert.equal(deadline.getTime(), row.deadline_ms);
  }
});
