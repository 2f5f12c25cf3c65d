// A dispatcher per set of queues: while slots are free it claims as many jobs as there are
// free slots, the moment one is free (a waiting claim in the server when there is no work, no
// LISTEN needed), and settles the jobs that ended without opening their transaction together
// with that claim (jobs.complete_and_claim: one statement and one commit for all of them).
// Nothing waits for a batch: a claim takes what is free now, and a slot is refilled as its job
// ends. With prefetch, it also holds up to that many claimed jobs beyond its slots, claimed
// ahead once half of them are taken; a freed slot starts the next at once, and the next settle
// marks it started (until then, a lapse gives it back unused). A stop gives back what it holds.
// A database error is waited out with backoff: a worker never ends on one.

import type pg from 'pg';
import { type Attempts, failForGood } from './attempt.js';
import { Backoff } from './connection.js';
import { type ClaimedRow, ROW, toJob } from './context.js';
import { arrayLiteral, firstLine, type Group, type Statement, statement, type WorkerCore } from './core.js';
import type { Held } from './held.js';
import { codes } from './errors.js';
import type { Outcome } from './log.js';
import { isTransient } from './results.js';
import * as q from './queries.js';

const CLAIM = statement('claim', q.CLAIM);
const COMPLETE_AND_CLAIM = statement('complete_and_claim', q.COMPLETE_AND_CLAIM);
const COMPLETE_MANY = statement('complete_many', q.COMPLETE_MANY);
const CLAIM_AHEAD = statement('claim_ahead', q.CLAIM_AHEAD);
const SETTLE_AHEAD = statement('settle_ahead', q.SETTLE_AHEAD);

const QUERY_CANCELED = '57014';
/** A prepared statement missing, or another of that name there: a server connection other than
 * the one that prepared it (a transaction-pooling PgBouncer before 1.21). */
const NOT_KEPT = new Set(['26000', '42P05']);

export class Dispatcher {
  /** A look of a prefetching claim found nothing while jobs were still held: no other look
   * until a slot frees. */
  private dry = false;
  private refillSoon = false;

  constructor(private readonly core: WorkerCore, readonly group: Group, private readonly attempts: Attempts) {
    // A slot freed: the next held job starts in a microtask (not inside the ended job's frame,
    // where a queue of jobs that end at once would start each other ever deeper).
    group.refill = (): void => {
      this.dry = false;
      if (this.refillSoon || group.queued.length === 0) return;
      this.refillSoon = true;
      queueMicrotask(() => {
        this.refillSoon = false;
        this.startQueued();
      });
    };
  }

  /** How many jobs to claim now: the free slots; with prefetch, enough to fill the slots and
   * the prefetch once half of it is taken (else none). */
  private toClaim(): number {
    const { core, group } = this;
    if (core.stopping) return 0;
    if (group.prefetch === 0) return group.free;
    if (this.dry || group.queued.length >= group.free + group.prefetch / 2) return 0;
    return Math.min(group.free + group.prefetch - group.queued.length, 1000);
  }

  /** While slots are free, claims that many jobs (completing the jobs pending in the same
   * statement), and starts each; sleeps while every slot is busy. Ends once the worker stops
   * and nothing is left to settle. */
  async run(): Promise<void> {
    const { core, group } = this;
    const backoff = new Backoff();
    for (;;) {
      const handBack = core.stopping && group.queued.length > 0;
      if (group.pending.length === 0 && group.starts.length === 0 && !handBack) {
        if (core.stopping) return;
        if (this.toClaim() === 0) {
          await new Promise<void>((resolve) => { group.wake = resolve; });
          group.wake = undefined;
          continue;
        }
      }
      // One turn of the event loop first while some of the group's jobs run: the jobs of a batch
      // end in the same few ticks, and are then completed by one statement rather than one each.
      if (group.free < group.size) await new Promise<void>((resolve) => setImmediate(resolve));
      let client: pg.PoolClient | undefined;
      try {
        client = group.clients.pop() ?? await core.connect();
        let rows: ClaimedRow[] = [];
        if (handBack) await this.handBack(client);
        else if (group.pending.length > 0 || group.starts.length > 0) rows = await this.settle(client);
        else rows = await this.claim(client);
        backoff.reset();
        core.giveBack(group, client, false);
        client = undefined;
        const buried = [];
        for (const row of rows) {
          if (row[ROW.buried] === true) buried.push(toJob(row));
          else if (group.prefetch > 0) group.queued.push(row);
          else this.attempts.start(group, row);
        }
        if (group.prefetch > 0) this.startQueued();
        if (buried.length > 0) core.hooks?.buried(buried);
      } catch (err) {
        if (client) core.giveBack(group, client, true);
        if (core.isStopping() && Date.now() >= core.giveUpAt) {
          this.giveUp(err);
          return;
        }
        if (core.isStopping() && (err as { code?: string }).code === QUERY_CANCELED) continue;
        if (core.prepared && NOT_KEPT.has((err as { code?: string }).code ?? '')) {
          core.prepared = false;
          core.logger.warn('the server did not keep this worker\'s prepared statements (a transaction-pooling '
            + 'PgBouncer before 1.21?); going on without them: pass preparedStatements: false (the command: '
            + '--no-prepared-statements)', { error: firstLine(err) });
          continue;
        }
        const wait = backoff.next();
        core.logger.warn('database error; trying again', { error: firstLine(err), retryInMs: Math.round(wait) });
        await core.pause(wait);
      }
    }
  }

  /** Completes the group's pending jobs and claims for its free slots, in one statement; a
   * claim among them no longer held completes each on its own (the others still land). A
   * statement refused for what it carries (not for a lost connection or a passing conflict)
   * is never sent again: its jobs are settled one by one, and the one refused fails alone. */
  private async settle(client: pg.PoolClient): Promise<ClaimedRow[]> {
    const { core, group } = this;
    const batch = group.pending.splice(0);
    let starts = group.starts.splice(0);
    if (starts.length > 0 && batch.length > 0) {
      // A job that started and ended since the last settle needs no mark (the engine would
      // skip it): not sent.
      starts = starts.filter((r) => core.held.get(r[ROW.id])?.pending !== true);
    }
    // Uuids and integers, which need no quoting, joined here: node-postgres quotes and escapes
    // an array's elements one by one, about 500 bytes of garbage a job in a settle of 500.
    const ids = arrayLiteral(batch.map((h) => h.job.id));
    const claims = arrayLiteral(batch.map((h) => h.job.claim));
    const startIds = arrayLiteral(starts.map((r) => r[ROW.id]));
    const startClaims = arrayLiteral(starts.map((r) => r[ROW.claim]));
    // No results at all (handlers that answer nothing): none sent, none for the server to read.
    const results = batch.every((h) => h.result === 'null') ? null : batch.map((h) => h.result);
    const free = this.toClaim();
    /** The jobs that landed; null for all of them. */
    let landed: Set<string> | null = null;
    let rows: ClaimedRow[] = [];
    try {
      if (group.prefetch > 0) {
        rows = await this.claimRows(client, SETTLE_AHEAD,
          [ids, claims, core.workerId, group.queues, free, `${core.leaseMs} milliseconds`, results,
            core.reportBuried, startIds, startClaims]);
      } else if (free > 0) {
        rows = await this.claimRows(client, COMPLETE_AND_CLAIM,
          [ids, claims, core.workerId, group.queues, free, `${core.leaseMs} milliseconds`, results,
            core.reportBuried]);
      } else {
        landed = await this.completeMany(client, ids, claims, results);
      }
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === codes.leaseLost) {
        if (starts.length > 0) {
          await client.query(q.MARK_STARTED, [startIds, startClaims]);
        }
        landed = await this.completeMany(client, ids, claims, results);
      } else if (isTransient(err) || NOT_KEPT.has(code ?? '')) {
        group.pending.unshift(...batch);
        group.starts.unshift(...starts);
        throw err;
      } else {
        core.logger.warn('a settle was refused for what it carries; its jobs are settled one by one',
          { jobs: batch.length, error: firstLine(err) });
        await this.settleEach(client, batch);
        return [];
      }
    }
    for (const h of batch) core.ended(h, landed === null || landed.has(h.job.id) ? 'completed' : 'lost');
    return rows;
  }

  /** Completes each job on its own: one the server refuses for its result fails for good with
   * the server's message; one it cannot reach now goes back to be settled later. */
  private async settleEach(client: pg.PoolClient, batch: Held[]): Promise<void> {
    for (const [i, held] of batch.entries()) {
      const { job } = held;
      let outcome: Outcome;
      let error: string | undefined;
      try {
        const { rows } = await client.query<{ landed: boolean }>(
          q.COMPLETE, [job.id, job.claim, held.result]);
        outcome = rows[0]?.landed === true ? 'completed' : 'lost';
      } catch (err) {
        if (isTransient(err)) {
          this.group.pending.unshift(...batch.slice(i));
          throw err;
        }
        error = `the result was refused: ${firstLine(err)}`;
        outcome = await failForGood(this.core, client, job, error);
      }
      this.core.ended(held, outcome, error);
    }
  }

  /** A stop past its grace that still cannot settle what its handlers completed: those jobs
   * are left to their leases (they run again once the leases lapse). */
  private giveUp(err: unknown): void {
    const batch = this.group.pending.splice(0);
    if (batch.length > 0) {
      this.core.logger.warn('stopping: could not settle completed jobs within the grace; they are left to their leases',
        { jobs: batch.length, error: firstLine(err) });
    }
    for (const held of batch) this.core.ended(held, 'lost');
  }

  private async completeMany(client: pg.PoolClient, ids: string, claims: string, results: string[] | null): Promise<Set<string>> {
    const { rows } = await client.query<{ id: string; landed: boolean }>(
      { ...this.core.statement(COMPLETE_MANY), values: [ids, claims, results] });
    return new Set(rows.filter((r) => r.landed).map((r) => r.id));
  }

  /** Runs a claim (or a settle that claims): its jobs. */
  private async claimRows(client: pg.PoolClient, statement: Statement, values: unknown[]): Promise<ClaimedRow[]> {
    const { rows } = await client.query<unknown[]>({ ...this.core.statement(statement), values, rowMode: 'array' });
    return rows as unknown as ClaimedRow[];
  }

  /** Starts held jobs in the free slots; the next settle marks them started. Once the worker
   * stops none starts (a handler's stop() included): the run loop hands them back. */
  private startQueued(): void {
    const { core, group } = this;
    let started = false;
    while (!core.stopping && group.free > 0 && group.queued.length > 0) {
      const row = group.queued.shift() as ClaimedRow;
      group.starts.push(row);
      this.attempts.start(group, row);
      started = true;
    }
    if (started) group.wake?.();
  }

  /** At a stop: the held jobs not started go back at once, no attempt used. */
  private async handBack(client: pg.PoolClient): Promise<void> {
    const { core, group } = this;
    const rows = group.queued.splice(0);
    try {
      await client.query(q.HAND_BACK, [rows.map((r) => r[ROW.id]), rows.map((r) => r[ROW.claim])]);
    } catch (err) {
      if (isTransient(err)) {
        group.queued.unshift(...rows);
        throw err;
      }
      core.logger.warn('could not hand back the jobs claimed ahead; they are left to their leases (no attempt used)',
        { jobs: rows.length, error: firstLine(err) });
    }
  }

  /** Claims for the group's free slots: a look first, and only when it finds nothing a claim
   * that sleeps in the server for work (while it does, an ending job completes itself). With
   * prefetch it claims ahead, and sleeps only when it holds nothing. */
  private async claim(client: pg.PoolClient): Promise<ClaimedRow[]> {
    const { core, group } = this;
    const claim = group.prefetch > 0 ? CLAIM_AHEAD : CLAIM;
    const lease = `${core.leaseMs} milliseconds`;
    const want = this.toClaim();
    const found = await this.claimRows(client, claim, [core.workerId, group.queues, want, lease, null, core.reportBuried]);
    if (found.length > 0 || core.stopping) return found;
    if (group.queued.length > 0) {
      this.dry = true;
      return [];
    }
    const pid = (client as unknown as { processID: number }).processID;
    // An idle worker holds one connection: the others go back to the pool (which closes them
    // once idle for its idleTimeoutMillis).
    for (const c of group.clients.splice(0)) c.release();
    core.claiming.add(pid);
    group.waiting = true;
    try {
      if (group.pending.length > 0 || group.starts.length > 0) return [];
      return await this.claimRows(client, claim,
        [core.workerId, group.queues, want, lease, `${core.pollMs} milliseconds`, core.reportBuried]);
    } finally {
      group.waiting = false;
      core.claiming.delete(pid);
    }
  }
}
