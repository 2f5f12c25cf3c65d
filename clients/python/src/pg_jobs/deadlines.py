"""The running jobs' deadlines: one timer for all the jobs whose deadlines fall in the same
hundredth of a second (the jobs of one claim, whose attempts got the same timeout at the same
moment, share one), each told at most that much late. A timer per job cost a no-op job about a
tenth of its time in the worker, for a deadline that almost no job reaches."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Hashable

#: The seconds a deadline is rounded up to.
GRAIN = 0.01


class Deadlines:
    def __init__(self, loop: asyncio.AbstractEventLoop, reached: Callable[[Hashable], None]) -> None:
        self._loop = loop
        self._reached = reached
        #: By tick (a deadline in GRAINs of the loop's clock): its jobs and its timer.
        self._ticks: dict[int, tuple[set[Hashable], asyncio.TimerHandle]] = {}

    def add(self, item: Hashable, seconds: float) -> int:
        """Calls ``reached(item)`` in ``seconds`` (up to GRAIN later) unless removed first;
        answers what ``remove`` takes."""
        tick = math.ceil((self._loop.time() + max(seconds, 0.0)) / GRAIN)
        entry = self._ticks.get(tick)
        if entry is None:
            entry = self._ticks[tick] = (set(), self._loop.call_at(tick * GRAIN, self._fire, tick))
        entry[0].add(item)
        return tick

    def remove(self, item: Hashable, tick: int) -> None:
        entry = self._ticks.get(tick)
        if entry is not None:
            entry[0].discard(item)
            if not entry[0]:
                entry[1].cancel()
                del self._ticks[tick]

    def _fire(self, tick: int) -> None:
        items, _ = self._ticks.pop(tick, (set(), None))
        for item in items:
            self._reached(item)
