"""The worker: for each set of queues, a dispatcher claims as many jobs as there are free slots
the moment one is free (a waiting claim in the server when there is no work: no LISTEN
needed), and settles the jobs that ended without opening their transaction together with that
claim (jobs.complete_and_claim: one statement and one commit for all of them). A job whose
handler wrote through ``ctx.conn`` is completed in that transaction, on its own connection.
Nothing waits for a batch. ``async def`` handlers run on the worker's event loop, plain ones in
its threads. Heartbeats, steps and events go through a connection of its own; a cancel
listener heartbeats a cancelled job at once. The engine decides retries, backoff, fencing and
burial: the worker reports and obeys."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from .arrays import Int8Array, TextArray, UuidArray, int8_array, text_array, uuid_array
from .connection import Backoff, OwnConnection, Pool, Slot
from . import queries as q
from .context import AsyncContext, Context, Job, Parked
from .deadlines import Deadlines
from .errors import (CODES, INSTALL_HINT, NonRetryable, RetryAfter, StepTimeout, error_names, from_driver,
                     is_connection_error)
from .hooks import Hooks, OnExhausted, OnSettled
from .jobs import JobDefinition
from .observe import LEVELS, Metrics, Outcome, describe, first_line, log_outcome
from .observe import logger as default_logger
from .owner import UNTRUSTED_OWNERS, UntrustedOwner
from .results import ResultRefused, encode_result, encoded, is_transient
from .threads import Threads

QUERY_CANCELED = "57014"
#: A prepared statement missing, another of its name there, or one of another statement's
#: (psycopg numbers its names per connection) there: a server connection other than the one
#: that prepared it (a transaction-pooling PgBouncer before 1.21).
NOT_KEPT = {"26000", "42P05", "08P01"}
#: How much longer than its cancellation a handler is waited for before it is abandoned.
ABANDON = 1.0
#: How often a stop cancels again the claims still sleeping in the server.
RECANCEL = 1.0
#: How long, at most, the dispatcher lets plain handlers just started end before it settles.
GATHER = 0.0002


class _Held:
    __slots__ = ("job", "group", "started", "reason", "task", "threaded", "in_handler", "abandoned", "slot",
                 "tick", "ctx", "encoded")

    def __init__(self, job: Job, group: _Group, started: float) -> None:
        self.job, self.group, self.started = job, group, started
        self.reason: str | None = None
        #: While the handler runs (``in_handler``), the attempt's task: an ``async def`` handler
        #: runs in it, a plain one in a thread it waits for (``threaded``); or the thread's
        #: future when no task waits for it.
        self.task: asyncio.Future[Any] | None = None
        self.threaded = False
        self.in_handler = False
        #: Let go after ignoring its cancellation: its slot, outcome and connection were dealt
        #: with (Worker._let_go); its attempt only ends when the handler does.
        self.abandoned = False
        self.slot: Slot | None = None
        #: Its deadline's, in the worker's Deadlines; None for none.
        self.tick: int | None = None
        self.ctx: AsyncContext | Context | None = None
        #: The handler's result as JSON text, once encoded (pg_jobs.results).
        self.encoded: str | None = None


@dataclass(eq=False)
class _Group:
    queues: list[str]
    free: int
    #: ``queues`` as the claims send them, made once (pg_jobs.arrays).
    queue_array: TextArray | list[str] = field(init=False)
    pending: list[tuple[_Held, Any, float]] = field(default_factory=list)
    waiting: bool = False  # the dispatcher's claim sleeps in the server: an ending job completes itself
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Connections kept between the group's jobs and claims (the pool's checkout per job cost
    #: more than the job); given back before a waiting claim, so an idle worker holds one. At
    #: most as many as its slots are in use at once: the dispatcher runs only while one is free.
    slots: list[Slot] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.queue_array = text_array(self.queues)


class Worker:
    """Runs ``jobs`` from ``queues``, ``concurrency`` at a time (a number, or a number per
    queue), with at most ``concurrency + 2`` connections to ``dsn``."""

    def __init__(self, dsn: str, *, jobs: Iterable[JobDefinition[Any]], queues: Iterable[str] = ("default",),
                 concurrency: int | Mapping[str, int] = 10, lease: float = 30.0, shutdown_grace: float = 10.0,
                 poll: float = 5.0, worker_id: str | None = None, metrics: Metrics | None = None,
                 metrics_port: int | None = None, logger: logging.Logger | None = None, tracer: Any = None,
                 unknown_snooze: float = 60.0,
                 resolve: Callable[[str], JobDefinition[Any] | None] | None = None,
                 prepared_statements: bool = True, trust_owner: bool | None = None,
                 on_settled: OnSettled | None = None, on_exhausted: OnExhausted | None = None) -> None:
        self.dsn = dsn
        #: Work as a superuser even where a role that is not one owns schema jobs or its
        #: functions (that role could run code as the worker); refused unless True (default:
        #: whether PGJOBS_TRUST_OWNER is 1).
        self.trust_owner = os.environ.get("PGJOBS_TRUST_OWNER") == "1" if trust_owner is None else trust_owner
        self.queues = list(queues) or ["default"]
        if isinstance(concurrency, int):
            self._groups = [_Group(self.queues, concurrency)]
        else:
            self._groups = [_Group([queue], n) for queue, n in concurrency.items() if n > 0]
        self.concurrency = sum(g.free for g in self._groups)
        if self.concurrency < 1:
            raise ValueError("pg_jobs.Worker: concurrency must be at least 1")
        self.jobs = {j.name: j for j in jobs}
        self.lease, self.shutdown_grace, self.poll = lease, shutdown_grace, poll
        self._lease = dt.timedelta(seconds=lease)  # as the claims send it, made once
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.log = logger or default_logger
        self.metrics = metrics
        self.metrics_port = metrics_port
        self.tracer = tracer
        self.unknown_snooze = unknown_snooze
        #: Finds the job of a name not in ``jobs`` (e.g. a Django task by its module path);
        #: None, or a name it answers None for, is an unknown name.
        self.resolve = resolve
        #: After a settle committed: ``on_settled(job, outcome)``, ``on_exhausted(jobs)`` for the
        #: jobs out of attempts (pg_jobs.hooks); None without either.
        self._hooks = Hooks(on_settled, on_exhausted, self.log) if on_settled or on_exhausted else None
        #: Whether the claims answer the jobs they buried too (for on_exhausted).
        self._report_buried = on_exhausted is not None
        #: The jobs held, by their id's number (``UUID.int``: a UUID's hash is Python code).
        self._held: dict[int, _Held] = {}
        self._claiming: set[int] = set()
        self._warned: set[str] = set()
        #: The jobs' tasks, and plain handlers' threads (their futures).
        self._running: set[asyncio.Future[Any]] = set()
        self._letting_go: set[asyncio.Future[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped: asyncio.Future[None] | None = None
        #: When a stop gives up settling what its handlers completed (the end of its grace).
        self._give_up_at = float("inf")
        #: pg_jobs.max_payload_size as the server reads it (jobs.max_payload_size()); None when
        #: the server cannot say (the engine still refuses a result over it).
        self._max_result: int | None = None
        self._wake = asyncio.Event()
        self._threads = Threads("pg_jobs")
        #: Whether the claims and settles are prepared statements, kept by the server for each
        #: connection (planned once, not at every call). False behind a transaction-pooling
        #: PgBouncer before 1.21; a worker that meets that turns them off by itself, with a warning.
        self._prepared = prepared_statements
        self._pool = Pool(dsn, self.concurrency, "pg-jobs worker", prepared_statements)
        self._control = OwnConnection(dsn, "pg-jobs heartbeat")
        self._listener = OwnConnection(dsn, "pg-jobs listener", listen="pg_jobs_cancel")
        self._loop: asyncio.AbstractEventLoop  # the running loop, at start()
        self._deadlines: Deadlines  # made at start(), on the running loop

    @property
    def running(self) -> int:
        """The jobs running now."""
        return len(self._held)

    async def start(self) -> None:
        """Starts the dispatchers and the heartbeat; answers once the database was reached
        (trying again, with backoff, while it cannot be). Refuses a database without pg_jobs."""
        self._loop = asyncio.get_running_loop()
        self._deadlines = Deadlines(self._loop, self._deadline_reached)
        backoff = Backoff(0.2, 10.0)
        while True:
            try:
                version, preloaded, installed = (await self._control.query(q.SERVER))[0]
                break
            except Exception as err:  # noqa: BLE001 (any database error: try again)
                if self._stopping:
                    return
                wait = backoff.next()
                self.log.warning("cannot reach the database; trying again in %.1f s: %s", wait, first_line(err))
                await self._pause(wait)
        if not installed:
            raise RuntimeError(f"pg_jobs: this database has no pg_jobs: {INSTALL_HINT}, first")
        if not self.trust_owner:
            owners = (await self._control.query(UNTRUSTED_OWNERS))[0][0]
            if owners:
                raise UntrustedOwner(owners)
        try:
            self._max_result = (await self._control.query(q.MAX_PAYLOAD_SIZE))[0][0]
        except Exception:  # noqa: BLE001 (an older server: the engine's limit alone)
            self._max_result = None
        if self.metrics_port is not None:
            from . import prometheus
            self.metrics = self.metrics or prometheus.PrometheusMetrics()
            prometheus.serve(self.metrics_port)
        self.log.info("pg_jobs worker started: queues=%s concurrency=%d jobs=%s server=%s preloaded=%s worker_id=%s",
                      ",".join(queue for g in self._groups for queue in g.queues), self.concurrency,
                      ",".join(self.jobs), version, preloaded, self.worker_id)
        self._loops = [asyncio.create_task(self._dispatch(g)) for g in self._groups]
        self._loops.append(asyncio.create_task(self._heartbeats()))
        self._loops.append(asyncio.create_task(self._listen()))

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

    # -- the dispatchers --------------------------------------------------------------------

    async def _dispatch(self, group: _Group) -> None:
        backoff = Backoff()
        while True:
            if not group.pending:
                if self._stopping:
                    return
                if group.free == 0:
                    group.wake.clear()
                    await group.wake.wait()
                    continue
            slot: Slot | None = None
            try:
                slot = group.slots.pop() if group.slots else await self._pool.acquire()
                rows = await (self._settle(slot, group) if group.pending else self._claim(slot, group))
                backoff.reset()
                if not self._keep(group, slot, False):
                    await self._pool.release(slot)
                slot = None
                if self._report_buried and rows:
                    rows = self._announce_buried(rows)
                for row in rows:
                    self._launch(group, row)
                if rows and self.metrics:
                    self.metrics.running(len(self._held))
                if rows and group.pending:
                    await self._gather()
            except Exception as err:  # noqa: BLE001 (a worker never ends on a database error)
                if slot is not None:
                    await self._give_back(group, slot, True)
                if self._stopping and time.monotonic() >= self._give_up_at:
                    self._give_up(group, err)
                    return
                if self._stopping and isinstance(err, psycopg.Error) and err.sqlstate == QUERY_CANCELED:
                    continue
                if self._prepared and isinstance(err, psycopg.Error) and err.sqlstate in NOT_KEPT:
                    self._prepared = self._pool.prepared = False
                    self.log.warning("the server did not keep this worker's prepared statements (a transaction-"
                                     "pooling PgBouncer before 1.21?); going on without them: pass "
                                     "prepared_statements=False (the command: --no-prepared-statements): %s",
                                     first_line(err))
                    continue
                wait = backoff.next()
                self.log.warning("database error; trying again in %.1f s: %s", wait, first_line(err))
                await self._pause(wait)

    async def _gather(self) -> None:
        """Lets the jobs just claimed start, and plain ones that end at once end, before the
        jobs pending are settled: else those of one claim, split once (the first plain handler's
        end seen before the others had run), are settled in two statements from then on."""
        await asyncio.sleep(0)  # the new jobs start: plain handlers are handed to threads
        if self._threads.busy:
            self._threads.let_finish(GATHER)
            await asyncio.sleep(0)  # their ends delivered
            await asyncio.sleep(0)  # their jobs pending

    async def _settle(self, slot: Slot, group: _Group) -> list[tuple[Any, ...]]:
        # The ids and claims go as binary arrays made at once (pg_jobs.arrays).
        batch, group.pending = group.pending, []
        ids = uuid_array([h.job.id for h, _, _ in batch])
        claims = int8_array([h.job.claim for h, _, _ in batch])
        answers = [r for _, r, _ in batch]
        # No results at all (handlers that answer nothing): none sent, none for the server to read.
        results = None if answers.count("null") == len(answers) else [encoded(r) for r in answers]
        free = 0 if self._stopping else group.free
        rows: list[tuple[Any, ...]] = []
        landed: set[Any] | None
        try:
            if free > 0:
                cur = await slot.conn.execute(
                    q.COMPLETE_AND_CLAIM,
                    (ids, claims, self.worker_id, group.queue_array, free, self._lease, results,
                     self._report_buried),
                    prepare=self._prepared, binary=True)
                rows = await cur.fetchall()
                landed = None  # all of them: else the statement raised lease_lost
            else:
                landed = await self._complete_many(slot, ids, claims, results)
        except psycopg.Error as err:
            if err.sqlstate != CODES["lease_lost"]:
                if is_transient(err) or err.sqlstate in NOT_KEPT:
                    group.pending[:0] = batch
                    raise
                # Refused for what it carries: never sent again; its jobs settled one by one.
                self.log.warning("a settle of %d jobs was refused for what it carries; settling them one by one: %s",
                                 len(batch), first_line(err))
                await self._settle_each(slot, group, batch)
                return []
            landed = await self._complete_many(slot, ids, claims, results)
        for held, _, started in batch:
            self._ended(held, "completed" if landed is None or held.job.id in landed else "lost", started, count=False)
        if self.metrics:
            self.metrics.running(len(self._held))
        return rows

    async def _settle_each(self, slot: Slot, group: _Group, batch: list[tuple[_Held, Any, float]]) -> None:
        """Completes each job on its own: one the server refuses for its result fails for good
        with the server's message; one it cannot reach now goes back to be settled later."""
        for i, (held, result, started) in enumerate(batch):
            job = held.job
            error: str | None = None
            try:
                cur = await slot.conn.execute(q.COMPLETE, (job.id, job.claim, encoded(result)))
                row = await cur.fetchone()
                outcome: Outcome = "completed" if row and row[0] else "lost"
            except psycopg.Error as err:
                if is_transient(err):
                    group.pending[:0] = batch[i:]
                    raise
                error = f"the result was refused: {first_line(err)}"
                outcome = await self._fail_for_good(slot, held, error)
            self._ended(held, outcome, started, error)

    async def _fail_for_good(self, slot: Slot, held: _Held, error: str) -> Outcome:
        """Fails a held job for good (no retry): its result could not be settled."""
        job = held.job
        try:
            cur = await slot.conn.execute(q.FAIL_FOR_GOOD, (job.id, job.claim, error))
            row = await cur.fetchone()
            return row[0] if row and row[0] else "lost"
        except psycopg.Error as err:
            if is_transient(err):
                raise
            self.log.warning("could not fail job %s; it is left to its lease: %s", job.id, first_line(err))
            return "lost"

    def _give_up(self, group: _Group, err: BaseException) -> None:
        """A stop past its grace that still cannot settle what its handlers completed: those
        jobs are left to their leases (they run again once the leases lapse)."""
        batch, group.pending = group.pending, []
        if batch:
            self.log.warning("stopping: could not settle %d completed jobs within the grace; they are left to "
                             "their leases: %s", len(batch), first_line(err))
        for held, _, started in batch:
            self._ended(held, "lost", started)

    async def _complete_many(self, slot: Slot, ids: UuidArray, claims: Int8Array,
                             results: list[Any] | None) -> set[Any]:
        cur = await slot.conn.execute(q.COMPLETE_MANY,
                                      (ids, claims, results), prepare=self._prepared)
        return {r[0] for r in await cur.fetchall() if r[1]}

    async def _give_back(self, group: _Group, slot: Slot, broken: bool) -> None:
        """Keeps a connection for the group's next job or claim; a broken one is closed, and one
        goes back to the pool when the worker stops."""
        if not self._keep(group, slot, broken):
            await self._pool.release(slot, broken)

    def _keep(self, group: _Group, slot: Slot, broken: bool) -> bool:
        """_give_back's common case without a coroutine: whether the connection was kept."""
        if broken or slot.broken or self._stopping:
            return False
        group.slots.append(slot)
        return True

    async def _claim(self, slot: Slot, group: _Group) -> list[tuple[Any, ...]]:
        """Claims for the group's free slots: a look first, and only when it finds nothing a
        claim that sleeps in the server for work (while it does, an ending job completes
        itself). Without the look, a claim answered short was followed by a sleeping one, and
        every job of the batch running then completed with a commit of its own."""
        query = q.CLAIM
        lease, buried = self._lease, self._report_buried
        cur = await slot.conn.execute(query, (self.worker_id, group.queue_array, group.free, lease, None, buried),
                                      prepare=self._prepared, binary=True)
        found = await cur.fetchall()
        if found or self._stopping:
            return found
        while group.slots:  # an idle worker holds one connection
            await self._pool.release(group.slots.pop())
        pid = slot.pid
        self._claiming.add(pid)
        group.waiting = True
        try:
            # A job ended during the look: settled with the next claim. A stop that began
            # while the idle connections went back found no claim of this worker's to cancel.
            if group.pending or self._stopping:
                return []
            cur = await slot.conn.execute(query, (self.worker_id, group.queue_array, group.free, lease,
                                                  dt.timedelta(seconds=self.poll), buried),
                                          prepare=self._prepared, binary=True)
            return await cur.fetchall()
        finally:
            group.waiting = False
            self._claiming.discard(pid)

    def _announce_buried(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The rows of jobs to run; the ones the claim buried go to on_exhausted, together."""
        buried = [Job.from_row(r)[0] for r in rows if r[17]]
        if not buried:
            return rows
        assert self._hooks is not None
        self._hooks.buried(buried)
        return [r for r in rows if not r[17]]

    def _launch(self, group: _Group, row: tuple[Any, ...]) -> None:
        group.free -= 1
        job, time_left = Job.from_row(row)
        definition = self.jobs.get(job.name) or self._definition(job.name)
        if definition is None:
            self._running.add(self._loop.create_task(self._unknown(group, job)))
            return
        held = self._hold(group, job, time_left)
        if definition.is_async or not group.slots or self._stopping:
            # (An async handler takes its connection when its task runs: the jobs of a claim
            # whose handlers never wait take turns with one.)
            self._running.add(self._loop.create_task(self._run_job(held, None, definition)))
        else:
            slot = held.slot = group.slots.pop()
            self._start_in_thread(held, slot, definition)
        if len(self._running) > 4 * self.concurrency + 64:
            # The ended ones are let go now and then, not each as it ends: a done callback per
            # job cost about a microsecond of a no-op job's twenty-odd in the worker.
            self._running = self._live()

    def _live(self) -> set[asyncio.Future[Any]]:
        """What a shutdown waits for: the jobs' tasks and plain handlers' threads that have not
        ended."""
        return {t for t in self._running if not t.done()}

    def _free_slot(self, group: _Group) -> None:
        group.free += 1
        if group.free == 1:  # (the dispatcher waits only while none is free)
            group.wake.set()

    # -- a job --------------------------------------------------------------------------------

    def _definition(self, name: str) -> JobDefinition[Any] | None:
        definition = self.jobs.get(name)
        if definition is None and self.resolve is not None and name not in self._warned:
            try:
                definition = self.resolve(name)
            except Exception as err:  # noqa: BLE001 (an unknown name)
                self.log.warning("could not resolve job name %r: %s", name, first_line(err))
            if definition is not None:
                self.jobs[name] = definition
        return definition

    def _hold(self, group: _Group, job: Job, time_left: float | None) -> _Held:
        held = _Held(job, group, time.monotonic())
        if time_left is not None:
            held.tick = self._deadlines.add(held, time_left)
        self._held[job.id.int] = held  # (the dispatcher reports the running count, once a claim)
        return held

    def _start_in_thread(self, held: _Held, slot: Slot, definition: JobDefinition[Any]) -> None:
        """A plain handler, on a connection at hand, without a task of its own (one cost a
        no-op job more than the job): its thread's end is delivered to ``_thread_ended``, which
        leaves the job to the dispatcher's next settle, or ends the attempt in a task when
        there is more to do (a failure, a transaction, a cancellation)."""
        job = held.job
        ctx = held.ctx = Context(job, None, slot.view(False, definition.transactional), self._control.query,
                                 asyncio.get_running_loop())
        held.threaded = held.in_handler = True
        held.task = self._threads.run(definition.handler, job.payload, ctx, ended=self._thread_ended, tag=held)
        self._running.add(held.task)

    def _thread_ended(self, future: asyncio.Future[Any], held: _Held) -> None:
        held.in_handler = False
        held.task = None
        if held.abandoned:
            return
        group, slot = held.group, held.slot
        assert slot is not None
        error = asyncio.CancelledError() if future.cancelled() else future.exception()
        result = None if error is not None else future.result()
        if error is None and self._encode(held, result) and self._leave_to_dispatcher(held, slot):
            group.slots.append(slot)  # (kept: it is neither broken nor the worker stopping)
            self._free_slot(group)
            return
        self._running.add(self._loop.create_task(self._run_job(held, slot, ended=(result, error))))

    def _encode(self, held: _Held, result: Any) -> bool:
        """Encodes the handler's result (``held.encoded``); False when it cannot be settled
        (``_after`` fails the job for good)."""
        try:
            held.encoded = encode_result(result, self._max_result)
        except ResultRefused:
            return False
        return True

    def _leave_to_dispatcher(self, held: _Held, slot: Slot) -> bool:
        """Leaves a job whose handler returned, outside a transaction, its result encoded, to
        be completed with the dispatcher's next claim, unless it is stopped, stopping, or the
        dispatcher's claim is sleeping in the server (then it completes itself)."""
        group = held.group
        if (held.reason is None and not self._stopping and not group.waiting and not slot.broken
                and slot.conn.pgconn.transaction_status == TransactionStatus.IDLE):
            group.pending.append((held, held.encoded, held.started))
            return True
        return False

    async def _unknown(self, group: _Group, job: Job) -> None:
        try:
            await self._control.query(q.SNOOZE_FOR,
                                      (job.id, job.claim, dt.timedelta(seconds=self.unknown_snooze)))
            if job.name not in self._warned:
                self._warned.add(job.name)
                self.log.warning("no handler for job name %r here; snoozed, no attempt used", job.name)
            self._report(job, "unknown_name", 0.0, None)
        except Exception as err:  # noqa: BLE001
            self.log.warning("could not snooze job %s: %s", job.id, first_line(err))
        finally:
            self._free_slot(group)

    async def _run_job(self, held: _Held, slot: Slot | None, definition: JobDefinition[Any] | None = None,
                       ended: tuple[Any, BaseException | None] = (None, None)) -> None:
        """An attempt in a task of its own: its handler runs here (``definition``), or ran in a
        thread and ``ended`` (its result, what it raised) is followed up; then its connection is
        kept and its slot freed. An outcome of None: left to the dispatcher's next settle."""
        outcome: Outcome | None = "lost"
        error: str | None = None
        broken = False
        try:
            if slot is None:
                slot = held.slot = held.group.slots.pop() if held.group.slots else await self._pool.acquire()
            outcome, error = await (self._attempt(slot, held, definition) if definition is not None
                                    else self._after(slot, held, *ended))
        except Exception as err:  # noqa: BLE001 (the job is left to its lease)
            broken = True
            error = first_line(err)
            if not is_connection_error(err) and not held.abandoned:
                self.log.warning("job %s: %s", held.job.id, first_line(from_driver(err)))
        finally:
            if not held.abandoned:  # (else let go already: its slot, outcome and connection)
                if slot is not None and not self._keep(held.group, slot, broken):
                    await self._pool.release(slot, broken)
                if outcome is not None:
                    self._ended(held, outcome, held.started, error)
                self._free_slot(held.group)

    async def _attempt(self, slot: Slot, held: _Held,
                       definition: JobDefinition[Any]) -> tuple[Outcome | None, str | None]:
        job = held.job
        result: Any = None
        thrown: BaseException | None = None
        # Its first statement begins the transaction (when transactional) that the worker ends.
        view = slot.view(definition.is_async, definition.transactional)
        ctx: AsyncContext | Context = (AsyncContext(job, view, self._control.query) if definition.is_async else
                                       Context(job, None, view, self._control.query, asyncio.get_running_loop()))
        held.ctx = ctx
        if held.reason is not None:
            thrown = asyncio.CancelledError()  # stopped before it began
        else:
            # An async def handler runs in this task (a task of its own per job cost more than
            # the job), and a cancel reaches it by cancelling this task while it runs; a plain
            # one in a thread, told by ctx.cancelled. Either is let go from outside if it
            # ignores its cancellation (Worker._abandon).
            # (Not the task _launch made: an application's eager task factory, Python 3.12's,
            # starts it before create_task answers it.)
            task = asyncio.current_task()
            assert task is not None
            held.threaded = not definition.is_async
            thread = None if definition.is_async else self._threads.run(definition.handler, job.payload, ctx)
            held.task = task
            held.in_handler = True
            try:
                result = await (definition.handler(job.payload, ctx) if thread is None else thread)
            except BaseException as err:  # noqa: BLE001 (the handler's failure, parking or cancellation)
                thrown = err
            finally:
                held.in_handler = False
                held.task = None
                while task.cancelling():
                    task.uncancel()  # the cancels were the handler's, not this task's
            if held.abandoned:
                return None, None
            if thrown is None and self._encode(held, result) and self._leave_to_dispatcher(held, slot):
                return None, None
        return await self._after(slot, held, result, thrown)

    async def _after(self, slot: Slot, held: _Held, result: Any,
                     thrown: BaseException | None) -> tuple[Outcome | None, str | None]:
        """What the handler's end comes to: settled (now, or with the dispatcher's next claim),
        failed, parked, or stopped."""
        job, conn = held.job, slot.conn
        status = conn.pgconn.transaction_status
        in_tx = status != TransactionStatus.IDLE
        if held.reason is not None:
            await self._rollback(slot, in_tx)
            if held.reason == "shutdown":
                await conn.execute(q.SNOOZE_NOW, (job.id, job.claim))
            return self._stopped_outcome(held), None
        if isinstance(thrown, Parked):
            await self._rollback(slot, in_tx)
            if thrown.until is not None:
                await conn.execute(q.SNOOZE, (job.id, job.claim, thrown.until))
            return "parked", None
        if thrown is None and status == TransactionStatus.INERROR:
            thrown = RuntimeError("the handler's transaction failed (a statement of it raised) and was rolled back")
        if thrown is None and held.encoded is None:
            try:
                held.encoded = encode_result(result, self._max_result)
            except ResultRefused as err:
                thrown = NonRetryable(str(err))
        if thrown is not None:
            await self._rollback(slot, in_tx)
            if isinstance(thrown, asyncio.CancelledError):
                raise thrown
            error = describe(thrown)
            retry_at = thrown.at if isinstance(thrown, RetryAfter) else None
            cur = await conn.execute(q.FAIL,
                                     (job.id, job.claim, error, retry_at, not isinstance(thrown, NonRetryable),
                                      error_names(thrown), isinstance(thrown, StepTimeout)))
            row = await cur.fetchone()
            return (row[0] if row and row[0] else "lost"), error
        if not in_tx and self._leave_to_dispatcher(held, slot):
            return None, None
        try:
            cur = await conn.execute(q.COMPLETE, (job.id, job.claim, encoded(held.encoded or "null")))
        except psycopg.Error as err:
            if is_transient(err):
                raise
            await self._rollback(slot, in_tx)
            error = f"the result was refused: {first_line(err)}"
            return await self._fail_for_good(slot, held, error), error
        row = await cur.fetchone()
        landed = bool(row and row[0])
        if in_tx:
            await conn.execute("commit" if landed else "rollback")  # a lost claim: the handler's writes are undone
        return ("completed" if landed else "lost"), None

    def _stopped_outcome(self, held: _Held) -> Outcome:
        return {"shutdown": "handed_back", "deadline": "timed_out", "cancelled": "cancelled"}.get(
            held.reason or "lost", "lost")  # type: ignore[return-value]

    async def _rollback(self, slot: Slot, in_tx: bool) -> None:
        if in_tx:
            await slot.conn.execute("rollback")

    def _abandon(self, held: _Held) -> None:
        """A handler still running ABANDON after its cancellation: its task or thread is left
        to it, and the attempt ends without it (Worker._let_go)."""
        if not held.in_handler or held.abandoned:
            return
        held.abandoned = True
        held.in_handler = False
        if held.task is not None:
            self._running.discard(held.task)  # a shutdown does not wait for it (Worker._let_go ends its attempt)
        held.task = None
        going = asyncio.ensure_future(self._let_go(held))
        self._letting_go.add(going)
        going.add_done_callback(self._letting_go.discard)

    async def _let_go(self, held: _Held) -> None:
        job, slot = held.job, held.slot
        self.log.warning("job %s: the handler did not stop within a second of being told to (%s); "
                         "its connection is closed", job.id, held.reason)
        if held.reason == "shutdown":  # handed back on the control connection
            try:
                await self._control.query(q.SNOOZE_NOW, (job.id, job.claim))
            except Exception as err:  # noqa: BLE001 (left to its lease)
                self.log.warning("could not hand job %s back: %s", job.id, first_line(err))
        if slot is not None:
            if held.threaded:
                slot.conn.cancel()  # a thread cannot be stopped: its statement can
            await self._give_back(held.group, slot, True)  # closed: the handler may still use it
        self._ended(held, self._stopped_outcome(held), held.started)
        self._free_slot(held.group)

    def _abort(self, held: _Held, reason: str) -> None:
        if held.reason is None:
            held.reason = reason
            if held.in_handler:
                asyncio.get_running_loop().call_later(ABANDON, self._abandon, held)
        if held.ctx is not None and held.ctx.cancel_reason is None:
            held.ctx._cancel(held.reason)
        if held.in_handler and not held.threaded and held.task is not None:
            held.task.cancel()

    def _deadline_reached(self, held: Any) -> None:
        self._abort(held, "deadline")

    def _ended(self, held: _Held, outcome: Outcome, started: float, error: str | None = None,
               count: bool = True) -> None:
        """An attempt ended: reported; ``count``: and the running count (a settle reports it
        once for its jobs)."""
        if held.tick is not None:
            self._deadlines.remove(held, held.tick)
            held.tick = None
        job_id = held.job.id.int
        other = self._held.pop(job_id, held)
        if other is not held:
            self._held[job_id] = other  # another attempt's of the same job, claimed since: kept
        if count and self.metrics:
            self.metrics.running(len(self._held))
        self._report(held.job, outcome, time.monotonic() - started, error)
        if self._hooks is not None:
            self._hooks.ended(held.job, outcome)

    def _report(self, job: Job, outcome: Outcome, seconds: float, error: str | None) -> None:
        if self.metrics:
            self.metrics.attempt_ended(job.queue, job.name, outcome, seconds)
        if self.log.isEnabledFor(LEVELS[outcome]):
            log_outcome(self.log, job.id, job.name, job.queue, job.attempt, seconds, outcome, error)
        if self.tracer is not None:
            from .tracing import record_attempt
            record_attempt(self.tracer, job, outcome, seconds, error)

    # -- heartbeats, cancels, shutdown -------------------------------------------------------

    async def _heartbeats(self) -> None:
        """Every lease/3 until the worker has stopped: through a shutdown's grace too."""
        while True:
            await asyncio.sleep(max(self.lease / 3, 0.1))
            await self._beat(list(self._held), "lost")

    async def _beat(self, ids: list[int], reason: str) -> None:
        helds = [self._held[i] for i in ids if i in self._held]
        if not helds:
            return
        try:
            rows = await self._control.query(
                q.HEARTBEATS,
                ([h.job.id for h in helds], [h.job.claim for h in helds]))
        except Exception as err:  # noqa: BLE001 (tried again at the next beat)
            self.log.warning("heartbeat failed; trying again: %s", first_line(err))
            return
        for job_id, until in rows:
            held = self._held.get(job_id.int)
            if until is None and held is not None:
                self._abort(held, reason)

    async def _listen(self) -> None:
        backoff = Backoff()
        while not self._stopping:
            try:
                conn = await self._listener.connect()
                backoff.reset()
                await self._beat(list(self._held), "cancelled")  # cancels missed while away
                async for note in conn.notifies():
                    ids = list(self._held) if note.payload in ("", "*") else self._held_of(note.payload)
                    if ids:
                        await self._beat(ids, "cancelled")
            except Exception:  # noqa: BLE001 (made again)
                self._listener.conn = None
                await self._pause(backoff.next())

    def _held_of(self, job_id: str) -> list[int]:
        """The held job a cancel notice names, in a list; none for another's or a bad id."""
        try:
            key = uuid.UUID(job_id).int
        except ValueError:
            return []
        return [key] if key in self._held else []

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def _wait_running(self, seconds: float) -> None:
        """Until what runs has ended, ``seconds`` at most: a plain handler's end may start a
        task that ends its attempt, waited for too."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (live := self._live()) and (left := end - loop.time()) > 0:
            await asyncio.wait(live, timeout=left)

    async def _shutdown(self, grace: float) -> None:
        self._stopping = True
        self._give_up_at = time.monotonic() + grace
        self._wake.set()
        for g in self._groups:
            g.wake.set()
        dispatchers = self._loops[:len(self._groups)]
        others = self._loops[len(self._groups):]
        # A claim sleeping in the server is cancelled; again each second while a dispatcher
        # waits, as a cancel that came before its claim was under way found nothing to cancel.
        waiting = {d for d in dispatchers if not d.done()}
        while waiting:
            if self._claiming:
                try:
                    await self._control.query(q.CANCEL_WAITING_CLAIMS, (list(self._claiming),))
                except Exception:  # noqa: BLE001
                    pass
            _, waiting = await asyncio.wait(waiting, timeout=RECANCEL)
        await asyncio.gather(*dispatchers, return_exceptions=True)
        await self._wait_running(grace)
        if self._live():
            for held in list(self._held.values()):
                self._abort(held, "shutdown")
            await self._wait_running(ABANDON + 0.5)
        if self._letting_go:
            await asyncio.gather(*self._letting_go, return_exceptions=True)
        for held in list(self._held.values()):
            try:
                await self._control.query(q.SNOOZE_NOW, (held.job.id, held.job.claim))
            except Exception as err:  # noqa: BLE001
                self.log.warning("could not hand job %s back: %s", held.job.id, first_line(err))
            self._ended(held, "handed_back", time.monotonic())
        if self._hooks is not None:  # its async def hooks end within what is left of the grace
            await self._hooks.wait(self._give_up_at - time.monotonic())
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        for g in self._groups:
            while g.slots:
                await self._pool.release(g.slots.pop())
        await self._listener.close()
        await self._control.close()
        await self._pool.close()
        self._threads.shutdown()
        self.log.info("pg_jobs worker stopped: worker_id=%s", self.worker_id)
