"""Ids that name their shard (pg_jobs.shard, src/functions/ids.rs): every id a shard makes ends
with its number, a child's with its parent's, and a caller's id that names another shard is
refused (22023) with nothing enqueued. No session may change the setting. How the refusal was
checked: the test failed with the check in jobs._enqueue removed."""

import json
import uuid

import psycopg
import pytest


def one(dsn, sql, *args):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, args).fetchone()[0]


def count(dsn):
    return one(dsn, "select count(*) from jobs.jobs")


def test_every_id_a_shard_makes_ends_with_its_number(shards):
    for number, dsn in enumerate(shards["shards"]):
        made = one(dsn, "select array[jobs.new_id(), jobs.new_id(), (jobs.enqueue('ids')).id]")
        assert [u.bytes[15] for u in made] == [number] * 3
        assert made[0].version == 7 and made[0] < made[1]  # still UUIDv7, still increasing


def test_a_child_lives_on_its_parents_shard(shards):
    dsn = shards["shards"][2]
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = conn.execute("select id from jobs.enqueue('parent', queue => 'children-ids')").fetchone()[0]
        job = conn.execute("select id, claim from jobs.claim('w', array['children-ids'])").fetchone()
        assert job[0] == parent
        child = conn.execute("select id from jobs.spawn(%s, %s, %s)",
                             (job[0], job[1], json.dumps({"name": "child", "child_key": "a"}))).fetchone()[0]
        again = conn.execute("select id from jobs.spawn(%s, %s, %s)",
                             (job[0], job[1], json.dumps({"name": "child", "child_key": "a"}))).fetchone()[0]
    assert child.bytes[15] == 2 and child.version == 8
    assert again == child  # the same key is the same child


@pytest.mark.parametrize("call", [
    "select jobs.enqueue('other', id => %s)",
    "select jobs.enqueue_batch(jsonb_build_array(jsonb_build_object('name', 'mine', 'id', jobs.new_id()),"
    " jsonb_build_object('name', 'other', 'id', %s::uuid)))",
])
def test_an_id_of_another_shard_is_refused_and_nothing_is_enqueued(shards, call):
    dsn = shards["shards"][1]
    other = uuid.UUID(bytes=uuid.uuid4().bytes[:15] + bytes([0]))
    before = count(dsn)
    with pytest.raises(psycopg.Error) as refused:
        one(dsn, call, other)
    assert refused.value.sqlstate == "22023"
    assert "names shard 0, and this server is shard 1" in str(refused.value)
    assert "jobs.new_id()" in refused.value.diag.message_hint
    assert count(dsn) == before
    mine = uuid.UUID(bytes=other.bytes[:15] + bytes([1]))
    assert one(dsn, "select (jobs.enqueue('mine', id => %s)).id", mine) == mine


def test_no_session_changes_the_shard(shards):
    dsn = shards["shards"][0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("set pg_jobs.shard = 1")
        assert refused.value.sqlstate == "55P02"  # cant_change_runtime_param
        assert conn.execute("select jobs.new_id()").fetchone()[0].bytes[15] == 0
