// Producers: jobs.enqueue and jobs.enqueue_batch, on whatever the application holds (a Pool,
// a Client, a PoolClient inside its transaction, or an ORM's transaction through an adapter).

import type { Queryable } from './db.js';
import { fromDriver } from './errors.js';
import type { JobDefinition } from './jobs.js';
import { traceMeta } from './tracing.js';
import * as q from './queries.js';

export interface EnqueueOptions {
  queue?: string;
  /** When the job may run; a time in the past, or none, makes it ready now. */
  runAt?: Date;
  /** Or: how long from now. */
  delayMs?: number;
  priority?: number;
  maxAttempts?: number;
  /** One live job per (name, tenant, key): a second enqueue gets the first back. */
  idempotencyKey?: string;
  tenantId?: string;
  concurrencyKey?: string;
  /** 'return' (the default): a duplicate key answers the live job; 'error': raises PJ002;
   * 'replace': a job still waiting to run takes the new payload and run time; 'debounce' (with
   * debounceMs): it takes the new payload and runs debounceMs after the last enqueue. */
  onConflict?: 'return' | 'error' | 'replace' | 'debounce';
  /** With onConflict 'debounce': how long after the last enqueue of the key the job runs. */
  debounceMs?: number;
  /** With debounceMs: the longest after its first enqueue a job may be put off. */
  debounceMaxMs?: number;
  id?: string;
  runId?: string;
  parentId?: string;
  /** The most one attempt may run, overriding the job type's. */
  timeoutMs?: number;
  /** The most the whole run may take (every attempt and wait), overriding the job type's:
   * past it the job is buried, whatever attempts are left. */
  runTimeoutMs?: number;
  /** Labels to find the job by (`tags @> array[...]`): at most 20, each 1 to 100 characters. */
  tags?: string[];
  /** Jobs of one queue, tenant and ordering key run one at a time, in enqueue order: a later
   * job waits (delayed) until the earlier ones have ended. */
  orderingKey?: string;
  /** A small JSON object carried to every attempt (ctx.job.meta). With useOpenTelemetry, the
   * active trace context's `traceparent` is added unless meta has one. */
  meta?: Record<string, unknown>;
  /** Who enqueues it, kept in jobs.jobs.enqueued_by beside the role that did (`role (label)`):
   * a service name, 1 to 200 characters; by default the connection's application_name. */
  enqueuedBy?: string;
}

export interface Enqueued {
  id: string;
  runId: string;
  deduped: boolean;
  /** What the engine did: inserted, returned (deduped), replaced or debounced. */
  action: 'inserted' | 'returned' | 'replaced' | 'debounced' | 'skipped';
}

export interface EnqueueItem<P = unknown> extends EnqueueOptions {
  job: JobDefinition<P> | string;
  payload?: P;
}

function spec(job: JobDefinition | string, payload: unknown, options: EnqueueOptions = {}): Record<string, unknown> {
  const name = typeof job === 'string' ? job : job.name;
  const queue = options.queue ?? (typeof job === 'string' ? undefined : job.queue);
  if (options.runAt !== undefined && options.delayMs !== undefined) {
    throw new TypeError('enqueue: pass runAt or delayMs, not both');
  }
  const runAt = options.delayMs !== undefined ? new Date(Date.now() + options.delayMs) : options.runAt;
  const out: Record<string, unknown> = {
    name,
    payload: payload ?? {},
    queue,
    run_at: runAt?.toISOString(),
    priority: options.priority,
    max_attempts: options.maxAttempts,
    idempotency_key: options.idempotencyKey,
    tenant_id: options.tenantId,
    concurrency_key: options.concurrencyKey,
    on_conflict: options.onConflict,
    id: options.id,
    run_id: options.runId,
    parent_id: options.parentId,
    timeout: options.timeoutMs === undefined ? undefined : `${options.timeoutMs} milliseconds`,
    debounce: options.debounceMs === undefined ? undefined : `${options.debounceMs} milliseconds`,
    debounce_max: options.debounceMaxMs === undefined ? undefined : `${options.debounceMaxMs} milliseconds`,
    run_timeout: options.runTimeoutMs === undefined ? undefined : `${options.runTimeoutMs} milliseconds`,
    tags: options.tags,
    ordering_key: options.orderingKey,
    meta: withTrace(options.meta),
    enqueued_by: options.enqueuedBy,
  };
  return Object.fromEntries(Object.entries(out).filter(([, value]) => value !== undefined));
}

/** meta with the active trace context added (useOpenTelemetry), unless it carries one. */
function withTrace(meta: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (meta !== undefined && 'traceparent' in meta) return meta;
  const trace = traceMeta();
  return trace === undefined ? meta : { ...trace, ...meta };
}

/** Enqueues one job; answers its id and run id, and whether an existing job was handed back
 * (an idempotency key or id a live job holds). Inside the caller's transaction when `db` is in
 * one: rolled back, no job. */
export async function enqueue<P>(db: Queryable, job: JobDefinition<P> | string, payload?: P,
  options?: EnqueueOptions): Promise<Enqueued> {
  const [first] = await enqueueMany(db, [{ ...options, job, payload }]);
  return first as Enqueued;
}

/** Enqueues many jobs in one statement (at most 10,000); answers one result per item, in
 * order. A refusal of any item enqueues none. */
export async function enqueueMany(db: Queryable, items: readonly EnqueueItem[]): Promise<Enqueued[]> {
  if (items.length === 0) return [];
  const specs = items.map((item) => spec(item.job, item.payload, item));
  try {
    const { rows } = await db.query<{ id: string; run_id: string; deduped: boolean; action: Enqueued['action'] }>(
      q.ENQUEUE_BATCH,
      [JSON.stringify(specs)],
    );
    return rows.map((r) => ({ id: r.id, runId: r.run_id, deduped: r.deduped, action: r.action }));
  } catch (err) {
    throw fromDriver(err);
  }
}
