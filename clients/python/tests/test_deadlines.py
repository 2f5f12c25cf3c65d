"""The running jobs' deadlines (pg_jobs.deadlines): each job is told once its deadline passes,
at most a hundredth of a second late; one removed first is not; jobs whose deadlines fall in the
same hundredth share one timer, which goes when the last of them is removed. No database."""

from __future__ import annotations

import asyncio

from pg_jobs.deadlines import GRAIN, Deadlines


def test_each_is_told_once_at_its_deadline_and_a_removed_one_never() -> None:
    async def run() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        told: list[tuple[str, float]] = []
        deadlines = Deadlines(loop, lambda item: told.append((str(item), loop.time())))
        start = loop.time()
        deadlines.add("soon", 0.05)
        deadlines.add("later", 0.15)
        deadlines.remove("removed", deadlines.add("removed", 0.05))
        deadlines.add("past", -1.0)  # already passed: told at once
        await asyncio.sleep(0.3)
        return [(name, at - start) for name, at in told]

    told = asyncio.run(run())
    assert [name for name, _ in told] == ["past", "soon", "later"]
    at = dict(told)
    assert 0.05 <= at["soon"] and 0.15 <= at["later"]  # never early


class StoppedClock(asyncio.SelectorEventLoop):
    def time(self) -> float:
        return 1000.004


def test_the_jobs_of_one_hundredth_share_a_timer_gone_with_the_last_of_them() -> None:
    loop = StoppedClock()
    try:
        deadlines = Deadlines(loop, lambda item: None)
        ticks = [deadlines.add(n, 3600.0 + n * GRAIN / 100) for n in range(32)]
        assert ticks == [round(4600.01 / GRAIN)] * 32 and len(deadlines._ticks) == 1
        timer = deadlines._ticks[ticks[0]][1]
        for n, tick in enumerate(ticks[1:], 1):
            deadlines.remove(n, tick)
        assert not timer.cancelled()
        deadlines.remove(0, ticks[0])
        assert not deadlines._ticks and timer.cancelled()
        deadlines.remove(0, ticks[0])  # removed twice: nothing
    finally:
        loop.close()
