// The handler's context: the job, its AbortSignal, the transaction that completes it, and the
// durable operations of a held job (steps, events, children, snooze), each fenced by the claim
// in the server. Parking a job (waiting for an event or children, snoozing) ends the handler
// with a Parked signal the worker understands: no attempt is used.

import type { PoolClient } from 'pg';
import { fromDriver } from './errors.js';
import type { Queryable } from './db.js';
import * as q from './queries.js';

/** The job a spawn names: a defineJob result (its name and queue) or a name. */
export interface ChildJob {
  readonly name: string;
  readonly queue?: string | undefined;
}

/** A claimed job, as jobs.claim answers it. */
export interface Job<P = unknown> {
  id: string;
  runId: string;
  name: string;
  queue: string;
  payload: P;
  attempt: number;
  maxAttempts: number;
  claim: string;
  /** When this attempt times out (its job type's or its own timeout, never after the run's
   * deadline: runTimeoutMs); null for none. */
  deadline: Date | null;
  tenantId: string | null;
  /** The job that spawned this one (ctx.spawn); null for a job enqueued on its own. */
  parentId: string | null;
  priority: number;
  enqueuedAt: Date;
  lastError: string | null;
  /** The labels it was enqueued with; null for none. */
  tags: string[] | null;
  /** What its producer carried (a traceparent, ...); null for none. */
  meta: Record<string, unknown> | null;
}

export interface ChildResult {
  id: string;
  name: string;
  state: string;
  result: unknown;
  error: string | null;
}

export interface JobContext<P = unknown> {
  readonly job: Job<P>;
  /** Aborted when the claim is lost (lease lapsed, cancelled, claimed again), at the attempt's
   * deadline, and at the end of a shutdown's grace. `signal.reason` says which. */
  readonly signal: AbortSignal;
  /** The client of the transaction that completes the job (autocommit when the job is not
   * transactional). */
  readonly tx: PoolClient;
  /** Runs `fn` once per run: a later attempt gets the saved result without running it. */
  step<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
  /** The event's payload once published; or parks the job until it is (no attempt used). */
  waitForEvent<T = unknown>(name: string, options?: { key?: string; timeoutMs?: number }):
    Promise<{ status: 'received' | 'timed_out'; payload: T | null }>;
  /** Enqueues a child of this job; the same key gives the same child on every attempt. */
  spawn<C>(childKey: string, job: ChildJob | string, payload?: C,
    options?: { queue?: string; priority?: number; maxAttempts?: number; closePolicy?: 'terminate' | 'abandon' }):
    Promise<{ id: string; deduped: boolean }>;
  /** The children's outcomes once none is live; or parks the job until then. */
  awaitChildren(): Promise<ChildResult[]>;
  /** Parks the job until `ms` from now (no attempt used) and ends the handler. */
  snooze(ms: number): Promise<never>;
  /** A durable sleep (`jobs.sleep`): the first time in a run it parks the job until `until` (a
   * Date, or ms from now; no attempt used) and ends the handler; when the job runs again it
   * returns at once, so a retry does not sleep again. */
  sleep(step: string, until: Date | number): Promise<void>;
}

/** Thrown inside a handler to end it when the job was parked. */
export class Parked extends Error {
  readonly snoozeUntil: Date | undefined;

  constructor(why: string, snoozeUntil?: Date) {
    super(`the job was parked: ${why}`);
    this.name = 'Parked';
    this.snoozeUntil = snoozeUntil;
  }
}

/** Runs a statement for a held job on the worker's control connection (committed at once,
 * whatever the handler's transaction does). */
export type Control = <R extends object>(text: string, values: unknown[]) => Promise<R[]>;

/** What the worker gives a context: the attempt's AbortSignal and the client of its
 * transaction, each made or opened at the first use (a handler that never uses `tx` costs no
 * BEGIN and COMMIT; most never read the signal). */
export interface AttemptHandle {
  signal(): AbortSignal;
  tx(): PoolClient;
}

/** The handler's context. Its methods are made at their first use, each a closure, not a
 * method of the class, so a handler may destructure them (`async (payload, { step }) => ...`);
 * a context costs the jobs that use none of them two objects. */
class Context<P> implements JobContext<P> {
  #step: JobContext<P>['step'] | undefined;
  #waitForEvent: JobContext<P>['waitForEvent'] | undefined;
  #spawn: JobContext<P>['spawn'] | undefined;
  #awaitChildren: JobContext<P>['awaitChildren'] | undefined;
  #sleep: JobContext<P>['sleep'] | undefined;

  constructor(readonly job: Job<P>, private readonly attempt: AttemptHandle, private readonly control: Control) {}

  get signal(): AbortSignal {
    return this.attempt.signal();
  }

  get tx(): PoolClient {
    return this.attempt.tx();
  }

  private async call<R extends object>(text: string, values: unknown[]): Promise<R[]> {
    try {
      return await this.control<R>(text, values);
    } catch (err) {
      throw fromDriver(err);
    }
  }

  get step(): JobContext<P>['step'] {
    const job = this.job;
    return this.#step ??= async <T>(name: string, fn: () => Promise<T> | T): Promise<T> => {
      const [saved] = await this.call<{ done: boolean; output: T }>(
        q.GET_STEP, [job.runId, name]);
      if (saved?.done) return saved.output;
      const output = await fn();
      await this.call(q.SAVE_STEP,
        [job.id, job.claim, name, JSON.stringify(output ?? null)]);
      return output;
    };
  }

  get waitForEvent(): JobContext<P>['waitForEvent'] {
    const job = this.job;
    return this.#waitForEvent ??= async <T>(name: string, options: { key?: string; timeoutMs?: number } = {}) => {
      const [answer] = await this.call<{ status: string; payload: T | null }>(
        q.AWAIT_EVENT,
        [job.id, job.claim, name, options.key ?? null,
          options.timeoutMs === undefined ? null : `${options.timeoutMs} milliseconds`]);
      if (!answer || answer.status === 'waiting') throw new Parked(`waiting for event ${name}`);
      return { status: answer.status as 'received' | 'timed_out', payload: answer.payload };
    };
  }

  get spawn(): JobContext<P>['spawn'] {
    const job = this.job;
    return this.#spawn ??= async <C>(childKey: string, child: ChildJob | string, payload?: C,
      options: { queue?: string; priority?: number; maxAttempts?: number; closePolicy?: 'terminate' | 'abandon' } = {}) => {
      const name = typeof child === 'string' ? child : child.name;
      const spec: Record<string, unknown> = {
        name, payload: payload ?? {}, child_key: childKey,
        queue: options.queue ?? (typeof child === 'string' ? undefined : child.queue),
        priority: options.priority, max_attempts: options.maxAttempts, close_policy: options.closePolicy,
      };
      const [made] = await this.call<{ id: string; deduped: boolean }>(
        q.SPAWN, [job.id, job.claim, JSON.stringify(spec)]);
      return { id: (made as { id: string }).id, deduped: (made as { deduped: boolean }).deduped };
    };
  }

  get awaitChildren(): JobContext<P>['awaitChildren'] {
    const job = this.job;
    return this.#awaitChildren ??= async () => {
      const [answer] = await this.call<{ status: string; children: ChildResult[] }>(
        q.AWAIT_CHILDREN, [job.id, job.claim]);
      if (!answer || answer.status === 'waiting') throw new Parked('waiting for its children');
      return answer.children;
    };
  }

  get snooze(): JobContext<P>['snooze'] {
    return snooze;
  }

  get sleep(): JobContext<P>['sleep'] {
    const job = this.job;
    return this.#sleep ??= async (step: string, until: Date | number): Promise<void> => {
      const at = typeof until === 'number' ? new Date(Date.now() + until) : until;
      const [answer] = await this.call<{ slept: boolean }>(q.SLEEP,
        [job.id, job.claim, step, at.toISOString()]);
      if (!answer?.slept) throw new Parked(`asleep until ${at.toISOString()}`);
    };
  }
}

function snooze(ms: number): Promise<never> {
  return Promise.reject(new Parked(`snoozed for ${ms} ms`, new Date(Date.now() + ms)));
}

export function makeContext<P>(job: Job<P>, attempt: AttemptHandle, control: Control): JobContext<P> {
  return new Context(job, attempt, control);
}

/** The worker's view of a claimed row: queries.ts's CLAIMED_COLUMNS's values in order (the driver's
 * `rowMode: 'array'`, which builds no object per row). The deadline and the enqueue come as
 * milliseconds since 1970, a number the driver parses faster than a timestamp. */
export type ClaimedRow = [
  id: string, runId: string, name: string, queue: string, payload: unknown, attempt: number,
  maxAttempts: number, claim: string, deadlineMs: number | null, tenantId: string | null,
  parentId: string | null, priority: number, enqueuedMs: number, lastError: string | null,
  tags: string[] | null, meta: Record<string, unknown> | null,
  /** Milliseconds from the claim to the deadline, by the server's clock. */
  timeLeftMs: number | null,
  /** A job the claim buried (asked for with report_buried), not one to run. */
  buried: boolean | null,
];

export function toJob<P>(row: ClaimedRow): Job<P> {
  return {
    id: row[0],
    runId: row[1],
    name: row[2],
    queue: row[3],
    payload: row[4] as P,
    attempt: row[5],
    maxAttempts: row[6],
    claim: row[7],
    deadline: row[8] === null ? null : new Date(row[8]),
    tenantId: row[9],
    parentId: row[10],
    priority: row[11],
    enqueuedAt: new Date(row[12]),
    lastError: row[13],
    tags: row[14],
    meta: row[15],
  };
}

export type { Queryable };
