// The worker: for each set of queues, a dispatcher claims as many jobs as there are free slots
// the moment one is free (a waiting claim in the server when there is no work, no LISTEN
// needed), and settles the jobs that ended without opening their transaction together with that
// claim (jobs.complete_and_claim: one statement and one commit for all of them). A job whose
// handler wrote through ctx.tx is completed in that transaction, on its own connection. Nothing
// waits for a batch: a claim takes what is free now, and a slot is refilled as its job ends.
// Heartbeats, steps and events go through a connection of their own; a cancel listener
// heartbeats a cancelled job at once. The engine decides retries, backoff, fencing and burial:
// the worker reports and obeys.

import { createHash } from 'node:crypto';
import os from 'node:os';
import pg from 'pg';
import { type AttemptHandle, type ClaimedRow, type Control, type Job, makeContext, Parked, toJob } from './context.js';
import {
  codes, describe, errorNames, fromDriver, INSTALL_HINT, isConnectionError, NonRetryableError, RetryAfterError, StepTimeoutError,
} from './errors.js';
import { Hooks, type OnExhausted, type OnSettled } from './hooks.js';
import type { JobDefinition } from './jobs.js';
import { jsonLogger, type Logger, type Metrics, type Outcome } from './log.js';
import { Backoff, OwnConnection, within } from './connection.js';
import { encodeResult, isTransient, longTimeout } from './results.js';
import { UNTRUSTED_OWNERS, untrustedOwners } from './owner.js';
import { defaultTracer, endAttemptSpan, type SpanLike, startAttemptSpan, type TracerLike } from './tracing.js';
import * as q from './queries.js';

export interface WorkerOptions {
  /** A connection string; or `pool`, a node-postgres Pool the worker borrows from. */
  connectionString?: string;
  pool?: pg.Pool;
  /** Queues to work, in no order of preference (default: ['default']). */
  queues?: string[];
  /** Jobs run at once: a number for all queues, or a number per queue (default: 10). */
  concurrency?: number | Record<string, number>;
  jobs: readonly JobDefinition[];
  /** The lease of a claim, renewed every third of it (default: 30 s). */
  leaseMs?: number;
  /** How long a stop lets running jobs finish before aborting them (default: 10 s). */
  shutdownGraceMs?: number;
  /** How long one waiting claim sleeps in the server before it looks again (default: 5 s). */
  pollMs?: number;
  /** Names this worker in jobs.jobs.claimed_by (default: host:pid). */
  workerId?: string;
  logger?: Logger;
  metrics?: Metrics;
  /** An OpenTelemetry tracer (`trace.getTracer(...)`): a span per attempt. */
  tracer?: TracerLike;
  /** How long an unknown job name is snoozed (default: 60 s). */
  unknownSnoozeMs?: number;
  /** Whether the claims and settles are prepared statements, kept by the server for each
   * connection (default: true; the server plans them once, not at every call). Pass false
   * behind a transaction-pooling PgBouncer before 1.21, which would hand the next call another
   * server connection without them; a worker that meets that turns them off by itself, with a
   * warning. */
  preparedStatements?: boolean;
  /** Work as a superuser even where a role that is not one owns schema jobs or its functions
   * (that role could run code as the worker): refused unless true (default: whether
   * PGJOBS_TRUST_OWNER is 1). */
  trustOwner?: boolean;
  /** Called after a settle committed, with the job and how its attempt ended (`completed`,
   * `retried`, `dead`, `failed`, `cancelled`, `snoozed`). What it throws, or its promise
   * rejects with, is logged (code PGJOBS_ON_SETTLED_FAILED) and changes nothing. */
  onSettled?: OnSettled;
  /** Called with the jobs that ran out of attempts: the ones this worker's claims buried
   * (their final attempt lapsed, or their run is over), together, and each one this worker
   * dead-lettered; each job once. Errors as onSettled's (PGJOBS_ON_EXHAUSTED_FAILED). */
  onExhausted?: OnExhausted;
}

type Reason = 'lost' | 'cancelled' | 'deadline' | 'shutdown';

/** An attempt the worker holds: its job, why it must stop (once it must), its AbortSignal and
 * the connection and transaction of its handler. */
class Held implements AttemptHandle {
  /** Why the attempt must stop, once it must. */
  reason: Reason | undefined = undefined;
  /** Made when the handler first reads ctx.signal (most never do). */
  controller: AbortController | undefined = undefined;
  /** Set while the worker waits for the handler: called when the attempt must stop. */
  onAbort: (() => void) | undefined = undefined;
  timer: { clear(): void } | undefined = undefined;
  /** The connection the handler's ctx.tx gives, and whether its transaction is open. */
  client: pg.PoolClient | undefined = undefined;
  inTx = false;

  constructor(readonly job: Job, private readonly transactional: boolean) {}

  /** The attempt's AbortSignal, made at its first use (aborted already if the attempt must stop). */
  signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.reason !== undefined) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** The handler's client. The transaction opens at its first use (node-postgres runs a
   * client's queries in order, so BEGIN goes before the handler's first). */
  tx(): pg.PoolClient {
    const client = this.client as pg.PoolClient;
    if (this.transactional && !this.inTx) {
      this.inTx = true;
      client.query('begin').catch(() => {}); // its failure fails the handler's next query
    }
    return client;
  }
}

/** The slots working one set of queues: how many are free, and the jobs that ended without
 * opening their transaction, to be completed with the group's next claim. */
interface Group {
  queues: string[];
  /** Its slots, and how many of them are free. */
  size: number;
  free: number;
  pending: { held: Held; result: string; started: number; span: SpanLike | undefined }[];
  /** True while the dispatcher's claim sleeps in the server: an ending job completes itself. */
  waiting: boolean;
  wake: (() => void) | undefined;
  /** Connections of the pool kept between the group's jobs and claims (a checkout per job cost
   * more than the job); given back to the pool before a waiting claim, so an idle worker holds
   * one. At most `size` are in use at once: the dispatcher runs only while a slot is free. */
  clients: pg.PoolClient[];
}

/** How much longer than its signal a handler is waited for before its connection is closed. */
const ABANDON_MS = 1000;
/** How often a stop cancels again the claims still sleeping in the server. */
const RECANCEL_MS = 1000;
const QUERY_CANCELED = '57014';
/** A prepared statement missing, or another of that name there: a server connection other than
 * the one that prepared it (a transaction-pooling PgBouncer before 1.21). */
const NOT_KEPT = new Set(['26000', '42P05']);

interface Statement { name: string; text: string }

/** A statement of the dispatcher's, named for the server to keep it prepared under; the name
 * holds its text's hash, so that a worker of another release never runs this one's. */
function statement(purpose: string, text: string): Statement {
  return { name: `pg_jobs_${purpose}_${createHash('sha1').update(text).digest('hex').slice(0, 12)}`, text };
}

const CLAIM = statement('claim', q.CLAIM);
const COMPLETE_AND_CLAIM = statement('complete_and_claim', q.COMPLETE_AND_CLAIM);
const COMPLETE_MANY = statement('complete_many', q.COMPLETE_MANY);

class Abandoned extends Error {}

export class Worker {
  private readonly pool: pg.Pool;
  private readonly ownPool: boolean;
  private readonly ignorePoolError = (): void => {}; // an idle client's connection broke: the pool drops it
  private readonly control: OwnConnection;
  private readonly listener: OwnConnection;
  private readonly queues: string[];
  private readonly groups: Group[];
  private readonly concurrency: number;
  private readonly jobsRunning = new Set<Promise<void>>();
  private readonly jobs = new Map<string, JobDefinition>();
  private readonly held = new Map<string, Held>();
  private readonly claiming = new Set<number>();
  private readonly guarded = new WeakSet<pg.PoolClient>();
  private readonly warnedNames = new Set<string>();
  /** The jobs a claim just buried, announced together (onExhausted). */
  private readonly buried: Job[] = [];
  private readonly logger: Logger;
  private readonly workerId: string;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly graceMs: number;
  private loops: Promise<void>[] = [];
  private heartbeat: NodeJS.Timeout | undefined;
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private requestStop: () => void = () => {};
  /** Resolved by stop(): run() then stops as at a signal. */
  private readonly stopRequested = new Promise<void>((resolve) => { this.requestStop = resolve; });
  private prepared: boolean;
  private wake: (() => void)[] = [];
  /** pg_jobs.max_payload_size as the server reads it (jobs.max_payload_size()); null when the
   * server cannot say (the engine still refuses a result over it). */
  private maxResultBytes: number | null = null;
  /** When a stop gives up settling what its handlers completed (the end of its grace). */
  private giveUpAt = Infinity;
  /** The application's settle hooks; undefined without any. */
  private readonly hooks: Hooks | undefined;
  /** Whether the claims answer the jobs they buried too (for onExhausted). */
  private readonly reportBuried: boolean;

  constructor(private readonly options: WorkerOptions) {
    if (!options.pool && !options.connectionString) {
      throw new TypeError('createWorker: pass connectionString or pool');
    }
    this.queues = options.queues?.length ? [...options.queues] : ['default'];
    const c = options.concurrency ?? 10;
    const group = (queues: string[], size: number): Group => ({
      queues, size, free: size, pending: [], waiting: false, wake: undefined, clients: [],
    });
    this.groups = typeof c === 'number' ? [group(this.queues, c)]
      : Object.entries(c).filter(([, n]) => n > 0).map(([queue, n]) => group([queue], n));
    this.concurrency = this.groups.reduce((sum, g) => sum + g.free, 0);
    if (this.concurrency === 0 || this.groups.some((g) => !Number.isInteger(g.free))) {
      throw new TypeError('createWorker: concurrency must be a whole number, at least 1');
    }
    for (const job of options.jobs) this.jobs.set(job.name, job);
    this.logger = options.logger ?? jsonLogger;
    this.hooks = options.onSettled || options.onExhausted
      ? new Hooks(options.onSettled, options.onExhausted, this.logger) : undefined;
    this.reportBuried = options.onExhausted !== undefined;
    this.workerId = options.workerId ?? `${os.hostname()}:${process.pid}`;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.pollMs = options.pollMs ?? 5_000;
    this.graceMs = options.shutdownGraceMs ?? 10_000;
    this.ownPool = !options.pool;
    this.prepared = options.preparedStatements ?? true;
    // Each connection says what it is in pg_stat_activity.application_name.
    const config = options.pool ? (options.pool as unknown as { options: pg.ClientConfig }).options
      : { connectionString: options.connectionString };
    this.pool = options.pool ?? new pg.Pool({
      connectionString: options.connectionString, max: this.concurrency, application_name: 'pg-jobs worker',
    });
    this.pool.on('error', this.ignorePoolError);
    this.control = new OwnConnection({ ...config, application_name: 'pg-jobs heartbeat' });
    this.listener = new OwnConnection({ ...config, application_name: 'pg-jobs listener' }, async (client) => {
      client.on('notification', (n) => this.onCancel(n.payload ?? '*'));
      await client.query('listen pg_jobs_cancel');
      // Jobs cancelled while the listener was away: ask about every held one.
      this.beat([...this.held.keys()]);
    });
  }

  /** Starts the slots and the heartbeat; answers once the database was reached (trying again,
   * with backoff, while it cannot be: a worker never ends on a database error). Refuses a
   * database without pg_jobs. */
  async start(): Promise<void> {
    const backoff = new Backoff(200, 10_000);
    let info: { version: string; preloaded: boolean | null; installed: boolean } | undefined;
    while (!info) {
      try {
        [info] = await this.control.query<{ version: string; preloaded: boolean | null; installed: boolean }>(
          q.SERVER);
      } catch (err) {
        if (this.isStopping()) return;
        const wait = backoff.next();
        this.logger.warn('cannot reach the database; trying again', { error: firstLine(err), retryInMs: Math.round(wait) });
        await this.pause(wait);
      }
    }
    if (!info.installed) {
      throw new Error(`pg-jobs: this database has no pg_jobs: ${INSTALL_HINT}, first`);
    }
    if (!(this.options.trustOwner ?? process.env.PGJOBS_TRUST_OWNER === '1')) {
      const [found] = await this.control.query<{ owners: string | null }>(UNTRUSTED_OWNERS);
      if (found?.owners) throw untrustedOwners(found.owners);
    }
    this.maxResultBytes = await this.control.query<{ size: string | null }>(q.MAX_PAYLOAD_SIZE)
      .then(([row]) => (row?.size == null ? null : Number(row.size)), () => null);
    this.logger.info('pg-jobs worker started', {
      workerId: this.workerId, queues: this.groups.flatMap((g) => g.queues), concurrency: this.concurrency,
      jobs: [...this.jobs.keys()], serverVersion: info.version, preloaded: info.preloaded,
    });
    this.keepListening();
    this.heartbeat = setInterval(() => this.beat([...this.held.keys()]), Math.max(this.leaseMs / 3, 100));
    this.loops = this.groups.map((g) => this.dispatch(g));
  }

  /** Stops claiming, lets running jobs finish for `graceMs`, then aborts them and hands them
   * back (no attempt used). */
  stop(options: { graceMs?: number } = {}): Promise<void> {
    this.requestStop();
    this.stopped ??= this.shutdown(options.graceMs ?? this.graceMs);
    return this.stopped;
  }

  /** start(), then stop() at SIGTERM or SIGINT (or at stop() called elsewhere); resolves once
   * stopped. The process exits as it would without pg-jobs: `pg-jobs worker` exits 0 then. */
  async run(): Promise<void> {
    await this.start();
    let signalled: () => void = () => {};
    const signal = new Promise<void>((resolve) => { signalled = resolve; });
    process.once('SIGTERM', signalled);
    process.once('SIGINT', signalled);
    try {
      await Promise.race([signal, this.stopRequested]);
    } finally {
      process.off('SIGTERM', signalled);
      process.off('SIGINT', signalled);
    }
    await this.stop();
  }

  /** Read through a method: the flag changes while a loop awaits. */
  private isStopping(): boolean {
    return this.stopping;
  }

  /** The jobs running now. */
  get running(): number {
    return this.held.size;
  }

  private async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    this.giveUpAt = Date.now() + graceMs;
    for (const wake of this.wake.splice(0)) wake();
    for (const g of this.groups) g.wake?.();
    // A claim sleeping in the server is cancelled; again each second while a dispatcher waits,
    // as a cancel that came before its claim was under way found nothing to cancel.
    const loops = Promise.all(this.loops);
    do await this.cancelWaitingClaims();
    while (!await within(loops, RECANCEL_MS));
    const all = Promise.all(this.jobsRunning);
    await within(all, graceMs);
    if (this.held.size > 0) {
      for (const held of this.held.values()) this.abort(held, 'shutdown');
      await within(all, ABANDON_MS + 500);
    }
    await this.handBack([...this.held.values()].map((h) => h.job));
    // Its async hooks end within what is left of the grace.
    if (this.hooks) await within(this.hooks.settled(), Math.max(this.giveUpAt - Date.now(), 0));
    for (const g of this.groups) for (const c of g.clients.splice(0)) c.release();
    clearInterval(this.heartbeat);
    await this.listener.close();
    await this.control.close();
    if (this.ownPool) await this.pool.end().catch(() => {});
    else this.pool.off('error', this.ignorePoolError); // the application's pool outlives the worker
    this.logger.info('pg-jobs worker stopped', { workerId: this.workerId });
  }

  private async cancelWaitingClaims(): Promise<void> {
    const pids = [...this.claiming];
    if (pids.length === 0) return;
    // Only a backend still in its claim: a cancel must never reach a handler's query.
    await this.control.query(q.CANCEL_WAITING_CLAIMS, [pids]).catch(() => {});
  }

  private async handBack(jobs: Job[]): Promise<void> {
    for (const job of jobs) {
      await this.control.query(q.SNOOZE_NOW, [job.id, job.claim])
        .catch((err: unknown) => this.logger.warn('could not hand a job back', { id: job.id, error: firstLine(err) }));
      this.report(job, 'handed_back', 0);
      this.held.delete(job.id);
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const wake = this.wake;
      function done(): void {
        clearTimeout(timer);
        const i = wake.indexOf(done);
        if (i >= 0) wake.splice(i, 1);
        resolve();
      }
      wake.push(done);
    });
  }

  /** A group's dispatcher: while slots are free, claims that many jobs (completing the jobs
   * pending in the same statement), and starts each; sleeps while every slot is busy. */
  private async dispatch(group: Group): Promise<void> {
    const backoff = new Backoff();
    for (;;) {
      if (group.pending.length === 0) {
        if (this.stopping) return;
        if (group.free === 0) {
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
        client = group.clients.pop() ?? await this.connect();
        const rows = group.pending.length > 0 ? await this.settle(client, group) : await this.claim(client, group);
        backoff.reset();
        this.giveBack(group, client, false);
        client = undefined;
        for (const row of rows) {
          if (row[17] === true) this.buried.push(toJob(row));
          else this.launch(group, row);
        }
        if (this.buried.length > 0) this.hooks?.buried(this.buried.splice(0));
      } catch (err) {
        if (client) this.giveBack(group, client, true);
        if (this.isStopping() && Date.now() >= this.giveUpAt) {
          this.giveUp(group, err);
          return;
        }
        if (this.isStopping() && (err as { code?: string }).code === QUERY_CANCELED) continue;
        if (this.prepared && NOT_KEPT.has((err as { code?: string }).code ?? '')) {
          this.prepared = false;
          this.logger.warn('the server did not keep this worker\'s prepared statements (a transaction-pooling '
            + 'PgBouncer before 1.21?); going on without them: pass preparedStatements: false (the command: '
            + '--no-prepared-statements)', { error: firstLine(err) });
          continue;
        }
        const wait = backoff.next();
        this.logger.warn('database error; trying again', { error: firstLine(err), retryInMs: Math.round(wait) });
        await this.pause(wait);
      }
    }
  }

  /** Completes the group's pending jobs and claims for its free slots, in one statement; a
   * claim among them no longer held completes each on its own (the others still land). A
   * statement refused for what it carries (not for a lost connection or a passing conflict)
   * is never sent again: its jobs are settled one by one, and the one refused fails alone. */
  private async settle(client: pg.PoolClient, group: Group): Promise<ClaimedRow[]> {
    const batch = group.pending.splice(0);
    const ids = batch.map((p) => p.held.job.id);
    const claims = batch.map((p) => p.held.job.claim);
    // No results at all (handlers that answer nothing): none sent, none for the server to read.
    const results = batch.every((p) => p.result === 'null') ? null : batch.map((p) => p.result);
    const free = this.stopping ? 0 : group.free;
    let landed: Set<string>;
    let rows: ClaimedRow[] = [];
    try {
      if (free > 0) {
        ({ rows } = await client.query<ClaimedRow>({
          ...this.statement(COMPLETE_AND_CLAIM),
          values: [ids, claims, this.workerId, group.queues, free, `${this.leaseMs} milliseconds`, results,
            this.reportBuried],
          rowMode: 'array',
        }));
        landed = new Set(ids);
      } else {
        landed = await this.completeMany(client, ids, claims, results);
      }
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === codes.leaseLost) {
        landed = await this.completeMany(client, ids, claims, results);
      } else if (isTransient(err) || NOT_KEPT.has(code ?? '')) {
        group.pending.unshift(...batch);
        throw err;
      } else {
        this.logger.warn('a settle was refused for what it carries; its jobs are settled one by one',
          { jobs: batch.length, error: firstLine(err) });
        await this.settleEach(client, group, batch);
        return [];
      }
    }
    for (const p of batch) this.ended(group, p.held, landed.has(p.held.job.id) ? 'completed' : 'lost', p.started, p.span);
    return rows;
  }

  /** Completes each job on its own: one the server refuses for its result fails for good with
   * the server's message; one it cannot reach now goes back to be settled later. */
  private async settleEach(client: pg.PoolClient, group: Group, batch: Group['pending']): Promise<void> {
    for (const [i, p] of batch.entries()) {
      const { job } = p.held;
      let outcome: Outcome;
      let error: string | undefined;
      try {
        const { rows } = await client.query<{ landed: boolean }>(
          q.COMPLETE, [job.id, job.claim, p.result]);
        outcome = rows[0]?.landed === true ? 'completed' : 'lost';
      } catch (err) {
        if (isTransient(err)) {
          group.pending.unshift(...batch.slice(i));
          throw err;
        }
        error = `the result was refused: ${firstLine(err)}`;
        outcome = await this.failForGood(client, job, error);
      }
      this.ended(group, p.held, outcome, p.started, p.span, error);
    }
  }

  /** Fails a held job for good (no retry): its result could not be settled. */
  private async failForGood(client: pg.PoolClient, job: Job, error: string): Promise<Outcome> {
    try {
      const { rows } = await client.query<{ outcome: Outcome | null }>(
        q.FAIL, [job.id, job.claim, error, null, false, null, false]);
      return rows[0]?.outcome ?? 'lost';
    } catch (err) {
      if (isTransient(err)) throw err;
      this.logger.warn('could not fail the job; it is left to its lease', { id: job.id, error: firstLine(err) });
      return 'lost';
    }
  }

  /** A stop past its grace that still cannot settle what its handlers completed: those jobs
   * are left to their leases (they run again once the leases lapse). */
  private giveUp(group: Group, err: unknown): void {
    const batch = group.pending.splice(0);
    if (batch.length > 0) {
      this.logger.warn('stopping: could not settle completed jobs within the grace; they are left to their leases',
        { jobs: batch.length, error: firstLine(err) });
    }
    for (const p of batch) this.ended(group, p.held, 'lost', p.started, p.span);
  }

  private async completeMany(client: pg.PoolClient, ids: string[], claims: string[], results: string[] | null): Promise<Set<string>> {
    const { rows } = await client.query<{ id: string; landed: boolean }>(
      { ...this.statement(COMPLETE_MANY), values: [ids, claims, results] });
    return new Set(rows.filter((r) => r.landed).map((r) => r.id));
  }

  /** Claims for the group's free slots: a look first, and only when it finds nothing a claim
   * that sleeps in the server for work (while it does, an ending job completes itself). */
  private async claim(client: pg.PoolClient, group: Group): Promise<ClaimedRow[]> {
    const claim = this.statement(CLAIM);
    const lease = `${this.leaseMs} milliseconds`;
    const found = await client.query<ClaimedRow>({
      ...claim, values: [this.workerId, group.queues, group.free, lease, null, this.reportBuried], rowMode: 'array',
    });
    if (found.rows.length > 0 || this.stopping) return found.rows;
    const pid = (client as unknown as { processID: number }).processID;
    // An idle worker holds one connection: the others go back to the pool (which closes them
    // once idle for its idleTimeoutMillis).
    for (const c of group.clients.splice(0)) c.release();
    this.claiming.add(pid);
    group.waiting = true;
    try {
      if (group.pending.length > 0) return [];
      const { rows } = await client.query<ClaimedRow>({
        ...claim,
        values: [this.workerId, group.queues, group.free, lease, `${this.pollMs} milliseconds`, this.reportBuried],
        rowMode: 'array',
      });
      return rows;
    } finally {
      group.waiting = false;
      this.claiming.delete(pid);
    }
  }

  /** A statement as this worker sends it: by name while the server keeps prepared statements. */
  private statement(s: Statement): { name?: string; text: string } {
    return this.prepared ? s : { text: s.text };
  }

  /** A connection of the pool, with a listener for the errors of a broken one (kept, so that
   * one broken while the group keeps it does not end the process). */
  private async connect(): Promise<pg.PoolClient> {
    const client = await this.pool.connect();
    if (!this.guarded.has(client)) {
      client.on('error', () => {});
      this.guarded.add(client);
    }
    return client;
  }

  /** Keeps a connection for the group's next job or claim; a broken one is closed, and one
   * goes back to the pool when the worker stops or another user of the pool waits for one. */
  private giveBack(group: Group, client: pg.PoolClient, broken: boolean): void {
    if (broken) client.release(true);
    else if (this.stopping || this.pool.waitingCount > 0) client.release();
    else group.clients.push(client);
  }

  /** Takes a slot and runs the job in it. (runJob reports its own errors; what is left, a
   * logger or metrics of the application's that threw, is logged here.) */
  private launch(group: Group, row: ClaimedRow): void {
    group.free -= 1;
    const running = this.runJob(group, row);
    this.jobsRunning.add(running);
    running.then(() => this.jobsRunning.delete(running), (err: unknown) => {
      this.jobsRunning.delete(running);
      this.logger.warn('the worker could not report a job', { error: firstLine(err) });
    });
  }

  /** An attempt ended (or was handed to the dispatcher to complete): frees its slot. */
  private ended(group: Group, held: Held, outcome: Outcome, started: number, span: SpanLike | undefined, error?: string): void {
    held.timer?.clear();
    if (this.held.get(held.job.id) === held) this.held.delete(held.job.id);
    this.options.metrics?.running(this.held.size);
    this.report(held.job, outcome, Date.now() - started, error);
    if (span) endAttemptSpan(span, outcome, error);
    this.hooks?.ended(held.job, outcome);
  }

  private freeSlot(group: Group): void {
    group.free += 1;
    group.wake?.();
  }

  /** Runs one job on a connection of the pool: its handler, then its settlement. A handler
   * that returns with nothing to settle on its connection has its job completed by the
   * dispatcher with the group's next claim; what else may follow is in afterHandler. */
  private async runJob(group: Group, row: ClaimedRow): Promise<void> {
    const job = toJob(row);
    const def = this.jobs.get(job.name);
    if (!def) return this.unknownName(group, job);
    const started = Date.now();
    const held = new Held(job, def.transactional);
    const timeLeftMs = row[16];
    if (timeLeftMs !== null) held.timer = longTimeout(() => this.abort(held, 'deadline'), timeLeftMs);
    this.held.set(job.id, held);
    this.options.metrics?.running(this.held.size);
    const tracer = this.options.tracer ?? defaultTracer();
    const span = tracer ? startAttemptSpan(tracer, job) : undefined;
    let outcome: Outcome | null = 'lost';
    let error: string | undefined;
    let broken = false;
    try {
      held.client = group.clients.pop() ?? await this.connect();
      let result: unknown;
      let thrown: unknown;
      let failed = false;
      try {
        const work = def.handler(job.payload, makeContext(job, held, this.controlQuery));
        result = work instanceof Promise ? await this.untilAborted(work, held) : work;
      } catch (err) {
        if (err instanceof Abandoned) {
          // Its connection is closed (the handler may still use it); its job is reported as what
          // stopped it, and handed back (on the control connection) if that was a shutdown.
          broken = true;
          this.logger.warn('the handler did not stop within a second of being told to; its connection is closed',
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
          encoded = encodeResult(result, this.maxResultBytes);
        } catch (err) {
          thrown = new NonRetryableError(describe(err));
          failed = true;
        }
      }
      if (!failed && held.reason === undefined && !held.inTx && !this.stopping && !group.waiting) {
        // Completed by the dispatcher with the group's next claim; the slot frees now.
        group.pending.push({ held, result: encoded, started, span });
        outcome = null;
        return;
      }
      [outcome, error] = await this.afterHandler(held, encoded, failed, thrown);
    } catch (err) {
      broken = true;
      this.logger.warn('database error; the job is left to its lease',
        { error: firstLine(isConnectionError(err) ? err : fromDriver(err)) });
    } finally {
      if (held.client) this.giveBack(group, held.client, broken);
      if (outcome !== null) this.ended(group, held, outcome, started, span, error);
      this.freeSlot(group);
    }
  }

  /** The settlement of an attempt on its own connection: told to stop, parked, failed, or
   * completed in the transaction its handler opened (or with nobody to complete it with). */
  private async afterHandler(held: Held, result: string, failed: boolean, thrown: unknown): Promise<[Outcome, string?]> {
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
      return [await this.failForGood(c, job, error), error];
    }
    if (held.inTx) await c.query(landed ? 'commit' : 'rollback'); // a lost claim: the handler's writes are undone
    return [landed ? 'completed' : 'lost'];
  }

  /** A job of a name this worker has no handler for: snoozed, no attempt used, one warning per
   * name. */
  private async unknownName(group: Group, job: Job): Promise<void> {
    try {
      await this.control.query(q.SNOOZE_FOR,
        [job.id, job.claim, `${this.options.unknownSnoozeMs ?? 60_000} milliseconds`]);
      if (!this.warnedNames.has(job.name)) {
        this.warnedNames.add(job.name);
        this.logger.warn('no handler for this job name here; snoozed, no attempt used', { name: job.name, queue: job.queue });
      }
      this.report(job, 'unknown_name', 0);
    } catch (err) {
      this.logger.warn('database error; the job is left to its lease', { error: firstLine(err) });
    } finally {
      this.freeSlot(group);
    }
  }

  /** The outcome of an attempt that was told to stop: a shutdown hands its job back (no
   * attempt used); a cancel, a deadline or a lost claim has settled it already. */
  private async stoppedOutcome(held: Held): Promise<Outcome> {
    switch (held.reason) {
      case 'shutdown':
        await this.control.query(q.SNOOZE_NOW, [held.job.id, held.job.claim]);
        return 'handed_back';
      case 'deadline':
        return 'timed_out';
      default:
        return held.reason ?? 'lost';
    }
  }

  /** The handler's result; when the signal aborts, the handler gets ABANDON_MS more to
   * return, after which its connection is closed (Abandoned). */
  private untilAborted<T>(work: Promise<T>, held: Held): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      held.onAbort = (): void => {
        timer ??= setTimeout(() => reject(new Abandoned('the handler did not stop')), ABANDON_MS);
      };
      if (held.reason !== undefined) held.onAbort();
      work.then((value) => {
        clearTimeout(timer);
        held.onAbort = undefined;
        resolve(value);
      }, (err: unknown) => {
        clearTimeout(timer);
        held.onAbort = undefined;
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the handler's own reason, as it is
        reject(err);
      });
    });
  }

  private abort(held: Held, reason: Reason): void {
    if (held.reason !== undefined) return;
    held.reason = reason;
    held.controller?.abort(reason);
    held.onAbort?.();
  }

  private readonly controlQuery: Control = (text, values) => this.control.query(text, values);

  private onCancel(payload: string): void {
    const ids = payload === '*' ? [...this.held.keys()] : this.held.has(payload) ? [payload] : [];
    if (ids.length > 0) this.beat(ids, 'cancelled');
  }

  /** Heartbeats these held jobs; a job whose claim is gone has its signal aborted. */
  private beat(ids: string[], reason: Reason = 'lost'): void {
    const jobs = ids.map((id) => this.held.get(id)).filter((h): h is Held => h !== undefined);
    if (jobs.length === 0) return;
    this.control.query<{ id: string; until: Date | null }>(
      q.HEARTBEATS,
      [jobs.map((h) => h.job.id), jobs.map((h) => h.job.claim)],
    ).then((rows) => {
      for (const row of rows) {
        const held = this.held.get(row.id);
        if (row.until === null && held) this.abort(held, reason);
      }
    }, (err: unknown) => this.logger.warn('heartbeat failed; trying again', { error: firstLine(err) }));
  }

  private keepListening(): void {
    const backoff = new Backoff();
    const connect = (): void => {
      if (this.stopping) return;
      this.listener.connect().then((client) => {
        backoff.reset();
        client.once('end', () => setTimeout(connect, backoff.next()));
      }, () => setTimeout(connect, backoff.next()));
    };
    connect();
  }

  private report(job: Job, outcome: Outcome, durationMs: number, error?: string): void {
    this.options.metrics?.attemptEnded(job.queue, job.name, outcome, durationMs);
    const fields = { id: job.id, name: job.name, queue: job.queue, attempt: job.attempt, durationMs, outcome, error };
    if (outcome === 'completed' || outcome === 'parked' || outcome === 'handed_back') this.logger.info(`job ${outcome}`, fields);
    else this.logger.warn(`job ${outcome}`, fields);
  }
}

function firstLine(err: unknown): string {
  return describe(err).split('\n')[0] ?? '';
}

export function createWorker(options: WorkerOptions): Worker {
  return new Worker(options);
}
