"""pg_jobs for Python: workers and producers for pg_jobs, the job queue inside PostgreSQL.

The engine decides retries, backoff, fencing, burial and limits; this package calls its SQL
and hands the outcome to your handler: a cancellation event (and task cancellation for
``async def`` handlers), the connection of the transaction that completes the job, and a few
durable calls."""

from .context import AsyncContext, Backfill, ChildResult, Context, EventResult, Job
from .enqueue import Enqueued, enqueue, enqueue_many
from .errors import (CODES, DuplicateJob, JobNotFound, LeaseLost, NonRetryable, NotCancellable, NotDeletable,
                     NotInstalled, NotPromotable, NotRequeueable, PgJobsError, RetryAfter, StepTimeout, TenantNotAllowed,
                     WaitNeedsReadCommitted)
from .hooks import SettledOutcome
from .jobs import JobDefinition, Policy, job, jobs_in, sync_policies
from .observe import CountingMetrics, Metrics, Outcome
from .operate import cancel, delete_job, promote, requeue
from .status import JobStatus, get_job, get_jobs, wait_for_job
from .shards import ShardedWorker, hash_shard, shard_for, shard_of
from .worker import Worker

__all__ = [
    "AsyncContext", "Backfill", "ChildResult", "Context", "EventResult", "Job", "Enqueued", "enqueue", "enqueue_many", "CODES",
    "DuplicateJob", "JobNotFound", "LeaseLost", "NonRetryable", "NotCancellable", "NotDeletable", "NotInstalled",
    "NotPromotable",
    "NotRequeueable", "PgJobsError", "RetryAfter", "TenantNotAllowed", "WaitNeedsReadCommitted", "JobDefinition",
    "Policy", "job", "jobs_in", "sync_policies", "CountingMetrics", "Metrics", "Outcome", "Worker", "JobStatus",
    "get_job", "get_jobs", "wait_for_job", "cancel", "requeue", "promote", "delete_job", "SettledOutcome",
    "StepTimeout", "ShardedWorker", "hash_shard", "shard_for", "shard_of",
]
__version__ = "0.1.1"
