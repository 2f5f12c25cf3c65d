"""Producers: enqueue one job or many, on a psycopg connection inside the caller's
transaction (rolled back: no job), sync or asyncio."""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, overload

import psycopg
from psycopg.types.json import Jsonb

from .errors import from_driver
from .jobs import JobDefinition

_SQL = "select id, run_id, deduped, action from jobs.enqueue_batch(%s::jsonb) order by ordinal"
_OPTIONS = {"queue", "run_at", "delay", "priority", "max_attempts", "idempotency_key", "tenant_id",
            "concurrency_key", "on_conflict", "id", "run_id", "parent_id", "timeout", "debounce",
            "debounce_max", "run_timeout", "tags", "meta", "ordering_key", "enqueued_by"}


@dataclass(frozen=True)
class Enqueued:
    """An enqueued job: its id and run id, and whether an existing live job was handed back
    (its idempotency key or id taken) instead of a new one made."""

    id: uuid.UUID
    run_id: uuid.UUID
    deduped: bool
    #: What the engine did: inserted, returned (deduped), replaced or debounced (``on_conflict``),
    #: or for a busy key (``when_busy``) skipped or replaced.
    action: str = "inserted"


def _seconds(value: float | dt.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def _with_trace(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """meta with the active OpenTelemetry context's traceparent (and tracestate) added, when the
    application has loaded OpenTelemetry and a span is active, unless meta carries one."""
    if (meta is not None and "traceparent" in meta) or "opentelemetry" not in sys.modules:
        return None if meta is None else dict(meta)
    from opentelemetry import propagate  # (the package is loaded already)

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    trace = {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}
    if "traceparent" not in trace:
        return None if meta is None else dict(meta)
    return {**trace, **(meta or {})}


def spec(job: JobDefinition[Any] | str, payload: Any = None, **options: Any) -> dict[str, Any]:
    """One item of jobs.enqueue_batch's array, from a job (or its name), a payload and the
    options of jobs.enqueue (``delay`` in seconds or a timedelta; ``timeout``, ``run_timeout``,
    ``debounce`` and ``debounce_max`` likewise). With OpenTelemetry loaded, ``meta`` gets the
    active trace context (``traceparent``) unless it has one."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"enqueue: unknown option(s) {', '.join(sorted(unknown))}; "
                        f"the options are {', '.join(sorted(_OPTIONS))}")
    name = job if isinstance(job, str) else job.name
    out: dict[str, Any] = {"name": name, "payload": {} if payload is None else payload}
    queue = options.pop("queue", None) or (None if isinstance(job, str) else job.queue)
    if queue is not None:
        out["queue"] = queue
    run_at, delay = options.pop("run_at", None), options.pop("delay", None)
    if run_at is not None and delay is not None:
        raise TypeError("enqueue: pass run_at or delay, not both")
    if delay is not None:
        run_at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=_seconds(delay))
    if run_at is not None:
        out["run_at"] = run_at.isoformat()
    meta = _with_trace(options.pop("meta", None))
    if meta is not None:
        out["meta"] = meta
    for key in ("timeout", "debounce", "debounce_max", "run_timeout"):  # seconds, or a timedelta
        value = options.pop(key, None)
        if value is not None:
            out[key] = f"{_seconds(value)} seconds"
    for key, value in options.items():
        if value is not None:
            out[key] = str(value) if isinstance(value, uuid.UUID) else value
    return out


def _answers(rows: Iterable[tuple[Any, ...]]) -> list[Enqueued]:
    return [Enqueued(id=r[0], run_id=r[1], deduped=r[2], action=r[3]) for r in rows]


def _items(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in items:
        options = dict(item)
        job = options.pop("job")
        out.append(spec(job, options.pop("payload", None), **options))
    return out


def _many_sync(conn: psycopg.Connection[Any], specs: list[dict[str, Any]]) -> list[Enqueued]:
    try:
        return _answers(conn.execute(_SQL, (Jsonb(specs),)).fetchall())
    except psycopg.Error as err:
        raise from_driver(err) from None


async def _many_async(conn: psycopg.AsyncConnection[Any], specs: list[dict[str, Any]]) -> list[Enqueued]:
    try:
        cur = await conn.execute(_SQL, (Jsonb(specs),))
        return _answers(await cur.fetchall())
    except psycopg.Error as err:
        raise from_driver(err) from None


async def _first(many: Coroutine[Any, Any, list[Enqueued]]) -> Enqueued:
    return (await many)[0]


@overload
def enqueue(conn: psycopg.Connection[Any], job: JobDefinition[Any] | str, payload: Any = None,
            **options: Any) -> Enqueued: ...
@overload
def enqueue(conn: psycopg.AsyncConnection[Any], job: JobDefinition[Any] | str, payload: Any = None,
            **options: Any) -> Coroutine[Any, Any, Enqueued]: ...
def enqueue(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], job: JobDefinition[Any] | str,
            payload: Any = None, **options: Any) -> Enqueued | Coroutine[Any, Any, Enqueued]:
    """Enqueues one job in ``conn``'s transaction (awaitable on an AsyncConnection). Options:
    queue, run_at or delay, priority, max_attempts, idempotency_key, tenant_id,
    concurrency_key, on_conflict, id, run_id, parent_id, timeout, run_timeout, debounce,
    debounce_max, tags, meta, ordering_key, enqueued_by (a service name kept beside the role:
    by default the connection's application_name)."""
    specs = [spec(job, payload, **options)]
    if isinstance(conn, psycopg.AsyncConnection):
        return _first(_many_async(conn, specs))
    return _many_sync(conn, specs)[0]


@overload
def enqueue_many(conn: psycopg.Connection[Any], items: Iterable[Mapping[str, Any]]) -> list[Enqueued]: ...
@overload
def enqueue_many(conn: psycopg.AsyncConnection[Any],
                 items: Iterable[Mapping[str, Any]]) -> Coroutine[Any, Any, list[Enqueued]]: ...
def enqueue_many(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
                 items: Iterable[Mapping[str, Any]]) -> list[Enqueued] | Coroutine[Any, Any, list[Enqueued]]:
    """Enqueues many jobs in one statement (at most 10,000): each item a mapping with ``job``,
    ``payload`` and enqueue's options. One answer per item, in order; a refusal of any item
    enqueues none."""
    specs = _items(items)
    if isinstance(conn, psycopg.AsyncConnection):
        return _many_async(conn, specs)
    return _many_sync(conn, specs) if specs else []
