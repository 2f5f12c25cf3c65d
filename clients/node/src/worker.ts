// The worker: a dispatcher per set of queues (dispatcher.ts) claims jobs for its free slots and
// settles the ones that ended with its next claim; each job runs as an attempt (attempt.ts).
// Heartbeats, steps and events go through a connection of their own; a cancel listener
// heartbeats a cancelled job at once. A stop lets running jobs finish for a grace, then tells
// them to stop and hands them back. The engine decides retries, backoff, fencing and burial:
// the worker reports and obeys.

import os from 'node:os';
import pg from 'pg';
import { Attempts } from './attempt.js';
import { applicationName, Backoff, OwnConnection, within } from './connection.js';
import { firstLine, makeGroup, type Group, WorkerCore } from './core.js';
import { Dispatcher } from './dispatcher.js';
import { type ClaimedRow, ROW } from './context.js';
import { INSTALL_HINT, isConnectionError } from './errors.js';
import { ABANDON_MS, type Reason } from './held.js';
import type { OnExhausted, OnSettled } from './hooks.js';
import type { JobDefinition } from './jobs.js';
import type { Logger, Metrics } from './log.js';
import { UNTRUSTED_OWNERS, untrustedOwners } from './owner.js';
import type { TracerLike } from './tracing.js';
import * as q from './queries.js';

export interface WorkerOptions {
  /** A connection string; or `pool`, a node-postgres Pool the worker borrows from. */
  connectionString?: string;
  pool?: pg.Pool;
  /** Queues to work, in no order of preference (default: ['default']). */
  queues?: string[];
  /** Jobs run at once: a number for all queues, or a number per queue (default: 10). */
  concurrency?: number | Record<string, number>;
  /** Jobs claimed ahead and held beyond the running ones, per set of queues (default: 0).
   * They are claimed many at once and settled together, and a freed slot starts the next
   * without waiting for the database; a held job not started uses no attempt if this worker
   * dies, and a stop gives it back at once. Jobs held here are not available to other workers:
   * keep it near what this worker runs in a second or two. */
  prefetch?: number;
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

/** What the worker logs of the server at its start, and whether pg_jobs is there at all. */
type Server = { version: string; preloaded: boolean | null; installed: boolean };

/** How often a stop cancels again the claims still sleeping in the server. */
const RECANCEL_MS = 1000;

export class Worker {
  private readonly pool: pg.Pool;
  private readonly ownPool: boolean;
  private readonly ignorePoolError = (): void => {}; // an idle client's connection broke: the pool drops it
  private readonly control: OwnConnection;
  private readonly listener: OwnConnection;
  private readonly core: WorkerCore;
  private readonly attempts: Attempts;
  private readonly groups: Group[];
  private readonly concurrency: number;
  private readonly graceMs: number;
  private loops: Promise<void>[] = [];
  private heartbeat: NodeJS.Timeout | undefined;
  private stopped: Promise<void> | undefined;
  private requestStop: () => void = () => {};
  /** Resolved by stop(): run() then stops as at a signal. */
  private readonly stopRequested = new Promise<void>((resolve) => { this.requestStop = resolve; });

  constructor(private readonly options: WorkerOptions) {
    if (!options.pool && !options.connectionString) {
      throw new TypeError('createWorker: pass connectionString or pool');
    }
    const queues = options.queues?.length ? [...options.queues] : ['default'];
    const c = options.concurrency ?? 10;
    const prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > 1000) {
      throw new TypeError('createWorker: prefetch must be a whole number from 0 to 1000');
    }
    this.groups = typeof c === 'number' ? [makeGroup(queues, c, prefetch)]
      : Object.entries(c).filter(([, n]) => n > 0).map(([queue, n]) => makeGroup([queue], n, prefetch));
    this.concurrency = this.groups.reduce((sum, g) => sum + g.free, 0);
    if (this.concurrency === 0 || this.groups.some((g) => !Number.isInteger(g.free))) {
      throw new TypeError('createWorker: concurrency must be a whole number, at least 1');
    }
    this.graceMs = options.shutdownGraceMs ?? 10_000;
    this.ownPool = !options.pool;
    // Each connection says what it is, and whose, in pg_stat_activity.application_name.
    const workerId = options.workerId ?? `${os.hostname()}:${process.pid}`;
    const config = options.pool ? (options.pool as unknown as { options: pg.ClientConfig }).options
      : { connectionString: options.connectionString };
    this.pool = options.pool ?? new pg.Pool({
      // (with prefetch, one more per dispatcher: its settles go on while every slot runs)
      connectionString: options.connectionString, max: this.concurrency + (prefetch > 0 ? this.groups.length : 0),
      application_name: applicationName('worker', workerId),
    });
    this.pool.on('error', this.ignorePoolError);
    this.control = new OwnConnection({ ...config, application_name: applicationName('heartbeat', workerId) });
    this.core = new WorkerCore(this.pool, this.control, {
      jobs: options.jobs,
      workerId,
      leaseMs: options.leaseMs ?? 30_000,
      pollMs: options.pollMs ?? 5_000,
      unknownSnoozeMs: options.unknownSnoozeMs ?? 60_000,
      preparedStatements: options.preparedStatements ?? true,
      logger: options.logger,
      metrics: options.metrics,
      tracer: options.tracer,
      onSettled: options.onSettled,
      onExhausted: options.onExhausted,
    });
    this.attempts = new Attempts(this.core);
    this.listener = new OwnConnection({ ...config, application_name: applicationName('listener', workerId) }, async (client) => {
      client.on('notification', (n) => this.onCancel(n.payload ?? '*'));
      await client.query('listen pg_jobs_cancel');
      // Jobs cancelled while the listener was away: ask about every held one.
      this.beat(this.heldIds());
    });
  }

  /** Starts the slots and the heartbeat; answers once the database was reached (trying again,
   * with backoff, while it cannot be, or its connection breaks before the start is done: a
   * worker never ends on a database error). Refuses a database without pg_jobs. */
  async start(): Promise<void> {
    const core = this.core;
    const backoff = new Backoff(200, 10_000);
    let info: Server | Error | undefined;
    while (!info) {
      try {
        info = await this.probe();
      } catch (err) {
        if (core.isStopping()) return;
        const wait = backoff.next();
        core.logger.warn('cannot reach the database; trying again', { error: firstLine(err), retryInMs: Math.round(wait) });
        await core.pause(wait);
      }
    }
    if (info instanceof Error) throw info;
    core.logger.info('pg-jobs worker started', {
      workerId: core.workerId, queues: this.groups.flatMap((g) => g.queues), concurrency: this.concurrency,
      jobs: [...core.jobs.keys()], serverVersion: info.version, preloaded: info.preloaded,
    });
    this.keepListening();
    this.heartbeat = setInterval(() => this.beat(this.heldIds()), Math.max(core.leaseMs / 3, 100));
    this.loops = this.groups.map((g) => new Dispatcher(core, g, this.attempts).run());
  }

  /** What the worker learns of the server before its first claim. A database without pg_jobs,
   * or whose jobs schema a superuser must not trust, is a refusal, answered as an Error; what
   * it throws is a database error, tried again. */
  private async probe(): Promise<Server | Error> {
    const [info] = await this.control.query<Server>(q.SERVER) as [Server];
    if (!info.installed) return new Error(`pg-jobs: this database has no pg_jobs: ${INSTALL_HINT}, first`);
    if (!(this.options.trustOwner ?? process.env.PGJOBS_TRUST_OWNER === '1')) {
      const [found] = await this.control.query<{ owners: string | null }>(UNTRUSTED_OWNERS);
      if (found?.owners) return untrustedOwners(found.owners);
    }
    // Refused by an older server (the engine's limit alone then); a lost connection is thrown.
    this.core.maxResultBytes = await this.control.query<{ size: string | null }>(q.MAX_PAYLOAD_SIZE).then(
      ([row]) => (row?.size == null ? null : Number(row.size)),
      (err: unknown) => { if (isConnectionError(err)) throw err; return null; });
    return info;
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

  /** The jobs running now. */
  get running(): number {
    return this.core.held.size;
  }

  private async shutdown(graceMs: number): Promise<void> {
    const core = this.core;
    core.stopping = true;
    core.giveUpAt = Date.now() + graceMs;
    core.wakeAll();
    for (const g of this.groups) g.wake?.();
    // A claim sleeping in the server is cancelled; again each second while a dispatcher waits,
    // as a cancel that came before its claim was under way found nothing to cancel.
    const loops = Promise.all(this.loops);
    do await this.cancelWaitingClaims();
    while (!await within(loops, RECANCEL_MS));
    const all = this.attempts.drained();
    await within(all, graceMs);
    if (core.held.size > 0) {
      for (const held of core.held.values()) held.abort('shutdown');
      await within(all, ABANDON_MS + 500);
    }
    await this.handBack();
    // Its async hooks end within what is left of the grace.
    if (core.hooks) await within(core.hooks.settled(), Math.max(core.giveUpAt - Date.now(), 0));
    for (const g of this.groups) for (const c of g.clients.splice(0)) c.release();
    clearInterval(this.heartbeat);
    await this.listener.close();
    await this.control.close();
    if (this.ownPool) await this.pool.end().catch(() => {});
    else this.pool.off('error', this.ignorePoolError); // the application's pool outlives the worker
    core.logger.info('pg-jobs worker stopped', { workerId: core.workerId });
  }

  private async cancelWaitingClaims(): Promise<void> {
    const pids = [...this.core.claiming];
    if (pids.length === 0) return;
    // Only a backend still in its claim: a cancel must never reach a handler's query.
    await this.control.query(q.CANCEL_WAITING_CLAIMS, [pids]).catch(() => {});
  }

  /** The jobs still held after the grace go back to their queues, no attempt used. */
  private async handBack(): Promise<void> {
    const core = this.core;
    for (const { job } of [...core.held.values()]) {
      await this.control.query(q.SNOOZE_NOW, [job.id, job.claim])
        .catch((err: unknown) => core.logger.warn('could not hand a job back', { id: job.id, error: firstLine(err) }));
      core.report(job, 'handed_back', 0);
      core.held.delete(job.id);
    }
  }

  /** The jobs this worker holds: running, and claimed ahead. */
  private heldIds(): string[] {
    return [...this.core.held.keys(), ...this.claimedAhead().keys()];
  }

  /** The jobs claimed ahead and not started, by id, with their group. */
  private claimedAhead(): Map<string, { row: ClaimedRow; group: Group }> {
    return new Map(this.groups.flatMap((group) => group.queued.map((row) => [row[ROW.id], { row, group }] as const)));
  }

  private onCancel(payload: string): void {
    const { held } = this.core;
    const ids = payload === '*' ? this.heldIds() : held.has(payload) || this.claimedAhead().has(payload) ? [payload] : [];
    if (ids.length > 0) this.beat(ids, 'cancelled');
  }

  /** Heartbeats these held jobs; a job whose claim is gone is told to stop, or dropped if it
   * was not started. */
  private beat(ids: string[], reason: Reason = 'lost'): void {
    const { held } = this.core;
    const queued = this.claimedAhead();
    const jobs = ids.flatMap((id) => {
      const job = held.get(id)?.job;
      const row = queued.get(id)?.row;
      return job ? [{ id: job.id, claim: job.claim }] : row ? [{ id: row[ROW.id], claim: row[ROW.claim] }] : [];
    });
    if (jobs.length === 0) return;
    this.control.query<{ id: string; until: Date | null }>(
      q.HEARTBEATS,
      [jobs.map((h) => h.id), jobs.map((h) => h.claim)],
    ).then((rows) => {
      for (const row of rows) {
        if (row.until !== null) continue;
        held.get(row.id)?.abort(reason);
        const ahead = queued.get(row.id);
        if (ahead) {
          const i = ahead.group.queued.indexOf(ahead.row);
          if (i >= 0) ahead.group.queued.splice(i, 1);
        }
      }
    }, (err: unknown) => this.core.logger.warn('heartbeat failed; trying again', { error: firstLine(err) }));
  }

  private keepListening(): void {
    const backoff = new Backoff();
    const connect = (): void => {
      if (this.core.stopping) return;
      this.listener.connect().then((client) => {
        backoff.reset();
        client.once('end', () => setTimeout(connect, backoff.next()));
      }, () => setTimeout(connect, backoff.next()));
    };
    connect();
  }
}

export function createWorker(options: WorkerOptions): Worker {
  return new Worker(options);
}
