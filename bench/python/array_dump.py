"""What it takes to write a settle's ids and claims (a list of UUIDs and one of ints, 32 each,
as the Python worker sends a settle of 32 jobs): psycopg's list in text (`%s`) and in binary
(`%b`), and the binary arrays the worker makes at once (pg_jobs.arrays), without a server round
trip: CPU per settle, best of 5 runs of 3,000; then a claim's queue list, psycopg's or made once.

    .venv/bin/python bench/python/array_dump.py "host=127.0.0.1 port=54430 user=postgres" [32]
"""

import sys
import time
import uuid

import psycopg
from psycopg.adapt import PyFormat, Transformer

from pg_jobs import arrays

dsn, size = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 32
ids = [uuid.uuid4() for _ in range(size)]
claims = [1_800_000_000_000 << 10 | i for i in range(size)]
with psycopg.connect(dsn) as conn:
    arrays.register(conn)
    ways = (("psycopg's list, text (%s)", PyFormat.TEXT, lambda: [ids, claims]),
            ("psycopg's list, binary (%b)", PyFormat.BINARY, lambda: [ids, claims]),
            ("pg_jobs.arrays (%b)", PyFormat.BINARY, lambda: [arrays.uuid_array(ids), arrays.int8_array(claims)]))
    for name, fmt, values in ways:
        runs = []
        for _ in range(5):
            start = time.process_time()
            for _ in range(3000):
                Transformer(conn).dump_sequence(values(), [fmt, fmt])
            runs.append((time.process_time() - start) / 3000 * 1e6)
        print(f"{name}: {min(runs):.1f} µs per settle of {size}")
    # A claim's queues (one name), at every claim and settle: psycopg's list, or the text[] the
    # worker makes once.
    queues, made = ["default"], arrays.text_array(["default"])
    for name, fmt, value in (("queues, psycopg's list (%s)", PyFormat.TEXT, queues),
                             ("queues, pg_jobs.arrays made once (%b)", PyFormat.BINARY, made)):
        runs = []
        for _ in range(5):
            start = time.process_time()
            for _ in range(3000):
                Transformer(conn).dump_sequence([value], [fmt])
            runs.append((time.process_time() - start) / 3000 * 1e6)
        print(f"{name}: {min(runs):.1f} µs per claim")
