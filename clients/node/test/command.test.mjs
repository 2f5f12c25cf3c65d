// The package as a user meets it: both module formats, the `pg-jobs` command (worker, enqueue,
// metrics) and the README's quick start.
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { test } from 'node:test';
import { databaseOfThisFile } from './database.mjs';
import { enqueue, waitForJob } from 'pg-jobs';

let pool;
let dsn;
databaseOfThisFile((db) => ({ pool, dsn } = db));

test('require and import give the same API', () => {
  const cjs = execFileSync(process.execPath, ['-e', "console.log(Object.keys(require('pg-jobs')).sort().join(','))"],
    { encoding: 'utf8' }).trim();
  const esm = execFileSync(process.execPath, ['--input-type=module', '-e',
    "import * as m from 'pg-jobs'; console.log(Object.keys(m).filter((k) => k !== 'default').sort().join(','))"],
  { encoding: 'utf8' }).trim();
  assert.equal(cjs, esm);
  assert.ok(cjs.includes('createWorker') && cjs.includes('enqueue'));
});

test('pg-jobs worker --help documents every flag; a wrong one exits 2', () => {
  const help = execFileSync(process.execPath, ['dist/cjs/cli.js', 'worker', '--help'], { encoding: 'utf8' });
  for (const flag of ['--dsn', '--queue', '--concurrency', '--lease', '--shutdown-grace', '--poll', '--worker-id', '--no-prepared-statements']) {
    assert.ok(help.includes(flag), flag);
  }
  assert.throws(() => execFileSync(process.execPath, ['dist/cjs/cli.js', 'worker', '--nope'], { stdio: 'pipe' }),
    (err) => err.status === 2);
});

test("the README's quick start runs: the module enqueues, the command works it, SIGTERM exits 0", async () => {
  const readme = readFileSync('README.md', 'utf8');
  const [jobs, producer] = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  // Beside the package, so that 'pg-jobs' resolves to it; the producer imports './jobs.mjs'.
  writeFileSync('jobs.mjs', jobs);
  const file = 'jobs.mjs';
  writeFileSync('enqueue.mjs', producer);
  try {
    execFileSync(process.execPath, ['enqueue.mjs'], { env: { ...process.env, PG_JOBS_DSN: dsn } });
    const worker = spawn(process.execPath, ['dist/cjs/cli.js', 'worker', '--dsn', dsn, '--concurrency', '2', file],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    worker.stderr.on('data', (d) => { log += d; });
    for (let i = 0; i < 200; i++) {
      const { rows } = await pool.query("select state::text from jobs.jobs where name = 'send_email'");
      if (rows[0]?.state === 'completed') break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.deepEqual((await pool.query('select address from sent')).rows, [{ address: 'ada@example.com' }]);
    worker.kill('SIGTERM');
    const code = await new Promise((resolve) => worker.on('exit', resolve));
    assert.equal(code, 0, log);
    assert.match(log, /pg-jobs worker started.*"preloaded":(true|false)/);
  } finally {
    rmSync('jobs.mjs');
    rmSync('enqueue.mjs');
  }
});

test('pg-jobs worker runs a TypeScript module through tsx; without tsx it says how', async () => {
  writeFileSync('typed_jobs.ts', "import { defineJob } from 'pg-jobs';\n"
    + "export const typed = defineJob({ name: 'typed', queue: 'typed',\n"
    + '  handler: (payload: { n: number }) => ({ doubled: payload.n * 2 }) });\n');
  try {
    const { id } = await enqueue(pool, 'typed', { n: 21 }, { queue: 'typed' });
    const worker = spawn(process.execPath, ['dist/cjs/cli.js', 'worker', '--dsn', dsn, '--queue', 'typed', 'typed_jobs.ts'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    worker.stderr.on('data', (d) => { log += d; });
    const done = await waitForJob(pool, id, 30_000);
    worker.kill('SIGTERM');
    assert.equal(await new Promise((resolve) => worker.on('exit', resolve)), 0, log);
    assert.deepEqual([done.state, done.result], ['completed', { doubled: 42 }], log);
  } finally {
    rmSync('typed_jobs.ts');
  }
  if (!process.features.typescript) { // a Node.js that strips types itself runs it without tsx
    const bare = mkdtempSync(path.join(tmpdir(), 'pg-jobs-ts-'));
    writeFileSync(path.join(bare, 'jobs.ts'), 'export const n: number = 1;\n');
    const run = spawnSync(process.execPath, [path.resolve('dist/cjs/cli.js'), 'worker', '--dsn', dsn, 'jobs.ts'],
      { cwd: bare, encoding: 'utf8' });
    rmSync(bare, { recursive: true });
    assert.equal(run.status, 1, run.stderr);
    assert.match(run.stderr, /npm install --save-dev tsx.*node --import tsx node_modules\/\.bin\/pg-jobs worker jobs\.ts/s);
  }
});

test('pg-jobs enqueue prints the id, the same one for a taken key; bad JSON exits 2 and enqueues nothing', async () => {
  const cli = (...args) => spawnSync(process.execPath, ['dist/cjs/cli.js', 'enqueue', '--dsn', dsn, ...args], { encoding: 'utf8' });
  const first = cli('from_shell', '{"n": 1}', '--queue', 'shell', '--idempotency-key', 'nightly', '--max-attempts', '3');
  assert.equal(first.status, 0, first.stderr);
  const again = cli('from_shell', '{"n": 2}', '--queue', 'shell', '--idempotency-key', 'nightly');
  assert.equal(again.stdout, `${first.stdout.trim()} (an existing job: its key was taken)\n`);
  const { rows } = await pool.query('select queue, payload, max_attempts from jobs.jobs where id = $1', [first.stdout.trim()]);
  assert.deepEqual(rows, [{ queue: 'shell', payload: { n: 1 }, max_attempts: 3 }]);
  const bad = cli('from_shell', '{not json', '--queue', 'shell');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /PAYLOAD is not JSON/);
  assert.equal((await pool.query("select count(*)::int as n from jobs.jobs where queue = 'shell'")).rows[0].n, 1);
});

test('pg-jobs worker --metrics-port serves jobs_total for what it ran', async () => {
  writeFileSync('metered_jobs.mjs', "import { defineJob } from 'pg-jobs';\n"
    + "export const metered = defineJob({ name: 'metered', queue: 'metered', handler: () => ({ ok: true }) });\n");
  try {
    const { id } = await enqueue(pool, 'metered', {}, { queue: 'metered' });
    const port = 54470 + (process.pid % 20);
    const worker = spawn(process.execPath, ['dist/cjs/cli.js', 'worker', '--dsn', dsn, '--queue', 'metered',
      '--metrics-port', String(port), 'metered_jobs.mjs'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    worker.stderr.on('data', (d) => { log += d; });
    assert.equal((await waitForJob(pool, id, 30_000)).state, 'completed', log);
    let text = '';
    for (let i = 0; i < 100 && !text.includes('outcome="completed"'); i++) {
      text = await new Promise((resolve) => {
        http.get(`http://127.0.0.1:${port}/metrics`, (res) => {
          let body = '';
          res.on('data', (d) => { body += d; }).on('end', () => resolve(body));
        }).on('error', () => resolve(''));
      });
      if (!text.includes('outcome="completed"')) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    worker.kill('SIGTERM');
    assert.equal(await new Promise((resolve) => worker.on('exit', resolve)), 0, log);
    assert.match(text, /jobs_total\{queue="metered",name="metered",outcome="completed"\} 1/);
  } finally {
    rmSync('metered_jobs.mjs');
  }
});

test('a process whose worker.run() resolved at SIGTERM exits by itself: the worker leaves no timer', async () => {
  // A 60 s shutdown grace: its timer, left pending after the jobs ended, kept the process alive
  // that long (checked at the commit that clears it).
  const program = `const { createWorker, defineJob, silentLogger } = require('pg-jobs');
    createWorker({ connectionString: ${JSON.stringify(dsn)}, queues: ['exits'], shutdownGraceMs: 60000,
      jobs: [defineJob({ name: 'x', handler: () => 1 })], logger: silentLogger }).run();
    setTimeout(() => process.kill(process.pid, 'SIGTERM'), 500);`;
  const child = spawn(process.execPath, ['-e', program], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  const bound = new Promise((resolve) => { const t = setTimeout(() => resolve('still running after 30 s'), 30_000); t.unref(); });
  const code = await Promise.race([exited, bound]);
  if (code !== 0) child.kill('SIGKILL');
  assert.equal(code, 0, err);
});
