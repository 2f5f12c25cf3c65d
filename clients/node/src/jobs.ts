// Job definitions: a name, a handler, and the policy a DBA may also set in jobs.job_types.

import type { Queryable } from './db.js';
import type { JobContext } from './context.js';

/** The columns of jobs.job_types, in milliseconds where they are intervals. */
export interface Policy {
  maxAttempts?: number;
  backoff?: 'exponential' | 'fixed';
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  jitter?: number;
  deadLetter?: boolean;
  leaseMs?: number;
  timeoutMs?: number;
  concurrency?: number;
  rateLimit?: { limit: number; periodMs: number; perKey?: boolean };
  /** Errors that end the job at once, however many attempts it has left (dead-lettered, or
   * failed where deadLetter is false): an error's `name`, its class's or a base class's name,
   * or its `code`. Matched by the engine, so a worker of another language decides the same. */
  nonRetryableErrors?: readonly string[];
  /** The most jobs of one `concurrencyKey` running at once, fleet-wide (default 1). */
  keyConcurrency?: number;
  /** What an enqueue with a `concurrencyKey` does when its key is busy: `queue` (default: it
   * waits its turn), `skip` (at the key's limit: nothing is inserted, the running job is
   * answered, action `skipped`), `replace` (a job of the key waiting to start takes the new
   * payload, action `replaced`: at most one waits). */
  whenBusy?: 'queue' | 'skip' | 'replace';
}

export type Handler<P, R> = (payload: P, ctx: JobContext<P>) => Promise<R> | R;

export interface JobDefinition<P = unknown, R = unknown> {
  readonly name: string;
  readonly queue: string | undefined;
  readonly policy: Policy | undefined;
  /** true (the default): the handler's writes through ctx.tx and the completion commit
   * together. false: no transaction is opened; for effects outside the database. */
  readonly transactional: boolean;
  /** A method, so a job of any payload type is a JobDefinition<unknown>. */
  handler(payload: P, ctx: JobContext<P>): Promise<R> | R;
}

export function defineJob<P = unknown, R = unknown>(definition: {
  name: string;
  handler: Handler<P, R>;
  queue?: string;
  policy?: Policy;
  transactional?: boolean;
}): JobDefinition<P, R> {
  if (typeof definition.name !== 'string' || definition.name.length === 0) {
    throw new TypeError('defineJob: name must be a non-empty string');
  }
  if (typeof definition.handler !== 'function') {
    throw new TypeError(`defineJob(${definition.name}): handler must be a function`);
  }
  return Object.freeze({
    name: definition.name,
    queue: definition.queue,
    policy: definition.policy,
    transactional: definition.transactional ?? true,
    handler: definition.handler,
  });
}

export function isJobDefinition(value: unknown): value is JobDefinition {
  const v = value as Partial<JobDefinition> | null;
  return v !== null && typeof v === 'object' && typeof v.name === 'string'
    && typeof v.handler === 'function' && typeof v.transactional === 'boolean';
}

const ms = (value: number | undefined): string | null =>
  value === undefined ? null : `${value} milliseconds`;

/**
 * Writes the policies of these jobs to jobs.job_types (as an admin role: jobs.grant_admin).
 * Only the columns a policy names are written; a job without a policy is left alone. The
 * table wins otherwise: a worker never writes it on its own, so a DBA's change stays until
 * the application calls this again.
 */
export async function syncPolicies(db: Queryable, jobs: readonly JobDefinition[]): Promise<number> {
  let written = 0;
  for (const job of jobs) {
    const p = job.policy;
    if (!p) continue;
    const columns: [string, unknown, string][] = [
      ['max_attempts', p.maxAttempts, 'int'],
      ['backoff', p.backoff, 'text'],
      ['backoff_base', ms(p.backoffBaseMs), 'interval'],
      ['backoff_max', ms(p.backoffMaxMs), 'interval'],
      ['jitter', p.jitter, 'float8'],
      ['dead_letter', p.deadLetter, 'boolean'],
      ['lease', ms(p.leaseMs), 'interval'],
      ['timeout', ms(p.timeoutMs), 'interval'],
      ['concurrency', p.concurrency, 'int'],
      ['rate_limit', p.rateLimit?.limit, 'int'],
      ['rate_period', ms(p.rateLimit?.periodMs), 'interval'],
      ['rate_limit_per_key', p.rateLimit?.perKey, 'boolean'],
      ['non_retryable_errors', p.nonRetryableErrors, 'text[]'],
      ['key_concurrency', p.keyConcurrency, 'int'],
      ['when_busy', p.whenBusy, 'text'],
    ];
    const set = columns.filter(([, value]) => value !== undefined && value !== null);
    if (set.length === 0) continue;
    const names = set.map(([column]) => column);
    const values = set.map(([, value]) => value);
    const params = set.map(([, , type], i) => `$${i + 2}::${type}`);
    await db.query(
      `insert into jobs.job_types as t (name, ${names.join(', ')}) values ($1, ${params.join(', ')})
       on conflict (name) do update set ${names.map((n) => `${n} = excluded.${n}`).join(', ')}`,
      [job.name, ...values],
    );
    written += 1;
  }
  return written;
}
