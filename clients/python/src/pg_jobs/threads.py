"""The threads plain handlers run in: one queue, a thread per handler running at once, made
when none is free. Cheaper per job than ``loop.run_in_executor`` (no concurrent future chained
to the asyncio one), and a thread whose handler never ends (abandoned after a cancel) does not
hold back the next job: another thread is made. The threads are daemons, so such a handler
cannot keep the process from exiting once the worker has stopped."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

#: Told of a handler's end on the loop, with the future it ended and what run() was given as ``tag``.
Ended = Callable[["asyncio.Future[Any]", Any], None]
_Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...], Ended | None, Any]
#: How the future ends (_succeed or _fail), the future, its result or error, and run()'s ``ended`` and ``tag``.
_End = tuple[Ended, "asyncio.Future[Any]", Any, Ended | None, Any]


class Threads:
    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        #: Handlers handed over and not yet seen ending (counted on the event loop only).
        self._busy = 0
        #: Handlers' ends not yet delivered, by loop; a loop in it has been told to take them.
        self._ends: dict[asyncio.AbstractEventLoop, list[_End]] = {}
        self._lock = threading.Lock()
        #: Told of each handler that starts or ends, under the lock.
        self._changed = threading.Condition(self._lock)
        #: Handlers handed over and not yet started, and the start of each running one.
        self._unstarted = 0
        self._starts: dict[int, float] = {}

    def run(self, fn: Callable[..., Any], *args: Any, ended: Ended | None = None, tag: Any = None
            ) -> asyncio.Future[Any]:
        """``fn(*args)`` in a thread; the future ends with its result or what it raised, and
        ``ended(future, tag)`` is called on the loop as it does (before the future's callbacks)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._busy += 1
        if self._busy > len(self._threads):
            thread = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()
        with self._lock:
            self._unstarted += 1
        self._queue.put((loop, future, fn, args, ended, tag))
        return future

    @property
    def busy(self) -> int:
        """Handlers handed over whose ends the loop has not yet taken."""
        return self._busy

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, future, fn, args, ended, tag = item
            with self._changed:
                self._unstarted -= 1
                self._starts[id(future)] = time.monotonic()
                self._changed.notify()
            try:
                result = fn(*args)
            except StopIteration as err:  # a future cannot hold one
                self._hand(loop, (_fail, future, RuntimeError(f"the handler raised StopIteration: {err}"), ended, tag))
            except BaseException as err:  # noqa: BLE001 (the handler's, whatever it is: Parked too)
                self._hand(loop, (_fail, future, err, ended, tag))
            else:
                self._hand(loop, (_succeed, future, result, ended, tag))
            del item, future, fn, args, ended, tag

    def _hand(self, loop: asyncio.AbstractEventLoop, end: _End) -> None:
        """Delivers a handler's end on its loop. Ends that come before the loop has taken the
        last ones go with them: one wake-up of the loop for all (a wake-up per handler cost a
        plain handler about a third of its time in the worker)."""
        with self._changed:
            del self._starts[id(end[1])]
            self._changed.notify()
            waiting = self._ends.get(loop)
            if waiting is not None:
                waiting.append(end)
                return
            self._ends[loop] = [end]
        try:
            loop.call_soon_threadsafe(self._deliver, loop)
        except RuntimeError:  # the loop is closed: nobody waits any more
            with self._lock:
                self._ends.pop(loop, None)

    def let_finish(self, most: float) -> None:
        """Blocks, ``most`` seconds at most, while a handler has not started or started less
        than ``most`` ago: the ends of handlers that end at once are then on their way to the
        loop. (The dispatcher's settle takes them with the ends it was told of, where the jobs
        of one claim would otherwise go on being settled in two statements each time.)"""
        with self._changed:
            limit = time.monotonic() + most
            while (now := time.monotonic()) < limit and (
                    self._unstarted or any(now - t < most for t in self._starts.values())):
                self._changed.wait(limit - now)

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            ends = self._ends.pop(loop, [])
        for how, future, value, ended, tag in ends:
            self._busy -= 1
            how(future, value)
            if ended is not None:
                ended(future, tag)

    def shutdown(self) -> None:
        """Ends each thread once it is free; one still running a handler is left to it."""
        for _ in self._threads:
            self._queue.put(None)
        self._threads.clear()


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], err: BaseException) -> None:
    if not future.done():
        future.set_exception(err)
