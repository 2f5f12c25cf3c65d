// Adapters: an ORM's connection or transaction as a Queryable, so that enqueue runs inside the
// application's own transaction (rolled back: no job). Each loads its ORM only when called,
// through the ORM the application already has; pg-jobs depends on none of them.

import type { Queryable } from './db.js';

type Rows = Record<string, unknown>[];

/** pg-jobs's statements number their parameters ($1, $2, ...); these ORMs want them in order. */
function inOrder(text: string, values: readonly unknown[]): { parts: string[]; ordered: unknown[] } {
  const parts: string[] = [];
  const ordered: unknown[] = [];
  let last = 0;
  for (const match of text.matchAll(/\$(\d+)/g)) {
    parts.push(text.slice(last, match.index));
    ordered.push(values[Number(match[1]) - 1]);
    last = match.index + match[0].length;
  }
  parts.push(text.slice(last));
  return { parts, ordered };
}

/** Knex: the knex instance or a transaction (`trx`), on the pg client. */
export interface KnexLike {
  raw(sql: string, bindings: readonly unknown[]): PromiseLike<{ rows: Rows }>;
}

export function fromKnex(knex: KnexLike): Queryable {
  return {
    async query<R extends object>(text: string, values: unknown[] = []) {
      const { parts, ordered } = inOrder(text, values);
      // Knex's own placeholder is ?; pg-jobs's statements have none of their own.
      const result = await knex.raw(parts.join('?'), ordered);
      return { rows: result.rows as R[] };
    },
  };
}

/** Kysely: a Kysely instance or a transaction, on its PostgresDialect. */
export interface KyselyLike {
  executeQuery(query: never): Promise<{ rows: unknown[] }>;
}

export function fromKysely(db: KyselyLike): Queryable {
  return {
    async query<R extends object>(text: string, values: unknown[] = []) {
      const { CompiledQuery } = await import('kysely');
      const result = await db.executeQuery(CompiledQuery.raw(text, values) as never);
      return { rows: result.rows as R[] };
    },
  };
}

/** Drizzle: a node-postgres database (`drizzle(pool)`) or a transaction (`tx`). */
export interface DrizzleLike {
  execute(query: never): PromiseLike<{ rows: Rows }>;
}

export function fromDrizzle(db: DrizzleLike): Queryable {
  return {
    async query<R extends object>(text: string, values: unknown[] = []) {
      const { sql } = await import('drizzle-orm');
      const { parts, ordered } = inOrder(text, values);
      const strings = Object.assign([...parts], { raw: [...parts] }) as unknown as TemplateStringsArray;
      const result = await db.execute(sql(strings, ...ordered) as never);
      return { rows: result.rows as R[] };
    },
  };
}

/** Prisma: the client or an interactive transaction (`prisma.$transaction(async (tx) => ...)`),
 * on any of its PostgreSQL drivers (tested with @prisma/adapter-pg). */
export interface PrismaLike {
  $queryRawUnsafe(query: string, ...values: unknown[]): PromiseLike<unknown>;
}

export function fromPrisma(prisma: PrismaLike): Queryable {
  return {
    async query<R extends object>(text: string, values: unknown[] = []) {
      const rows = await prisma.$queryRawUnsafe(text, ...values);
      return { rows: rows as R[] };
    },
  };
}
