// Errors: the refusals of pg_jobs (SQLSTATE class PJ, and the standard codes its functions
// raise) as one class with `.code`, and the errors a handler throws to steer the engine.

/** pg_jobs's own SQLSTATEs, by name (docs/REFERENCE.md, "Errors"). */
export const codes = {
  leaseLost: 'PJ001',
  duplicateJob: 'PJ002',
  jobNotFound: 'PJ003',
  notRequeueable: 'PJ004',
  notCancellable: 'PJ005',
  notPromotable: 'PJ006',
  tenantNotAllowed: 'PJ007',
  waitNeedsReadCommitted: 'PJ008',
  invalidParameterValue: '22023',
  nullValueNotAllowed: '22004',
} as const;

/** A refusal of a pg_jobs function: `.code` is its SQLSTATE, `.hint` says what to do. */
export class PgJobsError extends Error {
  readonly code: string;
  readonly hint: string | undefined;

  constructor(message: string, code: string, hint?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PgJobsError';
    this.code = code;
    this.hint = hint;
  }
}

/** PJ001: the claim is no longer held (lease lapsed, claimed again, cancelled or settled). */
export class LeaseLostError extends PgJobsError {
  constructor(message: string, hint?: string, options?: { cause?: unknown }) {
    super(message, codes.leaseLost, hint, options);
    this.name = 'LeaseLostError';
  }
}

/** Thrown by a handler: the job fails for good, whatever attempts it has left. */
export class NonRetryableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'NonRetryableError';
  }
}

/** Thrown by a handler: the attempt fails and the job is retried at `retryAt` (attempts left
 * permitting) instead of after its type's backoff. */
export class RetryAfterError extends Error {
  readonly retryAt: Date;

  constructor(message: string, after: number | Date, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RetryAfterError';
    this.retryAt = after instanceof Date ? after : new Date(Date.now() + after);
  }
}

interface DatabaseError {
  code?: unknown;
  message?: unknown;
  hint?: unknown;
}

const OURS = new Set<string>(Object.values(codes));

/** What a database without pg_jobs needs, said wherever it is found missing. */
export const INSTALL_HINT = 'CREATE EXTENSION pg_jobs (as a superuser) in this database, or install the SQL-only '
  + 'edition (sql-only/pg_jobs.sql, docs/EDITIONS.md)';

/** No schema jobs (3F000), or no such function jobs.* (42883): no pg_jobs, or an older one. */
function notInstalled(e: DatabaseError): boolean {
  const message = String(e.message);
  return (e.code === '3F000' && message.includes('"jobs"'))
    || (e.code === '42883' && message.startsWith('function jobs.'));
}

/** The error a caller sees for an error of the driver: pg_jobs's refusals become
 * PgJobsError (LeaseLostError for PJ001), as does a database without pg_jobs (its code 3F000
 * or 42883, its hint the fix); anything else is returned as it is. */
export function fromDriver(err: unknown): unknown {
  const e = err as DatabaseError | null | undefined;
  if (typeof e !== 'object' || e === null || typeof e.code !== 'string') return err;
  if (notInstalled(e)) {
    return new PgJobsError(`this database has no pg_jobs, or an older one: ${String(e.message)}`, e.code,
      `${INSTALL_HINT}; where it is installed, ALTER EXTENSION pg_jobs UPDATE`, { cause: err });
  }
  if (!OURS.has(e.code)) return err;
  const message = String(e.message);
  const hint = typeof e.hint === 'string' ? e.hint : undefined;
  if (e.code === codes.leaseLost) return new LeaseLostError(message, hint, { cause: err });
  return new PgJobsError(message, e.code, hint, { cause: err });
}

/** Whether an error of the driver means the connection is gone (made again, with backoff). */
export function isConnectionError(err: unknown): boolean {
  const code = (err as DatabaseError | null)?.code;
  if (typeof code === 'string') {
    // 08: connection exceptions; 57P01-57P03: the server shut down or restarted.
    return code.startsWith('08') || ['57P01', '57P02', '57P03'].includes(code);
  }
  return err instanceof Error && /Connection terminated|ECONNREFUSED|ECONNRESET|EPIPE|not queryable/i.test(err.message);
}
