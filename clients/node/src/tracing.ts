// OpenTelemetry spans, one per attempt, through the tracer the application passes in
// (`trace.getTracer('my-service')` of @opentelemetry/api): pg-jobs loads nothing of it.

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
  startSpan(name: string, options?: { kind?: number; attributes?: Record<string, string | number | boolean> }): SpanLike;
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
  });
}

/** Ends it with the attempt's outcome (an error status for an attempt that did not land). */
export function endAttemptSpan(span: SpanLike, outcome: Outcome, error?: string): void {
  span.setAttribute('pg_jobs.outcome', outcome);
  span.setStatus(FAILED.has(outcome) ? { code: ERROR, message: error ?? outcome } : { code: OK });
  span.end();
}
