// What a producer hands to enqueue: anything with node-postgres's query(text, values), which a
// Pool, a Client and a PoolClient inside its transaction all have. Adapters turn an ORM's
// transaction into one (src/adapters.ts).

/** The part of a node-postgres Pool, Client or PoolClient that pg-jobs uses. */
export interface Queryable {
  query<R extends object = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount?: number | null }>;
}
