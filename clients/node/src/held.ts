// An attempt the worker holds: its job, why it must stop (once it must), its AbortSignal, and
// the connection and transaction of its handler. A handler that does not stop within
// ABANDON_MS of being told to is abandoned: its connection is closed.

import type pg from 'pg';
import type { AttemptHandle, Job } from './context.js';
import type { SpanLike } from './tracing.js';

/** Why an attempt must stop: its claim is gone, it was cancelled, it reached its deadline, or
 * the worker is stopping. */
export type Reason = 'lost' | 'cancelled' | 'deadline' | 'shutdown';

/** How much longer than its signal a handler is waited for before its connection is closed. */
export const ABANDON_MS = 1000;

/** The handler did not stop within ABANDON_MS of its signal. */
export class Abandoned extends Error {}

export class Held implements AttemptHandle {
  /** Why the attempt must stop, once it must. */
  reason: Reason | undefined = undefined;
  /** Made when the handler first reads ctx.signal (most never do). */
  controller: AbortController | undefined = undefined;
  /** Set while the worker waits for the handler: called when the attempt must stop. */
  onAbort: (() => void) | undefined = undefined;
  timer: { clear(): void } | undefined = undefined;
  /** The connection the handler's ctx.tx gives, and whether its transaction is open. */
  client: pg.PoolClient | undefined = undefined;
  inTx = false;
  /** When the attempt began, its trace span, and its result as JSON once its handler returned. */
  readonly started = Date.now();
  span: SpanLike | undefined = undefined;
  result = 'null';
  /** Left to the dispatcher, to be completed with its next settle. */
  pending = false;

  constructor(readonly job: Job, private readonly transactional: boolean) {}

  /** The attempt's AbortSignal, made at its first use (aborted already if the attempt must stop). */
  signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.reason !== undefined) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** The handler's client. The transaction opens at its first use (node-postgres runs a
   * client's queries in order, so BEGIN goes before the handler's first). */
  tx(): pg.PoolClient {
    const client = this.client as pg.PoolClient;
    if (this.transactional && !this.inTx) {
      this.inTx = true;
      client.query('begin').catch(() => {}); // its failure fails the handler's next query
    }
    return client;
  }

  /** Tells the attempt to stop, for the first reason that comes. */
  abort(reason: Reason): void {
    if (this.reason !== undefined) return;
    this.reason = reason;
    this.controller?.abort(reason);
    this.onAbort?.();
  }

  /** Calls `done` once with the handler's end: its value (`failed` false) or what it threw;
   * once told to stop, the handler gets ABANDON_MS more to end, after which `done` gets an
   * Abandoned. */
  follow(work: Promise<unknown>, done: (failed: boolean, value: unknown) => void): void {
    let over = false;
    let timer: NodeJS.Timeout | undefined;
    const end = (failed: boolean, value: unknown): void => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      this.onAbort = undefined;
      done(failed, value);
    };
    this.onAbort = (): void => {
      timer ??= setTimeout(() => end(true, new Abandoned('the handler did not stop')), ABANDON_MS);
    };
    if (this.reason !== undefined) this.onAbort();
    work.then((value) => end(false, value), (err: unknown) => end(true, err));
  }
}
