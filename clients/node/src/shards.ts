// Shards (docs/SCALING.md): pg_jobs servers with pg_jobs.shard set, each holding the jobs of some
// tenants. A producer sends each enqueue to the shard shardFor() names, as the router does;
// shardOf() reads a job's shard from its id; a ShardedWorker works every shard, each with its
// own pool, claims (waiting ones) and heartbeats, so a shard that is down stops only its own
// share of the work. A handler's ctx.tx is a transaction on its job's shard: writes there commit
// with the job (exactly once), writes to another database do not.
import { createHash } from 'node:crypto';
import os from 'node:os';
import { Worker, type WorkerOptions } from './worker.js';

/** The shard a job's id names: its last byte. */
export function shardOf(id: string): number {
  const last = Number.parseInt(id.slice(-2), 16);
  if (!/^[0-9a-f-]{36}$/i.test(id) || Number.isNaN(last)) throw new TypeError(`shardOf: not a UUID: ${id}`);
  return last;
}

/** A key's shard among `shards`: the first 32 bits of its MD5 modulo their number (the
 * router's jobs_router.hash_shard). */
export function hashShard(key: string, shards: number): number {
  return Number.parseInt(createHash('md5').update(key, 'utf8').digest('hex').slice(0, 8), 16) % shards;
}

/** The shard an enqueue goes to, as the router sends it: the one its id, runId or parentId
 * names, else its tenant's, else its job name's. A tenant's (or name's) shard is its
 * placement, where the router has one (`placements`: `select key, shard from
 * jobs_router.placements` on the router, once a shard was added or a tenant moved), else its
 * hash. */
export function shardFor(shards: number, name: string,
                         options: { tenantId?: string | null; id?: string | null; runId?: string | null;
                                    parentId?: string | null; placements?: ReadonlyMap<string, number> } = {}): number {
  if (!Number.isInteger(shards) || shards < 1) throw new TypeError('shardFor: shards must be a whole number, at least 1');
  const given = options.id ?? options.runId ?? options.parentId;
  if (given != null) return shardOf(given);
  const key = options.tenantId ?? name;
  return options.placements?.get(key) ?? hashShard(key, shards);
}

export interface ShardedWorkerOptions extends Omit<WorkerOptions, 'connectionString' | 'pool'> {
  /** Each shard's connection string, in shard order (the i-th is the server with
   * pg_jobs.shard = i). */
  shards: readonly string[];
}

/** A Worker per shard, each with the options given (its concurrency and prefetch are per shard)
 * and a worker id ending /shard<i>; one metrics object counts them all. */
export class ShardedWorker {
  readonly workers: Worker[];

  constructor(options: ShardedWorkerOptions) {
    if (!Array.isArray(options.shards) || options.shards.length === 0) throw new TypeError('createShardedWorker: pass shards, each shard\'s connection string');
    const base = options.workerId ?? `${os.hostname()}:${process.pid}`;
    this.workers = options.shards.map((connectionString: string, i: number) =>
      new Worker({ ...options, connectionString, workerId: `${base}/shard${i}` }));
  }

  /** The jobs running now, on every shard. */
  get running(): number {
    return this.workers.reduce((sum, w) => sum + w.running, 0);
  }

  /** Starts every shard's worker at once; answers once each was reached (a shard reached
   * starts working without waiting for the others). */
  async start(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.start()));
  }

  /** Stops every shard's worker, as Worker.stop(). */
  async stop(options: { graceMs?: number } = {}): Promise<void> {
    await Promise.all(this.workers.map((w) => w.stop(options)));
  }

  /** start(), then stop() at SIGTERM or SIGINT (also while a shard is still being reached). */
  async run(): Promise<void> {
    let signalled: () => void = () => {};
    const signal = new Promise<void>((resolve) => { signalled = resolve; });
    process.once('SIGTERM', signalled);
    process.once('SIGINT', signalled);
    const starting = this.start();
    try {
      await Promise.race([signal, starting.then(() => signal)]);
    } finally {
      process.off('SIGTERM', signalled);
      process.off('SIGINT', signalled);
      await this.stop();
      await starting;
    }
  }
}

export function createShardedWorker(options: ShardedWorkerOptions): ShardedWorker {
  return new ShardedWorker(options);
}
