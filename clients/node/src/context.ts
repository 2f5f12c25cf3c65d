// The handler's context: the job, its AbortSignal, the transaction that completes it, and the
// durable operations of a held job (steps, events, children, snooze), each fenced by the claim
// in the server. Parking a job (waiting for an event or children, snoozing) ends the handler
// with a Parked signal the worker understands: no attempt is used.

import type { PoolClient } from 'pg';
import { describe, fromDriver, StepTimeoutError } from './errors.js';
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
  /** Runs `fn` once per run: a later attempt gets the saved result without running it. The step
   * is recorded running while `fn` runs and failed, with its error, when it throws. `fn` gets an
   * AbortSignal, aborted when the attempt's is and, with `timeoutMs`, when the step runs past
   * it: then the step throws StepTimeoutError at once and the attempt fails as timed out. */
  step<T>(name: string, fn: (signal: AbortSignal) => Promise<T> | T, options?: StepOptions): Promise<T>;
  /** A long backfill as a sequence of passes, each a step (`backfill:1`, `backfill:2`, ...):
   * `pass(cursor, signal)` handles the batch after `cursor` (null at first) and answers how many
   * rows it handled and the cursor to go on from; a pass of 0 rows (or `done: true`) ends it.
   * Each pass is saved as it finishes, so a later attempt (or the run requeued) resumes after
   * the last finished one; `jobs.backfills` lists the runs. Answers the passes, rows and cursor. */
  backfill<C = unknown>(pass: (cursor: C | null, signal: AbortSignal) => Promise<BackfillPass<C>> | BackfillPass<C>,
    options?: StepOptions): Promise<BackfillDone<C>>;
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

/** The options of `ctx.step`. */
export interface StepOptions {
  /** The most the step may run, in ms; past it the step fails with StepTimeoutError. */
  timeoutMs?: number;
}

/** What a backfill's pass answers: the rows it handled, where the next pass starts, and
 * whether it was the last (as a pass of 0 rows is). */
export interface BackfillPass<C = unknown> {
  rows: number;
  cursor?: C | null;
  done?: boolean;
}

/** What a finished backfill answers: its passes (the last included), the rows they handled
 * and the last cursor. */
export interface BackfillDone<C = unknown> {
  passes: number;
  rows: number;
  cursor: C | null;
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
  #backfill: JobContext<P>['backfill'] | undefined;
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
    return this.#step ??= async <T>(name: string, fn: (signal: AbortSignal) => Promise<T> | T,
      options: StepOptions = {}): Promise<T> => {
      const timeoutMs = options.timeoutMs;
      if (timeoutMs !== undefined && !(Number.isFinite(timeoutMs) && timeoutMs > 0)) {
        throw new RangeError(`step ${name}: timeoutMs must be a positive number of milliseconds, got ${String(timeoutMs)}`);
      }
      const [begun] = await this.call<{ done: boolean; output: T }>(q.START_STEP, [job.id, job.claim, name]);
      if (begun?.done) return begun.output;
      let output: T;
      try {
        output = await runStep(name, fn, this.attempt.signal(), timeoutMs);
      } catch (err) {
        if (!(err instanceof Parked)) {
          // Kept with its error; a claim lost meanwhile records nothing, and the step's own
          // error is the one the handler sees.
          await this.call(q.FAIL_STEP, [job.id, job.claim, name, describe(err)]).catch(() => undefined);
        }
        throw err;
      }
      await this.call(q.SAVE_STEP,
        [job.id, job.claim, name, JSON.stringify(output ?? null)]);
      return output;
    };
  }

  get backfill(): JobContext<P>['backfill'] {
    const job = this.job;
    return this.#backfill ??= async <C>(pass: (cursor: C | null, signal: AbortSignal) =>
      Promise<BackfillPass<C>> | BackfillPass<C>, options: StepOptions = {}): Promise<BackfillDone<C>> => {
      // Where the run got to: its finished passes, read at once rather than replayed one by one.
      const steps = await this.call<{ step: string; state: string; output: Required<BackfillPass<C>> }>(
        q.GET_STEPS, [job.runId]);
      const done: BackfillDone<C> & { ended: boolean } = { passes: 0, rows: 0, cursor: null, ended: false };
      for (const s of steps) {
        const n = /^backfill:([1-9][0-9]*)$/.exec(s.step);
        if (!n || s.state !== 'completed') continue;
        done.rows += s.output.rows;
        if (Number(n[1]) > done.passes) {
          done.passes = Number(n[1]);
          done.cursor = s.output.cursor;
          done.ended = s.output.done;
        }
      }
      while (!done.ended) {
        const cursor = done.cursor;
        const out = await this.step(`backfill:${done.passes + 1}`, async (signal) => {
          const answer = await pass(cursor, signal);
          if (!Number.isSafeInteger(answer.rows) || answer.rows < 0) {
            throw new TypeError(`backfill pass ${done.passes + 1}: rows must be a count, got ${String(answer.rows)}`);
          }
          return { rows: answer.rows, cursor: answer.cursor ?? null, done: answer.done === true || answer.rows === 0 };
        }, options);
        done.passes += 1;
        done.rows += out.rows;
        done.cursor = out.cursor;
        done.ended = out.done;
      }
      return { passes: done.passes, rows: done.rows, cursor: done.cursor };
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

/** A step's function under a signal of its own: aborted with the attempt's, or at timeoutMs,
 * when the step rejects with StepTimeoutError without waiting for the function to return. */
async function runStep<T>(name: string, fn: (signal: AbortSignal) => Promise<T> | T, attempt: AbortSignal,
  timeoutMs: number | undefined): Promise<T> {
  const controller = new AbortController();
  const follow = (): void => controller.abort(attempt.reason);
  if (attempt.aborted) follow();
  else attempt.addEventListener('abort', follow, { once: true });
  let timer: NodeJS.Timeout | undefined;
  try {
    const work = Promise.resolve().then(() => fn(controller.signal));
    if (timeoutMs === undefined) return await work;
    work.catch(() => undefined); // past the timeout, what it does after is not the handler's
    return await Promise.race([work, new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        controller.abort('step_timeout');
        reject(new StepTimeoutError(name, timeoutMs));
      }, timeoutMs);
    })]);
  } finally {
    clearTimeout(timer);
    attempt.removeEventListener('abort', follow);
  }
}

function snooze(ms: number): Promise<never> {
  return Promise.reject(new Parked(`snoozed for ${ms} ms`, new Date(Date.now() + ms)));
}

export function makeContext<P>(job: Job<P>, attempt: AttemptHandle, control: Control): JobContext<P> {
  return new Context(job, attempt, control);
}

/** A claimed row as the worker reads it: the driver's array of its values in the order of
 * queries.ts's CLAIMED_COLUMNS, kept as it came (a job held ahead costs no object of its own
 * until it starts; by name, each field's store would go through a lookup shared with every
 * other query's rows: four times the parse). The deadline and the enqueue come as
 * milliseconds since 1970, a number the driver parses faster than a timestamp. */
export type ClaimedRow = readonly [
  id: string, runId: string, name: string, queue: string, payload: unknown, attempt: number,
  maxAttempts: number, claim: string, deadlineMs: number | null, tenantId: string | null,
  parentId: string | null, priority: number, enqueuedMs: number, lastError: string | null,
  tags: string[] | null, meta: Record<string, unknown> | null,
  /** Milliseconds from the claim to the deadline, by the server's clock. */
  timeLeftMs: number | null,
  /** A job the claim buried (asked for with report_buried), not one to run. */
  buried: boolean | null,
];

/** The positions of a ClaimedRow's values read before its job is made. */
export const ROW = { id: 0, claim: 7, timeLeftMs: 16, buried: 17 } as const;

export function toJob<P>(row: ClaimedRow): Job<P> {
  const deadlineMs = row[8];
  return {
    id: row[0],
    runId: row[1],
    name: row[2],
    queue: row[3],
    payload: row[4] as P,
    attempt: row[5],
    maxAttempts: row[6],
    claim: row[7],
    deadline: deadlineMs === null ? null : new Date(deadlineMs),
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
