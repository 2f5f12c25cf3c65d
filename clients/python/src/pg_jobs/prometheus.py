"""Metrics with prometheus_client (an optional dependency: ``pip install pg-jobs[prometheus]``),
loaded only when this module is imported: ``jobs_total`` by queue, name and outcome,
``job_duration_seconds`` and ``jobs_running``, on the registry given (the default one else)."""

from __future__ import annotations

from typing import Any

import prometheus_client

from .observe import Outcome


class PrometheusMetrics:
    def __init__(self, registry: Any = None) -> None:
        kw: dict[str, Any] = {} if registry is None else {"registry": registry}
        self.total = prometheus_client.Counter("jobs", "Attempts ended, by queue, name and outcome",
                                               ["queue", "name", "outcome"], **kw)
        self.duration = prometheus_client.Histogram("job_duration_seconds", "How long attempts ran",
                                                    ["queue", "name"], **kw)
        self.running_now = prometheus_client.Gauge("jobs_running", "Handlers running in this worker", **kw)

    def attempt_ended(self, queue: str, name: str, outcome: Outcome, seconds: float) -> None:
        self.total.labels(queue, name, outcome).inc()
        self.duration.labels(queue, name).observe(seconds)

    def running(self, count: int) -> None:
        self.running_now.set(count)


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serves the default registry at http://host:port/metrics (a thread of its own)."""
    prometheus_client.start_http_server(port, addr=host)
