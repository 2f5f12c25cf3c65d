"""Errors: pg_jobs's refusals (SQLSTATE class PJ, and the standard codes its functions raise)
as exceptions with ``.code`` and ``.hint``, and the exceptions a handler raises to steer the
engine."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg

#: pg_jobs's own SQLSTATEs, by name (docs/REFERENCE.md, "Errors").
CODES = {
    "lease_lost": "PJ001",
    "duplicate_job": "PJ002",
    "job_not_found": "PJ003",
    "not_requeueable": "PJ004",
    "not_cancellable": "PJ005",
    "not_promotable": "PJ006",
    "tenant_not_allowed": "PJ007",
    "wait_needs_read_committed": "PJ008",
    "not_deletable": "PJ009",
}


class PgJobsError(Exception):
    """A refusal of a pg_jobs function: ``code`` is its SQLSTATE, ``hint`` says what to do."""

    code = ""

    def __init__(self, message: str, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        if code is not None:
            self.code = code


class LeaseLost(PgJobsError):
    """PJ001: the claim is no longer held (lease lapsed, claimed again, cancelled or settled)."""

    code = "PJ001"


class DuplicateJob(PgJobsError):
    """PJ002: ``on_conflict => 'error'`` and a live job holds the idempotency key."""

    code = "PJ002"


class JobNotFound(PgJobsError):
    """PJ003: no job has this id."""

    code = "PJ003"


class NotRequeueable(PgJobsError):
    """PJ004: the job is live."""

    code = "PJ004"


class NotCancellable(PgJobsError):
    """PJ005: the job is finished."""

    code = "PJ005"


class NotPromotable(PgJobsError):
    """PJ006: the job is neither delayed nor snoozed."""

    code = "PJ006"


class TenantNotAllowed(PgJobsError):
    """PJ007: the role is bound to other tenants."""

    code = "PJ007"


class WaitNeedsReadCommitted(PgJobsError):
    """PJ008: a waiting claim in a REPEATABLE READ or SERIALIZABLE transaction."""

    code = "PJ008"


class NotDeletable(PgJobsError):
    """PJ009: the job is live, is a child (deleted with its root), or a job of its family is live."""

    code = "PJ009"


class NotInstalled(PgJobsError):
    """3F000 (no schema jobs) or 42883 (no such function jobs.*): the database has no pg_jobs,
    or an older release than this library calls."""

    code = "3F000"


#: What a database without pg_jobs needs, said wherever it is found missing.
INSTALL_HINT = ("CREATE EXTENSION pg_jobs (as a superuser) in this database, or install the SQL-only edition "
                "(sql-only/pg_jobs.sql, docs/EDITIONS.md)")


_BY_CODE: dict[str, type[PgJobsError]] = {
    cls.code: cls for cls in (LeaseLost, DuplicateJob, JobNotFound, NotRequeueable, NotCancellable,
                              NotPromotable, TenantNotAllowed, WaitNeedsReadCommitted, NotDeletable)
}


class NonRetryable(Exception):
    """Raised by a handler: the job fails for good, whatever attempts it has left."""


class StepTimeout(TimeoutError):
    """Raised by ``ctx.step`` when a step runs past its ``timeout``: the step is recorded failed
    with this error and the attempt fails as timed out (retried while attempts are left). An
    ``async`` step is cancelled at the timeout; a plain handler's ``ctx.cancelled`` is set
    (``cancel_reason`` ``'step_timeout'``), which its step should watch."""

    def __init__(self, step: str, timeout: float) -> None:
        super().__init__(f"step {step} timed out after {timeout:g} s")
        self.step = step
        self.timeout = timeout


class RetryAfter(Exception):
    """Raised by a handler: the attempt fails and the job is retried after ``seconds`` (or at
    ``at``), attempts left permitting, instead of after its type's backoff."""

    def __init__(self, seconds: float | None = None, message: str = "retry later", *,
                 at: dt.datetime | None = None) -> None:
        super().__init__(message)
        if at is None:
            at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds or 0)
        self.at = at


def from_driver(err: BaseException) -> BaseException:
    """The exception a caller sees for a driver error: pg_jobs's refusals become their
    PgJobsError subclass; anything else is answered as it is."""
    if isinstance(err, psycopg.Error) and ((err.sqlstate == "3F000" and '"jobs"' in str(err)) or
                                           (err.sqlstate == "42883" and str(err).startswith("function jobs."))):
        missing = NotInstalled(f"this database has no pg_jobs, or an older one: {err.diag.message_primary or err}",
                               f"{INSTALL_HINT}; where it is installed, ALTER EXTENSION pg_jobs UPDATE",
                               err.sqlstate)
        missing.__cause__ = err
        return missing
    if isinstance(err, psycopg.Error) and err.sqlstate in _BY_CODE:
        diag: Any = err.diag
        exc = _BY_CODE[err.sqlstate](diag.message_primary or str(err), diag.message_hint)
        exc.__cause__ = err
        return exc
    return err


def is_connection_error(err: BaseException) -> bool:
    """Whether the connection is gone (made again, with backoff)."""
    if isinstance(err, psycopg.OperationalError):
        return True
    if isinstance(err, psycopg.Error) and err.sqlstate:
        return err.sqlstate.startswith("08") or err.sqlstate in ("57P01", "57P02", "57P03")
    return isinstance(err, psycopg.InterfaceError)


def error_names(err: BaseException) -> list[str]:
    """What jobs.fail matches against a job type's non_retryable_errors: the exception's class
    and its bases (not ``BaseException`` nor ``object``), then its ``code`` and ``sqlstate``
    attributes where they are text or numbers."""
    names = [c.__name__ for c in type(err).__mro__ if c not in (BaseException, object)]
    for attr in ("code", "sqlstate"):
        try:
            value = getattr(err, attr, None)
        except Exception:  # noqa: BLE001 (a property that raises names nothing)
            continue
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) not in names:
            names.append(str(value))
    return names[:100]
