// The ORM adapters against a real database: an enqueue inside the ORM's transaction lands
// with its commit, and not at all when it rolls back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { makeDatabase } from './database.mjs';
import { drizzle } from 'drizzle-orm/node-postgres';
import knexFactory from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { enqueue, fromDrizzle, fromKnex, fromKysely, fromPrisma } from 'pg-jobs';
import { PrismaPg } from '@prisma/adapter-pg';
import prismaClient from '@prisma/client';

let db;
let pool;
let dsn;

before(async () => {
  db = await makeDatabase('node_orm');
  ({ pool, dsn } = db);
});

after(() => db.drop());

const jobsNamed = async (job) =>
  (await pool.query('select count(*)::int as n from jobs.jobs where name = $1', [job])).rows[0].n;

class Rollback extends Error {}

test('Knex: in a transaction, rolled back and committed', async () => {
  const knex = knexFactory({ client: 'pg', connection: dsn });
  try {
    await assert.rejects(knex.transaction(async (trx) => {
      await enqueue(fromKnex(trx), 'knex_job', { n: 1 }, { idempotencyKey: 'k' });
      throw new Rollback();
    }), Rollback);
    assert.equal(await jobsNamed('knex_job'), 0);
    const job = await knex.transaction((trx) => enqueue(fromKnex(trx), 'knex_job', { n: 2 }, { delayMs: 1000 }));
    assert.equal(job.deduped, false);
    assert.equal(await jobsNamed('knex_job'), 1);
  } finally {
    await knex.destroy();
  }
});

test('Kysely: in a transaction, rolled back and committed', async () => {
  const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: dsn }) }) });
  try {
    await assert.rejects(db.transaction().execute(async (trx) => {
      await enqueue(fromKysely(trx), 'kysely_job', { n: 1 });
      throw new Rollback();
    }), Rollback);
    assert.equal(await jobsNamed('kysely_job'), 0);
    await db.transaction().execute((trx) => enqueue(fromKysely(trx), 'kysely_job', { n: 2 }, { priority: 2 }));
    assert.equal(await jobsNamed('kysely_job'), 1);
  } finally {
    await db.destroy();
  }
});

test('Drizzle: in a transaction, rolled back and committed', async () => {
  const orm = new pg.Pool({ connectionString: dsn });
  const db = drizzle(orm);
  try {
    await assert.rejects(db.transaction(async (tx) => {
      await enqueue(fromDrizzle(tx), 'drizzle_job', { n: 1 });
      throw new Rollback();
    }), Rollback);
    assert.equal(await jobsNamed('drizzle_job'), 0);
    await db.transaction((tx) => enqueue(fromDrizzle(tx), 'drizzle_job', { n: 2 }, { queue: 'orm' }));
    assert.equal(await jobsNamed('drizzle_job'), 1);
  } finally {
    await orm.end();
  }
});

test('Prisma: in an interactive transaction, rolled back and committed', async () => {
  const prisma = new prismaClient.PrismaClient({ adapter: new PrismaPg({ connectionString: dsn }) });
  try {
    await assert.rejects(prisma.$transaction(async (tx) => {
      await enqueue(fromPrisma(tx), 'prisma_job', { n: 1 }, { idempotencyKey: 'p' });
      throw new Rollback();
    }), Rollback);
    assert.equal(await jobsNamed('prisma_job'), 0);
    const job = await prisma.$transaction((tx) => enqueue(fromPrisma(tx), 'prisma_job', { n: 2 }, { idempotencyKey: 'p' }));
    assert.equal(job.deduped, false);
    assert.match(job.id, /^[0-9a-f-]{36}$/);
    const again = await enqueue(fromPrisma(prisma), 'prisma_job', { n: 3 }, { idempotencyKey: 'p' });
    assert.deepEqual([again.id, again.deduped], [job.id, true]);
    assert.equal(await jobsNamed('prisma_job'), 1);
  } finally {
    await prisma.$disconnect();
  }
});
