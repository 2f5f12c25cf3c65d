// What a producer may know of its jobs: jobs.get_job and jobs.get_jobs, which a role granted
// jobs.grant_producer or jobs.grant_worker may call (jobs.jobs is for admins).

import type { Queryable } from './db.js';
import { fromDriver } from './errors.js';
import * as q from './queries.js';

/** A job's state, attempts and outcome, as jobs.get_job answers them. */
export interface JobStatus {
  id: string;
  name: string;
  queue: string;
  /** ready, delayed, running, suspended, completed, failed, dead or cancelled. */
  state: string;
  attempt: number;
  maxAttempts: number;
  result: unknown;
  lastError: string | null;
  runAt: Date | null;
  enqueuedAt: Date;
  finishedAt: Date | null;
  tenantId: string | null;
  tags: string[] | null;
  meta: Record<string, unknown> | null;
}

interface StatusRow {
  id: string;
  name: string;
  queue: string;
  state: string;
  attempt: number;
  max_attempts: number;
  result: unknown;
  last_error: string | null;
  run_at: Date | null;
  enqueued_at: Date;
  finished_at: Date | null;
  tenant_id: string | null;
  tags: string[] | null;
  meta: Record<string, unknown> | null;
}

function status(r: StatusRow): JobStatus {
  return {
    id: r.id, name: r.name, queue: r.queue, state: r.state, attempt: r.attempt, maxAttempts: r.max_attempts,
    result: r.result, lastError: r.last_error, runAt: r.run_at, enqueuedAt: r.enqueued_at,
    finishedAt: r.finished_at, tenantId: r.tenant_id, tags: r.tags, meta: r.meta,
  };
}

/** These jobs' states, in the order of `ids` (at most 10,000; a repeated id once). A job that
 * does not exist, or no longer does (past its retention), or that belongs to a tenant the role
 * is not bound to, has no entry. */
export async function getJobs(db: Queryable, ids: readonly string[]): Promise<JobStatus[]> {
  try {
    const { rows } = await db.query<StatusRow>(q.GET_JOBS, [ids]);
    return rows.map(status);
  } catch (err) {
    throw fromDriver(err);
  }
}

/** The job's state, or null where getJobs would give it no entry. */
export async function getJob(db: Queryable, id: string): Promise<JobStatus | null> {
  const [status] = await getJobs(db, [id]);
  return status ?? null;
}

/** Waits up to `timeoutMs` (at most an hour) for the job to end (completed, failed, dead or
 * cancelled) and answers its state then: ended, or as it is at the deadline (jobs.wait_for_job,
 * woken by the commit that ends it). Null where getJob would answer null. Holds one connection
 * of a Pool for the wait; not inside a transaction other than READ COMMITTED. */
export async function waitForJob(db: Queryable, id: string, timeoutMs: number): Promise<JobStatus | null> {
  try {
    const { rows } = await db.query<StatusRow>(q.WAIT_FOR_JOB,
      [id, `${timeoutMs} milliseconds`]);
    return rows[0] ? status(rows[0]) : null;
  } catch (err) {
    throw fromDriver(err);
  }
}
