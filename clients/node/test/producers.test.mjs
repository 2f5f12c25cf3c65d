// Producing and reading jobs: enqueue in and out of a transaction, its options and refusals,
// cancel, requeue and promote, getJob and waitForJob, the policies a job type declares.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import pg from 'pg';
import { databaseOfThisFile, dropDatabase } from './database.mjs';
import { cancel, codes, deleteJob, JobNotFoundError, NotCancellableError, NotDeletableError, NotInstalledError, NotPromotableError, NotRequeueableError, defineJob, enqueue, enqueueMany, errorNames, getJob, getJobs, PgJobsError, promote, requeue, silentLogger, syncPolicies, waitForJob } from 'pg-jobs';
import { assertEnqueued, drain } from 'pg-jobs/testing';

let pool;
let dsn;
databaseOfThisFile((db) => ({ pool, dsn } = db));

test('an enqueue in a transaction lands with its commit only', async () => {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const job = await enqueue(client, 'in_tx', { n: 1 });
    assert.equal((await assertEnqueued(client, 'in_tx', { n: 1 })).id, job.id);
    await client.query('rollback');
    assert.equal((await pool.query("select count(*)::int as n from jobs.jobs where name = 'in_tx'")).rows[0].n, 0);
    await client.query('begin');
    await enqueue(client, 'in_tx', { n: 2 });
    await client.query('commit');
    assert.equal((await pool.query("select count(*)::int as n from jobs.jobs where name = 'in_tx'")).rows[0].n, 1);
  } finally {
    client.release();
  }
});

test('options reach jobs.enqueue: idempotency, delay, queue, priority, timeout', async () => {
  const first = await enqueue(pool, 'opts', {}, { idempotencyKey: 'k1', delayMs: 60_000, queue: 'q', priority: 3, timeoutMs: 5000 });
  const again = await enqueue(pool, 'opts', {}, { idempotencyKey: 'k1' });
  assert.deepEqual([first.deduped, again.deduped, again.id], [false, true, first.id]);
  const { rows } = await pool.query('select state::text, queue, priority from jobs.jobs where id = $1', [first.id]);
  assert.deepEqual(rows[0], { state: 'delayed', queue: 'q', priority: 3 });
  const many = await enqueueMany(pool, [{ job: 'many', payload: { i: 1 } }, { job: 'many', payload: { i: 2 } }]);
  assert.equal(many.length, 2);
  // Debounce: the repeat takes the new payload and puts the waiting job off (the engine decides).
  const made = await enqueue(pool, 'digest', { n: 1 }, { idempotencyKey: 'u', onConflict: 'debounce', debounceMs: 30_000, debounceMaxMs: 300_000 });
  const repeat = await enqueue(pool, 'digest', { n: 2 }, { idempotencyKey: 'u', onConflict: 'debounce', debounceMs: 60_000 });
  assert.deepEqual([made.action, repeat.action, repeat.id], ['inserted', 'debounced', made.id]);
  const put = await pool.query("select payload from jobs.jobs where id = $1 and run_at > now() + interval '50 seconds'", [made.id]);
  assert.deepEqual(put.rows, [{ payload: { n: 2 } }]);
});

test('a refusal is a PgJobsError with its SQLSTATE, and enqueues nothing', async () => {
  await enqueue(pool, 'dup', {}, { idempotencyKey: 'only' });
  await assert.rejects(enqueue(pool, 'dup', {}, { idempotencyKey: 'only', onConflict: 'error' }),
    (err) => err instanceof PgJobsError && err.code === 'PJ002');
  assert.equal((await pool.query("select count(*)::int as n from jobs.jobs where name = 'dup'")).rows[0].n, 1);
});

test('errorNames: the name, the classes and the code; the policy reaches jobs.job_types', async () => {
  class Invalid extends RangeError {}
  const err = Object.assign(new Invalid('bad'), { code: 'E_INVALID' });
  assert.deepEqual(errorNames(err), ['RangeError', 'Invalid', 'Error', 'E_INVALID']);
  assert.deepEqual(errorNames('a string'), []);
  const picky = defineJob({
    name: 'picky', policy: { nonRetryableErrors: ['RangeError'], keyConcurrency: 3, whenBusy: 'replace' }, handler: () => {},
  });
  assert.equal(await syncPolicies(pool, [picky]), 1);
  const { rows } = await pool.query(
    "select non_retryable_errors, key_concurrency, when_busy from jobs.job_types where name = 'picky'");
  assert.deepEqual(rows[0], { non_retryable_errors: ['RangeError'], key_concurrency: 3, when_busy: 'replace' });
});

test('waitForJob answers once the job has ended, and at its deadline as the job is', async () => {
  const job = defineJob({ name: 'awaited', queue: 'awaited', handler: () => ({ ok: 1 }) });
  const { id } = await enqueue(pool, job, {});
  assert.equal((await waitForJob(pool, id, 100)).state, 'ready');
  const waited = waitForJob(pool, id, 60_000);
  await drain({ pool, queues: ['awaited'], jobs: [job], logger: { info() {}, warn() {}, error() {} } });
  const done = await waited;
  assert.deepEqual([done.state, done.result], ['completed', { ok: 1 }]);
  assert.equal(await waitForJob(pool, '00000000-0000-0000-0000-000000000000', 60_000), null);
});

test('cancel, requeue, promote and deleteJob move a job; a refusal is a PgJobsError and changes nothing', async () => {
  const job = defineJob({ name: 'operated', queue: 'operated', handler: () => ({ ok: 1 }) });
  const { id } = await enqueue(pool, job, {}, { runAt: new Date(Date.now() + 3_600_000) });
  const refused = async (call, code) => {
    const before = await getJob(pool, id);
    const classes = { [codes.notRequeueable]: NotRequeueableError, [codes.notPromotable]: NotPromotableError,
      [codes.notCancellable]: NotCancellableError, [codes.notDeletable]: NotDeletableError };
    await assert.rejects(call(), (err) => err instanceof classes[code] && err instanceof PgJobsError
      && err.code === code && Boolean(err.hint));
    assert.deepEqual(await getJob(pool, id), before);
  };
  await refused(() => requeue(pool, id), codes.notRequeueable);
  await refused(() => deleteJob(pool, id), codes.notDeletable);
  await promote(pool, id);
  assert.equal((await getJob(pool, id)).state, 'ready');
  await refused(() => promote(pool, id), codes.notPromotable);
  await cancel(pool, id);
  assert.equal((await getJob(pool, id)).state, 'cancelled');
  await refused(() => cancel(pool, id), codes.notCancellable);
  await requeue(pool, id);
  await drain({ pool, queues: ['operated'], jobs: [job], logger: silentLogger });
  assert.deepEqual([(await getJob(pool, id)).state, (await getJob(pool, id)).attempt], ['completed', 1]);
  assert.equal(await deleteJob(pool, id), 1);
  assert.equal(await getJob(pool, id), null);
  await assert.rejects(cancel(pool, '00000000-0000-0000-0000-000000000000'),
    (err) => err instanceof JobNotFoundError && err.code === codes.jobNotFound && err.name === 'JobNotFoundError');
});

test('an enqueue on a database without pg_jobs is a PgJobsError whose hint is the fix', async () => {
  const name = `bare_${randomUUID().slice(0, 8)}`;
  await pool.query(`create database ${name}`);
  const url = new URL(dsn);
  url.pathname = `/${name}`;
  const bare = new pg.Pool({ connectionString: url.toString() });
  try {
    await assert.rejects(enqueue(bare, 'anything', {}),
      (err) => err instanceof NotInstalledError && err.code === '3F000' && err.hint.includes('CREATE EXTENSION pg_jobs'));
  } finally {
    await bare.end();
    await dropDatabase(name);
  }
});

test('tags, meta and runTimeoutMs reach the job, the handler and getJob', async () => {
  let seen;
  const job = defineJob({ name: 'labelled', queue: 'labelled', handler: (_p, ctx) => { seen = ctx.job; } });
  const { id } = await enqueue(pool, job, {}, { tags: ['customer:42', 'import'], meta: { source: 'test' }, runTimeoutMs: 60_000 });
  const [many] = await enqueueMany(pool, [{ job: 'labelled_too', tags: ['x'], meta: { k: 1 } }]);
  const { rows } = await pool.query(
    "select extract(epoch from run_timeout)::int as run_timeout, tags from jobs.jobs where id = any($1::uuid[]) order by name",
    [[id, many.id]]);
  assert.deepEqual(rows, [{ run_timeout: 60, tags: ['customer:42', 'import'] }, { run_timeout: null, tags: ['x'] }]);
  await drain({ pool, queues: ['labelled'], jobs: [job], logger: { info() {}, warn() {}, error() {} } });
  assert.deepEqual([seen.tags, seen.meta], [['customer:42', 'import'], { source: 'test' }]);
  // A deadline within the run's: the attempt's deadline was capped at enqueue + 60 s.
  assert.ok(seen.deadline !== null && seen.deadline.getTime() - Date.now() < 61_000);
  const status = await getJob(pool, id);
  assert.deepEqual([status.tags, status.meta], [['customer:42', 'import'], { source: 'test' }]);
  await assert.rejects(enqueue(pool, 'labelled', {}, { tags: [''] }), (err) => err instanceof PgJobsError && err.code === '22023');
});

test('getJob and getJobs answer a job\'s state, result and error; an unknown id none', async () => {
  const ok = defineJob({ name: 'status_ok', queue: 'status', handler: () => ({ total: 3 }) });
  const bad = defineJob({ name: 'status_bad', queue: 'status', handler: () => { throw new Error('no stock'); } });
  const [a, b] = await enqueueMany(pool, [{ job: ok }, { job: bad, maxAttempts: 1 }]);
  const before = await getJob(pool, a.id);
  assert.deepEqual([before.state, before.attempt, before.result, before.finishedAt], ['ready', 0, null, null]);
  await drain({ pool, queues: ['status'], concurrency: 1, jobs: [ok, bad], logger: silentLogger });
  const unknown = '00000000-0000-0000-0000-00000000ffff';
  const after = await getJobs(pool, [b.id, unknown, a.id]);
  assert.deepEqual(after.map((s) => [s.name, s.state, s.attempt, s.result, s.lastError]),
    [['status_bad', 'dead', 1, null, 'Error: no stock'], ['status_ok', 'completed', 1, { total: 3 }, null]]);
  assert.ok(after.every((s) => s.finishedAt instanceof Date && s.enqueuedAt instanceof Date));
  assert.equal(await getJob(pool, unknown), null);
});
