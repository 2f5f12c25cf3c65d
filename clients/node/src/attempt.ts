// One attempt of a claimed job, in a slot of its group: the handler, run under the attempt's
// AbortSignal and deadline, then its settle. A handler that returns with nothing to settle on
// its connection has its job completed by the dispatcher with the group's next claim; any
// other end is settled here, on the connection the handler used: told to stop, parked,
// failed, or completed in the transaction the handler opened. The engine decides what a
// failure becomes (retry, backoff, burial): the attempt reports it and obeys.

import type pg from 'pg';
import { type ClaimedRow, type Job, makeContext, Parked, ROW, toJob } from './context.js';
import { describe, errorNames, fromDriver, isConnectionError, NonRetryableError, RetryAfterError, StepTimeoutError } from './errors.js';
import { firstLine, type Group, type WorkerCore } from './core.js';
import { Abandoned, Held } from './held.js';
import type { JobDefinition } from './jobs.js';
import type { Outcome } from './log.js';
import { encodeResult, isTransient, longTimeout } from './results.js';
import { defaultTracer, type SpanLike, startAttemptSpan } from './tracing.js';
import * as q from './queries.js';

export class Attempts {
  /** The attempts whose end is still to come (a handler's promise, a settle on its own
   * connection), which a stop waits for; an attempt that ends at once is never among them. */
  private underWay = 0;
  private idle: (() => void)[] = [];
  private readonly warnedNames = new Set<string>();

  constructor(private readonly core: WorkerCore) {}

  /** Resolves once no attempt is under way. */
  drained(): Promise<void> {
    if (this.underWay === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  /** Takes a slot and runs the job in it: its handler at once, and, when the handler returns
   * a value (not a promise) and the job may be completed with the group's next claim, nothing
   * else: no promise is made for it. */
  start(group: Group, row: ClaimedRow): void {
    group.free -= 1;
    const core = this.core;
    const job = toJob(row);
    const def = core.jobs.get(job.name);
    if (!def) {
      this.follow(this.unknownName(group, job));
      return;
    }
    const held = new Held(job, def.transactional);
    const timeLeftMs = row[ROW.timeLeftMs];
    if (timeLeftMs !== null) held.timer = longTimeout(() => held.abort('deadline'), timeLeftMs);
    core.held.set(job.id, held);
    let span: SpanLike | undefined;
    try {
      core.metrics?.running(core.held.size);
      const tracer = core.tracer ?? defaultTracer();
      if (tracer) span = startAttemptSpan(tracer, job);
    } catch (err) {
      this.unreported(err); // the job runs all the same
    }
    held.span = span;
    const client = group.clients.pop();
    if (client === undefined) {
      this.follow(this.connectAndRun(group, held, def));
      return;
    }
    held.client = client;
    this.run(group, held, def);
  }

  /** Runs the handler on the attempt's connection; its end, now or when its promise settles. */
  private run(group: Group, held: Held, def: JobDefinition): void {
    let work: unknown;
    try {
      work = def.handler(held.job.payload, makeContext(held.job, held, this.core.controlQuery));
    } catch (err) {
      this.ended(group, held, undefined, err, true);
      return;
    }
    if (!(work instanceof Promise)) {
      this.ended(group, held, work, undefined, false);
      return;
    }
    this.underWay += 1;
    held.follow(work as Promise<unknown>, (failed, value) => {
      try {
        this.ended(group, held, failed ? undefined : value, failed ? value : undefined, failed);
      } catch (err) {
        this.unreported(err);
      } finally {
        this.done();
      }
    });
  }

  /** An attempt that found no connection kept by its group: one from the pool, then its handler. */
  private async connectAndRun(group: Group, held: Held, def: JobDefinition): Promise<void> {
    try {
      held.client = await this.core.connect();
    } catch (err) {
      this.lost(group, held, err);
      return;
    }
    this.run(group, held, def);
  }

  /** The handler ended (`failed` says whether it threw, `thrown` what): a completed job the
   * dispatcher may complete with the group's next claim is left to it, and its slot frees now;
   * any other end is settled here, on the attempt's connection. */
  private ended(group: Group, held: Held, result: unknown, thrown: unknown, failed: boolean): void {
    const { core } = this;
    if (failed && thrown instanceof Abandoned) {
      // Its connection is closed (the handler may still use it); its job is reported as what
      // stopped it, and handed back (on the control connection) if that was a shutdown.
      core.logger.warn('the handler did not stop within a second of being told to; its connection is closed',
        { id: held.job.id, name: held.job.name, reason: held.reason });
      this.follow(this.stopped(group, held));
      return;
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
      held.result = encoded;
      held.pending = true;
      group.pending.push(held);
      core.giveBack(group, held.client as pg.PoolClient, false);
      freeSlot(group);
      return;
    }
    this.follow(this.settleHere(group, held, encoded, failed, thrown));
  }

  /** Settles an attempt on its own connection, then frees its slot and reports it. */
  private async settleHere(group: Group, held: Held, encoded: string, failed: boolean, thrown: unknown): Promise<void> {
    let outcome: Outcome = 'lost';
    let error: string | undefined;
    let broken = false;
    try {
      [outcome, error] = await this.settle(held, encoded, failed, thrown);
    } catch (err) {
      broken = true;
      this.core.logger.warn('database error; the job is left to its lease',
        { error: firstLine(isConnectionError(err) ? err : fromDriver(err)) });
    }
    this.release(group, held, broken, outcome, error);
  }

  /** An attempt whose handler was abandoned: its connection closed, its job reported as what
   * stopped it. */
  private async stopped(group: Group, held: Held): Promise<void> {
    let outcome: Outcome = 'lost';
    try {
      outcome = await this.stoppedOutcome(held);
    } catch (err) {
      this.core.logger.warn('database error; the job is left to its lease', { error: firstLine(err) });
    }
    this.release(group, held, true, outcome);
  }

  /** An attempt that could not get a connection: its job is left to its lease. */
  private lost(group: Group, held: Held, err: unknown): void {
    this.core.logger.warn('database error; the job is left to its lease',
      { error: firstLine(isConnectionError(err) ? err : fromDriver(err)) });
    this.release(group, held, false, 'lost');
  }

  private release(group: Group, held: Held, broken: boolean, outcome: Outcome, error?: string): void {
    if (held.client) this.core.giveBack(group, held.client, broken);
    this.core.ended(held, outcome, error);
    freeSlot(group);
  }

  /** Counts a promise among the attempts a stop waits for. (Each reports its own errors; what
   * is left, a logger or metrics of the application's that threw, is logged here.) */
  private follow(work: Promise<void>): void {
    this.underWay += 1;
    work.then(() => this.done(), (err: unknown) => {
      this.done();
      this.unreported(err);
    });
  }

  /** What an attempt's report threw (a logger or metrics of the application's). */
  private unreported(err: unknown): void {
    try {
      this.core.logger.warn('the worker could not report a job', { error: firstLine(err) });
    } catch {
      // the logger itself: nothing left to tell
    }
  }

  private done(): void {
    this.underWay -= 1;
    if (this.underWay === 0) for (const resolve of this.idle.splice(0)) resolve();
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
