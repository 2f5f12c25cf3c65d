"""The handler's context: the job, its cancellation, the connection of the transaction that
completes it, and the durable operations of a held job (steps, events, children, snooze),
each fenced by the claim in the server. Parking a job (waiting for an event or children,
snoozing) ends the handler with ``Parked``, which the worker understands: no attempt used."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import math
import re
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from . import queries as q
from .errors import PgJobsError, StepTimeout, from_driver
from .jobs import JobDefinition
from .observe import describe

T = TypeVar("T")



@dataclass(frozen=True)
class Job:
    """A claimed job, as jobs.claim answers it."""

    id: uuid.UUID
    run_id: uuid.UUID
    name: str
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    claim: int
    #: When this attempt times out (its type's or its own timeout, never after the run's
    #: deadline: run_timeout); None for never.
    deadline: dt.datetime | None
    tenant_id: str | None
    #: The job that spawned this one (ctx.spawn); None for a job enqueued on its own.
    parent_id: uuid.UUID | None
    priority: int
    enqueued_at: dt.datetime
    last_error: str | None
    #: The labels it was enqueued with; None for none.
    tags: list[str] | None = None
    #: What its producer carried (a traceparent, ...); None for none.
    meta: dict[str, Any] | None = None

_JOB_FIELDS = tuple(f.name for f in fields(Job))

#: A claimed row as the worker reads it: the job, the seconds left to its deadline by the
#: server's clock (None for none), and whether the claim buried it rather than handing it out.
Claimed = tuple[Job, float | None, bool | None]


def _job_fields(v: Sequence[Any]) -> dict[str, Any]:
    """A job's fields from a claimed row that begins with them, in ``Job``'s order: a dict
    display, twice as fast as ``dict(zip(names, row))`` (0.5 µs against 1.0)."""
    return {"id": v[0], "run_id": v[1], "name": v[2], "queue": v[3], "payload": v[4], "attempt": v[5],
            "max_attempts": v[6], "claim": v[7], "deadline": v[8], "tenant_id": v[9], "parent_id": v[10],
            "priority": v[11], "enqueued_at": v[12], "last_error": v[13], "tags": v[14], "meta": v[15]}


if tuple(_job_fields(range(len(_JOB_FIELDS)))) != _JOB_FIELDS:  # a field of Job missing above
    raise ImportError("pg_jobs.context: _job_fields does not name Job's fields in their order")


def claimed_row(cursor: Any) -> Callable[[Sequence[Any]], Claimed]:
    """A psycopg row factory for queries.CLAIMED_COLUMNS, which begin with a job's fields in
    ``Job``'s order (checked by name, once a result). A job's fields are set at once, its
    ``__dict__`` made from the row, not one by one as a frozen dataclass's ``__init__`` does (a
    third of the time) nor copied into the one ``object.__new__`` gives it: 1.5 µs a row where
    that took 2.4 on a 2-core machine, which counts at thousands of jobs a second."""
    at = {column.name: i for i, column in enumerate(cursor.description or ())}
    if [at.get(f) for f in _JOB_FIELDS] != list(range(len(_JOB_FIELDS))):
        raise RuntimeError("pg-jobs: a claim's columns must begin with Job's fields, in its order "
                           "(queries.CLAIMED_COLUMNS)")
    time_left, buried = at["time_left"], at["buried"]
    new, set_dict = object.__new__, object.__setattr__

    def make(values: Sequence[Any]) -> Claimed:
        job = new(Job)
        set_dict(job, "__dict__", _job_fields(values))
        return job, values[time_left], values[buried]

    return make


@dataclass(frozen=True)
class ChildResult:
    id: uuid.UUID
    name: str
    state: str
    result: Any
    error: str | None


@dataclass
class Backfill:
    """What a backfill (``ctx.backfill``) did: its passes (the last included), the rows they
    handled and the last cursor."""

    passes: int = 0
    rows: int = 0
    cursor: Any = None
    ended: bool = False

    def next_pass(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """A pass's answer as its step saves it: rows, cursor, and whether it was the last."""
        rows = answer.get("rows")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
            raise TypeError(f"backfill pass {self.passes + 1}: rows must be a count, got {rows!r}")
        return {"rows": rows, "cursor": answer.get("cursor"), "done": bool(answer.get("done")) or rows == 0}

    def passed(self, output: Mapping[str, Any]) -> None:
        self.passes += 1
        self.rows += output["rows"]
        self.cursor = output["cursor"]
        self.ended = output["done"]


_PASS = re.compile(r"backfill:([1-9][0-9]*)")


@dataclass(frozen=True)
class EventResult:
    status: str  # 'received' | 'timed_out'
    payload: Any


class Parked(BaseException):
    """Ends a handler whose job was parked (no attempt used). A BaseException, so a handler's
    ``except Exception`` does not swallow it."""

    def __init__(self, why: str, until: dt.datetime | None = None) -> None:
        super().__init__(f"the job was parked: {why}")
        self.until = until


#: Runs a statement for a held job on the worker's control connection (committed at once,
#: whatever the handler's transaction does); answers its rows.
Control = Callable[[str, tuple[Any, ...]], Coroutine[Any, Any, list[tuple[Any, ...]]]]


class _Durable:
    """The durable calls, as coroutines on the worker's event loop."""

    def __init__(self, job: Job, control: Control) -> None:
        self.job = job
        self._control = control

    async def _call(self, query: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            return await self._control(query, args)
        except psycopg.Error as err:
            raise from_driver(err) from None

    async def start_step(self, name: str) -> tuple[bool, Any]:
        """(True, the saved output) when the run completed the step before; else the step is
        marked running and (False, None) answers."""
        rows = await self._call(q.START_STEP, (self.job.id, self.job.claim, name))
        return (True, rows[0][1]) if rows and rows[0][0] else (False, None)

    async def backfill_start(self) -> Backfill:
        """Where the run's backfill got to: its finished passes, read at once."""
        done = Backfill()
        for step, state, output in await self._call(q.GET_STEPS, (self.job.run_id,)):
            n = _PASS.fullmatch(step)
            if n is None or state != "completed":
                continue
            done.rows += output["rows"]
            if int(n[1]) > done.passes:
                done.passes, done.cursor, done.ended = int(n[1]), output["cursor"], output["done"]
        return done

    async def fail_step(self, name: str, err: BaseException) -> None:
        """Records the step failed with its error; a claim lost meanwhile records nothing, and
        the step's own error is the one the handler sees."""
        try:
            await self._call(q.FAIL_STEP, (self.job.id, self.job.claim, name, describe(err)))
        except (PgJobsError, psycopg.Error):
            pass

    async def save_step(self, name: str, output: Any) -> None:
        await self._call(q.SAVE_STEP, (self.job.id, self.job.claim, name, Jsonb(output)))

    async def wait_for_event(self, name: str, key: str | None, timeout: float | None) -> EventResult:
        rows = await self._call(
            q.AWAIT_EVENT,
            (self.job.id, self.job.claim, name, key, None if timeout is None else dt.timedelta(seconds=timeout)))
        if not rows or rows[0][0] == "waiting":
            raise Parked(f"waiting for event {name}")
        return EventResult(status=rows[0][0], payload=rows[0][1])

    async def spawn(self, child_key: str, child: JobDefinition[Any] | str, payload: Any,
                    options: dict[str, Any]) -> tuple[uuid.UUID, bool]:
        item: dict[str, Any] = {"name": child if isinstance(child, str) else child.name,
                                "payload": {} if payload is None else payload, "child_key": child_key}
        queue = options.pop("queue", None) or (None if isinstance(child, str) else child.queue)
        if queue is not None:
            item["queue"] = queue
        item.update({k: v for k, v in options.items() if v is not None})
        rows = await self._call(q.SPAWN,
                                (self.job.id, self.job.claim, Jsonb(item)))
        return rows[0][0], rows[0][1]

    async def sleep(self, step: str, until: dt.datetime) -> None:
        rows = await self._call(q.SLEEP, (self.job.id, self.job.claim, step, until))
        if not rows or not rows[0][0]:
            raise Parked(f"asleep until {until.isoformat()}")

    async def await_children(self) -> list[ChildResult]:
        rows = await self._call(q.AWAIT_CHILDREN, (self.job.id, self.job.claim))
        if not rows or rows[0][0] == "waiting":
            raise Parked("waiting for its children")
        return [ChildResult(id=uuid.UUID(c["id"]), name=c["name"], state=c["state"], result=c.get("result"),
                            error=c.get("error")) for c in rows[0][1] or []]


def _step_timeout(name: str, timeout: float | dt.timedelta | None) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else float(timeout)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"step {name}: timeout must be a positive number of seconds, got {timeout!r}")
    return seconds


async def _run_async_step(name: str, fn: Callable[[], T] | Callable[[], Awaitable[T]], seconds: float | None) -> T:
    """The step's value; past ``seconds`` its coroutine is cancelled and StepTimeout raised."""
    result = fn()
    if not inspect.isawaitable(result):
        return result
    if seconds is None:
        return await result
    task: asyncio.Future[T] = asyncio.ensure_future(result)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if task in done:
        return task.result()
    task.cancel()
    try:
        await task
    except BaseException:  # noqa: BLE001 - what it does once cancelled is not the handler's
        pass
    raise StepTimeout(name, seconds)


def _until(until: dt.datetime | float) -> dt.datetime:
    if isinstance(until, dt.datetime):
        return until
    return dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=until)


def _snooze(seconds: float) -> Parked:
    return Parked(f"snoozed for {seconds} s", dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds))


class AsyncContext:
    """What an ``async def`` handler gets as ``ctx``."""

    def __init__(self, job: Job, conn: psycopg.AsyncConnection[Any], control: Control) -> None:
        self.job = job
        self.cancel_reason: str | None = None
        self._cancelled: threading.Event | None = None  # made at the first read: most never read it
        self._conn = conn
        self._control = control

    @property
    def _durable(self) -> _Durable:
        return _Durable(self.job, self._control)  # at a durable call: most handlers make none

    @property
    def cancelled(self) -> threading.Event:
        """Set when the claim is lost, the job is cancelled, its deadline passes or a shutdown's
        grace ends (the handler's task is cancelled too); ``cancel_reason`` says which."""
        if self._cancelled is None:
            self._cancelled = threading.Event()
            if self.cancel_reason is not None:
                self._cancelled.set()
        return self._cancelled

    def _cancel(self, reason: str) -> None:
        self.cancel_reason = reason
        if self._cancelled is not None:
            self._cancelled.set()

    @property
    def conn(self) -> psycopg.AsyncConnection[Any]:
        """The connection of the transaction that completes the job: its first statement begins
        the transaction, and the worker commits it with the completion. Do not commit it."""
        return self._conn

    async def step(self, name: str, fn: Callable[[], T] | Callable[[], Awaitable[T]], *,
                   timeout: float | dt.timedelta | None = None) -> T:
        """Runs ``fn`` once per run: a later attempt gets the saved result without running it.
        The step is recorded running while ``fn`` runs and failed, with its error, when it
        raises. With ``timeout`` (seconds), a step still running then is cancelled and raises
        StepTimeout, and the attempt fails as timed out."""
        seconds = _step_timeout(name, timeout)
        durable = self._durable
        done, output = await durable.start_step(name)
        if done:
            return output  # type: ignore[no-any-return]
        try:
            value = await _run_async_step(name, fn, seconds)
        except Exception as err:
            await durable.fail_step(name, err)
            raise
        await durable.save_step(name, value)
        return value

    async def backfill(self, run_pass: Callable[[Any], Awaitable[Mapping[str, Any]]], *,
                       timeout: float | dt.timedelta | None = None) -> Backfill:
        """A long backfill as a sequence of passes, each a step (``backfill:1``, ...):
        ``run_pass(cursor)`` handles the batch after ``cursor`` (None at first) and answers
        ``{"rows": n, "cursor": ...}``; a pass of 0 rows (or ``"done": True``) ends it. Each
        pass is saved as it finishes, so a later attempt (or the run requeued) resumes after
        the last finished one; ``jobs.backfills`` lists the runs. ``timeout`` is each pass's."""
        done = await self._durable.backfill_start()
        while not done.ended:
            async def one(cursor: Any = done.cursor) -> dict[str, Any]:
                return done.next_pass(await run_pass(cursor))
            done.passed(await self.step(f"backfill:{done.passes + 1}", one, timeout=timeout))
        return done

    async def wait_for_event(self, name: str, *, key: str | None = None, timeout: float | None = None) -> EventResult:
        """The event's payload once published; or parks the job until it is (no attempt used)."""
        return await self._durable.wait_for_event(name, key, timeout)

    async def spawn(self, child_key: str, child: JobDefinition[Any] | str, payload: Any = None,
                    **options: Any) -> tuple[uuid.UUID, bool]:
        """Enqueues a child of this job; the same key gives the same child on every attempt.
        Answers (id, deduped)."""
        return await self._durable.spawn(child_key, child, payload, options)

    async def await_children(self) -> list[ChildResult]:
        """The children's outcomes once none is live; or parks the job until then."""
        return await self._durable.await_children()

    async def snooze(self, seconds: float) -> None:
        """Parks the job until ``seconds`` from now (no attempt used) and ends the handler."""
        raise _snooze(seconds)

    async def sleep(self, step: str, until: dt.datetime | float) -> None:
        """A durable sleep (``jobs.sleep``): the first time in a run it parks the job until
        ``until`` (a datetime, or seconds from now; no attempt used) and ends the handler; when
        the job runs again it returns at once, so a retry does not sleep again."""
        await self._durable.sleep(step, _until(until))


#: Makes a plain handler's ``ctx.cancelled`` once, whichever thread reads it or cancels first.
_MAKING = threading.Lock()


class Context:
    """What a plain (``def``) handler gets as ``ctx``; it runs in a thread of the worker."""

    def __init__(self, job: Job, cancelled: threading.Event | None, conn: psycopg.Connection[Any],
                 control: Control, loop: asyncio.AbstractEventLoop) -> None:
        self.job = job
        self.cancel_reason: str | None = None
        self._cancelled = cancelled  # made at the first read (most never read it): see below
        self._conn = conn
        self._control = control
        self._loop = loop

    @property
    def _durable(self) -> _Durable:
        return _Durable(self.job, self._control)  # at a durable call: most handlers make none

    @property
    def cancelled(self) -> threading.Event:
        """Set when the claim is lost, the job is cancelled, its deadline passes or a shutdown's
        grace ends; ``cancel_reason`` says which. Wait on it instead of ``time.sleep``."""
        event = self._cancelled
        if event is None:
            with _MAKING:  # the handler's thread reads it while the worker's may cancel
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                    if self.cancel_reason is not None:
                        self._cancelled.set()
                event = self._cancelled
        return event

    def _cancel(self, reason: str) -> None:
        with _MAKING:
            self.cancel_reason = reason
            event = self._cancelled
        if event is not None:
            event.set()

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The connection of the transaction that completes the job: its first statement begins
        the transaction, and the worker commits it with the completion. Do not commit it."""
        return self._conn

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def step(self, name: str, fn: Callable[[], T], *, timeout: float | dt.timedelta | None = None) -> T:
        """Runs ``fn`` once per run: a later attempt gets the saved result without running it.
        The step is recorded running while ``fn`` runs and failed, with its error, when it
        raises. With ``timeout`` (seconds), ``ctx.cancelled`` is set then (``cancel_reason``
        ``'step_timeout'``): ``fn`` should watch it, as a handler watches its deadline. When
        ``fn`` returns or raises past the timeout, the step raises StepTimeout and the attempt
        fails as timed out."""
        seconds = _step_timeout(name, timeout)
        durable = self._durable
        done, output = self._run(durable.start_step(name))
        if done:
            return output  # type: ignore[no-any-return]
        fired = threading.Event()
        timer = None
        if seconds is not None:
            def expire() -> None:
                fired.set()
                if self.cancel_reason is None:
                    self._cancel("step_timeout")
            timer = threading.Timer(seconds, expire)
            timer.daemon = True
            timer.start()
        try:
            try:
                value = fn()
            finally:
                if timer is not None:
                    timer.cancel()
            if fired.is_set():
                raise StepTimeout(name, seconds or 0)
        except Exception as err:
            failure = StepTimeout(name, seconds or 0) if fired.is_set() and not isinstance(err, StepTimeout) else err
            self._run(durable.fail_step(name, failure))
            if failure is not err:
                raise failure from err
            raise
        self._run(durable.save_step(name, value))
        return value

    def backfill(self, run_pass: Callable[[Any], Mapping[str, Any]], *,
                 timeout: float | dt.timedelta | None = None) -> Backfill:
        """A long backfill as a sequence of passes, each a step (``backfill:1``, ...):
        ``run_pass(cursor)`` handles the batch after ``cursor`` (None at first) and answers
        ``{"rows": n, "cursor": ...}``; a pass of 0 rows (or ``"done": True``) ends it. Each
        pass is saved as it finishes, so a later attempt (or the run requeued) resumes after
        the last finished one; ``jobs.backfills`` lists the runs. ``timeout`` is each pass's."""
        done = self._run(self._durable.backfill_start())
        while not done.ended:
            def one(cursor: Any = done.cursor) -> dict[str, Any]:
                return done.next_pass(run_pass(cursor))
            done.passed(self.step(f"backfill:{done.passes + 1}", one, timeout=timeout))
        return done

    def wait_for_event(self, name: str, *, key: str | None = None, timeout: float | None = None) -> EventResult:
        """The event's payload once published; or parks the job until it is (no attempt used)."""
        return self._run(self._durable.wait_for_event(name, key, timeout))

    def spawn(self, child_key: str, child: JobDefinition[Any] | str, payload: Any = None,
              **options: Any) -> tuple[uuid.UUID, bool]:
        """Enqueues a child of this job; the same key gives the same child on every attempt.
        Answers (id, deduped)."""
        return self._run(self._durable.spawn(child_key, child, payload, options))

    def await_children(self) -> list[ChildResult]:
        """The children's outcomes once none is live; or parks the job until then."""
        return self._run(self._durable.await_children())

    def snooze(self, seconds: float) -> None:
        """Parks the job until ``seconds`` from now (no attempt used) and ends the handler."""
        raise _snooze(seconds)

    def sleep(self, step: str, until: dt.datetime | float) -> None:
        """A durable sleep (``jobs.sleep``): the first time in a run it parks the job until
        ``until`` (a datetime, or seconds from now; no attempt used) and ends the handler; when
        the job runs again it returns at once, so a retry does not sleep again."""
        self._run(self._durable.sleep(step, _until(until)))
