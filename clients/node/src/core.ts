// What a worker's dispatchers and attempts share: the pool and the control connection, the
// attempts held, the stop in progress, and how an ended attempt is reported. The worker
// (worker.ts) makes one and starts a dispatcher (dispatcher.ts) per set of queues; each
// claimed job runs as an attempt (attempt.ts).

import { createHash } from 'node:crypto';
import pg from 'pg';
import type { ClaimedRow, Control, Job } from './context.js';
import { describe } from './errors.js';
import type { Held } from './held.js';
import { Hooks, type OnExhausted, type OnSettled } from './hooks.js';
import type { JobDefinition } from './jobs.js';
import { jsonLogger, type Logger, type Metrics, type Outcome, silentLogger } from './log.js';
import type { OwnConnection } from './connection.js';
import { endAttemptSpan, type TracerLike } from './tracing.js';

/** The slots working one set of queues: how many are free, and the jobs that ended without
 * opening their transaction, to be completed with the group's next claim. */
export interface Group {
  queues: string[];
  /** Its slots, and how many of them are free. */
  size: number;
  free: number;
  pending: Held[];
  /** True while the dispatcher's claim sleeps in the server: an ending job completes itself. */
  waiting: boolean;
  wake: (() => void) | undefined;
  /** Connections of the pool kept between the group's jobs and claims (a checkout per job cost
   * more than the job); given back to the pool before a waiting claim, so an idle worker holds
   * one. At most `size` are in use at once: the dispatcher runs only while a slot is free. */
  clients: pg.PoolClient[];
  /** How many claimed jobs the group may hold beyond its slots (the prefetch option), those
   * it holds, in claim order, and the ones it took from them since its last settle, whose
   * starts that settle marks (jobs.mark_started). */
  prefetch: number;
  queued: ClaimedRow[];
  starts: ClaimedRow[];
  /** Called when a slot frees: the dispatcher starts the next held job. */
  refill: (() => void) | undefined;
}

export function makeGroup(queues: string[], size: number, prefetch = 0): Group {
  return {
    queues, size, free: size, pending: [], waiting: false, wake: undefined, clients: [],
    prefetch, queued: [], starts: [], refill: undefined,
  };
}

/** A statement named for the server to keep it prepared under; the name holds its text's hash,
 * so that a worker of another release never runs this one's. */
export interface Statement { name: string; text: string }

export function statement(purpose: string, text: string): Statement {
  return { name: `pg_jobs_${purpose}_${createHash('sha1').update(text).digest('hex').slice(0, 12)}`, text };
}

/** A Postgres array literal of values that need no quoting (uuids, integers as text), for a
 * parameter such as `$1::uuid[]`. */
export function arrayLiteral(values: readonly string[]): string {
  return `{${values.join(',')}}`;
}

/** What the core takes from the worker's options. */
export interface CoreOptions {
  jobs: readonly JobDefinition[];
  workerId: string;
  leaseMs: number;
  pollMs: number;
  unknownSnoozeMs: number;
  preparedStatements: boolean;
  logger?: Logger | undefined;
  metrics?: Metrics | undefined;
  tracer?: TracerLike | undefined;
  onSettled?: OnSettled | undefined;
  onExhausted?: OnExhausted | undefined;
}

export class WorkerCore {
  readonly jobs = new Map<string, JobDefinition>();
  /** The attempts running now, by job id. */
  readonly held = new Map<string, Held>();
  /** The backends of the claims sleeping in the server, cancelled at a stop. */
  readonly claiming = new Set<number>();
  readonly logger: Logger;
  readonly metrics: Metrics | undefined;
  readonly tracer: TracerLike | undefined;
  /** The application's settle hooks; undefined without any. */
  readonly hooks: Hooks | undefined;
  /** Whether the claims answer the jobs they buried too (for onExhausted). */
  readonly reportBuried: boolean;
  readonly workerId: string;
  readonly leaseMs: number;
  readonly pollMs: number;
  readonly unknownSnoozeMs: number;
  stopping = false;
  /** When a stop gives up settling what its handlers completed (the end of its grace). */
  giveUpAt = Infinity;
  /** Whether the claims and settles go as prepared statements (turned off when the server
   * does not keep them). */
  prepared: boolean;
  /** pg_jobs.max_payload_size as the server reads it (jobs.max_payload_size()); null when the
   * server cannot say (the engine still refuses a result over it). */
  maxResultBytes: number | null = null;
  /** A held job's durable calls (ctx) go through the control connection. */
  readonly controlQuery: Control = (text, values) => this.control.query(text, values);
  private readonly guarded = new WeakSet<pg.PoolClient>();
  private readonly wake: (() => void)[] = [];

  constructor(readonly pool: pg.Pool, readonly control: OwnConnection, options: CoreOptions) {
    for (const job of options.jobs) this.jobs.set(job.name, job);
    this.logger = options.logger ?? jsonLogger;
    this.metrics = options.metrics;
    this.tracer = options.tracer;
    this.hooks = options.onSettled || options.onExhausted
      ? new Hooks(options.onSettled, options.onExhausted, this.logger) : undefined;
    this.reportBuried = options.onExhausted !== undefined;
    this.workerId = options.workerId;
    this.leaseMs = options.leaseMs;
    this.pollMs = options.pollMs;
    this.unknownSnoozeMs = options.unknownSnoozeMs;
    this.prepared = options.preparedStatements;
  }

  /** Read through a method: the flag changes while a loop awaits. */
  isStopping(): boolean {
    return this.stopping;
  }

  /** A statement as this worker sends it: by name while the server keeps prepared statements. */
  statement(s: Statement): { name?: string; text: string } {
    return this.prepared ? s : { text: s.text };
  }

  /** Waits `ms`, or less when the worker stops. */
  pause(ms: number): Promise<void> {
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

  /** Ends every pause: the worker stops. */
  wakeAll(): void {
    for (const wake of this.wake.splice(0)) wake();
  }

  /** A connection of the pool, with a listener for the errors of a broken one (kept, so that
   * one broken while the group keeps it does not end the process). */
  async connect(): Promise<pg.PoolClient> {
    const client = await this.pool.connect();
    if (!this.guarded.has(client)) {
      client.on('error', () => {});
      this.guarded.add(client);
    }
    return client;
  }

  /** Keeps a connection for the group's next job or claim; a broken one is closed, and one
   * goes back to the pool when the worker stops or another user of the pool waits for one. */
  giveBack(group: Group, client: pg.PoolClient, broken: boolean): void {
    if (broken) client.release(true);
    else if (this.stopping || this.pool.waitingCount > 0) client.release();
    else group.clients.push(client);
  }

  /** An attempt ended (or was completed by its dispatcher): no longer held, and reported. */
  ended(held: Held, outcome: Outcome, error?: string): void {
    held.timer?.clear();
    if (this.held.get(held.job.id) === held) this.held.delete(held.job.id);
    this.metrics?.running(this.held.size);
    this.report(held.job, outcome, Date.now() - held.started, error);
    if (held.span) endAttemptSpan(held.span, outcome, error);
    this.hooks?.ended(held.job, outcome);
  }

  report(job: Job, outcome: Outcome, durationMs: number, error?: string): void {
    this.metrics?.attemptEnded(job.queue, job.name, outcome, durationMs);
    if (this.logger === silentLogger) return;
    const fields = { id: job.id, name: job.name, queue: job.queue, attempt: job.attempt, durationMs, outcome, error };
    if (outcome === 'completed' || outcome === 'parked' || outcome === 'handed_back') this.logger.info(`job ${outcome}`, fields);
    else this.logger.warn(`job ${outcome}`, fields);
  }
}

export function firstLine(err: unknown): string {
  return describe(err).split('\n')[0] ?? '';
}
