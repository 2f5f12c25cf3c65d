// A pg_jobs worker in Node.js: the pg-jobs package (clients/node) with three demo handlers.
//
//   node worker.js --dsn postgres://user@host/app [--queue default] [--batch 10]
//                  [--lease 30] [--poll 5] [--until-empty] [--quiet]
//
// The package does the rest: a slot claims the moment it is free, waiting in the server;
// heartbeats every lease/3 on a connection of its own; a lost claim, a cancel or the deadline
// aborts ctx.signal; each handler's writes through ctx.tx commit with its completion; unknown
// names are snoozed; SIGTERM finishes what is held and exits 0.
'use strict';
const { parseArgs } = require('node:util');
const { createWorker, defineJob, silentLogger } = require('pg-jobs');
const { drain } = require('pg-jobs/testing');

const record = (ctx) => ctx.tx.query(
  'insert into example_log (job_id, worker, payload) values ($1, $2, $3)', [ctx.job.id, 'node', ctx.job.payload]);

const jobs = [
  defineJob({ name: 'record', handler: async (payload, ctx) => { await record(ctx); return { recorded: true }; } }),
  defineJob({
    name: 'sleep',
    async handler(payload, ctx) {
      const seconds = payload.seconds ?? 1;
      await new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, seconds * 1000);
        ctx.signal.addEventListener('abort', () => { clearTimeout(timer); reject(new Error(`stopped: ${ctx.signal.reason}`)); });
      });
      await record(ctx);
      return { slept: seconds };
    },
  }),
  defineJob({ name: 'fail', handler: (payload) => { throw new Error(payload.message ?? 'this job always fails'); } }),
];

const { values: args } = parseArgs({
  options: {
    dsn: { type: 'string', default: process.env.PG_JOBS_DSN }, queue: { type: 'string', multiple: true },
    batch: { type: 'string', default: '10' }, lease: { type: 'string', default: '30' },
    poll: { type: 'string', default: '5' }, 'until-empty': { type: 'boolean' }, quiet: { type: 'boolean' },
  },
});
const options = {
  connectionString: args.dsn, queues: args.queue ?? ['default'], concurrency: Number(args.batch), jobs,
  leaseMs: Number(args.lease) * 1000, pollMs: Number(args.poll) * 1000, shutdownGraceMs: 60_000,
  logger: args.quiet ? silentLogger : undefined,
};
if (args['until-empty']) drain({ ...options, delayed: true, timeoutMs: 300_000 }).then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
else createWorker(options).run().then(() => process.exit(0)); // a handler's leftover timer keeps no stopped worker alive
