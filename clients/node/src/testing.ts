// Test helpers, the same in the Python library (pg_jobs.testing): drain runs a worker until its
// queues have nothing left to do; performJob runs one job's handler through a real worker and
// answers how it ended; assertEnqueued and refuteEnqueued find the jobs a test enqueued (inside
// the test's own transaction, whose rows only it sees). They read jobs.jobs: run them as a role
// that may (the database owner in tests, or jobs.grant_admin).

import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Queryable } from './db.js';
import { enqueue, type EnqueueOptions } from './enqueue.js';
import type { JobDefinition } from './jobs.js';
import { getJob, type JobStatus } from './status.js';
import { createWorker, type WorkerOptions } from './worker.js';
import { sleep } from './connection.js';

/** Runs a worker until no job of its queues is ready, due or running (with `delayed`, none
 * delayed either: retries and scheduled jobs are waited for), then stops it. Gives up after
 * `timeoutMs` (default 30 s) with an error. */
export async function drain(options: WorkerOptions & { timeoutMs?: number; delayed?: boolean }): Promise<void> {
  const worker = createWorker({ pollMs: 200, ...options });
  const c = options.concurrency;
  const queues = options.queues?.length ? options.queues
    : c !== undefined && typeof c === 'object' ? Object.keys(c) : ['default'];
  const db = options.pool ?? null;
  const check = db ?? new pg.Pool({ connectionString: options.connectionString, max: 1 });
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  await worker.start();
  try {
    for (;;) {
      const { rows } = await check.query<{ left: string }>(
        "select count(*) as left from jobs.jobs where queue = any($1) and (state = 'running' "
        + "or state in ('ready', 'delayed', 'suspended') and (run_at <= now() or $2 and state = 'delayed'))",
        [queues, options.delayed ?? false]);
      if (Number(rows[0]?.left) === 0 && worker.running === 0) return;
      if (Date.now() > deadline) throw new Error(`drain: jobs still left after ${options.timeoutMs ?? 30_000} ms`);
      await sleep(50);
    }
  } finally {
    await worker.stop({ graceMs: 0 });
    if (!db) await check.end();
  }
}

export interface EnqueuedJob {
  id: string;
  name: string;
  queue: string;
  payload: unknown;
  state: string;
}

/** The jobs of this name whose payload contains `payload` (jsonb @>), as `db` sees them: in a
 * test's transaction, the jobs it enqueued and has not committed too. */
export async function enqueuedJobs(db: Queryable, name: string, payload: unknown = {}): Promise<EnqueuedJob[]> {
  const { rows } = await db.query<EnqueuedJob>(
    'select id::text, name, queue, payload, state::text from jobs.jobs where name = $1 and payload @> $2::jsonb order by id',
    [name, JSON.stringify(payload)]);
  return rows;
}

/** Throws unless exactly one job of this name whose payload contains `payload` was enqueued. */
export async function assertEnqueued(db: Queryable, name: string, payload: unknown = {}): Promise<EnqueuedJob> {
  const found = await enqueuedJobs(db, name, payload);
  if (found.length !== 1) {
    throw new Error(`expected one job ${name} with payload containing ${JSON.stringify(payload)}, found ${found.length}`);
  }
  return found[0] as EnqueuedJob;
}

/** Throws if a job of this name whose payload contains `payload` was enqueued. */
export async function refuteEnqueued(db: Queryable, name: string, payload: unknown = {}): Promise<void> {
  const found = await enqueuedJobs(db, name, payload);
  if (found.length !== 0) {
    throw new Error(`expected no job ${name} with payload containing ${JSON.stringify(payload)}, found ${found.length}`);
  }
}

/** Enqueues `job` with `payload` on a queue of its own, runs it through a worker with a real
 * context (its transaction, steps, spawns and signal) until it is done or parked, and answers
 * its state, result and last error (as Oban's perform_job and River's rivertest do). Retries
 * are not waited for: a failed first attempt answers `retried`'s state, `delayed`. */
export async function performJob<P, R>(
  options: Pick<WorkerOptions, 'pool' | 'connectionString' | 'logger'> & { timeoutMs?: number },
  job: JobDefinition<P, R>, payload?: P, enqueueOptions: Omit<EnqueueOptions, 'queue'> = {},
): Promise<JobStatus> {
  const queue = `perform_job_${randomUUID()}`;
  const pool = options.pool ?? new pg.Pool({ connectionString: options.connectionString, max: 2 });
  try {
    const { id } = await enqueue(pool, job, payload, { ...enqueueOptions, queue });
    await drain({ pool, queues: [queue], concurrency: 1, jobs: [job], timeoutMs: options.timeoutMs,
      ...(options.logger ? { logger: options.logger } : {}) });
    return await getJob(pool, id) as JobStatus;
  } finally {
    if (!options.pool) await pool.end();
  }
}
