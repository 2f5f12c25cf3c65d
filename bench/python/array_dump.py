"""What psycopg takes to write a settle's ids and claims (a list of UUIDs and one of ints, 32
each, as the Python worker sends a settle of 32 jobs), in text (`%s`) and in binary (`%b`),
without a server round trip: CPU per settle, best of 5 runs of 3,000.

    .venv/bin/python bench/python/array_dump.py "host=127.0.0.1 port=54430 user=postgres" [32]
"""

import sys
import time
import uuid

import psycopg
from psycopg.adapt import PyFormat, Transformer

dsn, size = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 32
ids = [uuid.uuid4() for _ in range(size)]
claims = [1_800_000_000_000 << 10 | i for i in range(size)]
with psycopg.connect(dsn) as conn:
    for name, fmt in (("text (%s)", PyFormat.TEXT), ("binary (%b)", PyFormat.BINARY)):
        runs = []
        for _ in range(5):
            start = time.process_time()
            for _ in range(3000):
                Transformer(conn).dump_sequence([ids, claims], [fmt, fmt])
            runs.append((time.process_time() - start) / 3000 * 1e6)
        print(f"{name}: {min(runs):.1f} µs per settle of {size}")
