// A new database with pg_jobs on PG_JOBS_DSN's server for one test file, dropped after it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import pg from 'pg';

/** One statement on PG_JOBS_DSN's server (its maintenance database), on a connection of its own: the rows. */
export async function admin(sql, params) {
  const client = new pg.Client({ connectionString: serverDsn() });
  await client.connect();
  try { return (await client.query(sql, params)).rows; } finally { await client.end(); }
}

function serverDsn() {
  const server = process.env.PG_JOBS_DSN;
  assert.ok(server, 'PG_JOBS_DSN is not set (a superuser URL, e.g. postgres://postgres@127.0.0.1:54392/postgres)');
  return server;
}

/** This test file's database (with a table `sent` of addresses, which its tests write to),
 * made before its tests and handed to `made`, and dropped after them. */
export function databaseOfThisFile(made) {
  let db;
  before(async () => {
    db = await makeDatabase('node');
    await db.pool.query('create table sent (address text)');
    made(db);
  });
  after(() => db.drop());
}

export async function makeDatabase(prefix) {
  const server = serverDsn();
  const name = `${prefix}_${randomUUID().slice(0, 8)}`;
  await admin(`create database ${name}`);
  const url = new URL(server);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString() });
  await pool.query('create extension pg_jobs');
  return {
    dsn: url.toString(),
    pool,
    async drop() {
      await pool.end();
      await dropDatabase(name);
    },
  };
}

/** Drops a database once its clients' backends have gone. pool.end() resolves once each
 * client was told to end, not once its backend left: a backend still reading its Terminate
 * when the drop's force signals it answers with a FATAL the ending client raises as an
 * uncaught error. So wait (5 s at most) for the clients' backends to go; the force is for the
 * pg_jobs sweeper, whose backend comes and goes. */
export async function dropDatabase(name) {
  for (let waited = 0; waited < 5000; waited += 20) {
    const [{ n }] = await admin(
      "select count(*)::int as n from pg_stat_activity where datname = $1 and backend_type = 'client backend'",
      [name],
    );
    if (n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await admin(`drop database ${name} with (force)`);
}
