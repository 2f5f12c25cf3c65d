// What an application does to one job: jobs.cancel, jobs.requeue, jobs.promote and jobs.delete, which a role
// granted jobs.grant_admin (or a tenant admin, for its tenants' jobs) may call. A refusal is the
// engine's, a PgJobsError under its own code (codes.notCancellable, notRequeueable,
// notPromotable, notDeletable, jobNotFound), and changes nothing.

import type { Queryable } from './db.js';
import { fromDriver } from './errors.js';
import * as q from './queries.js';

async function call<R extends object>(db: Queryable, sql: string, values: unknown[]): Promise<R[]> {
  try {
    return (await db.query<R>(sql, values)).rows;
  } catch (err) {
    throw fromDriver(err);
  }
}

/** Cancels a live job (ready, delayed, running or suspended); a running job's worker loses its
 * claim and its handler's AbortSignal fires. A finished job is refused (codes.notCancellable). */
export async function cancel(db: Queryable, id: string): Promise<void> {
  await call(db, q.CANCEL, [id]);
}

/** Runs a finished job (completed, failed, dead or cancelled) again: ready now, its attempts
 * reset. Its steps are kept, or dropped from `fromStep` on. A live job is refused
 * (codes.notRequeueable). */
export async function requeue(db: Queryable, id: string, fromStep?: string): Promise<void> {
  await call(db, q.REQUEUE, [id, fromStep ?? null]);
}

/** Makes a delayed or snoozed job claimable now. Any other state is refused (codes.notPromotable). */
export async function promote(db: Queryable, id: string): Promise<void> {
  await call(db, q.PROMOTE, [id]);
}

/** Deletes a finished job now with its family (every descendant), their attempts and steps, as
 * retention would later, and answers how many jobs went. A live job, a child (it goes with the
 * root of its family) and a family with a live job are refused (codes.notDeletable). */
export async function deleteJob(db: Queryable, id: string): Promise<number> {
  const rows = await call<{ deleted: string }>(db, q.DELETE, [id]);
  return Number(rows[0]?.deleted ?? 0);
}
