"""The worker's connections: a small pool for claims and jobs (each with a synchronous view for
plain handlers), and connections of its own (heartbeats and a held job's durable calls; the
cancel listener), made again with backoff when they break. A worker never ends on a database
error. Only the worker's claims and settles are prepared on the server, when asked for
(``Worker(prepared_statements=...)``): a transaction-pooling PgBouncer before 1.21 hands each
transaction another server connection, where they would not exist."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import psycopg
from psycopg.types.json import JsonbBinaryLoader, set_json_loads

from . import arrays
from .errors import is_connection_error

#: The prepare_threshold of a connection whose statements are prepared only when asked for
#: (``execute(..., prepare=True)``): none of a handler's is.
ONLY_WHEN_ASKED = 2**31 - 1


_DECODER = json.JSONDecoder()


def _loads(data: str | bytes) -> Any:
    """json.loads for the server's jsonb text, which has no whitespace around it: the decoder's
    ``raw_decode`` on it, without json.loads's search for a byte order mark and for spaces (a
    fifth of what a claimed job's payload cost to read). Anything else is json.loads's."""
    text = data.decode() if isinstance(data, bytes) else data
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        end = -1
    return value if end == len(text) else json.loads(text)


def _read_payloads_fast(conn: psycopg.AsyncConnection[Any]) -> None:
    """The claims' payloads read with ``_loads``, unless the application set psycopg's
    ``set_json_loads`` for every connection (then with its own)."""
    if getattr(JsonbBinaryLoader, "_loads", json.loads) is json.loads:
        set_json_loads(_loads, conn)


class Backoff:
    def __init__(self, first: float = 0.1, most: float = 5.0) -> None:
        self.first, self.most, self.delay = first, most, first

    def next(self) -> float:
        d = self.delay
        self.delay = min(self.delay * 2, self.most)
        return d * (0.75 + random.random() * 0.5)

    def reset(self) -> None:
        self.delay = self.first


class Slot:
    """A pooled connection, in autocommit, for the worker's own statements; and the views of the
    same libpq connection that handlers get as ``ctx.conn`` (an async or a synchronous one, in a
    transaction or in autocommit), each made at its first use and kept, so that no job switches
    a connection's autocommit. One of them is used at a time."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.broken = False
        self._views: dict[tuple[bool, bool], psycopg.AsyncConnection[Any] | psycopg.Connection[Any]] = {
            (True, False): conn}
        # Where the connection's notices and notifications go: to the view a handler holds.
        self._routes = {id(conn): (conn.pgconn.notice_handler, conn.pgconn.notify_handler)}
        self._routed: object = conn

    @property
    def pid(self) -> int:
        return self.conn.info.backend_pid

    def view(self, is_async: bool, transactional: bool) -> Any:
        """The connection a handler gets: its first statement begins a transaction when
        ``transactional`` (which the worker ends), else each statement commits."""
        view = self._views.get((is_async, transactional))
        pgconn = self.conn.pgconn
        if view is None:
            view = psycopg.AsyncConnection(pgconn) if is_async else psycopg.Connection(pgconn)
            view.prepare_threshold = None  # its prepared statements' names would clash
            if not transactional:  # (the async one in autocommit is the worker's own)
                view.autocommit = True
            self._views[(is_async, transactional)] = view
            self._routes[id(view)] = (pgconn.notice_handler, pgconn.notify_handler)
            self._routed = view
        elif self._routed is not view:
            pgconn.notice_handler, pgconn.notify_handler = self._routes[id(view)]
            self._routed = view
        return view


class Pool:
    """At most ``size`` connections, made on demand; a broken one is closed, not reused.
    ``prepared``: whether a statement executed with ``prepare=True`` is prepared."""

    def __init__(self, dsn: str, size: int, application_name: str, prepared: bool = False) -> None:
        self.dsn, self.size, self.application_name, self.prepared = dsn, size, application_name, prepared
        self._idle: list[Slot] = []
        self._all: set[Slot] = set()
        self._free = asyncio.Semaphore(size)

    async def acquire(self) -> Slot:
        await self._free.acquire()
        try:
            while self._idle:
                slot = self._idle.pop()
                if not slot.conn.closed and not slot.broken:
                    return slot
                self._all.discard(slot)
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, prepare_threshold=ONLY_WHEN_ASKED if self.prepared else None,
                application_name=self.application_name)
            _read_payloads_fast(conn)
            arrays.register(conn)
            slot = Slot(conn)
            self._all.add(slot)
            return slot
        except BaseException:
            self._free.release()
            raise

    async def release(self, slot: Slot, broken: bool = False) -> None:
        if broken or slot.broken or slot.conn.closed:
            slot.broken = True
            self._all.discard(slot)
            await _close(slot.conn)
        else:
            self._idle.append(slot)
        self._free.release()

    async def close(self) -> None:
        for slot in list(self._all):
            await _close(slot.conn)
        self._all.clear()
        self._idle.clear()


async def _close(conn: psycopg.AsyncConnection[Any]) -> None:
    try:
        await conn.close()
    except Exception:  # noqa: BLE001 (a connection already gone)
        pass


def application_name(role: str, worker_id: str) -> str:
    """A worker's connection's application_name, ``pg-jobs ROLE WORKER_ID``, cut to the 63 bytes
    PostgreSQL keeps (it would cut it with a notice): ``pgjobs workers`` tells by it which worker
    each connection is."""
    return f"pg-jobs {role} {worker_id}".encode()[:63].decode(errors="ignore")


class OwnConnection:
    """One connection, made on first use and again after it broke; statements run one at a
    time, each committed at once."""

    def __init__(self, dsn: str, application_name: str, listen: str | None = None) -> None:
        self.dsn, self.application_name, self.listen = dsn, application_name, listen
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self.closed = False

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        if self.closed:
            raise RuntimeError("pg_jobs: the worker is stopped")
        if self.conn is None or self.conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, prepare_threshold=None,
                                                          application_name=self.application_name)
            if self.listen:
                await conn.execute(f"listen {self.listen}")
            self.conn = conn
        return self.conn

    async def query(self, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            conn = await self.connect()
            try:
                cur = await conn.execute(query, args)
                return await cur.fetchall() if cur.description else []
            except BaseException as err:
                if is_connection_error(err) if isinstance(err, Exception) else True:
                    self.conn = None
                    await _close(conn)
                raise

    async def close(self) -> None:
        self.closed = True
        if self.conn is not None:
            await _close(self.conn)
            self.conn = None
