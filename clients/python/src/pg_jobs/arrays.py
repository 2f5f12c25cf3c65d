"""A settle's ids and claims written in PostgreSQL's binary array form at once, and the queues
of a claim made once. psycopg looks through a list to find its elements' type and writes them
one by one: 43.5 µs for the ids and claims of 32 jobs, against 11.7 µs here; 6.4 µs for a list
of one queue name at every claim, against 0.7 (bench/python/array_dump.py)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.abc import AdaptContext
from psycopg.adapt import Buffer, Dumper
from psycopg.pq import Format

_UUID, _INT8, _TEXT = 2950, 20, 25
_UUID_ARRAY, _INT8_ARRAY, _TEXT_ARRAY = 2951, 1016, 1009
#: dimensions, whether any element is null, the elements' type, then the length and lower
#: bound of the one dimension
_HEADER = struct.Struct("!iiiii")
_UUID_SIZE = struct.pack("!i", 16)


class UuidArray(bytes):
    """A uuid[] in binary form."""


class Int8Array(bytes):
    """A bigint[] in binary form."""


class TextArray(bytes):
    """A text[] in binary form."""


def uuid_array(values: Sequence[uuid.UUID]) -> UuidArray:
    # (UUID.bytes is a property in Python code around this)
    return UuidArray(_HEADER.pack(1, 0, _UUID, len(values), 1)
                     + b"".join([_UUID_SIZE + v.int.to_bytes(16, "big") for v in values]))


def int8_array(values: Sequence[int]) -> Int8Array:
    return Int8Array(_HEADER.pack(1, 0, _INT8, len(values), 1)
                     + struct.pack(f"!{'iq' * len(values)}", *[x for v in values for x in (8, v)]))


def text_array(values: Sequence[str]) -> TextArray | list[str]:
    """``values`` as a text[] made once; the list itself when a value is not ASCII (psycopg
    writes it in the connection's encoding: every server encoding reads ASCII as ASCII)."""
    if not all(v.isascii() for v in values):
        return list(values)
    return TextArray(_HEADER.pack(1, 0, _TEXT, len(values), 1)
                     + b"".join([struct.pack("!i", len(v)) + v.encode("ascii") for v in values]))


class _AsIs(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> Buffer | None:
        return obj  # type: ignore[no-any-return]


class _UuidArrayDumper(_AsIs):
    oid = _UUID_ARRAY


class _Int8ArrayDumper(_AsIs):
    oid = _INT8_ARRAY


class _TextArrayDumper(_AsIs):
    oid = _TEXT_ARRAY


def register(conn: AdaptContext) -> None:
    """Lets ``conn`` send UuidArray, Int8Array and TextArray as what they are."""
    conn.adapters.register_dumper(UuidArray, _UuidArrayDumper)
    conn.adapters.register_dumper(Int8Array, _Int8ArrayDumper)
    conn.adapters.register_dumper(TextArray, _TextArrayDumper)
