// A new database with pg_jobs on PG_JOBS_DSN's server for one test file, dropped after it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';

export async function makeDatabase(prefix) {
  const server = process.env.PG_JOBS_DSN;
  assert.ok(server, 'PG_JOBS_DSN is not set (a superuser URL, e.g. postgres://postgres@127.0.0.1:54392/postgres)');
  const name = `${prefix}_${randomUUID().slice(0, 8)}`;
  const admin = async (sql) => {
    const client = new pg.Client({ connectionString: server });
    await client.connect();
    try { await client.query(sql); } finally { await client.end(); }
  };
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
      await admin(`drop database ${name} with (force)`);
    },
  };
}
