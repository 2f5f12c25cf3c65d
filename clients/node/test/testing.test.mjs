// The testing helpers: drain and performJob, assertEnqueued and refuteEnqueued.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { databaseOfThisFile } from './database.mjs';
import { defineJob, enqueueMany, silentLogger } from 'pg-jobs';
import { drain, performJob, refuteEnqueued } from 'pg-jobs/testing';

let pool;
databaseOfThisFile((db) => ({ pool } = db));

test('drain runs a queue empty with the jobs given, and leaves the pool given as it was', async () => {
  const seen = [];
  const job = defineJob({ name: 'drained', queue: 'drain', handler: (payload) => { seen.push(payload.i); } });
  await enqueueMany(pool, [1, 2, 3].map((i) => ({ job, payload: { i } })));
  const listeners = pool.listenerCount('error');
  await drain({ pool, queues: ['drain'], concurrency: 2, jobs: [job], logger: { info() {}, warn() {}, error() {} } });
  assert.deepEqual(seen.sort(), [1, 2, 3]);
  assert.equal(pool.listenerCount('error'), listeners, 'the worker took its error listener off the pool');
});

test('performJob runs one job with a real context and answers how it ended; refuteEnqueued', async () => {
  await pool.query('create table inline_log (n int)');
  const stepped = defineJob({ name: 'inline_job', queue: 'elsewhere', async handler(payload, ctx) {
    const doubled = await ctx.step('double', () => payload.n * 2);
    await ctx.tx.query('insert into inline_log (n) values ($1)', [doubled]);
    return { doubled };
  } });
  const done = await performJob({ pool, logger: silentLogger }, stepped, { n: 21 });
  assert.deepEqual([done.state, done.result, done.attempt], ['completed', { doubled: 42 }, 1]);
  assert.deepEqual((await pool.query('select n from inline_log')).rows, [{ n: 42 }]);
  const failing = defineJob({ name: 'inline_failing', handler: () => { throw new Error('no such user'); } });
  const failed = await performJob({ pool, logger: silentLogger }, failing, {}, { maxAttempts: 1 });
  assert.equal(failed.state, 'dead');
  assert.match(failed.lastError, /no such user/);
  await refuteEnqueued(pool, 'never_enqueued');
  await assert.rejects(refuteEnqueued(pool, 'inline_job', { n: 21 }), /expected no job inline_job/);
});
