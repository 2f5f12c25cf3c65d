"""What a worker reports: one log line per attempt's outcome (the standard ``logging``
module, logger ``pg_jobs``), and counts through a metrics interface the application can fill
(``pg_jobs.prometheus`` fills it with prometheus_client)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Literal, Protocol, get_args

logger = logging.getLogger("pg_jobs")

#: How a job's attempt ended, as the worker saw it.
Outcome = Literal["completed", "retried", "failed", "dead", "lost", "parked", "unknown_name", "handed_back",
                  "timed_out", "cancelled"]
_QUIET = {"completed", "parked", "handed_back"}


class Metrics(Protocol):
    def attempt_ended(self, queue: str, name: str, outcome: Outcome, seconds: float) -> None:
        """An attempt ended: its queue, name, outcome and duration."""

    def running(self, count: int) -> None:
        """The number of jobs this worker holds: told after each claim and after jobs end
        (once for the jobs a settle completes)."""


class CountingMetrics:
    """Counts kept in memory, for tests."""

    def __init__(self) -> None:
        self.outcomes: Counter[tuple[str, str, str]] = Counter()
        self.running_now = 0

    def attempt_ended(self, queue: str, name: str, outcome: Outcome, seconds: float) -> None:
        self.outcomes[(queue, name, outcome)] += 1

    def running(self, count: int) -> None:
        self.running_now = count

    def count(self, outcome: str, *, queue: str | None = None, name: str | None = None) -> int:
        return sum(n for (q, j, o), n in self.outcomes.items()
                   if o == outcome and queue in (None, q) and name in (None, j))

    def __repr__(self) -> str:
        counted = ", ".join(f"{q}/{j}/{o}={n}" for (q, j, o), n in sorted(self.outcomes.items()))
        return f"CountingMetrics(running={self.running_now}, outcomes={{{counted}}})"


def describe(err: BaseException) -> str:
    """What was raised, as text: its class and message, or its class alone when its message
    cannot be made (a __str__ that raises)."""
    try:
        return f"{type(err).__name__}: {err}"
    except Exception:  # noqa: BLE001 (the exception's own __str__ failed)
        return type(err).__name__


def first_line(err: BaseException) -> str:
    text = describe(err)
    return text.splitlines()[0] if text else type(err).__name__


#: The level of an outcome's line.
LEVELS: dict[str, int] = {o: logging.INFO if o in _QUIET else logging.WARNING for o in get_args(Outcome)}


def log_outcome(log: logging.Logger, job_id: object, name: str, queue: str, attempt: int, seconds: float,
                outcome: Outcome, error: str | None) -> None:
    """An outcome's line, at its level (LEVELS); the caller has checked that the level is on."""
    text = (f"job {outcome}: id={job_id} name={name} queue={queue} attempt={attempt} "
            f"duration_ms={round(seconds * 1000)}")
    if error:
        text += f" error={error.splitlines()[0]}"
    log.log(LEVELS[outcome], text, extra={"job_id": str(job_id), "job_name": name, "queue": queue,
                                          "attempt": attempt, "duration_ms": round(seconds * 1000),
                                          "outcome": outcome, "error": error})
