"""The worker: a dispatcher per set of queues (pg_jobs.dispatcher) claims jobs for its free
slots and settles the ones that ended with its next claim; each job runs as an attempt
(pg_jobs.attempt), an ``async def`` handler on the worker's event loop, a plain one in its
threads. Heartbeats, steps and events go through a connection of its own; a cancel listener
heartbeats a cancelled job at once. A stop lets running jobs finish for a grace, then cancels
them and hands them back. The engine decides retries, backoff, fencing and burial: the worker
reports and obeys."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import queries as q
from .attempt import ABANDON, Attempts
from .connection import Backoff, OwnConnection, Pool, application_name
from .context import Claimed
from .core import Group, WorkerCore
from .deadlines import Deadlines
from .dispatcher import Dispatcher
from .errors import INSTALL_HINT, is_connection_error
from .hooks import Hooks, OnExhausted, OnSettled
from .jobs import JobDefinition
from .observe import Metrics, first_line
from .observe import logger as default_logger
from .owner import UNTRUSTED_OWNERS, UntrustedOwner

#: How often a stop cancels again the claims still sleeping in the server.
RECANCEL = 1.0


class Worker:
    """Runs ``jobs`` from ``queues``, ``concurrency`` at a time (a number, or a number per
    queue), with at most ``concurrency + 2`` connections to ``dsn`` (one more per set of queues
    with ``prefetch``)."""

    def __init__(self, dsn: str, *, jobs: Iterable[JobDefinition[Any]], queues: Iterable[str] = ("default",),
                 concurrency: int | Mapping[str, int] = 10, lease: float = 30.0, shutdown_grace: float = 10.0,
                 poll: float = 5.0, worker_id: str | None = None, metrics: Metrics | None = None,
                 metrics_port: int | None = None, logger: logging.Logger | None = None, tracer: Any = None,
                 unknown_snooze: float = 60.0,
                 resolve: Callable[[str], JobDefinition[Any] | None] | None = None,
                 prepared_statements: bool = True, trust_owner: bool | None = None,
                 on_settled: OnSettled | None = None, on_exhausted: OnExhausted | None = None,
                 prefetch: int = 0) -> None:
        self.dsn = dsn
        #: Work as a superuser even where a role that is not one owns schema jobs or its
        #: functions (that role could run code as the worker); refused unless True (default:
        #: whether PGJOBS_TRUST_OWNER is 1).
        self.trust_owner = os.environ.get("PGJOBS_TRUST_OWNER") == "1" if trust_owner is None else trust_owner
        self.queues = list(queues) or ["default"]
        #: Jobs claimed ahead and held beyond the running ones, per set of queues (0 to 1000):
        #: claimed many at once and settled together, a freed slot starting the next without
        #: waiting for the database. A held job not started uses no attempt if this worker
        #: dies, and a stop gives it back at once; it is not available to other workers.
        if not isinstance(prefetch, int) or not 0 <= prefetch <= 1000:
            raise ValueError("pg_jobs.Worker: prefetch must be a whole number from 0 to 1000")
        if isinstance(concurrency, int):
            self._groups = [Group(self.queues, concurrency, prefetch=prefetch)]
        else:
            self._groups = [Group([queue], n, prefetch=prefetch) for queue, n in concurrency.items() if n > 0]
        self.concurrency = sum(g.free for g in self._groups)
        if self.concurrency < 1:
            raise ValueError("pg_jobs.Worker: concurrency must be at least 1")
        self.lease, self.shutdown_grace = lease, shutdown_grace
        self.metrics_port = metrics_port
        log = logger or default_logger
        worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        # Each connection says what it is, and whose, in pg_stat_activity.application_name.
        # (with prefetch, one more per dispatcher: its settles go on while every slot runs)
        self._pool = Pool(dsn, self.concurrency + (len(self._groups) if prefetch else 0),
                          application_name("worker", worker_id), prepared_statements)
        self._control = OwnConnection(dsn, application_name("heartbeat", worker_id))
        self._listener = OwnConnection(dsn, application_name("listener", worker_id), listen="pg_jobs_cancel")
        #: Whether the claims and settles are prepared statements, kept by the server for each
        #: connection (planned once, not at every call). False behind a transaction-pooling
        #: PgBouncer before 1.21; a worker that meets that turns them off by itself, with a warning.
        self._core = WorkerCore(
            self._pool, self._control, jobs={j.name: j for j in jobs},
            worker_id=worker_id, lease=lease, poll=poll,
            unknown_snooze=unknown_snooze, log=log, metrics=metrics, tracer=tracer, resolve=resolve,
            # after a settle committed: on_settled(job, outcome), on_exhausted(jobs) for the jobs
            # out of attempts (pg_jobs.hooks)
            hooks=Hooks(on_settled, on_exhausted, log) if on_settled or on_exhausted else None,
            report_buried=on_exhausted is not None, prepared=prepared_statements)
        self._attempts = Attempts(self._core, self.concurrency)
        self._loops: list[asyncio.Task[None]] = []
        self._stopped: asyncio.Future[None] | None = None

    # What the application gave, as the worker goes by it.
    @property
    def jobs(self) -> dict[str, JobDefinition[Any]]:
        return self._core.jobs

    @property
    def worker_id(self) -> str:
        return self._core.worker_id

    @property
    def log(self) -> logging.Logger:
        return self._core.log

    @property
    def metrics(self) -> Metrics | None:
        return self._core.metrics

    @property
    def poll(self) -> float:
        """How long a waiting claim sleeps in the server (read at each claim)."""
        return self._core.poll

    @poll.setter
    def poll(self, seconds: float) -> None:
        self._core.poll = seconds

    @property
    def _stopping(self) -> bool:
        return self._core.stopping

    @property
    def running(self) -> int:
        """The jobs running now."""
        return len(self._core.held)

    async def start(self) -> None:
        """Starts the dispatchers and the heartbeat; answers once the database was reached
        (trying again, with backoff, while it cannot be, or its connection breaks before the
        start is done). Refuses a database without pg_jobs."""
        core = self._core
        core.loop = asyncio.get_running_loop()
        core.deadlines = Deadlines(core.loop, self._deadline_reached)
        backoff = Backoff(0.2, 10.0)
        while True:
            try:
                found = await self._probe()
                break
            except Exception as err:  # noqa: BLE001 (any database error: try again)
                if core.stopping:
                    return
                wait = backoff.next()
                core.log.warning("cannot reach the database; trying again in %.1f s: %s", wait, first_line(err))
                await core.pause(wait)
        if isinstance(found, Exception):
            raise found
        version, preloaded = found
        if self.metrics_port is not None:
            from . import prometheus
            core.metrics = core.metrics or prometheus.PrometheusMetrics()
            prometheus.serve(self.metrics_port)
        core.log.info("pg_jobs worker started: queues=%s concurrency=%d jobs=%s server=%s preloaded=%s worker_id=%s",
                      ",".join(queue for g in self._groups for queue in g.queues), self.concurrency,
                      ",".join(core.jobs), version, preloaded, core.worker_id)
        self._loops = [asyncio.create_task(Dispatcher(core, g, self._attempts).run()) for g in self._groups]
        self._loops.append(asyncio.create_task(self._heartbeats()))
        self._loops.append(asyncio.create_task(self._listen()))

    async def _probe(self) -> tuple[str, bool | None] | Exception:
        """What the worker learns of the server before its first claim. A database without
        pg_jobs, or whose jobs schema a superuser must not trust, is a refusal, answered as an
        exception; what this raises is a database error, tried again."""
        version, preloaded, installed = (await self._control.query(q.SERVER))[0]
        if not installed:
            return RuntimeError(f"pg_jobs: this database has no pg_jobs: {INSTALL_HINT}, first")
        if not self.trust_owner:
            owners = (await self._control.query(UNTRUSTED_OWNERS))[0][0]
            if owners:
                return UntrustedOwner(owners)
        try:
            self._core.max_result = (await self._control.query(q.MAX_PAYLOAD_SIZE))[0][0]
        except Exception as err:
            if is_connection_error(err):
                raise
            self._core.max_result = None  # an older server: the engine's limit alone
        return version, preloaded

    async def stop(self, grace: float | None = None) -> None:
        """Stops claiming, lets running jobs finish for ``grace`` seconds (``shutdown_grace``),
        then cancels the rest and hands them back (no attempt used)."""
        if self._stopped is None:
            self._stopped = asyncio.ensure_future(self._shutdown(self.shutdown_grace if grace is None else grace))
        await asyncio.shield(self._stopped)

    async def run_async(self) -> None:
        """start(), then stop() at SIGTERM or SIGINT."""
        await self.start()
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, done.set)
        try:
            await done.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.stop()

    def run(self) -> None:
        """Blocks: runs until SIGTERM or SIGINT, then stops; returns normally (exit 0)."""
        asyncio.run(self.run_async())

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- heartbeats, cancels, shutdown -------------------------------------------------------

    def _deadline_reached(self, held: Any) -> None:
        self._attempts.abort(held, "deadline")

    async def _heartbeats(self) -> None:
        """Every lease/3 until the worker has stopped: through a shutdown's grace too."""
        while True:
            await asyncio.sleep(max(self.lease / 3, 0.1))
            await self._beat(self._held_ids(), "lost")

    def _held_ids(self) -> list[int]:
        """The jobs this worker holds: running, and claimed ahead."""
        return [*self._core.held, *self._claimed_ahead()]

    def _claimed_ahead(self) -> dict[int, tuple[Claimed, Group]]:
        """The jobs claimed ahead and not started, by id, with their group."""
        return {row[0].id.int: (row, g) for g in self._groups for row in g.queued}

    async def _beat(self, ids: list[int], reason: str) -> None:
        held_now, queued = self._core.held, self._claimed_ahead()
        jobs = [held_now[i].job if i in held_now else queued[i][0][0] for i in ids if i in held_now or i in queued]
        if not jobs:
            return
        try:
            rows = await self._control.query(q.HEARTBEATS, ([j.id for j in jobs], [j.claim for j in jobs]))
        except Exception as err:  # noqa: BLE001 (tried again at the next beat)
            self.log.warning("heartbeat failed; trying again: %s", first_line(err))
            return
        for job_id, until in rows:
            if until is not None:
                continue
            held = held_now.get(job_id.int)
            if held is not None:
                self._attempts.abort(held, reason)
            ahead = queued.pop(job_id.int, None)
            if ahead is not None:  # not started: dropped
                row, group = ahead
                if row in group.queued:
                    group.queued.remove(row)

    async def _listen(self) -> None:
        backoff = Backoff()
        while not self._core.stopping:
            try:
                conn = await self._listener.connect()
                backoff.reset()
                await self._beat(self._held_ids(), "cancelled")  # cancels missed while away
                async for note in conn.notifies():
                    ids = self._held_ids() if note.payload in ("", "*") else self._held_of(note.payload)
                    if ids:
                        await self._beat(ids, "cancelled")
            except Exception:  # noqa: BLE001 (made again)
                self._listener.conn = None
                await self._core.pause(backoff.next())

    def _held_of(self, job_id: str) -> list[int]:
        """The held job a cancel notice names, in a list; none for another's or a bad id."""
        try:
            key = uuid.UUID(job_id).int
        except ValueError:
            return []
        return [key] if key in self._core.held or key in self._claimed_ahead() else []

    async def _wait_running(self, seconds: float) -> None:
        """Until what runs has ended, ``seconds`` at most: a plain handler's end may start a
        task that ends its attempt, waited for too."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (live := self._core.live()) and (left := end - loop.time()) > 0:
            await asyncio.wait(live, timeout=left)

    async def _shutdown(self, grace: float) -> None:
        core = self._core
        core.stopping = True
        core.give_up_at = time.monotonic() + grace
        core.wake.set()
        for g in self._groups:
            g.wake.set()
        dispatchers = self._loops[:len(self._groups)]
        others = self._loops[len(self._groups):]
        # A claim sleeping in the server is cancelled; again each second while a dispatcher
        # waits, as a cancel that came before its claim was under way found nothing to cancel.
        waiting = {d for d in dispatchers if not d.done()}
        while waiting:
            if core.claiming:
                try:
                    await self._control.query(q.CANCEL_WAITING_CLAIMS, (list(core.claiming),))
                except Exception:  # noqa: BLE001
                    pass
            _, waiting = await asyncio.wait(waiting, timeout=RECANCEL)
        await asyncio.gather(*dispatchers, return_exceptions=True)
        await self._wait_running(grace)
        if core.live():
            for held in list(core.held.values()):
                self._attempts.abort(held, "shutdown")
            await self._wait_running(ABANDON + 0.5)
        if self._attempts.letting_go:
            await asyncio.gather(*self._attempts.letting_go, return_exceptions=True)
        for held in list(core.held.values()):
            try:
                await self._control.query(q.SNOOZE_NOW, (held.job.id, held.job.claim))
            except Exception as err:  # noqa: BLE001
                core.log.warning("could not hand job %s back: %s", held.job.id, first_line(err))
            core.ended(held, "handed_back", time.monotonic())
        if core.hooks is not None:  # its async def hooks end within what is left of the grace
            await core.hooks.wait(core.give_up_at - time.monotonic())
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        for g in self._groups:
            while g.slots:
                await self._pool.release(g.slots.pop())
        await self._listener.close()
        await self._control.close()
        await self._pool.close()
        core.threads.shutdown()
        core.log.info("pg_jobs worker stopped: worker_id=%s", core.worker_id)
