// The Node peer of bench/run.py: drains N jobs end to end from one Node process, with
// graphile-worker 0.17.3, with pg_jobs over node-postgres, or with pg_jobs's library
// (clients/node, built: its worker, `workers` slots), and prints one JSON line
// {system, workers, batch, jobs, seconds, jobs_per_s}. The jobs are enqueued first and the
// clock runs from the first fetch to the last completion; the handler does nothing.
//
//   node drain.js --dsn postgres://... --system graphile|pg_jobs|library --jobs 20000 --workers 4 --batch 10
//
// graphile-worker: `concurrency` = workers; with batch > 1 its local queue fetches `batch`
// jobs a time and completions are batched (completeJobBatchDelay 0), its nearest equivalent
// of a batch claim. pg_jobs: `workers` loops, each jobs.claim(batch), then
// jobs.complete_and_claim(batch) until the queue is empty.
'use strict';
const { Pool } = require('pg');

function parseArgs(argv) {
  const args = { system: 'pg_jobs', jobs: 20000, workers: 4, batch: 10 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    args[key] = ['jobs', 'workers', 'batch'].includes(key) ? Number(argv[i + 1]) : argv[i + 1];
  }
  return args;
}

async function drainPgJobs(args) {
  const pool = new Pool({ connectionString: args.dsn, max: args.workers + 1 });
  await pool.query("delete from jobs.jobs where queue = 'node_bench'");
  for (let done = 0; done < args.jobs; done += 10000) {
    await pool.query(`select count(*) from jobs.enqueue_batch(
      (select jsonb_agg(jsonb_build_object('name', 'bench', 'queue', 'node_bench', 'payload', jsonb_build_object('n', g)))
       from generate_series(1, $1::int) g))`, [Math.min(10000, args.jobs - done)]);
  }
  let completed = 0;
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: args.workers }, async (_, n) => {
    const client = await pool.connect();
    try {
      // Each batch completed and the next claimed in one call and one commit, as the
      // example workers run (all or nothing: a lost claim would raise lease_lost).
      let { rows } = await client.query("select id, claim, payload from jobs.claim($1, array['node_bench'], $2)",
        [`node-${n}`, args.batch]);
      while (rows.length > 0) {
        const ids = rows.map((r) => r.id);
        ({ rows } = await client.query(
          "select id, claim, payload from jobs.complete_and_claim($1, $2, $3, array['node_bench'], $4)",
          [ids, rows.map((r) => r.claim), `node-${n}`, args.batch]));
        completed += ids.length;
      }
    } finally {
      client.release();
    }
  }));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await pool.end();
  return { completed, seconds };
}

async function enqueueBench(pool, jobs) {
  await pool.query("delete from jobs.jobs where queue = 'node_bench'");
  for (let done = 0; done < jobs; done += 10000) {
    await pool.query(`select count(*) from jobs.enqueue_batch(
      (select jsonb_agg(jsonb_build_object('name', 'bench', 'queue', 'node_bench', 'payload', jsonb_build_object('n', g)))
       from generate_series(1, $1::int) g))`, [Math.min(10000, jobs - done)]);
  }
}

// The library's worker: `workers` slots, each claiming one job at a time (its batch is 1), the
// next claimed in the completing statement; a no-op handler that never opens its transaction.
async function drainLibrary(args) {
  const lib = require('../../clients/node/dist/cjs/index.js');
  const setup = new Pool({ connectionString: args.dsn, max: 1 });
  await enqueueBench(setup, args.jobs);
  await setup.end();
  let completed = 0;
  let finished;
  const done = new Promise((resolve) => { finished = resolve; });
  const worker = lib.createWorker({
    connectionString: args.dsn, queues: ['node_bench'], concurrency: args.workers, pollMs: 100,
    jobs: [lib.defineJob({ name: 'bench', handler: () => null })], logger: lib.silentLogger,
    metrics: { attemptEnded() { completed += 1; if (completed === args.jobs) finished(); }, running() {} },
  });
  const start = process.hrtime.bigint();
  await worker.start();
  await done;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await worker.stop({ graceMs: 0 });
  return { completed, seconds };
}

async function drainGraphile(args) {
  const { run, runMigrations, Logger } = require('graphile-worker');
  await runMigrations({ connectionString: args.dsn });
  const pool = new Pool({ connectionString: args.dsn, max: 2 });
  await pool.query('delete from graphile_worker._private_jobs');
  await pool.query("select count(*) from (select graphile_worker.add_job('bench', json_build_object('n', g)) from generate_series(1, $1::int) g) a",
    [args.jobs]);
  await pool.end();
  const worker = args.batch > 1
    ? { localQueue: { size: args.batch }, completeJobBatchDelay: 0 }
    : {};
  let completed = 0;
  let start;
  let finished;
  const done = new Promise((resolve) => { finished = resolve; });
  const runner = await run({
    connectionString: args.dsn,
    concurrency: args.workers,
    noHandleSignals: true,
    pollInterval: 100,
    taskList: { bench: async () => {} },
    preset: { worker },
    logger: new Logger(() => () => {}),
  });
  runner.events.on('job:start', () => { if (start === undefined) start = process.hrtime.bigint(); });
  runner.events.on('job:success', () => { completed += 1; if (completed === args.jobs) finished(); });
  await done;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await runner.stop();
  return { completed, seconds };
}

async function main() {
  const args = parseArgs(process.argv);
  const drain = { graphile: drainGraphile, library: drainLibrary }[args.system] ?? drainPgJobs;
  const { completed, seconds } = await drain(args);
  if (completed !== args.jobs) throw new Error(`completed ${completed} of ${args.jobs}`);
  console.log(JSON.stringify({ system: args.system, workers: args.workers, batch: args.batch, jobs: args.jobs,
    seconds, jobs_per_s: args.jobs / seconds }));
}

main().catch((err) => { console.error(err); process.exit(1); });
