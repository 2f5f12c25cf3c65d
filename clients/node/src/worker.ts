// The worker: slots that each claim a job the moment they are free (a waiting claim in the
// server, no LISTEN needed), run its handler in the transaction that completes it, and chain
// the next claim into that commit (jobs.complete_and_claim). Heartbeats, steps and events go
// through a connection of their own; a cancel listener heartbeats a cancelled job at once.
// The engine decides retries, backoff, fencing and burial: the worker reports and obeys.

import os from 'node:os';
import pg from 'pg';
import { CLAIMED_COLUMNS, type ClaimedRow, type Job, makeContext, Parked, toJob } from './context.js';
import { codes, fromDriver, isConnectionError, NonRetryableError, RetryAfterError } from './errors.js';
import type { JobDefinition } from './jobs.js';
import { jsonLogger, type Logger, type Metrics, type Outcome } from './log.js';
import { Backoff, OwnConnection, sleep } from './connection.js';
import { endAttemptSpan, startAttemptSpan, type TracerLike } from './tracing.js';

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
}

type Reason = 'lost' | 'cancelled' | 'deadline' | 'shutdown';

interface Held {
  job: Job;
  controller: AbortController;
  timer: NodeJS.Timeout | undefined;
}

/** How much longer than its signal a handler is waited for before its connection is closed. */
const ABANDON_MS = 1000;
const QUERY_CANCELED = '57014';

class Abandoned extends Error {}

export class Worker {
  private readonly pool: pg.Pool;
  private readonly ownPool: boolean;
  private readonly control: OwnConnection;
  private readonly listener: OwnConnection;
  private readonly queues: string[];
  private readonly slots: string[][];
  private readonly jobs = new Map<string, JobDefinition>();
  private readonly held = new Map<string, Held>();
  private readonly claiming = new Set<number>();
  private readonly warnedNames = new Set<string>();
  private readonly logger: Logger;
  private readonly workerId: string;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly graceMs: number;
  private loops: Promise<void>[] = [];
  private heartbeat: NodeJS.Timeout | undefined;
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private wake: (() => void)[] = [];

  constructor(private readonly options: WorkerOptions) {
    if (!options.pool && !options.connectionString) {
      throw new TypeError('createWorker: pass connectionString or pool');
    }
    this.queues = options.queues?.length ? [...options.queues] : ['default'];
    const c = options.concurrency ?? 10;
    this.slots = typeof c === 'number'
      ? Array.from({ length: c }, () => this.queues)
      : Object.entries(c).flatMap(([queue, n]) => Array.from({ length: n }, () => [queue]));
    if (this.slots.length === 0) throw new TypeError('createWorker: concurrency must be at least 1');
    for (const job of options.jobs) this.jobs.set(job.name, job);
    this.logger = options.logger ?? jsonLogger;
    this.workerId = options.workerId ?? `${os.hostname()}:${process.pid}`;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.pollMs = options.pollMs ?? 5_000;
    this.graceMs = options.shutdownGraceMs ?? 10_000;
    this.ownPool = !options.pool;
    // Each connection says what it is in pg_stat_activity.application_name.
    const config = options.pool ? (options.pool as unknown as { options: pg.ClientConfig }).options
      : { connectionString: options.connectionString };
    this.pool = options.pool ?? new pg.Pool({
      connectionString: options.connectionString, max: this.slots.length, application_name: 'pg-jobs worker',
    });
    this.pool.on('error', () => {}); // an idle client's connection broke: the pool drops it
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
          "select current_setting('server_version') as version, "
          // NULL where the role may not read the setting (pg_read_all_settings)
          + "(select setting ~ 'pg_jobs' from pg_settings where name = 'shared_preload_libraries') as preloaded, "
          + "exists (select from pg_extension where extname = 'pg_jobs') as installed");
      } catch (err) {
        if (this.isStopping()) return;
        const wait = backoff.next();
        this.logger.warn('cannot reach the database; trying again', { error: firstLine(err), retryInMs: Math.round(wait) });
        await this.pause(wait);
      }
    }
    if (!info.installed) {
      throw new Error('pg-jobs: this database has no pg_jobs: CREATE EXTENSION pg_jobs (as a superuser) first');
    }
    this.logger.info('pg-jobs worker started', {
      workerId: this.workerId, queues: this.queues, concurrency: this.slots.length,
      jobs: [...this.jobs.keys()], serverVersion: info.version, preloaded: info.preloaded,
    });
    this.keepListening();
    this.heartbeat = setInterval(() => this.beat([...this.held.keys()]), Math.max(this.leaseMs / 3, 100));
    this.loops = this.slots.map((queues) => this.slotLoop(queues));
  }

  /** Stops claiming, lets running jobs finish for `graceMs`, then aborts them and hands them
   * back (no attempt used). */
  stop(options: { graceMs?: number } = {}): Promise<void> {
    this.stopped ??= this.shutdown(options.graceMs ?? this.graceMs);
    return this.stopped;
  }

  /** start(), then stop() at SIGTERM or SIGINT, and exit 0. */
  async run(): Promise<void> {
    await this.start();
    await new Promise<void>((resolve) => {
      process.once('SIGTERM', resolve);
      process.once('SIGINT', resolve);
    });
    await this.stop();
    process.exit(0);
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
    for (const wake of this.wake.splice(0)) wake();
    await this.cancelWaitingClaims();
    const all = Promise.all(this.loops);
    await Promise.race([all, sleep(graceMs)]);
    if (this.held.size > 0) {
      for (const held of this.held.values()) this.abort(held, 'shutdown');
      await Promise.race([all, sleep(ABANDON_MS + 500)]);
    }
    await this.handBack([...this.held.values()].map((h) => h.job));
    clearInterval(this.heartbeat);
    await this.listener.close();
    await this.control.close();
    if (this.ownPool) await this.pool.end().catch(() => {});
    this.logger.info('pg-jobs worker stopped', { workerId: this.workerId });
  }

  private async cancelWaitingClaims(): Promise<void> {
    const pids = [...this.claiming];
    if (pids.length === 0) return;
    // Only a backend still in its claim: a cancel must never reach a handler's query.
    await this.control.query(
      "select pg_cancel_backend(a.pid) from pg_stat_activity as a where a.pid = any($1::int[]) "
      + "and a.state = 'active' and a.query like '%jobs.claim(%'", [pids]).catch(() => {});
  }

  private async handBack(jobs: Job[]): Promise<void> {
    for (const job of jobs) {
      await this.control.query('select jobs.snooze($1, $2::bigint, clock_timestamp())', [job.id, job.claim])
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

  private async slotLoop(queues: string[]): Promise<void> {
    const backoff = new Backoff();
    while (!this.stopping) {
      let client: pg.PoolClient | undefined;
      // A connection that breaks between two of its queries (a server restart while a handler
      // works) reports it as an 'error' event, which would end the process unheard; its next
      // query fails, and the slot makes a new connection.
      const onError = (): void => {};
      try {
        client = await this.pool.connect();
        client.on('error', onError);
        let row = await this.claim(client, queues);
        backoff.reset();
        while (row) row = await this.runJob(client, row, queues);
        client.off('error', onError);
        client.release();
      } catch (err) {
        client?.off('error', onError);
        client?.release(true);
        if (this.isStopping() && (err as { code?: string }).code === QUERY_CANCELED) break;
        const wait = backoff.next();
        this.logger.warn('database error; trying again', { error: firstLine(err), retryInMs: Math.round(wait) });
        await this.pause(wait);
      }
    }
  }

  private async claim(client: pg.PoolClient, queues: string[]): Promise<ClaimedRow | null> {
    const pid = (client as unknown as { processID: number }).processID;
    this.claiming.add(pid);
    try {
      const { rows } = await client.query<ClaimedRow>(
        `select ${CLAIMED_COLUMNS} from jobs.claim($1, $2, 1, $3::interval, $4::interval)`,
        [this.workerId, queues, `${this.leaseMs} milliseconds`, `${this.pollMs} milliseconds`]);
      return rows[0] ?? null;
    } finally {
      this.claiming.delete(pid);
    }
  }

  /** Runs one job; answers the job claimed in its completing commit, if any. */
  private async runJob(client: pg.PoolClient, row: ClaimedRow, queues: string[]): Promise<ClaimedRow | null> {
    const job = toJob(row);
    const def = this.jobs.get(job.name);
    if (!def) {
      await client.query('select jobs.snooze($1, $2::bigint, clock_timestamp() + $3::interval)',
        [job.id, job.claim, `${this.options.unknownSnoozeMs ?? 60_000} milliseconds`]);
      if (!this.warnedNames.has(job.name)) {
        this.warnedNames.add(job.name);
        this.logger.warn('no handler for this job name here; snoozed, no attempt used', { name: job.name, queue: job.queue });
      }
      this.report(job, 'unknown_name', 0);
      return null;
    }
    const held: Held = { job, controller: new AbortController(), timer: undefined };
    if (row.time_left_ms !== null) {
      held.timer = setTimeout(() => this.abort(held, 'deadline'), Math.max(0, row.time_left_ms));
    }
    this.held.set(job.id, held);
    this.options.metrics?.running(this.held.size);
    const started = Date.now();
    const span = this.options.tracer ? startAttemptSpan(this.options.tracer, job) : undefined;
    let outcome: Outcome = 'lost';
    let error: string | undefined;
    try {
      // The transaction opens when the handler first uses ctx.tx (node-postgres runs a client's
      // queries in order, so BEGIN goes before the handler's first); one that never does is
      // completed by one statement, in autocommit, which is as atomic.
      const opened = { inTx: false };
      const tx = (): pg.PoolClient => {
        if (def.transactional && !opened.inTx) {
          opened.inTx = true;
          client.query('begin').catch(() => {}); // its failure fails the handler's next query
        }
        return client;
      };
      const ctx = makeContext(job, held.controller.signal, tx, (text, values) => this.control.query(text, values));
      let result: unknown;
      let thrown: unknown;
      let failed = false;
      try {
        result = await this.untilAborted(Promise.resolve().then(() => def.handler(job.payload, ctx)), held.controller.signal);
      } catch (err) {
        if (err instanceof Abandoned) throw err;
        thrown = err;
        failed = true;
      }
      const signal = held.controller.signal;
      if (signal.aborted) {
        if (opened.inTx) await client.query('rollback');
        const reason = signal.reason as Reason;
        if (reason === 'shutdown') {
          await client.query('select jobs.snooze($1, $2::bigint, clock_timestamp())', [job.id, job.claim]);
          outcome = 'handed_back';
        } else {
          outcome = reason === 'deadline' ? 'timed_out' : reason;
        }
        return null;
      }
      if (failed && thrown instanceof Parked) {
        if (opened.inTx) await client.query('rollback');
        if (thrown.snoozeUntil) {
          await client.query('select jobs.snooze($1, $2::bigint, $3)', [job.id, job.claim, thrown.snoozeUntil]);
        }
        outcome = 'parked';
        return null;
      }
      if (failed) {
        if (opened.inTx) await client.query('rollback');
        error = describe(thrown);
        const retryAt = thrown instanceof RetryAfterError ? thrown.retryAt : null;
        const retryable = !(thrown instanceof NonRetryableError);
        const { rows } = await client.query<{ outcome: Outcome | null }>(
          'select jobs.fail($1, $2::bigint, $3, $4, $5) as outcome', [job.id, job.claim, error, retryAt, retryable]);
        outcome = rows[0]?.outcome ?? 'lost';
        return null;
      }
      const json = JSON.stringify(result ?? null);
      if (!def.transactional) {
        const { rows } = await client.query<{ landed: boolean }>(
          'select jobs.complete($1, $2::bigint, $3::jsonb) as landed', [job.id, job.claim, json]);
        outcome = rows[0]?.landed ? 'completed' : 'lost';
        return null;
      }
      if (this.stopping) {
        const { rows } = await client.query<{ landed: boolean }>(
          'select jobs.complete($1, $2::bigint, $3::jsonb) as landed', [job.id, job.claim, json]);
        const landed = rows[0]?.landed === true;
        if (opened.inTx) await client.query(landed ? 'commit' : 'rollback');
        outcome = landed ? 'completed' : 'lost';
        return null;
      }
      try {
        const { rows } = await client.query<ClaimedRow>(
          `select ${CLAIMED_COLUMNS} from jobs.complete_and_claim(array[$1]::uuid[], array[$2]::bigint[], $3, $4, 1, `
          + '$5::interval, array[$6]::jsonb[])',
          [job.id, job.claim, this.workerId, queues, `${this.leaseMs} milliseconds`, json]);
        if (opened.inTx) await client.query('commit');
        outcome = 'completed';
        return rows[0] ?? null;
      } catch (err) {
        if ((err as { code?: string }).code !== codes.leaseLost) throw err;
        if (opened.inTx) await client.query('rollback'); // the claim was lost: the handler's writes are undone
        return null;
      }
    } catch (err) {
      if (err instanceof Abandoned || isConnectionError(err)) throw err;
      throw fromDriver(err);
    } finally {
      clearTimeout(held.timer);
      if (this.held.get(job.id) === held) this.held.delete(job.id);
      this.options.metrics?.running(this.held.size);
      this.report(job, outcome, Date.now() - started, error);
      if (span) endAttemptSpan(span, outcome, error);
    }
  }

  /** The handler's result; when the signal aborts, the handler gets ABANDON_MS more to
   * return, after which its connection is closed (Abandoned). */
  private untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (): void => {
        timer = setTimeout(() => reject(new Abandoned('the handler did not stop')), ABANDON_MS);
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
      work.then(resolve, reject).finally(() => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      });
    });
  }

  private abort(held: Held, reason: Reason): void {
    if (!held.controller.signal.aborted) held.controller.abort(reason);
  }

  private onCancel(payload: string): void {
    const ids = payload === '*' ? [...this.held.keys()] : this.held.has(payload) ? [payload] : [];
    if (ids.length > 0) this.beat(ids, 'cancelled');
  }

  /** Heartbeats these held jobs; a job whose claim is gone has its signal aborted. */
  private beat(ids: string[], reason: Reason = 'lost'): void {
    const jobs = ids.map((id) => this.held.get(id)).filter((h): h is Held => h !== undefined);
    if (jobs.length === 0) return;
    this.control.query<{ id: string; until: Date | null }>(
      'select h.id::text, jobs.heartbeat(h.id, h.claim) as until '
      + 'from unnest($1::uuid[], $2::bigint[]) as h(id, claim)',
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

function describe(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

function firstLine(err: unknown): string {
  return describe(err).split('\n')[0] ?? '';
}

export function createWorker(options: WorkerOptions): Worker {
  return new Worker(options);
}
