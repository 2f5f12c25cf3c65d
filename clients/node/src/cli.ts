#!/usr/bin/env node
// pg-jobs worker: runs the jobs a module exports (JavaScript, or TypeScript through tsx) until
// SIGTERM or SIGINT, then exits 0. pg-jobs enqueue: enqueues one job, for scripts and cron.

import http from 'node:http';
import pg from 'pg';
import { enqueue } from './enqueue.js';
import { isJobDefinition, type JobDefinition } from './jobs.js';
import { loadModule } from './load.js';
import type { Metrics } from './log.js';
import { type PromClientLike, prometheusMetrics } from './prometheus.js';
import { createWorker } from './worker.js';

const USAGE = `usage: pg-jobs worker [options] MODULE
       pg-jobs enqueue [options] NAME [PAYLOAD]

Runs the jobs MODULE (JavaScript, or TypeScript where the application has tsx installed)
exports (its named exports and the array it exports by default that are
defineJob results) until SIGTERM or SIGINT; then stops claiming, lets running jobs finish for
the shutdown grace, hands the rest back (no attempt used), and exits 0.

options:
  --dsn DSN                 the database (default: $PG_JOBS_DSN, else $DATABASE_URL)
  --queue Q                 a queue to work; repeat for more (default: default)
  --concurrency N           jobs run at once (default: 10)
  --prefetch N              jobs claimed ahead and held beyond the running ones (default: 0)
  --lease SECONDS           the lease of a claim, renewed every third of it (default: 30)
  --shutdown-grace SECONDS  how long running jobs may finish at a stop (default: 10)
  --poll SECONDS            how long one claim waits in the server (default: 5)
  --worker-id ID            the name in jobs.jobs.claimed_by (default: host:pid)
  --no-prepared-statements  claim and settle without prepared statements (behind a
                            transaction-pooling PgBouncer before 1.21)
  --trust-owner             work as a superuser even where a role that is not one owns
                            schema jobs or its functions
  --metrics-port P          serve Prometheus metrics on 127.0.0.1:P/metrics (needs the
                            application's prom-client)
  --help                    this text

pg-jobs enqueue enqueues one job named NAME with PAYLOAD (JSON, default {}) and prints its
id; options: --dsn DSN, --queue Q, --priority N, --delay SECONDS, --idempotency-key KEY,
--max-attempts N.
`;

interface Args {
  dsn: string | undefined;
  queues: string[];
  concurrency: number;
  prefetch: number;
  lease: number;
  grace: number;
  poll: number;
  workerId: string | undefined;
  prepared: boolean;
  trustOwner: boolean;
  module: string | undefined;
  metricsPort: number | undefined;
}

interface EnqueueArgs {
  dsn: string | undefined;
  name: string;
  payload: unknown;
  queue?: string;
  priority?: number;
  delayMs?: number;
  idempotencyKey?: string;
  maxAttempts?: number;
}

function fail(message: string): never {
  process.stderr.write(`pg-jobs: ${message}\n\n${USAGE}`);
  process.exit(2);
}

function number(flag: string, value: string | undefined): number {
  const n = Number(value);
  if (value === undefined || !Number.isFinite(n) || n <= 0) fail(`${flag} needs a positive number, got ${value ?? 'nothing'}`);
  return n;
}

export function parse(argv: string[]): Args {
  const args: Args = {
    dsn: process.env.PG_JOBS_DSN ?? process.env.DATABASE_URL, queues: [], concurrency: 10, prefetch: 0, lease: 30,
    grace: 10, poll: 5, workerId: undefined, prepared: true, trustOwner: false, module: undefined,
    metricsPort: undefined,
  };
  const rest = [...argv];
  if (rest[0] === '--help' || rest[0] === '-h') {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  if (rest.shift() !== 'worker') fail('the commands are: worker, enqueue');
  while (rest.length > 0) {
    const flag = rest.shift() as string;
    switch (flag) {
      case '--help': case '-h': process.stdout.write(USAGE); process.exit(0); break;
      case '--dsn': args.dsn = rest.shift(); break;
      case '--queue': args.queues.push(rest.shift() ?? fail('--queue needs a name')); break;
      case '--concurrency': args.concurrency = number(flag, rest.shift()); break;
      case '--prefetch': args.prefetch = number(flag, rest.shift()); break;
      case '--lease': args.lease = number(flag, rest.shift()); break;
      case '--shutdown-grace': args.grace = number(flag, rest.shift()); break;
      case '--poll': args.poll = number(flag, rest.shift()); break;
      case '--worker-id': args.workerId = rest.shift(); break;
      case '--no-prepared-statements': args.prepared = false; break;
      case '--trust-owner': args.trustOwner = true; break;
      case '--metrics-port': args.metricsPort = whole(flag, rest.shift(), 1); break;
      default:
        if (flag.startsWith('-')) fail(`unknown option ${flag}`);
        if (args.module !== undefined) fail(`one module only, got ${args.module} and ${flag}`);
        args.module = flag;
    }
  }
  if (!args.module) fail('name the module whose jobs to run');
  if (!args.dsn) fail('pass --dsn, or set PG_JOBS_DSN');
  return args;
}

function whole(flag: string, value: string | undefined, least: number): number {
  const n = Number(value);
  if (value === undefined || !Number.isInteger(n) || n < least) fail(`${flag} needs a whole number of at least ${least}, got ${value ?? 'nothing'}`);
  return n;
}

export function parseEnqueue(argv: string[]): EnqueueArgs {
  const rest = argv.slice(1);
  const positional: string[] = [];
  const args: Omit<EnqueueArgs, 'name' | 'payload'> = { dsn: process.env.PG_JOBS_DSN ?? process.env.DATABASE_URL };
  while (rest.length > 0) {
    const flag = rest.shift() as string;
    switch (flag) {
      case '--help': case '-h': process.stdout.write(USAGE); process.exit(0); break;
      case '--dsn': args.dsn = rest.shift(); break;
      case '--queue': args.queue = rest.shift() ?? fail('--queue needs a name'); break;
      case '--priority': args.priority = Number(rest.shift()); break;
      case '--delay': args.delayMs = number(flag, rest.shift()) * 1000; break;
      case '--idempotency-key': args.idempotencyKey = rest.shift() ?? fail('--idempotency-key needs a key'); break;
      case '--max-attempts': args.maxAttempts = whole(flag, rest.shift(), 1); break;
      default:
        if (flag.startsWith('-')) fail(`unknown option ${flag}`);
        positional.push(flag);
    }
  }
  if (args.priority !== undefined && !Number.isInteger(args.priority)) fail('--priority needs a whole number');
  const [name, text = '{}', extra] = positional;
  if (!name) fail('name the job to enqueue');
  if (extra !== undefined) fail(`one payload only, got ${text} and ${extra}`);
  if (!args.dsn) fail('pass --dsn, or set PG_JOBS_DSN');
  let payload: unknown;
  try {
    payload = JSON.parse(text);
  } catch (err) {
    fail(`PAYLOAD is not JSON: ${(err as Error).message}`);
  }
  return { ...args, name, payload };
}

async function enqueueOne(argv: string[]): Promise<void> {
  const { dsn, name, payload, ...options } = parseEnqueue(argv);
  const client = new pg.Client({ connectionString: dsn, application_name: 'pg-jobs enqueue' });
  await client.connect();
  try {
    const made = await enqueue(client, name, payload, options);
    process.stdout.write(`${made.id}${made.deduped ? ' (an existing job: its key was taken)' : ''}\n`);
  } finally {
    await client.end();
  }
}

/** --metrics-port: prom-client's metrics on 127.0.0.1, with the application's prom-client. */
async function serveMetrics(port: number): Promise<{ metrics: Metrics; server: http.Server }> {
  let prom: PromClientLike & { Registry: new () => { metrics(): Promise<string>; contentType: string } };
  try {
    prom = await import('prom-client') as unknown as typeof prom;
  } catch {
    fail('--metrics-port needs prom-client: npm install prom-client');
  }
  const registry = new prom.Registry();
  const metrics = prometheusMetrics(prom, { registry });
  const server = http.createServer((_req, res) => {
    registry.metrics().then((text) => {
      res.setHeader('Content-Type', registry.contentType);
      res.end(text);
    }, () => { res.statusCode = 500; res.end(); });
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve));
  return { metrics, server };
}

/** The job definitions among a module's exports. */
export function jobsOf(exports: Record<string, unknown>): JobDefinition[] {
  const found = new Map<string, JobDefinition>();
  const visit = (value: unknown): void => {
    if (isJobDefinition(value)) found.set(value.name, value);
    else if (Array.isArray(value)) value.forEach(visit);
  };
  for (const [key, value] of Object.entries(exports)) {
    if (key === 'default' && value !== null && typeof value === 'object' && !Array.isArray(value)
      && !isJobDefinition(value)) {
      Object.values(value).forEach(visit); // a CommonJS module's exports
    } else visit(value);
  }
  return [...found.values()];
}

async function main(): Promise<void> {
  if (process.argv[2] === 'enqueue') return enqueueOne(process.argv.slice(2));
  const args = parse(process.argv.slice(2));
  const exports = await loadModule(args.module as string);
  const jobs = jobsOf(exports);
  if (jobs.length === 0) fail(`${args.module} exports no job (defineJob results, or an array of them by default)`);
  const served = args.metricsPort === undefined ? undefined : await serveMetrics(args.metricsPort);
  await createWorker({
    metrics: served?.metrics,
    connectionString: args.dsn, queues: args.queues, concurrency: args.concurrency, prefetch: args.prefetch, jobs,
    leaseMs: args.lease * 1000, shutdownGraceMs: args.grace * 1000, pollMs: args.poll * 1000,
    workerId: args.workerId, preparedStatements: args.prepared, trustOwner: args.trustOwner,
  }).run();
  // Whatever a handler left behind (a timer, a socket) does not keep the command alive.
  process.exit(0);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`${message.startsWith('pg-jobs: ') ? '' : 'pg-jobs: '}${message}\n`);
    process.exit(1);
  });
}
