"""Shards (docs/SCALING.md): pg_jobs servers with ``pg_jobs.shard`` set, each holding the jobs of
some tenants. A producer sends each enqueue to the shard :func:`shard_for` names, as the
router does; :func:`shard_of` reads a job's shard from its id; :class:`ShardedWorker` works
every shard, each with its own connections, claims (waiting ones) and heartbeats, so a shard
that is down stops only its own share of the work.

A handler's ``ctx.conn`` is a connection to its job's shard: writes there commit with the job
(exactly once), writes to another database do not."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .worker import Worker


def shard_of(job_id: uuid.UUID | str) -> int:
    """The shard a job's id names: its last byte."""
    return (job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))).bytes[15]


def hash_shard(key: str, shards: int) -> int:
    """A key's shard among ``shards``: the first 32 bits of its MD5 modulo their number (the
    router's ``jobs_router.hash_shard``)."""
    return int(hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()[:8], 16) % shards


def shard_for(shards: int, name: str, *, tenant_id: str | None = None, id: uuid.UUID | str | None = None,
              run_id: uuid.UUID | str | None = None, parent_id: uuid.UUID | str | None = None,
              placements: Mapping[str, int] | None = None) -> int:
    """The shard an enqueue goes to, as the router sends it: the one its ``id``, ``run_id`` or
    ``parent_id`` names, else its tenant's, else its job name's. A tenant's (or name's) shard is
    its placement, where the router has one (``placements``: ``select key, shard from
    jobs_router.placements`` on the router, once a shard was added or a tenant moved), else
    its hash."""
    if shards < 1:
        raise ValueError("shard_for: shards must be at least 1")
    given = id or run_id or parent_id
    if given is not None:
        return shard_of(given)
    key = tenant_id if tenant_id is not None else name
    placed = placements.get(key) if placements else None
    return placed if placed is not None else hash_shard(key, shards)


class ShardedWorker:
    """A :class:`Worker` per shard, in shard order (``dsns[i]`` is the server with
    ``pg_jobs.shard = i``), each with the options given (its concurrency and prefetch are per
    shard) and a worker id ending ``/shard<i>``. ``metrics_port`` serves one set of metrics
    for all of them."""

    def __init__(self, dsns: Sequence[str], **options: Any) -> None:
        if not dsns:
            raise ValueError("ShardedWorker: pass each shard's connection string, in shard order")
        base = options.pop("worker_id", None) or f"{socket.gethostname()}:{os.getpid()}"
        port = options.pop("metrics_port", None)
        if port is not None and options.get("metrics") is None:
            from . import prometheus
            options["metrics"] = prometheus.PrometheusMetrics()
        self.workers = [Worker(dsn, **options, worker_id=f"{base}/shard{i}",
                               metrics_port=port if i == 0 else None) for i, dsn in enumerate(dsns)]

    @property
    def running(self) -> int:
        """The jobs running now, on every shard."""
        return sum(w.running for w in self.workers)

    async def start(self) -> None:
        """Starts every shard's worker at once; answers once each was reached (a shard reached
        starts working without waiting for the others)."""
        await asyncio.gather(*(w.start() for w in self.workers))

    async def stop(self, grace: float | None = None) -> None:
        """Stops every shard's worker, as :meth:`Worker.stop`."""
        await asyncio.gather(*(w.stop(grace) for w in self.workers))

    async def run_async(self) -> None:
        """start(), then stop() at SIGTERM or SIGINT (also while a shard is still being reached)."""
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, done.set)
        starting = asyncio.ensure_future(self.start())
        try:
            await asyncio.wait([starting, asyncio.ensure_future(done.wait())], return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # (a refusal: no pg_jobs on a shard)
                await done.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.stop()
            await starting  # (a start still trying to reach a shard ends at the stop)

    def run(self) -> None:
        """Blocks: runs until SIGTERM or SIGINT, then stops; returns normally (exit 0)."""
        asyncio.run(self.run_async())

    async def __aenter__(self) -> ShardedWorker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
