// Prometheus metrics through prom-client, which the application installs and passes in: this
// module loads nothing, so pg-jobs does not depend on prom-client unless it is used.
//
//   import * as prom from 'prom-client';
//   createWorker({ ..., metrics: prometheusMetrics(prom) });

import type { Metrics, Outcome } from './log.js';

type Labels = Record<string, string>;

/** The parts of prom-client used here (its Counter, Histogram and Gauge constructors). */
export interface PromClientLike {
  Counter: new (config: { name: string; help: string; labelNames: string[]; registers?: unknown[] }) => {
    inc(labels: Labels, value?: number): void;
  };
  Histogram: new (config: { name: string; help: string; labelNames: string[]; buckets?: number[]; registers?: unknown[] }) => {
    observe(labels: Labels, value: number): void;
  };
  Gauge: new (config: { name: string; help: string; registers?: unknown[] }) => {
    set(value: number): void;
  };
}

export interface PrometheusOptions {
  /** The registry to register on (default: prom-client's global one). */
  registry?: unknown;
  /** A prefix for the metric names (default: none). */
  prefix?: string;
}

/**
 * Metrics for a worker: `jobs_total` (counter, by queue, name and outcome),
 * `job_duration_seconds` (histogram, the same labels) and `jobs_running` (gauge). Job names
 * are labels here, per worker: a worker knows its own names, a bounded set (the server-wide
 * counters in `jobs.outcome_stats()` are per queue only).
 */
export function prometheusMetrics(prom: PromClientLike, options: PrometheusOptions = {}): Metrics {
  const prefix = options.prefix ?? '';
  const registers = options.registry === undefined ? undefined : [options.registry];
  const labelNames = ['queue', 'name', 'outcome'];
  const total = new prom.Counter({
    name: `${prefix}jobs_total`, help: 'Attempts of pg_jobs jobs that ended, by outcome', labelNames, registers,
  });
  const duration = new prom.Histogram({
    name: `${prefix}job_duration_seconds`, help: 'How long attempts of pg_jobs jobs ran', labelNames, registers,
    buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300],
  });
  const running = new prom.Gauge({ name: `${prefix}jobs_running`, help: 'Jobs this worker runs now', registers });
  return {
    attemptEnded(queue: string, name: string, outcome: Outcome, durationMs: number): void {
      total.inc({ queue, name, outcome });
      duration.observe({ queue, name, outcome }, durationMs / 1000);
    },
    running(count: number): void {
      running.set(count);
    },
  };
}
