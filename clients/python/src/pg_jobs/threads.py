"""The threads plain handlers run in: one queue, a thread per handler running at once, made
when none is free. Cheaper per job than ``loop.run_in_executor`` (no concurrent future chained
to the asyncio one), and a thread whose handler never ends (abandoned after a cancel) does not
hold back the next job: another thread is made. The threads are daemons, so such a handler
cannot keep the process from exiting once the worker has stopped."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

_Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_End = tuple[Callable[["asyncio.Future[Any]", Any], None], "asyncio.Future[Any]", Any]


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

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` in a thread; the future ends with its result or what it raised."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._busy += 1
        future.add_done_callback(self._ended)
        if self._busy > len(self._threads):
            thread = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()
        self._queue.put((loop, future, fn, args))
        return future

    def _ended(self, _: asyncio.Future[Any]) -> None:
        self._busy -= 1

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, future, fn, args = item
            try:
                result = fn(*args)
            except StopIteration as err:  # a future cannot hold one
                self._hand(loop, _fail, future, RuntimeError(f"the handler raised StopIteration: {err}"))
            except BaseException as err:  # noqa: BLE001 (the handler's, whatever it is: Parked too)
                self._hand(loop, _fail, future, err)
            else:
                self._hand(loop, _succeed, future, result)
            del item, future, fn, args

    def _hand(self, loop: asyncio.AbstractEventLoop, how: Callable[[asyncio.Future[Any], Any], None],
              future: asyncio.Future[Any], value: Any) -> None:
        """Delivers a handler's end on its loop. Ends that come before the loop has taken the
        last ones go with them: one wake-up of the loop for all (a wake-up per handler cost a
        plain handler about a third of its time in the worker)."""
        with self._lock:
            waiting = self._ends.get(loop)
            if waiting is not None:
                waiting.append((how, future, value))
                return
            self._ends[loop] = [(how, future, value)]
        try:
            loop.call_soon_threadsafe(self._deliver, loop)
        except RuntimeError:  # the loop is closed: nobody waits any more
            with self._lock:
                self._ends.pop(loop, None)

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            ends = self._ends.pop(loop, [])
        for how, future, value in ends:
            how(future, value)

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
