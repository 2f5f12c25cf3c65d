"""What claims waiting on one queue cost the producers of another: single enqueues (one job
a transaction, one connection, synchronous_commit off so the commit's wake-up, not the disk,
is measured) into queue `busy` while 0 and then 80 blocking claims wait on queue `idle`
(within the test clusters' max_connections of 100).
Run on a cluster that preloads pg_jobs (waits are polled without it), once per build.

    python bench/ab/idle_waiters_cost.py "host=127.0.0.1 port=PORT user=postgres dbname=DB"
"""

import sys
import threading
import time

import psycopg

SECONDS = 5
WAITERS = 80


def enqueue_rate(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < SECONDS:
            conn.execute("select jobs.enqueue('bench', queue => 'busy')")
            n += 1
        rate = n / (time.perf_counter() - start)
        conn.execute("delete from jobs_data.jobs where queue = 'busy'")
        return rate


def waiter(dsn, stop):
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("select * from jobs.claim('idle-waiter', array['idle'], wait => '2s')")


def main(dsn):
    print(f"single enqueues/s, no claim waiting: {enqueue_rate(dsn):.0f}", flush=True)
    stop = threading.Event()
    threads = [threading.Thread(target=waiter, args=(dsn, stop), daemon=True) for _ in range(WAITERS)]
    for t in threads:
        t.start()
    time.sleep(1)
    print(f"single enqueues/s, {WAITERS} claims waiting on another queue: {enqueue_rate(dsn):.0f}")
    stop.set()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(sys.argv[1])
