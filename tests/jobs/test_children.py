"""Child jobs end to end: the fan-out example (examples/python/fan_out.py), a parent spawning
100 children and summing their squares, with its worker killed between two spawns. The parent
is claimed again by another worker, spawns every key again, and gets the children already
spawned back: exactly 100 children, each run to completion, and the right sum.

Guard checked: with the child's id drawn at random in jobs.spawn (no child_key in it), the
parent spawned its children anew each time it ran, and never finished (the second worker
timed out).
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from polling import eventually

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAN_OUT = [sys.executable, os.path.join(ROOT, "examples/python/fan_out.py")]
DEADLINE = 60


def run(dsn, *args, **kwargs):
    return subprocess.Popen(FAN_OUT + ["--dsn", dsn, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def children(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select count(*) from jobs.jobs where name = 'square'").fetchone()[0]


def test_a_fan_out_resumed_after_its_worker_is_killed_spawns_no_child_twice(dsn):
    enqueue = run(dsn, "enqueue", "100", "--pause", "0.02")
    assert enqueue.wait(DEADLINE) == 0, enqueue.stderr.read()
    first = run(dsn, "work", "--lease", "2")
    try:
        deadline = time.monotonic() + DEADLINE
        while children(dsn) < 30:  # between two spawns: about 2 s of spawning in
            assert time.monotonic() < deadline and first.poll() is None, "the parent spawns nothing"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(DEADLINE)
    finally:
        if first.poll() is None:
            first.kill()
    spawned_before = children(dsn)
    assert 30 <= spawned_before < 100
    second = run(dsn, "work", "--until-done", "--lease", "2")
    out, err = second.communicate(timeout=DEADLINE)
    assert second.returncode == 0, err
    assert "sum of the squares of 1..100: 338350 (100 children)" in out
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select state::text, count(*) from jobs.jobs where name = 'square'"
                            " group by state").fetchall()
        assert rows == [("completed", 100)]
        parent = conn.execute("select state::text, result, attempt, children_live from jobs.jobs"
                              " where name = 'sum_squares'").fetchone()
        assert parent[0] == "completed" and parent[1] == {"sum": 338350} and parent[3] == 0
        assert parent[2] >= 2  # the killed attempt, then the one that spawned the rest
    eventually(dsn, "select count(*) from jobs.jobs where state in ('ready', 'running')", 0, 5)


def test_a_producer_cannot_take_a_childs_id_before_its_parent_spawns_it(dsn):
    """A producer of another tenant that learned a parent's id enqueues jobs under the ids
    jobs.spawn would give its children (the time, then the parent's and key's digest): refused
    (22023), as any version 8 id is, with nothing enqueued; the parent's spawn then makes its
    child, with that digest.
    Checked to fail without the guard: with the version 8 check skipped, the squatter's
    enqueue landed (at d7d86e0 a job so enqueued took the child's id, and the parent's spawn
    was refused)."""
    role = f"squatter_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"create role {role} login")
        admin.execute("select jobs.grant_producer(%s, tenant => 'evil')", (role,))
        parent = admin.execute("select (jobs.enqueue('fan', tenant_id => 'acme')).id").fetchone()[0]
        try:
            child_id = admin.execute("select jobs._child_id(%s, 'k', jobs._uuid_v7())", (parent,)).fetchone()[0]
            with psycopg.connect(f"{dsn} user={role}", autocommit=True) as squatter:
                for sql in ("select jobs.enqueue('x', tenant_id => 'evil', id => %s)",
                            "select jobs.enqueue_batch(jsonb_build_array(jsonb_build_object("
                            "'name', 'x', 'tenant_id', 'evil', 'id', %s::text)))"):
                    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
                        squatter.execute(sql, (str(child_id),))
                    assert "version 8" in str(refused.value)
            assert admin.execute("select count(*) from jobs.jobs where id = %s", (child_id,)).fetchone()[0] == 0
            job_id, claim = admin.execute("select id, claim from jobs.claim('w')").fetchone()
            spawned = admin.execute("select id from jobs.spawn(%s, %s, '{\"child_key\": \"k\", \"name\": \"kid\"}')",
                                    (job_id, claim)).fetchone()[0]
            assert admin.execute("select jobs._child_digest(%s) = jobs._child_digest(%s)",
                                 (spawned, child_id)).fetchone()[0]
        finally:
            admin.execute(f"drop owned by {role} cascade")
            admin.execute(f"drop role {role}")


def test_childrens_ids_sort_in_enqueue_order_and_a_key_spawned_again_gets_its_child(dsn):
    """A parent enqueued first spawns its child after a later job was enqueued: by id, the jobs
    come in the order they were enqueued, the child between the jobs enqueued before and after
    its spawn (its id starts with the time of its spawn), so lists newest first by id are in
    enqueue order. Its key spawned again, in the same attempt and in a later one, gets the same
    child. Checked to fail without it: with the parent's and key's digest alone as the id, the
    child sorted among the others by chance."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        def enqueue(name):
            time.sleep(0.005)  # (ids of one millisecond sort by their counter)
            return conn.execute("select (jobs.enqueue(%s, queue => %s)).id", (name, name)).fetchone()[0]

        def spawn(parent, claim):
            return conn.execute("select id, deduped from jobs.spawn(%s, %s, '{\"name\": \"kid\", \"child_key\": \"k\"}')",
                                (parent, claim)).fetchone()

        parent = enqueue("fan")
        before = enqueue("early")
        parent_id, claim = conn.execute("select id, claim from jobs.claim('w', array['fan'])").fetchone()
        assert parent_id == parent
        time.sleep(0.005)
        child, deduped = spawn(parent, claim)
        assert not deduped
        after = enqueue("late")
        ids = [r[0] for r in conn.execute("select id from jobs.jobs order by id")]
        assert ids == [parent, before, child, after]
        assert spawn(parent, claim) == (child, True)
        assert conn.execute("select jobs.snooze(%s, %s, now())", (parent, claim)).fetchone()[0]
        again = conn.execute("select claim from jobs.claim('w', array['fan'])").fetchone()[0]
        assert spawn(parent, again) == (child, True)
        assert conn.execute("select count(*) from jobs.jobs where parent_id = %s", (parent,)).fetchone()[0] == 1


def test_retention_never_walks_the_children_a_live_parent_keeps(dsn):
    """2,000 children finished a month ago under a parent waiting until 2099: a retention pass
    deletes an old job of another family and reads no index entry of the kept children
    (jobs_finished_idx's reads, from pg_stat_user_indexes, stay under 10); once the parent
    ends, the pass deletes it with its children. Checked to fail without the guard: at
    d7d86e0 (every finished row walked oldest first, each child's parent tested) the pass read
    2,001 entries."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = conn.execute("select (jobs.enqueue('fan', run_at => '2099-01-01')).id").fetchone()[0]
        conn.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
                     "'name', 'kid', 'parent_id', %s::text)) from generate_series(1, 2000)))", (str(parent),))
        other = conn.execute("select (jobs.enqueue('other')).id").fetchone()[0]
        conn.execute("update jobs_data.jobs set state = 'completed', finished_at = now() - interval '30 days' "
                     "where parent_id = %s or id = %s", (parent, other))

        def reads():
            conn.execute("select pg_stat_force_next_flush()")
            return conn.execute("select idx_tup_read from pg_stat_user_indexes "
                                "where indexrelname = 'jobs_finished_idx'").fetchone()[0]

        before = reads()
        deleted = conn.execute("select jobs_deleted from jobs._prune('{completed,cancelled}', "
                               "now() - interval '7 days', 1000)").fetchone()[0]
        assert reads() - before < 10 and deleted == 1
        assert conn.execute("select count(*) from jobs.jobs where parent_id = %s", (parent,)).fetchone()[0] == 2000
        conn.execute("update jobs_data.jobs set state = 'completed', finished_at = now() - interval '30 days' "
                     "where id = %s", (parent,))
        deleted = conn.execute("select jobs_deleted from jobs._prune('{completed,cancelled}', "
                               "now() - interval '7 days', 1000)").fetchone()[0]
        assert deleted == 2001
        assert conn.execute("select count(*) from jobs.jobs where id = %s or parent_id = %s",
                            (parent, parent)).fetchone()[0] == 0
