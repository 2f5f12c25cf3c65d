"""An attempt the worker holds: its job, its group, why it must stop (once it must), and where
its handler runs (a task, or a thread)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .connection import Slot
from .context import AsyncContext, Context, Job

if TYPE_CHECKING:
    from .core import Group


class Held:
    __slots__ = ("job", "group", "started", "reason", "task", "threaded", "in_handler", "abandoned", "slot",
                 "tick", "ctx", "encoded")

    def __init__(self, job: Job, group: Group, started: float) -> None:
        self.job, self.group, self.started = job, group, started
        #: Why the attempt must stop, once it must: lost, cancelled, deadline or shutdown.
        self.reason: str | None = None
        #: While the handler runs (``in_handler``), the attempt's task: an ``async def`` handler
        #: runs in it, a plain one in a thread it waits for (``threaded``); or the thread's
        #: future when no task waits for it.
        self.task: asyncio.Future[Any] | None = None
        self.threaded = False
        self.in_handler = False
        #: Let go after ignoring its cancellation: its slot, outcome and connection were dealt
        #: with (Attempts.let_go); its attempt only ends when the handler does.
        self.abandoned = False
        self.slot: Slot | None = None
        #: Its deadline's, in the worker's Deadlines; None for none.
        self.tick: int | None = None
        self.ctx: AsyncContext | Context | None = None
        #: The handler's result as JSON text, once encoded (pg_jobs.results).
        self.encoded: str | None = None
