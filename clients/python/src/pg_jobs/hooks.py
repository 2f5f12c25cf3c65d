"""Settle hooks: what a worker tells the application after it settled an attempt
(``on_settled``) and when jobs ran out of attempts (``on_exhausted``), as @ultimat3/jobs's claim
options ``onSettled`` and ``onExhausted`` did. A hook runs after the settle committed, on the
worker's event loop (an ``async def`` hook as a task of its own); one that raises is logged
with its own code and changes nothing: the settle stands."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .context import Job
from .observe import first_line

#: How a settled attempt ended, as ``on_settled`` is told: parked (a snooze, a wait for an
#: event or a durable sleep) is ``snoozed``; ``failed`` is an attempt out of retries whose job
#: type does not dead-letter.
SettledOutcome = Literal["completed", "retried", "dead", "failed", "cancelled", "snoozed"]
_SETTLED: dict[str, SettledOutcome] = {
    "completed": "completed", "retried": "retried", "dead": "dead", "failed": "failed",
    "cancelled": "cancelled", "parked": "snoozed"}

OnSettled = Callable[[Job, SettledOutcome], Any]
OnExhausted = Callable[[Sequence[Job]], Any]

#: The codes a failed hook is logged with (the record's ``code``).
ON_SETTLED_FAILED = "PGJOBS_ON_SETTLED_FAILED"
ON_EXHAUSTED_FAILED = "PGJOBS_ON_EXHAUSTED_FAILED"


class Hooks:
    """The application's hooks of one worker, and the tasks of its ``async def`` ones."""

    def __init__(self, on_settled: OnSettled | None, on_exhausted: OnExhausted | None,
                 log: logging.Logger) -> None:
        self.on_settled = on_settled
        self.on_exhausted = on_exhausted
        self.log = log
        self._tasks: set[asyncio.Future[Any]] = set()

    def ended(self, job: Job, outcome: str) -> None:
        """An attempt ended with this outcome (the worker's): the hooks of a settled one."""
        settled = _SETTLED.get(outcome)
        if settled is None:  # lost, handed back, timed out, unknown name: nothing this worker settled
            return
        if self.on_settled is not None:
            self._call(ON_SETTLED_FAILED, "on_settled", [job], self.on_settled, job, settled)
        if self.on_exhausted is not None and settled in ("dead", "failed"):
            self._call(ON_EXHAUSTED_FAILED, "on_exhausted", [job], self.on_exhausted, [job])

    def buried(self, jobs: Sequence[Job]) -> None:
        """The jobs a claim of this worker buried (their final attempt lapsed, or their run is
        over): announced once, together."""
        if jobs and self.on_exhausted is not None:
            self._call(ON_EXHAUSTED_FAILED, "on_exhausted", jobs, self.on_exhausted, list(jobs))

    async def wait(self, timeout: float) -> None:
        """Lets the ``async def`` hooks still running end, for at most ``timeout`` seconds."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(timeout, 0.0))

    def _call(self, code: str, name: str, jobs: Sequence[Job], hook: Callable[..., Any], *args: Any) -> None:
        try:
            answer = hook(*args)
        except Exception as err:  # noqa: BLE001 (the application's hook: logged, the settle stands)
            self._failed(code, name, jobs, err)
            return
        if inspect.isawaitable(answer):
            task = asyncio.ensure_future(answer)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._done(t, code, name, jobs))

    def _done(self, task: asyncio.Future[Any], code: str, name: str, jobs: Sequence[Job]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._failed(code, name, jobs, task.exception())  # type: ignore[arg-type]

    def _failed(self, code: str, name: str, jobs: Sequence[Job], err: BaseException) -> None:
        ids = [str(j.id) for j in jobs]
        self.log.error("%s: the %s hook failed; the settle stands: %s", code, name, first_line(err),
                       extra={"code": code, "hook": name, "job_ids": ids, "error": first_line(err)})
