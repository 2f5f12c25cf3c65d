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
  notDeletable: 'PJ009',
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

/** One class per refusal, as the Python library has (each a PgJobsError with its code). */
function refusal(name: string, code: string): new (message: string, hint?: string, options?: { cause?: unknown }) => PgJobsError {
  return class extends PgJobsError {
    constructor(message: string, hint?: string, options?: { cause?: unknown }) {
      super(message, code, hint, options);
      this.name = name;
    }
  };
}

/** PJ002: a live job holds the idempotency key (with `onConflict: 'error'`). */
export const DuplicateJobError = refusal('DuplicateJobError', codes.duplicateJob);
/** PJ003: no such job (or one of a tenant the role is not bound to). */
export const JobNotFoundError = refusal('JobNotFoundError', codes.jobNotFound);
/** PJ004: only a finished job can be requeued. */
export const NotRequeueableError = refusal('NotRequeueableError', codes.notRequeueable);
/** PJ005: a finished job cannot be cancelled. */
export const NotCancellableError = refusal('NotCancellableError', codes.notCancellable);
/** PJ006: only a delayed or snoozed job can be promoted. */
export const NotPromotableError = refusal('NotPromotableError', codes.notPromotable);
/** PJ007: the role is bound to other tenants. */
export const TenantNotAllowedError = refusal('TenantNotAllowedError', codes.tenantNotAllowed);
/** PJ008: a waiting claim inside a REPEATABLE READ or SERIALIZABLE transaction. */
export const WaitNeedsReadCommittedError = refusal('WaitNeedsReadCommittedError', codes.waitNeedsReadCommitted);
/** PJ009: only a finished root job whose family is finished can be deleted. */
export const NotDeletableError = refusal('NotDeletableError', codes.notDeletable);
/** 3F000 or 42883: the database has no pg_jobs, or an older release than this library calls. */
export class NotInstalledError extends PgJobsError {
  constructor(message: string, code: string, hint?: string, options?: { cause?: unknown }) {
    super(message, code, hint, options);
    this.name = 'NotInstalledError';
  }
}

const BY_CODE: Record<string, new (message: string, hint?: string, options?: { cause?: unknown }) => PgJobsError> = {
  [codes.leaseLost]: LeaseLostError,
  [codes.duplicateJob]: DuplicateJobError,
  [codes.jobNotFound]: JobNotFoundError,
  [codes.notRequeueable]: NotRequeueableError,
  [codes.notCancellable]: NotCancellableError,
  [codes.notPromotable]: NotPromotableError,
  [codes.tenantNotAllowed]: TenantNotAllowedError,
  [codes.waitNeedsReadCommitted]: WaitNeedsReadCommittedError,
  [codes.notDeletable]: NotDeletableError,
};

/** Thrown by a handler: the job fails for good, whatever attempts it has left. */
export class NonRetryableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'NonRetryableError';
  }
}

/** Thrown by `ctx.step` when a step runs past its `timeoutMs`: the step is recorded failed with
 * this error, its function's signal aborted (reason `'step_timeout'`), and the attempt fails as
 * timed out (retried while attempts are left). */
export class StepTimeoutError extends Error {
  readonly step: string;
  readonly timeoutMs: number;

  constructor(step: string, timeoutMs: number) {
    super(`step ${step} timed out after ${timeoutMs} ms`);
    this.name = 'StepTimeoutError';
    this.step = step;
    this.timeoutMs = timeoutMs;
  }
}

/** What was thrown, as text: anything at all may be (a value without toString, a BigInt). */
export function describe(err: unknown): string {
  try {
    if (err instanceof Error) return `${err.name}: ${err.message}`;
    return String(err);
  } catch {
    return Object.prototype.toString.call(err);
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
    return new NotInstalledError(`this database has no pg_jobs, or an older one: ${String(e.message)}`, e.code,
      `${INSTALL_HINT}; where it is installed, ALTER EXTENSION pg_jobs UPDATE`, { cause: err });
  }
  if (!OURS.has(e.code)) return err;
  const message = String(e.message);
  const hint = typeof e.hint === 'string' ? e.hint : undefined;
  const Refusal = BY_CODE[e.code];
  return Refusal ? new Refusal(message, hint, { cause: err }) : new PgJobsError(message, e.code, hint, { cause: err });
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

/** What jobs.fail matches against a job type's non-retryable errors: the error's `name`, the
 * names of its class and the classes it extends (not Object), and its `code` where it is text
 * or a number. Anything may be thrown: a value that is no object names nothing. */
export function errorNames(err: unknown): string[] {
  const names: string[] = [];
  const add = (name: unknown): void => {
    if ((typeof name === 'string' && name.length > 0) || typeof name === 'number') {
      const text = String(name);
      if (!names.includes(text)) names.push(text);
    }
  };
  if (err === null || (typeof err !== 'object' && typeof err !== 'function')) return names;
  try {
    add((err as { name?: unknown }).name);
    for (let p = Object.getPrototypeOf(err) as object | null; p !== null && p !== Object.prototype;
      p = Object.getPrototypeOf(p) as object | null) {
      add((Object.getOwnPropertyDescriptor(p, 'constructor')?.value as { name?: unknown } | undefined)?.name);
    }
    add((err as { code?: unknown }).code);
  } catch {
    // a getter or a proxy that throws: the names found so far
  }
  return names.slice(0, 100);
}
