"""OpenTelemetry: a span per attempt, ``<job name> process``, with the job's queue, id, attempt
and outcome, its status an error for an attempt that did not land, a child of the trace its
enqueue carried in the job's meta (``traceparent``). Used when a tracer is given
(``opentelemetry.trace.get_tracer(...)``, an optional dependency)."""

from __future__ import annotations

import time
from typing import Any

from .context import Job

_LANDED = {"completed", "parked", "handed_back"}


def record_attempt(tracer: Any, job: Job, outcome: str, seconds: float, error: str | None) -> None:
    end = time.time_ns()
    context = None
    if job.meta is not None and isinstance(job.meta.get("traceparent"), str):
        from opentelemetry import propagate

        context = propagate.extract({k: v for k, v in job.meta.items() if k in ("traceparent", "tracestate")})
    span = tracer.start_span(f"{job.name} process", context=context, start_time=end - int(seconds * 1e9), attributes={
        "messaging.system": "pg_jobs", "messaging.destination.name": job.queue, "messaging.message.id": str(job.id),
        "pg_jobs.attempt": job.attempt, "pg_jobs.outcome": outcome})
    if outcome not in _LANDED:
        from opentelemetry.trace import Status, StatusCode
        span.set_status(Status(StatusCode.ERROR, error or outcome))
    span.end(end_time=end)
