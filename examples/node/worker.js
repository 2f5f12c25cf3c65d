// A pg_jobs worker in Node.js with node-postgres (pg).
//
//   node worker.js --dsn postgres://user@host/app [--queue default] [--batch 10]
//                  [--lease 30] [--poll 5] [--until-empty]
//
// Runs up to --batch jobs at once, each on a connection of its own from a pool, and claims
// more as soon as one finishes: a slow job never holds back the others. Heartbeats held jobs
// every lease/3 on its own connection, made again when it fails; a heartbeat answering NULL
// (the claim is lost) aborts the job's signal, which handlers watch; a job named on
// pg_jobs_cancel (cancelled while running) is heartbeaten at once, so its handler stops within
// moments, not at the next beat; a job's handler is stopped at its attempt's deadline too (a
// timeout). Runs each handler and
// its completion in ONE transaction, which also claims the job's successor for the same
// connection (jobs.complete_and_claim: one commit per job; rolled back when it raises
// lease_lost), reports failures with jobs.fail, snoozes a job whose name has no handler (no attempt used), sleeps on
// LISTEN pg_jobs with a polling fallback, and on SIGTERM or SIGINT stops claiming, finishes
// what it holds, and exits 0.
'use strict';
const os = require('os');
const { Client, Pool } = require('pg');

const handlers = {
  // Each takes (client, job) inside the transaction that completes the job. job.signal is
  // aborted when the claim is lost: a long handler should stop then.
  async record(client, job) {
    await client.query('insert into example_log (job_id, worker, payload) values ($1, $2, $3)',
      [job.id, 'node', job.payload]);
    return { recorded: true };
  },
  async sleep(client, job) {
    const seconds = job.payload.seconds ?? 1;
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, seconds * 1000);
      job.signal.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(new Error('the claim was lost: stopped'));
      });
    });
    await client.query('insert into example_log (job_id, worker, payload) values ($1, $2, $3)',
      [job.id, 'node', job.payload]);
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

// time_left: seconds to the attempt's deadline (its job type's timeout), null for none.
const CLAIMED = 'id, claim, name, payload, attempt, max_attempts, '
  + 'extract(epoch from deadline - clock_timestamp())::float8 as time_left';

// One job: handler and completion in one transaction; a failure rolls back and is reported.
// With a chain ({ workerId, queues, lease }), the completion also claims the job's successor
// in that transaction (jobs.complete_and_claim: one commit per job), which it answers, or null.
async function runJob(pool, job, log, chain) {
  const where = `job ${job.id.slice(-8)} ${job.name.padEnd(13)} attempt ${job.attempt}/${job.max_attempts}`;
  const client = await pool.connect();
  try {
    const handler = handlers[job.name];
    if (!handler) { // not a failure: no attempt used; a worker that knows the name will run it
      await client.query("select jobs.snooze($1, $2, now() + interval '1 minute')", [job.id, job.claim]);
      log(`${where}: no handler for this name here; snoozed for a minute (no attempt used)`);
      return null;
    }
    try {
      await client.query('begin');
      const result = JSON.stringify(await handler(client, job));
      let landed = true;
      let next = null;
      if (chain) {
        try {
          const { rows } = await client.query(
            `select ${CLAIMED} from jobs.complete_and_claim(array[$1]::uuid[], array[$2]::bigint[], $3, $4, 1,`
            + ' make_interval(secs => $5), array[$6]::jsonb[])',
            [job.id, job.claim, chain.workerId, chain.queues, chain.lease, result]);
          next = rows[0] ?? null;
        } catch (err) {
          if (err.code !== 'PJ001') throw err;
          landed = false; // lease_lost: the claim is no longer held
        }
      } else {
        const { rows } = await client.query('select jobs.complete($1, $2, $3) as landed',
          [job.id, job.claim, result]);
        landed = rows[0].landed;
      }
      if (landed) {
        await client.query('commit');
        log(`${where}: completed`);
        return next;
      }
      await client.query('rollback'); // the claim was lost: undo this job's writes
      log(`${where}: lost its claim; its writes were rolled back`);
      return null;
    } catch (err) {
      await client.query('rollback');
      const error = `${err.name}: ${err.message}`;
      const { rows } = await client.query('select jobs.fail($1, $2, $3) as outcome', [job.id, job.claim, error]);
      const then = { retried: 'retried after its backoff', dead: 'dead-lettered: out of attempts',
        failed: 'failed: out of attempts' }[rows[0].outcome] ?? 'the claim was already lost';
      log(`${where}: failed (${error}); ${then}`);
      return null;
    }
  } finally {
    client.release();
  }
}

// Extends the lease of every held job every interval, on a connection of its own, made again
// when it fails. A NULL answer: the claim is lost, and the job's signal is aborted. check(id)
// beats one job at once: for a signal on pg_jobs_cancel, which is a hint only (any role that
// can connect may NOTIFY), so the heartbeat's answer decides.
function heartbeats(dsn, intervalMs, held, log) {
  let client = null;
  const beat = async (jobs, retry = true) => {
    try {
      if (!client) {
        client = new Client({ connectionString: dsn, application_name: 'pg_jobs heartbeat' });
        client.on('error', () => { client = null; });
        await client.connect();
      }
      for (const job of jobs) {
        const { rows } = await client.query('select jobs.heartbeat($1, $2) as until', [job.id, job.claim]);
        if (rows[0].until === null) {
          log(`job ${job.id.slice(-8)} ${job.name}: the claim is lost; stopping its handler`);
          held.delete(job.id);
          job.abort.abort();
        }
      }
    } catch (err) { // made again, and the beat tried again, at once
      log(`heartbeat connection failed (${err.message}); reconnecting`);
      const broken = client;
      client = null;
      if (broken) broken.end().catch(() => {});
      if (retry) await beat(jobs, false);
    }
  };
  const timer = setInterval(() => { beat([...held.values()]); }, intervalMs);
  return {
    check: (id) => {
      const jobs = id === '*' ? [...held.values()] : [held.get(id)].filter(Boolean);
      if (jobs.length > 0) beat(jobs);
    },
    stop: async () => { clearInterval(timer); if (client) await client.end().catch(() => {}); },
  };
}

async function main() {
  const args = parseArgs(process.argv);
  const log = args.quiet ? () => {} : (line) => console.log(' ', line);
  const workerId = `${os.hostname()}:${process.pid}`;
  const conn = new Client({ connectionString: args.dsn });
  const listener = new Client({ connectionString: args.dsn });
  const pool = new Pool({ connectionString: args.dsn, max: args.batch });
  pool.on('error', () => {}); // an idle job connection that broke: the pool makes a new one
  await Promise.all([conn.connect(), listener.connect()]);

  let stopping = false;
  // A wake-up (a signal, a notification for our queues, a job ending) that comes while the
  // worker is busy claiming is kept for its next sleep, which then returns at once: without
  // it, a SIGTERM during a claim was lost and the worker slept a whole poll interval.
  let pending = false;
  let wake = () => { pending = true; };
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { stopping = true; wake(); });
  const held = new Map(); // id -> job
  const beats = heartbeats(args.dsn, (args.lease / 3) * 1000, held, log);
  // pg_jobs: work in a queue; pg_jobs_cancel: a running job was cancelled (maybe ours).
  listener.on('notification', (n) => {
    if (n.channel === 'pg_jobs_cancel') beats.check(n.payload);
    else if (n.payload === '*' || args.queues.includes(n.payload)) wake(); // '*': every queue
  });
  await listener.query('listen pg_jobs');
  await listener.query('listen pg_jobs_cancel');

  const running = new Set();
  const chain = { workerId, queues: args.queues, lease: args.lease };
  // A job, then each successor its completion claimed, until none comes or a signal.
  const runChain = async (first) => {
    for (let job = first; job;) {
      job.abort = new AbortController();
      job.signal = job.abort.signal;
      held.set(job.id, job);
      const current = job;
      // A timeout: the handler is stopped at the deadline, as for a lost claim.
      const deadline = current.time_left === null ? null : setTimeout(() => {
        log(`job ${current.id.slice(-8)} ${current.name}: its timeout passed; stopping its handler`);
        current.abort.abort();
      }, Math.max(0, current.time_left * 1000));
      try {
        job = await runJob(pool, current, log, stopping ? null : chain);
      } finally {
        held.delete(current.id);
        if (deadline) clearTimeout(deadline);
      }
    }
  };
  const sleep = (ms) => new Promise((resolve) => {
    if (pending) { pending = false; resolve(); return; }
    const done = () => { clearTimeout(timer); wake = () => { pending = true; }; resolve(); };
    const timer = setTimeout(done, ms);
    wake = done;
  });

  while (!stopping) {
    const free = args.batch - running.size;
    let jobs = [];
    if (free > 0) {
      ({ rows: jobs } = await conn.query(
        `select ${CLAIMED} from jobs.claim($1, $2, $3, make_interval(secs => $4))`,
        [workerId, args.queues, free, args.lease]));
    }
    for (const job of jobs) {
      const run = runChain(job).finally(() => { running.delete(run); wake(); });
      running.add(run);
    }
    if (jobs.length > 0 && running.size < args.batch) continue; // room for more: claim again
    if (running.size > 0) { await sleep(jobs.length > 0 ? 200 : args.poll * 1000); continue; }
    if (args.untilEmpty) {
      const { rows } = await conn.query(
        "select count(*)::int as live from jobs.jobs where queue = any($1) and state in ('ready', 'delayed', 'running', 'suspended')",
        [args.queues]);
      if (rows[0].live === 0) break;
    }
    // Idle: sleep until a wake-up on our queues, a signal, or the poll interval.
    await sleep(args.poll * 1000);
  }
  await Promise.all(running); // a signal: stop claiming, finish the jobs held
  await beats.stop();
  await Promise.all([conn.end(), listener.end(), pool.end()]);
}

main().catch((err) => { console.error(err); process.exit(1); });
