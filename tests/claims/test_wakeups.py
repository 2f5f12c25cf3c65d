"""Wake-ups: a worker LISTENing on channel pg_jobs is woken when its queue gets ready work.

Enqueue notifies (payload: the queue) when a queue that had no ready job gets one, once per
call however many jobs it enqueues; a queue that already has ready jobs is being worked, so
no notification is sent.
"""

import statistics
import time

import psycopg

WAIT = 5  # seconds at most for a notification that must come


def listener(dsn):
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("listen pg_jobs")
    return conn


def drain(conn, timeout):
    return [n.payload for n in conn.notifies(timeout=timeout, stop_after=100)]


def test_a_listening_worker_is_woken_within_100_ms_of_the_commit(dsn):
    latencies = []
    with listener(dsn) as listen, psycopg.connect(dsn, autocommit=True) as producer:
        for _ in range(5):
            producer.execute("delete from jobs.jobs")
            with producer.transaction():
                producer.execute("select jobs.enqueue('wake', queue => 'mail')")
            committed = time.monotonic()
            got = next(listen.notifies(timeout=WAIT, stop_after=1), None)
            assert got is not None and got.payload == "mail"
            latencies.append(time.monotonic() - committed)
    print(f"\nwake-up latency after commit: {[round(x * 1000, 2) for x in latencies]} ms")
    assert statistics.median(latencies) < 0.1


def test_one_notification_per_queue_per_call_and_none_for_a_busy_queue(dsn):
    with listener(dsn) as listen, psycopg.connect(dsn, autocommit=True) as producer:
        producer.execute(
            """select count(*) from jobs.enqueue_batch(
                 (select jsonb_agg(jsonb_build_object('name', 'n', 'queue', q))
                  from generate_series(1, 100), unnest(array['a', 'b']) q))"""
        )
        assert sorted(drain(listen, 0.5)) == ["a", "b"]
        producer.execute("select jobs.enqueue('n', queue => 'a')")  # 'a' has ready jobs
        producer.execute("select jobs.enqueue('n', queue => 'c', run_at => now() + interval '1 hour')")
        assert drain(listen, 0.5) == []


def test_publish_requeue_and_promote_wake_the_queues_they_make_ready(dsn):
    with listener(dsn) as listen, psycopg.connect(dsn, autocommit=True) as conn:
        waiter = conn.execute("select id from jobs.enqueue('w', queue => 'events')").fetchone()[0]
        drain(listen, 0.3)
        claim = conn.execute("select claim from jobs.claim('x', array['events'])").fetchone()[0]
        assert conn.execute("select status from jobs.await_event(%s, %s, 'go')", (waiter, claim)).fetchone()[0] == "waiting"
        conn.execute("select jobs.publish('go')")
        assert drain(listen, 0.5) == ["events"]

        later = conn.execute(
            "select id from jobs.enqueue('p', queue => 'later', run_at => now() + interval '1 day')"
        ).fetchone()[0]
        conn.execute("select jobs.promote(%s)", (later,))
        assert drain(listen, 0.5) == ["later"]

        conn.execute("update jobs.jobs set state = 'dead', finished_at = now() where id = %s", (later,))
        conn.execute("select jobs.requeue(%s)", (later,))
        assert drain(listen, 0.5) == ["later"]
