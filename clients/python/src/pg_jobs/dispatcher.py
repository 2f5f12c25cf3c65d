"""A dispatcher per set of queues: while slots are free it claims as many jobs as there are free
slots, the moment one is free (a waiting claim in the server when there is no work: no LISTEN
needed), and settles the jobs that ended without opening their transaction together with that
claim (jobs.complete_and_claim: one statement and one commit for all of them). Nothing waits
for a batch. With prefetch, it also holds up to that many claimed jobs beyond its slots,
claimed ahead once half of them are taken; a freed slot starts the next at once, and the next
settle marks it started (until then, a lapse gives it back unused). A stop gives back what it
holds. A database error is waited out with backoff: a worker never ends on one."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import deque
from typing import Any

import psycopg

from . import queries as q
from .arrays import Int8Array, UuidArray, int8_array, uuid_array
from .attempt import Attempts, fail_for_good
from .connection import Backoff, Slot
from .context import Claimed, claimed_row
from .core import Group, WorkerCore
from .errors import CODES
from .held import Held
from .observe import Outcome, first_line
from .results import encoded, is_transient

QUERY_CANCELED = "57014"
#: A prepared statement missing, another of its name there, or one of another statement's
#: (psycopg numbers its names per connection) there: a server connection other than the one
#: that prepared it (a transaction-pooling PgBouncer before 1.21).
NOT_KEPT = {"26000", "42P05", "08P01"}
#: How long, at most, the dispatcher lets plain handlers just started end before it settles.
GATHER = 0.0002


class Dispatcher:
    def __init__(self, core: WorkerCore, group: Group, attempts: Attempts) -> None:
        self.core, self.group, self.attempts = core, group, attempts
        group.refill = self._refill

    def _refill(self) -> None:
        """A slot freed: the next held job starts, its handler in a task or a thread of its own
        (a job ended in a task has run the next one there when it could: Attempts._next_here)."""
        self.group.dry = False
        self._start_queued()

    def _to_claim(self) -> int:
        """How many jobs to claim now: the free slots; with prefetch, enough to fill the slots
        and the prefetch once half of it is taken (else none)."""
        group = self.group
        if self.core.stopping:
            return 0
        if not group.prefetch:
            return group.free
        if group.dry or len(group.queued) >= group.free + group.prefetch / 2:
            return 0
        return min(group.free + group.prefetch - len(group.queued), 1000)

    def _start_queued(self) -> None:
        """Starts held jobs in the free slots; the next settle marks them started. Once the
        worker stops none starts: the run loop hands them back."""
        group = self.group
        started = False
        while not self.core.stopping and group.free > 0 and group.queued:
            job, time_left, _ = group.queued.popleft()
            group.starts.append(job)
            self.attempts.start(group, job, time_left)
            started = True
        if started:
            group.wake.set()

    async def run(self) -> None:
        """While slots are free, claims that many jobs (completing the jobs pending in the same
        statement), and starts each; sleeps while every slot is busy. Ends once the worker
        stops and nothing is left to settle."""
        core, group, attempts = self.core, self.group, self.attempts
        backoff = Backoff()
        while True:
            hand_back = core.stopping and bool(group.queued)
            if not group.pending and not group.starts and not hand_back:
                if core.stopping:
                    return
                if self._to_claim() == 0:
                    group.wake.clear()
                    await group.wake.wait()
                    continue
            slot: Slot | None = None
            try:
                slot = group.slots.pop() if group.slots else await core.pool.acquire()
                rows: list[Claimed] = []
                if hand_back:
                    await self._hand_back(slot)
                elif group.pending or group.starts:
                    rows = await self._settle(slot)
                else:
                    rows = await self._claim(slot)
                backoff.reset()
                if not core.keep(group, slot, False):
                    await core.pool.release(slot)
                slot = None
                if core.report_buried and rows:
                    rows = self._announce_buried(rows)
                if group.prefetch:
                    group.queued.extend(rows)
                    self._start_queued()
                else:
                    for job, time_left, _ in rows:
                        attempts.start(group, job, time_left)
                if rows and core.metrics:
                    core.metrics.running(len(core.held))
                if rows and group.pending:
                    await self._gather()
            except Exception as err:  # noqa: BLE001 (a worker never ends on a database error)
                if slot is not None:
                    await core.give_back(group, slot, True)
                if core.stopping and time.monotonic() >= core.give_up_at:
                    self._give_up(err)
                    return
                if core.stopping and isinstance(err, psycopg.Error) and err.sqlstate == QUERY_CANCELED:
                    continue
                if core.prepared and isinstance(err, psycopg.Error) and err.sqlstate in NOT_KEPT:
                    core.prepared = core.pool.prepared = False
                    core.log.warning("the server did not keep this worker's prepared statements (a transaction-"
                                     "pooling PgBouncer before 1.21?); going on without them: pass "
                                     "prepared_statements=False (the command: --no-prepared-statements): %s",
                                     first_line(err))
                    continue
                wait = backoff.next()
                core.log.warning("database error; trying again in %.1f s: %s", wait, first_line(err))
                await core.pause(wait)

    async def _gather(self) -> None:
        """Lets the jobs just claimed start, and plain ones that end at once end, before the
        jobs pending are settled: else those of one claim, split once (the first plain handler's
        end seen before the others had run), are settled in two statements from then on."""
        await asyncio.sleep(0)  # the new jobs start: plain handlers are handed to threads
        threads = self.core.threads
        if threads.busy:
            threads.let_finish(GATHER)
            await asyncio.sleep(0)  # their ends delivered
            await asyncio.sleep(0)  # their jobs pending

    async def _settle(self, slot: Slot) -> list[Claimed]:
        core, group = self.core, self.group
        # The ids and claims go as binary arrays made at once (pg_jobs.arrays).
        batch, group.pending = group.pending, []
        starts, group.starts = group.starts, []
        if starts and batch:
            # A job that started and ended since the last settle needs no mark (the engine
            # would skip it): not sent.
            ended = {h.job.id.int for h, _, _ in batch}
            starts = [j for j in starts if j.id.int not in ended]
        ids = uuid_array([h.job.id for h, _, _ in batch])
        claims = int8_array([h.job.claim for h, _, _ in batch])
        answers = [r for _, r, _ in batch]
        # No results at all (handlers that answer nothing): none sent, none for the server to read.
        results = None if answers.count("null") == len(answers) else [encoded(r) for r in answers]
        free = self._to_claim()
        rows: list[Claimed] = []
        landed: set[Any] | None
        start_ids = uuid_array([j.id for j in starts])
        start_claims = int8_array([j.claim for j in starts])
        try:
            if group.prefetch:
                cur = slot.conn.cursor(row_factory=claimed_row, binary=True)
                await cur.execute(
                    q.SETTLE_AHEAD,
                    (ids, claims, core.worker_id, group.queue_array, free, core.lease, results, core.report_buried,
                     start_ids, start_claims),
                    prepare=core.prepared)
                rows = await cur.fetchall()
                landed = None  # all of them: else the statement raised lease_lost
            elif free > 0:
                cur = slot.conn.cursor(row_factory=claimed_row, binary=True)
                await cur.execute(
                    q.COMPLETE_AND_CLAIM,
                    (ids, claims, core.worker_id, group.queue_array, free, core.lease, results, core.report_buried),
                    prepare=core.prepared)
                rows = await cur.fetchall()
                landed = None  # all of them: else the statement raised lease_lost
            else:
                landed = await self._complete_many(slot, ids, claims, results)
        except psycopg.Error as err:
            if err.sqlstate != CODES["lease_lost"]:
                if is_transient(err) or err.sqlstate in NOT_KEPT:
                    group.pending[:0] = batch
                    group.starts[:0] = starts
                    raise
                # Refused for what it carries: never sent again; its jobs settled one by one.
                core.log.warning("a settle of %d jobs was refused for what it carries; settling them one by one: %s",
                                 len(batch), first_line(err))
                await self._settle_each(slot, batch)
                return []
            if starts:
                await slot.conn.execute(q.MARK_STARTED, (start_ids, start_claims))
            landed = await self._complete_many(slot, ids, claims, results)
        for held, _, started in batch:
            core.ended(held, "completed" if landed is None or held.job.id in landed else "lost", started, count=False)
        if core.metrics:
            core.metrics.running(len(core.held))
        return rows

    async def _settle_each(self, slot: Slot, batch: list[tuple[Held, Any, float]]) -> None:
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
                    self.group.pending[:0] = batch[i:]
                    raise
                error = f"the result was refused: {first_line(err)}"
                outcome = await fail_for_good(self.core, slot, held, error)
            self.core.ended(held, outcome, started, error)

    def _give_up(self, err: BaseException) -> None:
        """A stop past its grace that still cannot settle what its handlers completed: those
        jobs are left to their leases (they run again once the leases lapse)."""
        batch, self.group.pending = self.group.pending, []
        if batch:
            self.core.log.warning("stopping: could not settle %d completed jobs within the grace; they are left "
                                  "to their leases: %s", len(batch), first_line(err))
        for held, _, started in batch:
            self.core.ended(held, "lost", started)

    async def _complete_many(self, slot: Slot, ids: UuidArray, claims: Int8Array,
                             results: list[Any] | None) -> set[Any]:
        cur = await slot.conn.execute(q.COMPLETE_MANY, (ids, claims, results), prepare=self.core.prepared)
        return {job_id for job_id, landed in await cur.fetchall() if landed}

    async def _hand_back(self, slot: Slot) -> None:
        """At a stop: the held jobs not started go back at once, no attempt used."""
        core, group = self.core, self.group
        rows, group.queued = list(group.queued), deque()
        try:
            await slot.conn.execute(q.HAND_BACK, ([job.id for job, _, _ in rows], [job.claim for job, _, _ in rows]))
        except psycopg.Error as err:
            if is_transient(err):
                group.queued.extendleft(reversed(rows))
                raise
            core.log.warning("could not hand back %d jobs claimed ahead; they are left to their leases (no attempt "
                             "used): %s", len(rows), first_line(err))

    async def _claim(self, slot: Slot) -> list[Claimed]:
        """Claims for the group's free slots: a look first, and only when it finds nothing a
        claim that sleeps in the server for work (while it does, an ending job completes
        itself). Without the look, a claim answered short was followed by a sleeping one, and
        every job of the batch running then completed with a commit of its own. With prefetch
        it claims ahead, and sleeps only when it holds nothing."""
        core, group = self.core, self.group
        lease, buried = core.lease, core.report_buried
        claim = q.CLAIM_AHEAD if group.prefetch else q.CLAIM
        want = self._to_claim()
        cur = slot.conn.cursor(row_factory=claimed_row, binary=True)
        await cur.execute(claim, (core.worker_id, group.queue_array, want, lease, None, buried),
                          prepare=core.prepared)
        found = await cur.fetchall()
        if found or core.stopping:
            return found
        if group.queued:
            group.dry = True
            return []
        while group.slots:  # an idle worker holds one connection
            await core.pool.release(group.slots.pop())
        pid = slot.pid
        core.claiming.add(pid)
        group.waiting = True
        try:
            # A job ended during the look: settled with the next claim. A stop that began
            # while the idle connections went back found no claim of this worker's to cancel.
            if group.pending or group.starts or core.stopping:
                return []
            await cur.execute(claim, (core.worker_id, group.queue_array, want, lease,
                                      dt.timedelta(seconds=core.poll), buried),
                              prepare=core.prepared)
            return await cur.fetchall()
        finally:
            group.waiting = False
            core.claiming.discard(pid)

    def _announce_buried(self, rows: list[Claimed]) -> list[Claimed]:
        """The rows of jobs to run; the ones the claim buried go to on_exhausted, together."""
        buried = [job for job, _, was_buried in rows if was_buried]
        if not buried:
            return rows
        assert self.core.hooks is not None
        self.core.hooks.buried(buried)
        return [r for r in rows if not r[2]]
