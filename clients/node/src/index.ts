// pg-jobs: workers and producers for pg_jobs, the job queue inside PostgreSQL.

export { defineJob, syncPolicies, isJobDefinition } from './jobs.js';
export type { JobDefinition, Handler, Policy } from './jobs.js';
export { enqueue, enqueueMany } from './enqueue.js';
export type { EnqueueOptions, EnqueueItem, Enqueued } from './enqueue.js';
export { getJob, getJobs, waitForJob } from './status.js';
export { cancel, requeue, promote, deleteJob } from './operate.js';
export type { JobStatus } from './status.js';
export { createWorker, Worker } from './worker.js';
export type { WorkerOptions } from './worker.js';
export { createShardedWorker, hashShard, ShardedWorker, shardFor, shardOf } from './shards.js';
export type { ShardedWorkerOptions } from './shards.js';
export { hookCodes } from './hooks.js';
export type { OnExhausted, OnSettled, SettledOutcome } from './hooks.js';
export type { Job, JobContext, ChildJob, ChildResult, StepOptions, BackfillPass, BackfillDone } from './context.js';
export {
  codes, PgJobsError, LeaseLostError, DuplicateJobError, JobNotFoundError, NotRequeueableError, NotCancellableError,
  NotPromotableError, NotDeletableError, TenantNotAllowedError, WaitNeedsReadCommittedError, NotInstalledError, NonRetryableError,
  RetryAfterError, StepTimeoutError, errorNames,
} from './errors.js';
export { jsonLogger, silentLogger, CountingMetrics } from './log.js';
export type { Logger, Metrics, Outcome } from './log.js';
export { prometheusMetrics } from './prometheus.js';
export { useOpenTelemetry } from './tracing.js';
export type { OpenTelemetryLike, SpanLike, TracerLike } from './tracing.js';
export type { PromClientLike, PrometheusOptions } from './prometheus.js';
export type { Queryable } from './db.js';
export { fromDrizzle, fromKnex, fromKysely, fromPrisma } from './adapters.js';
export type { DrizzleLike, KnexLike, KyselyLike, PrismaLike } from './adapters.js';
