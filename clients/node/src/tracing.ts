// OpenTelemetry spans, one per attempt, through the tracer the application passes in
// (`trace.getTracer('my-service')` of @opentelemetry/api): pg-jobs loads nothing of it. With
// useOpenTelemetry(api), enqueues carry the active trace context in the job's meta (a W3C
// traceparent) and each attempt's span starts under it.

import type { Job } from './context.js';
import type { Outcome } from './log.js';

/** The parts of an OpenTelemetry Span used here. */
export interface SpanLike {
  setAttribute(key: string, value: string | number | boolean): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}

/** The part of an OpenTelemetry Tracer used here. */
export interface TracerLike {
  startSpan(name: string, options?: { kind?: number; attributes?: Record<string, string | number | boolean> },
    context?: unknown): SpanLike;
}

/** The parts of @opentelemetry/api used to carry a trace from an enqueue to its attempts. */
export interface OpenTelemetryLike {
  context: { active(): unknown };
  propagation: {
    inject(context: unknown, carrier: Record<string, string>): void;
    extract(context: unknown, carrier: Record<string, string>): unknown;
  };
  ROOT_CONTEXT: unknown;
  trace: { getTracer(name: string): TracerLike };
}

let otel: OpenTelemetryLike | undefined;

/** Carries traces through jobs: `useOpenTelemetry(api)` with `import * as api from
 * '@opentelemetry/api'`. Then every enqueue puts the active context's `traceparent` (and
 * `tracestate`) in the job's meta, and a worker with no `tracer` of its own traces each attempt
 * with `api.trace.getTracer('pg-jobs')`, its span a child of the enqueue's. `undefined` stops. */
export function useOpenTelemetry(api: OpenTelemetryLike | undefined): void {
  otel = api;
}

/** The tracer a worker uses when it is given none: pg-jobs's, once useOpenTelemetry was called. */
export function defaultTracer(): TracerLike | undefined {
  return otel?.trace.getTracer('pg-jobs');
}

/** The active trace context as meta entries, or undefined (no useOpenTelemetry, no trace). */
export function traceMeta(): Record<string, string> | undefined {
  if (otel === undefined) return undefined;
  const carrier: Record<string, string> = {};
  otel.propagation.inject(otel.context.active(), carrier);
  if (typeof carrier.traceparent !== 'string') return undefined;
  // The trace context only (a propagator may add baggage, which is not the job's to keep).
  return typeof carrier.tracestate === 'string'
    ? { traceparent: carrier.traceparent, tracestate: carrier.tracestate }
    : { traceparent: carrier.traceparent };
}

/** The context a job's meta carries, for its attempt's span; undefined for none. */
function parentContext(job: Job): unknown {
  const traceparent = job.meta?.traceparent;
  if (otel === undefined || typeof traceparent !== 'string') return undefined;
  const carrier: Record<string, string> = { traceparent };
  if (typeof job.meta?.tracestate === 'string') carrier.tracestate = job.meta.tracestate;
  return otel.propagation.extract(otel.ROOT_CONTEXT, carrier);
}

// @opentelemetry/api's SpanKind.CONSUMER and SpanStatusCode.OK / ERROR.
const CONSUMER = 4;
const OK = 1;
const ERROR = 2;
const FAILED = new Set<Outcome>(['retried', 'failed', 'dead', 'lost', 'timed_out', 'cancelled']);

/** Starts the span of one attempt: `<job name> process`, with the job's attributes. */
export function startAttemptSpan(tracer: TracerLike, job: Job): SpanLike {
  return tracer.startSpan(`${job.name} process`, {
    kind: CONSUMER,
    attributes: {
      'messaging.system': 'pg_jobs',
      'messaging.operation': 'process',
      'messaging.destination.name': job.queue,
      'messaging.message.id': job.id,
      'pg_jobs.job.name': job.name,
      'pg_jobs.job.attempt': job.attempt,
      'pg_jobs.job.max_attempts': job.maxAttempts,
      'pg_jobs.run_id': job.runId,
    },
  }, parentContext(job));
}

/** Ends it with the attempt's outcome (an error status for an attempt that did not land). */
export function endAttemptSpan(span: SpanLike, outcome: Outcome, error?: string): void {
  span.setAttribute('pg_jobs.outcome', outcome);
  span.setStatus(FAILED.has(outcome) ? { code: ERROR, message: error ?? outcome } : { code: OK });
  span.end();
}
