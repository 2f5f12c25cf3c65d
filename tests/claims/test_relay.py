"""The NOTIFY relay (src/commit/relay.rs): with pg_jobs preloaded, an enqueue in the application's
transaction sends no NOTIFY; the database's sweeper sends it, from its own transaction, so the
application's commit takes no notification lock.

The relay needs a sweeper in the database: the tests run on the launcher's cluster, where every
database is swept (tests/server/test_launcher.py), except the fallback test, which runs on the shared
cluster, whose per-test databases have none. Each test says how it was checked to fail without
its guard.
"""

import statistics
import time

import psycopg

from polling import eventually, one
from test_launcher import make_db, server  # noqa: F401  (the launcher's cluster)

WAIT = 5  # seconds at most for a notification that must come


def sweeper_pid(dsn):
    eventually(dsn, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'"
                    " and datname = current_database()", 1, 30)
    return one(dsn, "select pid from pg_stat_activity where backend_type = 'pg_jobs sweeper'"
                    " and datname = current_database()")


def notifications(conn, timeout, count=10_000):
    return [(n.payload, n.pid) for n in conn.notifies(timeout=timeout, stop_after=count)]


def test_an_enqueue_in_the_applications_transaction_is_notified_by_the_sweeper(make_db):  # noqa: F811
    """Checked to fail without its guard: with jobs._wake calling pg_notify itself, every
    notification came from the producer's pid."""
    _, dsn = make_db()
    relay = sweeper_pid(dsn)
    latencies = []
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as app:
        listen.execute("listen pg_jobs")
        app.execute("create table orders (id int)")
        producer = app.info.backend_pid
        for n in range(5):
            app.execute("delete from jobs_data.jobs")
            with app.transaction():
                app.execute("insert into orders values (%s)", (n,))
                app.execute("select jobs.enqueue('ship', queue => 'mail')")
            committed = time.monotonic()
            got = next(listen.notifies(timeout=WAIT, stop_after=1), None)
            assert got is not None, "no notification"
            latencies.append(time.monotonic() - committed)
            assert (got.payload, got.pid) == ("mail", relay) and got.pid != producer
    print(f"\nrelayed wake-up latency after commit: {[round(x * 1000, 2) for x in latencies]} ms")
    assert statistics.median(latencies) < 0.1


def test_a_rolled_back_enqueue_is_not_relayed(make_db):  # noqa: F811
    """Checked to fail without its guard: handing the queues over at any end of the
    transaction relayed the rolled-back one."""
    _, dsn = make_db()
    sweeper_pid(dsn)
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn) as app:
        listen.execute("listen pg_jobs")
        app.execute("select jobs.enqueue('ship', queue => 'never')")
        app.rollback()
        app.execute("select jobs.enqueue('ship', queue => 'later')")
        app.commit()
        assert [p for p, _ in notifications(listen, 1)] == ["later"]


def test_a_full_share_of_the_ring_notifies_every_queue_once(make_db):  # noqa: F811
    """300 queues made ready in one transaction overflow the database's share of the relay's
    ring (64 entries): the sweeper then sends one notification '*' (every queue), so none is
    lost and the burst costs at most the share plus one notification, whatever the number of
    queues the database has. Checked to fail without its guards: with the overflow flag never
    set, the queues that did not fit were never notified; at 551070c the overflow notified
    every queue of the database (here 301, 51,389 for a database of that many queues)."""
    _, dsn = make_db()
    relay = sweeper_pid(dsn)
    queues = [f"q{n}" for n in range(300)]
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as app:
        listen.execute("listen pg_jobs")
        app.execute("""select count(*) from jobs.enqueue_batch(
                         (select jsonb_agg(jsonb_build_object('name', 'n', 'queue', q)) from unnest(%s::text[]) q))""",
                    (queues,))
        got = notifications(listen, 2)
    payloads = [p for p, _ in got]
    assert "*" in payloads
    assert len(payloads) <= 65 and set(payloads) - {"*"} <= set(queues)
    assert {pid for _, pid in got} == {relay}


def test_a_queue_name_too_long_for_the_ring_is_notified_by_its_transaction(make_db):  # noqa: F811
    _, dsn = make_db()
    sweeper_pid(dsn)
    name = "é" * 120  # 240 bytes: more than a ring entry holds
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as app:
        listen.execute("listen pg_jobs")
        app.execute("select jobs.enqueue('n', queue => %s)", (name,))
        assert notifications(listen, 1) == [(name, app.info.backend_pid)]


def test_without_a_sweeper_the_transaction_notifies_for_itself(dsn):
    """The shared cluster sweeps only `postgres` (tests/cluster.conf): a test's database has no
    sweeper, so nothing would relay, and the enqueue's own transaction notifies, as without
    preload. Checked to fail without its guard: relaying regardless lost the notification."""
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as app:
        listen.execute("listen pg_jobs")
        app.execute("select jobs.enqueue('n', queue => 'alone')")
        assert notifications(listen, 1) == [("alone", app.info.backend_pid)]


def test_relayed_every_enqueue_notifies_its_queue_busy_or_not(make_db):  # noqa: F811
    """Relayed, a notification costs the transaction nothing, so it is sent for a queue that
    already has ready jobs too: the probe that skipped those could count as ready a job a claim
    had taken but not committed, and a listener whose claim missed the new job slept until its
    poll (a 5 s p99 in docs/BENCHMARKS.md). Checked to fail with the probe kept when relaying:
    nothing came for the busy queue."""
    _, dsn = make_db()
    relay = sweeper_pid(dsn)
    with psycopg.connect(dsn, autocommit=True) as listen, psycopg.connect(dsn, autocommit=True) as app:
        # Listening first, and the first enqueue's notification taken, so that one relayed
        # late (the sweeper relays on its own time) is not counted for the second.
        listen.execute("listen pg_jobs")
        app.execute("select jobs.enqueue('n', queue => 'busy')")
        assert notifications(listen, 1) == [("busy", relay)]
        app.execute("select jobs.enqueue('n', queue => 'busy')")  # one is ready already
        assert notifications(listen, 1) == [("busy", relay)]
