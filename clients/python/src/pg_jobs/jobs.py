"""Job definitions: a name, a handler, and the policy a DBA may also set in jobs.job_types."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import sql

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Policy:
    """The columns of jobs.job_types; ``None`` leaves a column as the table has it."""

    max_attempts: int | None = None
    backoff: str | None = None  # 'exponential' | 'fixed'
    backoff_base: dt.timedelta | None = None
    backoff_max: dt.timedelta | None = None
    jitter: float | None = None
    dead_letter: bool | None = None
    lease: dt.timedelta | None = None
    timeout: dt.timedelta | None = None
    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: dt.timedelta | None = None
    rate_limit_per_key: bool | None = None
    #: Errors that end the job at once, however many attempts it has left (dead-lettered, or
    #: failed where dead_letter is off): an exception's class name, one of its bases' or its
    #: ``code`` (``sqlstate`` for a database error). Matched by the engine, so a worker of
    #: another language decides the same.
    non_retryable_errors: tuple[str, ...] | None = None
    #: The most jobs of one ``concurrency_key`` running at once, fleet-wide (the table's default: 1).
    key_concurrency: int | None = None
    #: What an enqueue with a ``concurrency_key`` does when its key is busy: 'queue' (it waits its
    #: turn), 'skip' (at the key's limit: nothing inserted, the running job answered, action
    #: 'skipped'), 'replace' (a job of the key waiting to start takes the new payload: at most
    #: one waits).
    when_busy: str | None = None


@dataclass(frozen=True)
class JobDefinition(Generic[F]):
    """A job a worker can run: ``handler(payload, ctx)``, plain or ``async def``."""

    name: str
    handler: F
    queue: str | None = None
    policy: Policy | None = None
    #: True (the default): the handler's writes through ``ctx.conn`` and the completion commit
    #: together. False: no transaction is opened; for effects outside the database.
    transactional: bool = True

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the handler itself (in a test, say)."""
        return self.handler(*args, **kwargs)


def job(name: str, *, queue: str | None = None, policy: Policy | None = None,
        transactional: bool = True, non_retryable_errors: Iterable[str] | None = None,
        ) -> Callable[[F], JobDefinition[F]]:
    """Declares a job: ``@pg_jobs.job("send_email")`` on ``def send(payload, ctx)`` or on an
    ``async def``. ``non_retryable_errors`` is the policy's (``Policy.non_retryable_errors``)."""
    if not isinstance(name, str) or not name:
        raise TypeError("pg_jobs.job: name must be a non-empty string")
    if non_retryable_errors is not None:
        names = (non_retryable_errors,) if isinstance(non_retryable_errors, str) else tuple(non_retryable_errors)
        if not all(isinstance(n, str) and n for n in names):
            raise TypeError(f"pg_jobs.job({name!r}): non_retryable_errors must be non-empty strings")
        policy = replace(policy or Policy(), non_retryable_errors=names)

    def wrap(handler: F) -> JobDefinition[F]:
        if not callable(handler):
            raise TypeError(f"pg_jobs.job({name!r}): the handler must be callable")
        return JobDefinition(name=name, handler=handler, queue=queue, policy=policy, transactional=transactional)

    return wrap


def jobs_in(values: Iterable[object]) -> list[JobDefinition[Any]]:
    """The job definitions among these values (a module's attributes, a list)."""
    return [v for v in values if isinstance(v, JobDefinition)]


def sync_policies(conn: psycopg.Connection[Any], jobs: Iterable[JobDefinition[Any]]) -> int:
    """Writes the policies of these jobs to jobs.job_types (as an admin role:
    jobs.grant_admin). Only the columns a policy names are written; a job without a policy is
    left alone. The table wins otherwise: a worker never writes it on its own, so a DBA's change
    stays until the application calls this again. Answers how many job types were written."""
    written = 0
    for definition in jobs:
        if definition.policy is None:
            continue
        chosen = {f.name: getattr(definition.policy, f.name) for f in fields(Policy)}
        chosen = {k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items() if v is not None}
        if not chosen:
            continue
        columns = [sql.Identifier(k) for k in chosen]
        conn.execute(sql.SQL(
            "insert into jobs.job_types as t (name, {cols}) values (%s, {vals}) "
            "on conflict (name) do update set {sets}").format(
                cols=sql.SQL(", ").join(columns),
                vals=sql.SQL(", ").join(sql.Placeholder() for _ in columns),
                sets=sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=c) for c in columns)),
            [definition.name, *chosen.values()])
        written += 1
    return written
