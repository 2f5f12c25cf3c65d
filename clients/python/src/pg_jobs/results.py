"""What a worker checks before it queues a job's result for a settle, and which refusals of a
settle are worth sending again: a result the server would refuse must cost its own job only,
never the batch it would have been settled with."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.types.json import Jsonb


class ResultRefused(Exception):
    """A handler's result that cannot be settled: not encodable as JSON, or over the server's
    size limit. Its job fails for good with this message."""


def encode_result(result: Any, max_bytes: int | None) -> str:
    """The result as JSON text (the encoding psycopg's Jsonb uses), refused when it cannot be
    encoded (a datetime, a set, a Decimal, NaN) or is larger than the server takes
    (pg_jobs.max_payload_size, measured as its ASCII JSON text)."""
    if result is None:
        return "null"
    try:
        text = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as err:
        raise ResultRefused(f"the result cannot be encoded as JSON: {type(err).__name__}: {err}") from None
    if max_bytes is not None and len(text) > max_bytes:  # (ensure_ascii: a character is a byte)
        raise ResultRefused(f"the result is {len(text)} bytes of JSON, over pg_jobs.max_payload_size "
                            f"({max_bytes} bytes): return less, or keep it elsewhere and return a reference to it")
    return text


def _as_is(text: str) -> str:
    return text


def encoded(text: str) -> Jsonb:
    """JSON text already encoded, sent as jsonb without encoding it again."""
    return Jsonb(text, dumps=_as_is)


#: SQLSTATE classes of errors that may pass if the same statement is sent again: a connection
#: lost, a conflict, lack of resources, an operator's cancel or shutdown.
TRANSIENT = ("08", "40", "53", "55", "57", "58", "XX")


def is_transient(err: BaseException) -> bool:
    """Whether a settle's error may pass if sent again; any other refusal is for what the
    statement carries, and would be refused again."""
    if isinstance(err, psycopg.OperationalError) or not isinstance(err, psycopg.Error):
        return True
    return not err.sqlstate or err.sqlstate[:2] in TRANSIENT
