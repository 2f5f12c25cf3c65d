// The conformance worker of the Node.js library (clients/conformance/README.md): the fixed set
// of handlers every pg_jobs library registers, run until SIGTERM.
//
//   node conformance/worker.mjs --dsn DSN [--queue Q] [--concurrency N] [--lease S]
//                               [--shutdown-grace S] [--metrics-port P] [--poll S]
//                               [--no-prepared-statements] [--hooks] [--prefetch N]
//                               [--shard DSN ...]
import http from 'node:http';
import pg from 'pg';
import { createShardedWorker, createWorker, defineJob, enqueue, prometheusMetrics } from '../dist/esm/index.js';

const args = {
  dsn: process.env.PG_JOBS_DSN, queues: [], concurrency: 8, lease: 30, grace: 10, metricsPort: null, poll: 1, prepared: true,
  hooks: false, prefetch: 0, shards: [],
};
for (let i = 2; i < process.argv.length; i++) {
  const flag = process.argv[i];
  if (flag === '--no-prepared-statements') { args.prepared = false; continue; }
  if (flag === '--hooks') { args.hooks = true; continue; }
  const value = process.argv[++i];
  if (flag === '--dsn') args.dsn = value;
  else if (flag === '--queue') args.queues.push(value);
  else if (flag === '--concurrency') args.concurrency = Number(value);
  else if (flag === '--lease') args.lease = Number(value);
  else if (flag === '--shutdown-grace') args.grace = Number(value);
  else if (flag === '--metrics-port') args.metricsPort = Number(value);
  else if (flag === '--poll') args.poll = Number(value);
  else if (flag === '--prefetch') args.prefetch = Number(value);
  else if (flag === '--shard') args.shards.push(value);
  else throw new Error(`unknown argument ${flag}`);
}

// Writes that must outlive a rolled-back attempt (a step's run) go through this pool.
const side = new pg.Pool({ connectionString: args.dsn, max: 2 });

// Sleeps, unless the job's signal aborts first: then records why (conformance_aborts, through
// the side pool, so a rolled-back attempt keeps it) and stops.
const pause = (ms, ctx) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms);
  ctx.signal.addEventListener('abort', () => {
    clearTimeout(timer);
    side.query('insert into conformance_aborts (job_id, reason) values ($1, $2)', [ctx.job.id, String(ctx.signal.reason)])
      .finally(() => reject(new Error(`stopped: ${ctx.signal.reason}`)));
  }, { once: true });
});

const jobs = [
  defineJob({ name: 'noop', handler: () => ({ ok: true }) }),
  defineJob({
    name: 'sleep',
    async handler(payload, ctx) {
      await pause(payload.ms ?? 1000, ctx);
      return { slept: payload.ms ?? 1000 };
    },
  }),
  defineJob({
    name: 'fail',
    handler(payload) {
      throw new Error(payload.message ?? 'failed on purpose');
    },
  }),
  defineJob({
    name: 'write',
    async handler(payload, ctx) {
      await ctx.tx.query('insert into conformance_rows (job_id, n) values ($1, $2)', [ctx.job.id, payload.n ?? 0]);
      if (payload.ms) await pause(payload.ms, ctx);
      return { wrote: payload.n ?? 0 };
    },
  }),
  defineJob({
    name: 'two_steps',
    async handler(payload, ctx) {
      const one = await ctx.step('one', async () => {
        await side.query('insert into conformance_step_runs (job_id, step) values ($1, $2)', [ctx.job.id, 'one']);
        return { first: ctx.job.attempt };
      });
      if (payload.fail_after_first && ctx.job.attempt === 1) throw new Error('failing after the first step');
      const two = await ctx.step('two', async () => {
        await side.query('insert into conformance_step_runs (job_id, step) values ($1, $2)', [ctx.job.id, 'two']);
        if (payload.fail_in_second && ctx.job.attempt === 1) throw new Error('the step failed on purpose');
        return { second: ctx.job.attempt };
      });
      return { one, two };
    },
  }),
  defineJob({
    name: 'slow_step',
    async handler(payload, ctx) {
      // The step's function stops when its signal aborts (at its timeout), recording why.
      return ctx.step('slow', (signal) => new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, payload.ms ?? 60_000);
        signal.addEventListener('abort', () => {
          clearTimeout(timer);
          side.query('insert into conformance_aborts (job_id, reason) values ($1, $2)', [ctx.job.id, String(signal.reason)])
            .finally(() => reject(new Error(`stopped: ${signal.reason}`)));
        }, { once: true });
      }), { timeoutMs: payload.timeout_ms });
    },
  }),
  defineJob({
    name: 'backfill',
    async handler(payload, ctx) {
      // Rows 1..total in passes of `batch`; attempt 1 fails the pass that starts at `fail_at`.
      return ctx.backfill(async (cursor) => {
        const start = cursor ?? 0;
        const end = Math.min(start + payload.batch, payload.total);
        await side.query('insert into conformance_step_runs (job_id, step) values ($1, $2)', [ctx.job.id, `from ${start}`]);
        if (start === payload.fail_at && ctx.job.attempt === 1) throw new Error('the pass failed on purpose');
        await side.query('insert into conformance_rows (job_id, n) select $1, g from generate_series($2::int, $3::int) as g',
          [ctx.job.id, start + 1, end]);
        return { rows: end - start, cursor: end };
      });
    },
  }),
  defineJob({
    name: 'enqueue_one',
    async handler(payload, ctx) {
      const made = await enqueue(ctx.tx, 'noop', {}, payload.by ? { enqueuedBy: payload.by } : {});
      return { id: made.id };
    },
  }),
  defineJob({
    name: 'wait_event',
    async handler(payload, ctx) {
      const got = await ctx.waitForEvent(payload.event, { key: payload.key });
      return { status: got.status, payload: got.payload };
    },
  }),
  defineJob({
    name: 'fan_out',
    async handler(payload, ctx) {
      for (let i = 0; i < (payload.children ?? 10); i++) {
        await ctx.spawn(`child-${i}`, 'child', { i });
        if (payload.pause_ms) await pause(payload.pause_ms, ctx);
      }
      const children = await ctx.awaitChildren();
      return { sum: children.reduce((total, c) => total + (c.result?.value ?? 0), 0), children: children.length };
    },
  }),
  defineJob({ name: 'child', handler: (payload, ctx) => ({ value: payload.i, parent: ctx.job.parentId }) }),
  defineJob({
    name: 'nap',
    async handler(payload, ctx) {
      // A durable sleep: a later attempt asks for ten minutes, and must not get them.
      await ctx.sleep('nap', ctx.job.attempt === 1 ? payload.ms ?? 1000 : 600_000);
      await side.query('insert into conformance_step_runs (job_id, step) values ($1, $2)', [ctx.job.id, 'woke']);
      if (payload.fail_once && ctx.job.attempt === 1) throw new Error('failing after the nap');
      return { attempt: ctx.job.attempt };
    },
  }),
  defineJob({ name: 'job_info', handler: (_payload, ctx) => ({ tags: ctx.job.tags, meta: ctx.job.meta }) }),
  defineJob({ name: 'big_result', handler: (payload) => ({ text: 'x'.repeat(payload.bytes ?? 2_000_000) }) }),
  // A BigInt: JSON.stringify refuses it.
  defineJob({ name: 'unencodable_result', handler: () => ({ n: 1n }) }),
  defineJob({ name: 'refused_result', handler: () => ({ text: 'a\u0000b' }) }),
  // Thrown: a value with no toString, which String() cannot make text of.
  defineJob({ name: 'odd_failure', handler: () => { throw Object.create(null); } }),
  defineJob({
    name: 'throw_named',
    handler(payload) {
      // An error of a class named `name`, extending one named `base` (or Error), with `code`.
      const Base = payload.base ? { [payload.base]: class extends Error {} }[payload.base] : Error;
      const Named = { [payload.name]: class extends Base {} }[payload.name];
      const err = new Named('thrown on purpose');
      err.name = payload.name;
      if (payload.code) err.code = payload.code;
      throw err;
    },
  }),
];

// --hooks: each settle and each exhausted job recorded in conformance_hooks; a job whose
// payload has hook_throws makes onSettled throw after recording it.
const hooks = !args.hooks ? {} : {
  async onSettled(job, outcome) {
    await side.query("insert into conformance_hooks (job_id, hook, outcome) values ($1, 'settled', $2)", [job.id, outcome]);
    if (job.payload?.hook_throws) throw new Error('the hook failed on purpose');
  },
  async onExhausted(dead) {
    for (const job of dead) {
      await side.query("insert into conformance_hooks (job_id, hook) values ($1, 'exhausted')", [job.id]);
    }
  },
};

// Prometheus metrics on 127.0.0.1:--metrics-port/metrics, when asked for.
let metrics;
let server;
if (args.metricsPort !== null) {
  const prom = await import('prom-client');
  const registry = new prom.Registry();
  metrics = prometheusMetrics(prom, { registry });
  server = http.createServer((req, res) => {
    registry.metrics().then((text) => res.end(text));
  }).listen(args.metricsPort, '127.0.0.1');
}

const options = {
  metrics,
  queues: args.queues,
  concurrency: args.concurrency,
  prefetch: args.prefetch,
  jobs,
  leaseMs: args.lease * 1000,
  shutdownGraceMs: args.grace * 1000,
  pollMs: args.poll * 1000,
  preparedStatements: args.prepared,
  ...hooks,
};
// With --shard: the library's sharded worker over those shards (--dsn then serves the side pool).
const worker = args.shards.length > 0
  ? createShardedWorker({ ...options, shards: args.shards })
  : createWorker({ ...options, connectionString: args.dsn });
const stop = () => worker.stop().then(() => side.end()).then(() => server?.close()).then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
await worker.start();
