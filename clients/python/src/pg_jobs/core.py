"""What a worker's dispatchers and attempts share: the pool and the control connection, the
attempts held, the stop in progress, and how an ended attempt is reported. The worker
(pg_jobs.worker) makes one and runs a dispatcher (pg_jobs.dispatcher) per set of queues; each
claimed job runs as an attempt (pg_jobs.attempt)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .arrays import TextArray, text_array
from .connection import OwnConnection, Pool, Slot
from .context import Claimed, Job
from .deadlines import Deadlines
from .held import Held
from .hooks import Hooks
from .jobs import JobDefinition
from .observe import LEVELS, Metrics, Outcome, log_outcome
from .threads import Threads


@dataclass(eq=False)
class Group:
    """The slots working one set of queues: how many are free, and the jobs that ended without
    opening their transaction, to be completed with the group's next claim."""

    queues: list[str]
    free: int
    #: ``queues`` as the claims send them, made once (pg_jobs.arrays).
    queue_array: TextArray | list[str] = field(init=False)
    pending: list[tuple[Held, Any, float]] = field(default_factory=list)
    waiting: bool = False  # the dispatcher's claim sleeps in the server: an ending job completes itself
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Connections kept between the group's jobs and claims (the pool's checkout per job cost
    #: more than the job); given back before a waiting claim, so an idle worker holds one. At
    #: most as many as its slots are in use at once: the dispatcher runs only while one is free.
    slots: list[Slot] = field(default_factory=list)
    #: How many claimed jobs the group may hold beyond its slots (the prefetch option), those it
    #: holds, in claim order, and the ones it took from them since its last settle, whose starts
    #: that settle marks (jobs.mark_started).
    prefetch: int = 0
    queued: deque[Claimed] = field(default_factory=deque)
    starts: list[Job] = field(default_factory=list)
    #: A look of a prefetching claim found nothing while jobs were still held: no other look
    #: until one of them starts.
    dry: bool = False
    #: Called when a slot frees: the dispatcher starts the next held job.
    refill: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.queue_array = text_array(self.queues)


class WorkerCore:
    def __init__(self, pool: Pool, control: OwnConnection, *, jobs: dict[str, JobDefinition[Any]], worker_id: str,
                 lease: float, poll: float, unknown_snooze: float, log: logging.Logger, metrics: Metrics | None,
                 tracer: Any, resolve: Callable[[str], JobDefinition[Any] | None] | None, hooks: Hooks | None,
                 report_buried: bool, prepared: bool) -> None:
        self.pool, self.control = pool, control
        self.jobs = jobs
        self.worker_id = worker_id
        self.lease = dt.timedelta(seconds=lease)  # as the claims send it, made once
        self.poll = poll
        self.unknown_snooze = unknown_snooze
        self.log, self.metrics, self.tracer = log, metrics, tracer
        #: Finds the job of a name not in ``jobs`` (e.g. a Django task by its module path).
        self.resolve = resolve
        #: After a settle committed (pg_jobs.hooks); None without any.
        self.hooks = hooks
        #: Whether the claims answer the jobs they buried too (for on_exhausted).
        self.report_buried = report_buried
        #: Whether the claims and settles are prepared statements (turned off when the server
        #: does not keep them).
        self.prepared = prepared
        #: The jobs held, by their id's number (``UUID.int``: a UUID's hash is Python code).
        self.held: dict[int, Held] = {}
        #: The backends of the claims sleeping in the server, cancelled at a stop.
        self.claiming: set[int] = set()
        #: The jobs' tasks, and plain handlers' threads (their futures).
        self.running: set[asyncio.Future[Any]] = set()
        self.stopping = False
        #: When a stop gives up settling what its handlers completed (the end of its grace).
        self.give_up_at = float("inf")
        #: pg_jobs.max_payload_size as the server reads it (jobs.max_payload_size()); None when
        #: the server cannot say (the engine still refuses a result over it).
        self.max_result: int | None = None
        self.wake = asyncio.Event()
        self.threads = Threads("pg_jobs")
        self.loop: asyncio.AbstractEventLoop  # the running loop, at start()
        self.deadlines: Deadlines  # made at start(), on the running loop

    async def pause(self, seconds: float) -> None:
        """Waits ``seconds``, or less when the worker stops."""
        try:
            await asyncio.wait_for(self.wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    def keep(self, group: Group, slot: Slot, broken: bool) -> bool:
        """give_back's common case without a coroutine: whether the connection was kept."""
        if broken or slot.broken or self.stopping:
            return False
        group.slots.append(slot)
        return True

    async def give_back(self, group: Group, slot: Slot, broken: bool) -> None:
        """Keeps a connection for the group's next job or claim; a broken one is closed, and one
        goes back to the pool when the worker stops."""
        if not self.keep(group, slot, broken):
            await self.pool.release(slot, broken)

    def live(self) -> set[asyncio.Future[Any]]:
        """What a shutdown waits for: the jobs' tasks and plain handlers' threads that have not
        ended."""
        return {t for t in self.running if not t.done()}

    def ended(self, held: Held, outcome: Outcome, started: float, error: str | None = None,
              count: bool = True) -> None:
        """An attempt ended: reported; ``count``: and the running count (a settle reports it
        once for its jobs)."""
        if held.tick is not None:
            self.deadlines.remove(held, held.tick)
            held.tick = None
        job_id = held.job.id.int
        other = self.held.pop(job_id, held)
        if other is not held:
            self.held[job_id] = other  # another attempt's of the same job, claimed since: kept
        if count and self.metrics:
            self.metrics.running(len(self.held))
        self.report(held.job, outcome, time.monotonic() - started, error)
        if self.hooks is not None:
            self.hooks.ended(held.job, outcome)

    def report(self, job: Job, outcome: Outcome, seconds: float, error: str | None) -> None:
        if self.metrics:
            self.metrics.attempt_ended(job.queue, job.name, outcome, seconds)
        if self.log.isEnabledFor(LEVELS[outcome]):
            log_outcome(self.log, job.id, job.name, job.queue, job.attempt, seconds, outcome, error)
        if self.tracer is not None:
            from .tracing import record_attempt
            record_attempt(self.tracer, job, outcome, seconds, error)


def free_slot(group: Group) -> None:
    group.free += 1
    if group.free == 1:  # (the dispatcher waits only while none is free)
        group.wake.set()
    if group.queued and group.refill is not None:
        group.refill()
