"""The threads plain handlers run in (pg_jobs.threads): each handler's end reaches its own
future, whether it returns or raises, when many end at once and their ends are delivered to the
event loop together. No database.

The delivery is guarded by a lock between the handlers' threads and the loop. The second test
widens the race's window (a thread looking up its loop's waiting ends pauses, letting the GIL
go); checked by taking the lock out (``self._lock = contextlib.nullcontext()``): the loop then
takes a list a thread is about to add to, that end is lost, and the test fails at its timeout."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pg_jobs.threads import Threads


def handler(n: int) -> int:
    if n % 7 == 0:
        raise ValueError(str(n))
    return n * 2


async def hand_over(threads: Threads, count: int, timeout: float = 60) -> list[object]:
    futures = [threads.run(handler, n) for n in range(count)]
    return await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout)


class SlowLookups(dict):  # type: ignore[type-arg]
    def get(self, key: object, default: object = None) -> object:
        found = super().get(key, default)
        time.sleep(0.0005)
        return found


def test_every_end_reaches_its_future() -> None:
    threads = Threads("test")
    try:
        for _ in range(5):
            answers = asyncio.run(hand_over(threads, 4000))
            for n, answer in enumerate(answers):
                if n % 7 == 0:
                    assert isinstance(answer, ValueError) and str(answer) == str(n)
                else:
                    assert answer == n * 2
    finally:
        threads.shutdown()


def test_no_end_lost_when_the_loop_takes_them_meanwhile() -> None:
    threads = Threads("test")
    threads._ends = SlowLookups()
    try:
        for _ in range(3):
            answers = asyncio.run(hand_over(threads, 300, timeout=20))
            assert [a for n, a in enumerate(answers) if n % 7] == [n * 2 for n in range(300) if n % 7]
    finally:
        threads.shutdown()


def test_a_closed_loop_does_not_stop_the_next() -> None:
    """A handler that ends after its loop has closed is dropped; the same threads then serve
    another loop."""
    threads = Threads("test")
    release = threading.Event()
    try:
        first = asyncio.new_event_loop()

        async def start() -> None:
            threads.run(release.wait)

        first.run_until_complete(start())
        first.close()
        release.set()
        assert asyncio.run(hand_over(threads, 50))[1] == 2
    finally:
        threads.shutdown()


def test_stop_iteration_is_a_runtime_error() -> None:
    def stops() -> None:
        raise StopIteration("done")

    async def run(threads: Threads) -> None:
        with pytest.raises(RuntimeError, match="StopIteration"):
            await threads.run(stops)

    threads = Threads("test")
    try:
        asyncio.run(run(threads))
    finally:
        threads.shutdown()


def test_let_finish_takes_the_ends_of_handlers_that_end_at_once_and_not_a_running_one() -> None:
    """What the dispatcher waits for before a settle (Threads.let_finish): a handler that ends
    at once has its end on the way when it returns; one that goes on running is not waited
    for past the bound (else this test would not end: its handler ends only after)."""
    threads = Threads("test")
    release = threading.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        quick = threads.run(handler, 3)
        threads.let_finish(5.0)
        assert [end[1] for end in threads._ends[loop]] == [quick]
        assert await quick == 6
        stuck = threads.run(release.wait)
        threads.let_finish(0.01)
        assert not stuck.done() and loop not in threads._ends
        release.set()
        assert await stuck is True

    try:
        asyncio.run(run())
    finally:
        threads.shutdown()
