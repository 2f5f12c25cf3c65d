// A pg_jobs worker in Node.js with node-postgres (pg).
//
//   node worker.js --dsn postgres://user@host/app [--queue default] [--batch 10]
//                  [--lease 30] [--poll 5] [--until-empty]
//
// Claims in batches, heartbeats held jobs every lease/3 on its own connection, runs each
// handler and jobs.complete in ONE transaction (rolled back when complete answers false),
// reports failures with jobs.fail, sleeps on LISTEN pg_jobs with a polling fallback, and on
// SIGTERM or SIGINT stops claiming, finishes what it holds, and exits 0.
'use strict';
const os = require('os');
const { Client } = require('pg');

const handlers = {
  // Each takes (client, job) inside the transaction that completes the job.
  async record(client, job) {
    await client.query('insert into example_log (job_id, worker, payload) values ($1, $2, $3)',
      [job.id, 'node', job.payload]);
    return { recorded: true };
  },
  async sleep(client, job) {
    const seconds = job.payload.seconds ?? 1;
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    return { slept: seconds };
  },
  async fail(client, job) {
    throw new Error(job.payload.message ?? 'this job always fails');
  },
};

function parseArgs(argv) {
  const args = { dsn: process.env.PG_JOBS_DSN, queues: [], batch: 10, lease: 30, poll: 5, untilEmpty: false };
  for (let i = 2; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--until-empty') args.untilEmpty = true;
    else if (flag === '--quiet') args.quiet = true;
    else if (flag === '--queue') args.queues.push(argv[++i]);
    else if (['--dsn', '--batch', '--lease', '--poll'].includes(flag)) {
      const value = argv[++i];
      args[flag.slice(2)] = flag === '--dsn' ? value : Number(value);
    } else throw new Error(`unknown argument ${flag}`);
  }
  if (args.queues.length === 0) args.queues = ['default'];
  return args;
}

async function runJob(client, job, log) {
  const handler = handlers[job.name];
  let outcome;
  try {
    await client.query('begin');
    if (!handler) throw new Error(`no handler for job ${JSON.stringify(job.name)}`);
    const result = await handler(client, job);
    const { rows } = await client.query('select jobs.complete($1, $2, $3) as landed',
      [job.id, job.claim, JSON.stringify(result)]);
    if (rows[0].landed) {
      await client.query('commit');
      outcome = 'completed';
    } else {
      await client.query('rollback'); // the claim was lost: undo this job's writes
      outcome = 'lost its claim';
    }
  } catch (err) {
    await client.query('rollback');
    const { rows } = await client.query('select jobs.fail($1, $2, $3) as outcome',
      [job.id, job.claim, `${err.name}: ${err.message}`]);
    outcome = rows[0].outcome;
  }
  log(`${job.name.padEnd(13)} attempt ${job.attempt}/${job.max_attempts}: ${outcome}`);
}

async function main() {
  const args = parseArgs(process.argv);
  const log = args.quiet ? () => {} : (line) => console.log(' ', line);
  const workerId = `${os.hostname()}:${process.pid}`;
  const conn = new Client({ connectionString: args.dsn });
  const beatConn = new Client({ connectionString: args.dsn });
  const listener = new Client({ connectionString: args.dsn });
  await Promise.all([conn.connect(), beatConn.connect(), listener.connect()]);

  let stopping = false;
  // A wake-up (a signal, or a notification for our queues) that comes while the worker is
  // busy claiming or working is kept for its next sleep, which then returns at once: without
  // it, a SIGTERM during a claim was lost and the worker slept a whole poll interval.
  let pending = false;
  let wake = () => { pending = true; };
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { stopping = true; wake(); });
  listener.on('notification', (n) => { if (args.queues.includes(n.payload)) wake(); });
  await listener.query('listen pg_jobs');

  const held = new Map(); // id -> claim
  const beats = setInterval(() => {
    for (const [id, claim] of held) beatConn.query('select jobs.heartbeat($1, $2)', [id, claim]).catch(() => {});
  }, (args.lease / 3) * 1000);

  while (!stopping) {
    const { rows: jobs } = await conn.query(
      'select id, claim, name, payload, attempt, max_attempts from jobs.claim($1, $2, $3, make_interval(secs => $4))',
      [workerId, args.queues, args.batch, args.lease]);
    for (const job of jobs) held.set(job.id, job.claim);
    for (const job of jobs) { // a SIGTERM now still lets the batch finish
      await runJob(conn, job, log);
      held.delete(job.id);
    }
    if (jobs.length > 0) continue;
    if (args.untilEmpty) {
      const { rows } = await conn.query(
        "select count(*)::int as live from jobs.jobs where queue = any($1) and state in ('ready', 'delayed', 'running', 'suspended')",
        [args.queues]);
      if (rows[0].live === 0) break;
    }
    // Idle: sleep until a wake-up on our queues, a signal, or the poll interval.
    await new Promise((resolve) => {
      if (pending) { pending = false; resolve(); return; }
      const done = () => { clearTimeout(timer); wake = () => { pending = true; }; resolve(); };
      const timer = setTimeout(done, args.poll * 1000);
      wake = done;
    });
  }
  clearInterval(beats);
  await Promise.all([conn.end(), beatConn.end(), listener.end()]);
}

main().catch((err) => { console.error(err); process.exit(1); });
