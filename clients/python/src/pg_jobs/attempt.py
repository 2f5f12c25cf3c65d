"""One attempt of a claimed job, in a slot of its group: its handler (an ``async def`` one on
the worker's event loop, a plain one in the worker's threads), run until it ends or is told to
stop (a lost claim, a cancel, its deadline, a shutdown), then its settle. A handler that
returns outside a transaction has its job completed by the dispatcher with the group's next
claim; any other end is settled here, on the connection the handler used: stopped, parked,
failed, or completed in the handler's transaction. The engine decides what a failure becomes
(retry, backoff, burial): the attempt reports it and obeys."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from . import queries as q
from .connection import Slot
from .context import AsyncContext, Context, Job, Parked
from .core import Group, WorkerCore, free_slot
from .errors import NonRetryable, RetryAfter, StepTimeout, error_names, from_driver, is_connection_error
from .held import Held
from .jobs import JobDefinition
from .observe import Outcome, describe, first_line
from .results import ResultRefused, encode_result, encoded, is_transient

#: How much longer than its cancellation a handler is waited for before it is abandoned.
ABANDON = 1.0
#: How long, at most, a task runs held jobs one after another (handlers that never wait)
#: before it lets the event loop's other work run: a turn of the loop a job cost a no-op job
#: a tenth of the worker's time.
TURN = 0.001


class Attempts:
    """The attempts of a worker's jobs: each started in a slot of its group, and ended."""

    def __init__(self, core: WorkerCore, concurrency: int) -> None:
        self.core = core
        #: The ended ones among core.running are let go once there are more than this.
        self._most_running = 4 * concurrency + 64
        #: The names this worker has no handler for, warned about once each.
        self._warned: set[str] = set()
        #: The attempts being let go after their handlers ignored their cancellation.
        self.letting_go: set[asyncio.Future[None]] = set()

    def start(self, group: Group, job: Job, time_left: float | None) -> None:
        core = self.core
        group.free -= 1
        definition = core.jobs.get(job.name) or self._definition(job.name)
        if definition is None:
            core.running.add(core.loop.create_task(self._unknown(group, job)))
            return
        held = self._hold(group, job, time_left)
        if definition.is_async or not group.slots or core.stopping:
            # (An async handler takes its connection when its task runs: the jobs of a claim
            # whose handlers never wait take turns with one.)
            core.running.add(core.loop.create_task(self._run_job(held, None, definition)))
        else:
            slot = held.slot = group.slots.pop()
            self._start_in_thread(held, slot, definition)
        if len(core.running) > self._most_running:
            # The ended ones are let go now and then, not each as it ends: a done callback per
            # job cost about a microsecond of a no-op job's twenty-odd in the worker.
            core.running = core.live()

    def _definition(self, name: str) -> JobDefinition[Any] | None:
        definition = self.core.jobs.get(name)
        if definition is None and self.core.resolve is not None and name not in self._warned:
            try:
                definition = self.core.resolve(name)
            except Exception as err:  # noqa: BLE001 (an unknown name)
                self.core.log.warning("could not resolve job name %r: %s", name, first_line(err))
            if definition is not None:
                self.core.jobs[name] = definition
        return definition

    def _hold(self, group: Group, job: Job, time_left: float | None) -> Held:
        held = Held(job, group, time.monotonic())
        if time_left is not None:
            held.tick = self.core.deadlines.add(held, time_left)
        self.core.held[job.id.int] = held  # (the dispatcher reports the running count, once a claim)
        return held

    def _start_in_thread(self, held: Held, slot: Slot, definition: JobDefinition[Any]) -> None:
        """A plain handler, on a connection at hand, without a task of its own (one cost a
        no-op job more than the job): its thread's end is delivered to ``_thread_ended``, which
        leaves the job to the dispatcher's next settle, or ends the attempt in a task when
        there is more to do (a failure, a transaction, a cancellation)."""
        job = held.job
        ctx = held.ctx = Context(job, None, slot.view(False, definition.transactional), self.core.control.query,
                                 asyncio.get_running_loop())
        held.threaded = held.in_handler = True
        held.task = self.core.threads.run(definition.handler, job.payload, ctx, ended=self._thread_ended, tag=held)
        self.core.running.add(held.task)

    def _thread_ended(self, future: asyncio.Future[Any], held: Held) -> None:
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
            free_slot(group)
            return
        self.core.running.add(self.core.loop.create_task(self._run_job(held, slot, ended=(result, error))))

    def _encode(self, held: Held, result: Any) -> bool:
        """Encodes the handler's result (``held.encoded``); False when it cannot be settled
        (``_after`` fails the job for good)."""
        try:
            held.encoded = encode_result(result, self.core.max_result)
        except ResultRefused:
            return False
        return True

    def _leave_to_dispatcher(self, held: Held, slot: Slot) -> bool:
        """Leaves a job whose handler returned, outside a transaction, its result encoded, to
        be completed with the dispatcher's next claim, unless it is stopped, stopping, or the
        dispatcher's claim is sleeping in the server (then it completes itself)."""
        group = held.group
        if (held.reason is None and not self.core.stopping and not group.waiting and not slot.broken
                and slot.conn.pgconn.transaction_status == TransactionStatus.IDLE):
            group.pending.append((held, held.encoded, held.started))
            return True
        return False

    async def _unknown(self, group: Group, job: Job) -> None:
        try:
            await self.core.control.query(q.SNOOZE_FOR,
                                          (job.id, job.claim, dt.timedelta(seconds=self.core.unknown_snooze)))
            if job.name not in self._warned:
                self._warned.add(job.name)
                self.core.log.warning("no handler for job name %r here; snoozed, no attempt used", job.name)
            self.core.report(job, "unknown_name", 0.0, None)
        except Exception as err:  # noqa: BLE001
            self.core.log.warning("could not snooze job %s: %s", job.id, first_line(err))
        finally:
            free_slot(group)

    async def _run_job(self, held: Held, slot: Slot | None, definition: JobDefinition[Any] | None = None,
                       ended: tuple[Any, BaseException | None] = (None, None)) -> None:
        """An attempt in a task of its own: its handler runs here (``definition``), or ran in a
        thread and ``ended`` (its result, what it raised) is followed up; then its connection is
        kept and its slot freed, or the next held job with an ``async def`` handler runs in this
        task, in that slot (``_next_here``). An outcome of None: left to the dispatcher's next
        settle."""
        resumed = time.monotonic()
        while True:
            outcome: Outcome | None = "lost"
            error: str | None = None
            broken = False
            try:
                if slot is None:
                    slot = held.slot = held.group.slots.pop() if held.group.slots else await self.core.pool.acquire()
                outcome, error = await (self._attempt(slot, held, definition) if definition is not None
                                        else self._after(slot, held, *ended))
            except Exception as err:  # noqa: BLE001 (the job is left to its lease)
                broken = True
                error = first_line(err)
                if not is_connection_error(err) and not held.abandoned:
                    self.core.log.warning("job %s: %s", held.job.id, first_line(from_driver(err)))
            finally:
                if not held.abandoned:  # (else let go already: its slot, outcome and connection)
                    if slot is not None and not self.core.keep(held.group, slot, broken):
                        await self.core.pool.release(slot, broken)
                    if outcome is not None:
                        self.core.ended(held, outcome, held.started, error)
            if held.abandoned:
                return
            following = self._next_here(held.group)
            if following is None:
                free_slot(held.group)
                return
            held, definition = following
            slot, ended = None, (None, None)
            if held.started - resumed > TURN:
                await asyncio.sleep(0)  # the loop's other work (settles, heartbeats, timers)
                resumed = time.monotonic()

    def _next_here(self, group: Group) -> tuple[Held, JobDefinition[Any]] | None:
        """The next held job, started in the slot just freed, when its handler is an ``async
        def`` one: it runs in the task of the job that ended (a task a job cost a no-op job a
        fifth of the worker's time). None: the slot is freed instead, and the dispatcher starts
        what comes next."""
        core = self.core
        if not group.queued or core.stopping:
            return None
        job, time_left, _ = group.queued[0]
        definition = core.jobs.get(job.name)
        if definition is None or not definition.is_async:
            return None
        group.queued.popleft()
        group.starts.append(job)  # marked started by the next settle
        group.dry = False
        group.wake.set()
        return self._hold(group, job, time_left), definition

    async def _attempt(self, slot: Slot, held: Held,
                       definition: JobDefinition[Any]) -> tuple[Outcome | None, str | None]:
        job = held.job
        result: Any = None
        thrown: BaseException | None = None
        # Its first statement begins the transaction (when transactional) that the worker ends.
        view = slot.view(definition.is_async, definition.transactional)
        ctx: AsyncContext | Context = (AsyncContext(job, view, self.core.control.query) if definition.is_async else
                                       Context(job, None, view, self.core.control.query, asyncio.get_running_loop()))
        held.ctx = ctx
        if held.reason is not None:
            thrown = asyncio.CancelledError()  # stopped before it began
        else:
            # An async def handler runs in this task (a task of its own per job cost more than
            # the job; held jobs run one after another in one: _run_job), and a cancel reaches
            # it by cancelling this task while it runs (and only then: in_handler); a plain
            # one in a thread, told by ctx.cancelled. Either is let go from outside if it
            # ignores its cancellation (Attempts._abandon).
            # (Not the task start made: an application's eager task factory, Python 3.12's,
            # starts it before create_task answers it.)
            task = asyncio.current_task(self.core.loop)  # (the loop given: 0.3 µs a job less on Python 3.11)
            assert task is not None
            held.threaded = not definition.is_async
            thread = None if definition.is_async else self.core.threads.run(definition.handler, job.payload, ctx)
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

    async def _after(self, slot: Slot, held: Held, result: Any,
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
                held.encoded = encode_result(result, self.core.max_result)
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
            return await fail_for_good(self.core, slot, held, error), error
        row = await cur.fetchone()
        landed = bool(row and row[0])
        if in_tx:
            await conn.execute("commit" if landed else "rollback")  # a lost claim: the handler's writes are undone
        return ("completed" if landed else "lost"), None

    def _stopped_outcome(self, held: Held) -> Outcome:
        return {"shutdown": "handed_back", "deadline": "timed_out", "cancelled": "cancelled"}.get(
            held.reason or "lost", "lost")  # type: ignore[return-value]

    async def _rollback(self, slot: Slot, in_tx: bool) -> None:
        if in_tx:
            await slot.conn.execute("rollback")

    def _abandon(self, held: Held) -> None:
        """A handler still running ABANDON after its cancellation: its task or thread is left
        to it, and the attempt ends without it (Attempts.let_go)."""
        if not held.in_handler or held.abandoned:
            return
        held.abandoned = True
        held.in_handler = False
        if held.task is not None:
            self.core.running.discard(held.task)  # a shutdown does not wait for it (Attempts.let_go ends its attempt)
        held.task = None
        going = asyncio.ensure_future(self.let_go(held))
        self.letting_go.add(going)
        going.add_done_callback(self.letting_go.discard)

    async def let_go(self, held: Held) -> None:
        job, slot = held.job, held.slot
        self.core.log.warning("job %s: the handler did not stop within a second of being told to (%s); "
                         "its connection is closed", job.id, held.reason)
        if held.reason == "shutdown":  # handed back on the control connection
            try:
                await self.core.control.query(q.SNOOZE_NOW, (job.id, job.claim))
            except Exception as err:  # noqa: BLE001 (left to its lease)
                self.core.log.warning("could not hand job %s back: %s", job.id, first_line(err))
        if slot is not None:
            if held.threaded:
                slot.conn.cancel()  # a thread cannot be stopped: its statement can
            await self.core.give_back(held.group, slot, True)  # closed: the handler may still use it
        self.core.ended(held, self._stopped_outcome(held), held.started)
        free_slot(held.group)

    def abort(self, held: Held, reason: str) -> None:
        if held.reason is None:
            held.reason = reason
            if held.in_handler:
                asyncio.get_running_loop().call_later(ABANDON, self._abandon, held)
        if held.ctx is not None and held.ctx.cancel_reason is None:
            held.ctx._cancel(held.reason)
        if held.in_handler and not held.threaded and held.task is not None:
            held.task.cancel()

    def deadline_reached(self, held: Any) -> None:
        self.abort(held, "deadline")


async def fail_for_good(core: WorkerCore, slot: Slot, held: Held, error: str) -> Outcome:
    """Fails a held job for good (no retry): its result could not be settled."""
    job = held.job
    try:
        cur = await slot.conn.execute(q.FAIL_FOR_GOOD, (job.id, job.claim, error))
        row = await cur.fetchone()
        return row[0] if row and row[0] else "lost"
    except psycopg.Error as err:
        if is_transient(err):
            raise
        core.log.warning("could not fail job %s; it is left to its lease: %s", job.id, first_line(err))
        return "lost"
