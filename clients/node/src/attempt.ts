// One attempt of a claimed job, in a slot of its group: the handler, run under the attempt's
// AbortSignal and deadline, then its settle. A handler that returns with nothing to settle on
// its connection has its job completed by the dispatcher with the group's next claim; any
// other end is settled here, on the connection the handler used: told to stop, parked,
// failed, or completed in the transaction the handler opened. The engine decides what a
// failure becomes (retry, backoff, burial): the attempt reports it and obeys.

import type pg from 'pg';
import { type ClaimedRow, type Job, makeContext, Parked, toJob } from './context.js';
import { describe, errorNames, fromDriver, isConnectionError, NonRetryableError, RetryAfterError, StepTimeoutError } from './errors.js';
import { firstLine, type Group, type WorkerCore } from './core.js';
import { Abandoned, Held } from './held.js';
import type { Outcome } from './log.js';
import { encodeResult, isTransient, longTimeout } from './results.js';
import { defaultTracer, startAttemptSpan } from './tracing.js';
import * as q from './queries.js';

export class Attempts {
  /** The attempts under way, which a stop waits for. */
  readonly running = new Set<Promise<void>>();
  private readonly warnedNames = new Set<string>();

  constructor(private readonly core: WorkerCore) {}

  /** Takes a slot and runs the job in it. (run reports its own errors; what is left, a
   * logger or metrics of the application's that threw, is logged here.) */
  start(group: Group, row: ClaimedRow): void {
    group.free -= 1;
    const running = this.run(group, row);
    this.running.add(running);
    running.then(() => this.running.delete(running), (err: unknown) => {
      this.running.delete(running);
      this.core.logger.warn('the worker could not report a job', { error: firstLine(err) });
    });
  }

  /** Runs one job on a connection of the pool: its handler, then its settle. */
  private async run(group: Group, row: ClaimedRow): Promise<void> {
    const core = this.core;
    const job = toJob(row);
    const def = core.jobs.get(job.name);
    if (!def) return this.unknownName(group, job);
    const started = Date.now();
    const held = new Held(job, def.transactional);
    if (row.time_left_ms !== null) held.timer = longTimeout(() => held.abort('deadline'), row.time_left_ms);
    core.held.set(job.id, held);
    core.metrics?.running(core.held.size);
    const tracer = core.tracer ?? defaultTracer();
    const span = tracer ? startAttemptSpan(tracer, job) : undefined;
    let outcome: Outcome | null = 'lost';
    let error: string | undefined;
    let broken = false;
    try {
      held.client = group.clients.pop() ?? await core.connect();
      let result: unknown;
      let thrown: unknown;
      let failed = false;
      try {
        const work = def.handler(job.payload, makeContext(job, held, core.controlQuery));
        result = work instanceof Promise ? await held.untilAborted(work) : work;
      } catch (err) {
        if (err instanceof Abandoned) {
          // Its connection is closed (the handler may still use it); its job is reported as what
          // stopped it, and handed back (on the control connection) if that was a shutdown.
          broken = true;
          core.logger.warn('the handler did not stop within a second of being told to; its connection is closed',
            { id: job.id, name: job.name, reason: held.reason });
          outcome = await this.stoppedOutcome(held);
          return;
        }
        thrown = err;
        failed = true;
      }
      let encoded = 'null';
      if (!failed) {
        try {
          encoded = encodeResult(result, core.maxResultBytes);
        } catch (err) {
          thrown = new NonRetryableError(describe(err));
          failed = true;
        }
      }
      if (!failed && held.reason === undefined && !held.inTx && !core.stopping && !group.waiting) {
        // Completed by the dispatcher with the group's next claim; the slot frees now.
        group.pending.push({ held, result: encoded, started, span });
        outcome = null;
        return;
      }
      [outcome, error] = await this.settle(held, encoded, failed, thrown);
    } catch (err) {
      broken = true;
      core.logger.warn('database error; the job is left to its lease',
        { error: firstLine(isConnectionError(err) ? err : fromDriver(err)) });
    } finally {
      if (held.client) core.giveBack(group, held.client, broken);
      if (outcome !== null) core.ended(held, outcome, started, span, error);
      freeSlot(group);
    }
  }

  /** The settle of an attempt on its own connection: told to stop, parked, failed, or
   * completed in the transaction its handler opened (or with nobody to complete it with). */
  private async settle(held: Held, result: string, failed: boolean, thrown: unknown): Promise<[Outcome, string?]> {
    const job = held.job;
    const c = held.client as pg.PoolClient;
    if (held.reason !== undefined) {
      if (held.inTx) await c.query('rollback');
      return [await this.stoppedOutcome(held)];
    }
    if (failed && thrown instanceof Parked) {
      if (held.inTx) await c.query('rollback');
      if (thrown.snoozeUntil) {
        await c.query(q.SNOOZE, [job.id, job.claim, thrown.snoozeUntil]);
      }
      return ['parked'];
    }
    if (failed) {
      if (held.inTx) await c.query('rollback');
      const error = describe(thrown);
      const retryAt = thrown instanceof RetryAfterError ? thrown.retryAt : null;
      const retryable = !(thrown instanceof NonRetryableError);
      const { rows } = await c.query<{ outcome: Outcome | null }>(
        q.FAIL, [job.id, job.claim, error, retryAt, retryable, errorNames(thrown), thrown instanceof StepTimeoutError]);
      return [rows[0]?.outcome ?? 'lost', error];
    }
    let landed: boolean;
    try {
      const { rows } = await c.query<{ landed: boolean }>(
        q.COMPLETE, [job.id, job.claim, result]);
      landed = rows[0]?.landed === true;
    } catch (err) {
      if (isTransient(err)) throw err;
      if (held.inTx) await c.query('rollback');
      const error = `the result was refused: ${firstLine(err)}`;
      return [await failForGood(this.core, c, job, error), error];
    }
    if (held.inTx) await c.query(landed ? 'commit' : 'rollback'); // a lost claim: the handler's writes are undone
    return [landed ? 'completed' : 'lost'];
  }

  /** A job of a name this worker has no handler for: snoozed, no attempt used, one warning per
   * name. */
  private async unknownName(group: Group, job: Job): Promise<void> {
    const core = this.core;
    try {
      await core.control.query(q.SNOOZE_FOR, [job.id, job.claim, `${core.unknownSnoozeMs} milliseconds`]);
      if (!this.warnedNames.has(job.name)) {
        this.warnedNames.add(job.name);
        core.logger.warn('no handler for this job name here; snoozed, no attempt used', { name: job.name, queue: job.queue });
      }
      core.report(job, 'unknown_name', 0);
    } catch (err) {
      core.logger.warn('database error; the job is left to its lease', { error: firstLine(err) });
    } finally {
      freeSlot(group);
    }
  }

  /** The outcome of an attempt that was told to stop: a shutdown hands its job back (no
   * attempt used); a cancel, a deadline or a lost claim has settled it already. */
  private async stoppedOutcome(held: Held): Promise<Outcome> {
    switch (held.reason) {
      case 'shutdown':
        await this.core.control.query(q.SNOOZE_NOW, [held.job.id, held.job.claim]);
        return 'handed_back';
      case 'deadline':
        return 'timed_out';
      default:
        return held.reason ?? 'lost';
    }
  }
}

/** Fails a held job for good (no retry): its result could not be settled. */
export async function failForGood(core: WorkerCore, client: pg.PoolClient, job: Job, error: string): Promise<Outcome> {
  try {
    const { rows } = await client.query<{ outcome: Outcome | null }>(
      q.FAIL, [job.id, job.claim, error, null, false, null, false]);
    return rows[0]?.outcome ?? 'lost';
  } catch (err) {
    if (isTransient(err)) throw err;
    core.logger.warn('could not fail the job; it is left to its lease', { id: job.id, error: firstLine(err) });
    return 'lost';
  }
}

function freeSlot(group: Group): void {
  group.free += 1;
  group.wake?.();
  group.refill?.();
}
