// A connection of the worker's own (heartbeats and a held job's durable calls; the cancel
// listener), made again with backoff when it breaks. A worker never exits on a database error.

import pg from 'pg';
import { isConnectionError } from './errors.js';

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits for `promise`, or `ms` at most, and answers whether it settled; its timer is cleared
 * either way, so that a process whose work is done is not kept alive by it. */
export async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise.then(() => true),
      new Promise<boolean>((resolve) => { timer = setTimeout(() => resolve(false), ms); })]);
  } finally {
    clearTimeout(timer);
  }
}

export class Backoff {
  private delay: number;

  constructor(private readonly first = 100, private readonly most = 5000) {
    this.delay = first;
  }

  next(): number {
    const d = this.delay;
    this.delay = Math.min(this.delay * 2, this.most);
    return d * (0.75 + Math.random() * 0.5);
  }

  reset(): void {
    this.delay = this.first;
  }
}

/** A worker's connection's application_name, `pg-jobs ROLE WORKER_ID`, cut to the 63 bytes
 * PostgreSQL keeps (it would cut it with a notice): `pgjobs workers` tells by it which worker
 * each connection is. */
export function applicationName(role: 'worker' | 'heartbeat' | 'listener', workerId: string): string {
  return Buffer.from(`pg-jobs ${role} ${workerId}`).subarray(0, 63).toString().replace(/\uFFFD+$/, '');
}

/** One connection, made on first use and again after it broke. Queries run one at a time. */
export class OwnConnection {
  private client: pg.Client | null = null;
  private connecting: Promise<pg.Client> | null = null;
  private closed = false;

  constructor(private readonly config: pg.ClientConfig, private readonly onConnect?: (c: pg.Client) => Promise<void>) {}

  async query<R extends object>(text: string, values: unknown[] = []): Promise<R[]> {
    const client = await this.connect();
    try {
      const result = await client.query<R>(text, values);
      return result.rows;
    } catch (err) {
      if (isConnectionError(err)) this.drop(client);
      throw err;
    }
  }

  connect(): Promise<pg.Client> {
    if (this.closed) return Promise.reject(new Error('pg-jobs: the worker is stopped'));
    if (this.client) return Promise.resolve(this.client);
    if (!this.connecting) {
      this.connecting = (async () => {
        const client = new pg.Client(this.config);
        client.on('error', () => this.drop(client));
        client.on('end', () => this.drop(client));
        try {
          await client.connect();
          if (this.onConnect) await this.onConnect(client);
        } catch (err) {
          client.end().catch(() => {});
          throw err;
        }
        this.client = client;
        return client;
      })().finally(() => {
        this.connecting = null;
      });
    }
    return this.connecting;
  }

  get connected(): boolean {
    return this.client !== null;
  }

  private drop(client: pg.Client): void {
    if (this.client === client) this.client = null;
    client.end().catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = null;
    if (client) await client.end().catch(() => {});
  }
}
