"""The hot statements walk indexes: their cost does not grow with backlog or history.

The claim statement's plan is captured with auto_explain (nested statements, ANALYZE,
BUFFERS) after enough calls for PL/pgSQL to settle on its cached plan, with 1M ready jobs
and then with 1M finished rows beside 10k ready ones. Each claim of 10 jobs must read the
ready jobs through jobs_ready_idx and touch a bounded number of buffers: no sort of the
backlog, no scan of history. The plans are printed (pytest -s) and kept in
docs/PLANS.md. Settles must find their jobs by primary key, however many jobs are running.
"""

import re

import psycopg
import pytest
from test_no_history import set_retention

BIG = 1_000_000
BUFFER_BOUND = 600  # a claim of 10 touches ~100; a backlog sort or history scan touches 10^4+


def insert(conn, n, state):
    conn.execute(
        """insert into jobs.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                  payload, enqueued_at, created_at, updated_at, finished_at)
           select gen_random_uuid(), gen_random_uuid(), 'bulk', 'default', %s::jobs.job_state,
                  g %% 3, now() - make_interval(secs => g), 25, '{}', now(), now(), now(),
                  case when %s <> 'ready' then now() end
           from generate_series(1, %s) g""",
        (state, state, n),
    )


def fill(conn, n, state):
    insert(conn, n, state)
    conn.execute("vacuum analyze jobs_data.jobs")


def explain_nested(conn):
    """Have auto_explain send conn the plans of every statement, nested ones too; answers the
    list the plans are appended to."""
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("load 'auto_explain'")
    for setting, value in [
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
    ]:
        conn.execute(f"set {setting} = {value}")
    return notices


def claim_plan(conn, statements=1):
    """The plans of the claim's statements that read jobs.jobs on a call past PL/pgSQL's custom
    plans: one for plain jobs (the common case finds and moves them); more when the common
    case moves nothing and the later statements claim (a limit, a lapsed lease)."""
    notices = explain_nested(conn)
    for _ in range(8):  # past PL/pgSQL's five custom plans, onto the cached one
        notices.clear()
        rows = conn.execute("select * from jobs.claim('planner', max_jobs => 10)").fetchall()
        assert len(rows) == 10
    conn.execute("set auto_explain.log_min_duration = -1")
    plans = [n for n in notices if "jobs_data.jobs" in n and "Query Text: select * from jobs.claim" not in n]
    assert len(plans) == statements, notices
    return "\n\n".join(plans)


def buffers(plan):
    """Buffers touched, summed over the top node of each statement in plan."""
    total = 0
    for statement in plan.split("\n\n"):
        line = next(x for x in statement.splitlines() if "Buffers:" in x)
        total += sum(int(x) for x in re.findall(r"(?:hit|read|dirtied|written)=(\d+)", line))
    return total


def rows_processed(plan):
    """Rows the nodes of plan returned or filtered out, summed over their loops (EXPLAIN shows
    both per loop)."""
    total, loops = 0, 1
    for line in plan.splitlines():
        node = re.search(r"actual time=\S+ rows=(\d+) loops=(\d+)", line)
        if node:
            loops = int(node[2])
            total += int(node[1]) * loops
        removed = re.search(r"Rows Removed by (?:Join )?Filter: (\d+)", line)
        if removed:
            total += int(removed[1]) * loops
    return total


def check(plan):
    assert "Index Scan using jobs_ready_idx" in plan, plan
    # A generic plan costs LIMIT max_jobs at a tenth of what it reads: with 1M rows, past
    # jit_above_cost, so without jit = off every call compiled the statement (320 ms).
    assert "JIT:" not in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    assert buffers(plan) < BUFFER_BOUND, plan


def test_claim_with_a_million_ready_jobs_walks_the_ready_index(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        fill(conn, BIG, "ready")
        plan = claim_plan(conn)
        print("\n-- claim of 10 with 1M ready jobs\n" + plan)
        check(plan)


def test_claim_past_its_common_case_with_a_million_ready_jobs_walks_the_indexes(dsn):
    """A job type with a concurrency limit (one that never holds a job back) sends every claim
    past its one-statement common case to the statements that check limits: each of them, and
    the common case that moved nothing, reads indexes, within the same bound."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        fill(conn, BIG, "ready")
        conn.execute("insert into jobs.job_types (name, concurrency) values ('bulk', 100000)")
        # the common case (which moves nothing), the candidates, the limits' slots and check,
        # the lapsed leases' attempts (none), the move
        plan = claim_plan(conn, statements=6)
        print("\n-- claim of 10 with 1M ready jobs of a limited job type\n" + plan)
        check(plan)


def test_claim_with_a_million_finished_jobs_reads_none_of_them(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        fill(conn, BIG, "completed")
        fill(conn, 10_000, "ready")
        plan = claim_plan(conn)
        print("\n-- claim of 10 with 1M completed and 10k ready jobs\n" + plan)
        check(plan)


def test_queue_stats_live_counts_read_none_of_a_million_finished_rows(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        fill(conn, BIG, "completed")
        fill(conn, 1_000, "ready")
        live = "select queue, ready, delayed, running, suspended, oldest_ready_age from jobs.queue_stats"
        # Once first, as a monitor polling it does: the pages counted below are then the
        # statement's, not the catalog pages a connection's first call reads (on PostgreSQL 18
        # those can push the count past the bound).
        conn.execute(live).fetchall()
        plan = "\n".join(row[0] for row in conn.execute("explain (analyze, buffers, costs off) " + live))
        print("\n-- live columns of queue_stats with 1M completed and 1k ready jobs\n" + plan)
        plan = plan.replace("\n\n", "\n")
        assert "Seq Scan on jobs" not in plan, plan
        assert "jobs_finished_idx" not in plan, plan
        assert buffers(plan) < BUFFER_BOUND, plan


def test_sweep_reads_none_of_a_million_finished_rows_inside_retention(dsn):
    """The background worker sweeps every second: with a large history that retention keeps,
    each pass must stop at the oldest finished row, not read the history (a generic plan of
    the retention statement once preferred a sequential scan with a LIMIT)."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        fill(setup, BIG, "completed")
    with psycopg.connect(dsn) as conn:  # one transaction: the xact counters below cover it
        for _ in range(12):  # past PL/pgSQL's five custom plans, onto the cached one
            assert dict(conn.execute("select task, affected from jobs.sweep(5000)").fetchall())["completed_deleted"] == 0
        read = conn.execute("select pg_stat_get_xact_tuples_returned('jobs_data.jobs'::regclass)").fetchone()[0]
        print(f"\n-- 12 sweeps over 1M completed jobs inside retention read {read} rows by sequential scan")
        assert read < 10_000, f"12 sweeps read {read} rows of jobs.jobs by sequential scan"


@pytest.mark.parametrize("statistics", ["none taken", "taken when no lease had lapsed"])
def test_a_sweep_of_5000_lapsed_leases_reads_each_once(dsn, statistics):
    """Leases lapse together when workers die together, and the statistics then say few have
    (most leases run into the future). The sweep's lapsed-lease statement once joined the
    leases it locked to the jobs it settled, and asked the locked set about each row: planned
    for a handful, both were rescans per row, 5000 x 5000 rows, seconds a pass while the
    backlog waited (and past a test's deadline under load). Checked to fail with that
    statement: 25 and 75 million rows."""
    lapsed = 5000
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter table jobs_data.jobs set (autovacuum_enabled = false)")  # no ANALYZE mid-test
        future = statistics.startswith("taken")
        conn.execute(
            """insert into jobs_data.jobs (id, run_id, name, queue, state, attempt, max_attempts, claim,
                                           lease_expires_at, lease_scan_at, deadline, payload,
                                           enqueued_at, created_at, updated_at, started_at)
               select u, u, 'lapsed', 'default', 'running', 1 + (g %% 2) * 4, 5, 1, t, t,
                      case when g %% 3 = 0 then t end, '{}', now(), now(), now(), now()
               from (select g, gen_random_uuid() as u, now() + %s * interval '1 hour' as t
                     from generate_series(1, %s) as g) as n""",
            (1 if future else -1, lapsed * 4 if future else lapsed),
        )
        if future:
            conn.execute("vacuum analyze jobs_data.jobs")
            conn.execute(
                """update jobs_data.jobs set lease_expires_at = now() - interval '1 hour',
                          lease_scan_at = now() - interval '1 hour',
                          deadline = case when deadline is not null then now() - interval '1 hour' end
                   where id in (select id from jobs_data.jobs order by id limit %s)""",
                (lapsed,),
            )
        notices = explain_nested(conn)
        swept = dict(conn.execute("select task, affected from jobs.sweep(%s)", (lapsed,)).fetchall())
        conn.execute("set auto_explain.log_min_duration = -1")
        assert swept["lapsed_leases"] == lapsed
        outcomes = dict(conn.execute("select outcome, count(*) from jobs.attempts group by 1").fetchall())
        assert sum(outcomes.values()) == lapsed and set(outcomes) == {"timed_out", "buried", "lease_lapsed"}, outcomes
    plan = next(n for n in notices if "insert into jobs_data.attempts" in n and "lease_lapsed" in n)
    print(f"\n-- a sweep of {lapsed} lapsed leases, statistics {statistics}\n" + plan)
    rows = rows_processed(plan)
    assert rows < 20 * lapsed, f"{rows} rows for {lapsed} lapsed leases:\n{plan}"


def test_tags_and_run_deadlines_are_found_by_their_indexes_among_a_million_jobs(dsn):
    """jobs_tags_idx finds tagged jobs, and the sweep's run_timeouts task buries the jobs past
    their run deadline through jobs_run_deadline_idx: neither reads the million jobs that have
    no tags and no deadline (only tagged jobs, and waiting jobs with a deadline, are in them).
    Checked to fail without jobs_run_deadline_idx: the sweep then read every row."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("select * from jobs.sweep()")  # the hourly queue prune (a full read) done
        insert(setup, BIG, "ready")
        for i in range(10):
            setup.execute(
                "select jobs.enqueue('late', tags => array['batch:' || %s::text], run_timeout => '1 minute')",
                (i % 2,),
            )
        setup.execute("vacuum analyze jobs_data.jobs")
        plan = "\n".join(
            r[0] for r in setup.execute(
                "explain (analyze, buffers, costs off) select id from jobs.jobs where tags @> array['batch:1']"
            )
        )
        print("\n-- jobs with a tag among 1M without\n" + plan)
        assert "jobs_tags_idx" in plan and "Seq Scan" not in plan, plan
        assert buffers(plan) < BUFFER_BOUND, plan
    with psycopg.connect(dsn) as conn:  # one transaction: the xact counters below cover it
        conn.execute("set pg_jobs.clock_offset = '2min'")
        swept = dict(conn.execute("select task, affected from jobs.sweep(5000)").fetchall())
        assert swept["run_timeouts"] == 10
        read = read_rows(conn)
        print(f"\n-- a sweep burying 10 jobs past their run deadline among 1M read {read} rows")
        assert read < 10_000, f"the sweep read {read} rows of jobs.jobs"


def read_rows(conn):
    """Rows of jobs.jobs this backend read so far, as its pending statistics count them: by
    sequential and bitmap scans (the table's counters) and through each of its indexes (an
    index scan's fetches count against the index). Measure in a connection of its own."""
    return conn.execute(
        "select pg_stat_get_xact_tuples_returned('jobs_data.jobs'::regclass)"
        " + pg_stat_get_xact_tuples_fetched('jobs_data.jobs'::regclass)"
        " + (select sum(pg_stat_get_xact_tuples_fetched(i.indexrelid)) from pg_index as i"
        "    where i.indrelid = 'jobs_data.jobs'::regclass)").fetchone()[0]


def test_a_keys_backlog_of_waiting_jobs_costs_claims_and_enqueues_nothing(dsn):
    """A million jobs waiting behind one ordering key (delayed, run_at infinity) are read by
    neither a claim (its due scan stops at now), nor an enqueue of the key, nor the end of the
    key's current job, which starts the next (jobs_ordering_idx answers from an entry or two).
    Checked to fail with an index without its (run_at = 'infinity') column: the end read every
    waiting job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        head = conn.execute("select id from jobs.enqueue('head', ordering_key => 'big')").fetchone()[0]
        conn.execute(
            """insert into jobs.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                      payload, enqueued_at, created_at, updated_at, ordering_key)
               select gen_random_uuid(), gen_random_uuid(), 'bulk', 'default', 'delayed', 0,
                      'infinity', 25, '{}', now(), now(), now(), 'big'
               from generate_series(1, %s)""", (BIG,))
        fill(conn, 10_000, "ready")
        plan = claim_plan(conn)
        print("\n-- claim of 10 beside 1M jobs waiting behind a key\n" + plan)
        check(plan)
    with psycopg.connect(dsn) as conn:
        for _ in range(9):  # past PL/pgSQL's custom plans
            conn.execute("select jobs.enqueue('next', ordering_key => 'big')")
        read = read_rows(conn)
        print(f"\n-- 9 enqueues of a key with 1M jobs waiting read {read} rows")
        assert read < 1_000, f"9 enqueues of the key read {read} rows of jobs.jobs"
    with psycopg.connect(dsn) as conn:
        conn.execute("select jobs.cancel(%s)", (head,))
        read = read_rows(conn)
        print(f"\n-- the end of the current job of a key with 1M jobs waiting read {read} rows")
        assert read < 1_000, f"the end read {read} rows of jobs.jobs"
        conn.commit()
        started = conn.execute("select count(*) from jobs.jobs where ordering_key = 'big' and state = 'ready'").fetchone()[0]
        assert started == 1


def test_a_fair_claim_beside_a_tenants_million_job_backlog_reads_an_entry_per_tenant(dsn):
    """In a fair queue, tenant big's backlog of a million ready jobs neither starves ten other
    tenants' one job each, enqueued after it, nor costs a claim a read of the backlog: the
    claim finds each tenant with ready jobs by one entry of jobs_fair_idx and takes a job of
    each. Checked to fail with jobs_fair_idx dropped: the claim read 19 million rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.set_fairness('fair', 'tenant')")
        conn.execute(
            """insert into jobs.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                      payload, enqueued_at, created_at, updated_at, tenant_id, fair_group)
               select gen_random_uuid(), gen_random_uuid(), 'bulk', 'fair', 'ready', 0,
                      now() - make_interval(secs => g), 25, '{}', now(), now(), now(), 'big', 'big'
               from generate_series(1, %s) g""", (BIG,))
        fill(conn, 10_000, "ready")  # (and a queue without fairness beside it)
        for t in range(10):
            conn.execute("select jobs.enqueue('small', queue => 'fair', tenant_id => %s)", (f"t{t}",))
    with psycopg.connect(dsn) as conn:
        tenants = [r[0] for r in conn.execute(
            "select tenant_id from jobs.claim('fair-planner', array['fair'], 10)").fetchall()]
        read = read_rows(conn)
        print(f"\n-- a fair claim of 10 beside a tenant's 1M ready jobs read {read} rows: {sorted(tenants)}")
        assert read < 1_000, f"the fair claim read {read} rows of jobs.jobs"
        assert sorted(tenants) == ["big"] + [f"t{t}" for t in range(9)]


def claim_and_complete(conn, n):
    """Claims n jobs and completes them with one complete_many; every one must land."""
    landed = conn.execute(
        """select l.landed from (select array_agg(id) as ids, array_agg(claim) as claims
                                 from jobs.claim('settler', max_jobs => %s)) as c,
                                jobs.complete_many(c.ids, c.claims) as l""",
        (n,),
    ).fetchall()
    assert landed == [(True,)] * n


def test_settles_find_their_jobs_by_primary_key_however_many_are_running(dsn):
    """A settle's plan is cached for the session, made with the statistics of that moment. If
    they saw no running job, a fence (state = 'running' and ...) could pick jobs_lease_idx and
    read every running job on every call: with 2,000 running, each complete_many of 10 read
    2,000 rows. jobs_lease_idx names lease_scan_at in its predicate, so a fence cannot."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """select count(*) from jobs.enqueue_batch(
                 (select jsonb_agg(jsonb_build_object('name', 'bulk')) from generate_series(1, 10000)))"""
        )
        conn.execute("vacuum analyze jobs_data.jobs")  # the statistics see no running job
        conn.execute("select count(*) from jobs.claim('holder', max_jobs => 1000)")
        conn.execute("select count(*) from jobs.claim('holder', max_jobs => 1000)")
        notices = explain_nested(conn)
        for _ in range(8):  # past PL/pgSQL's five custom plans, onto the cached one
            notices.clear()
            claim_and_complete(conn, 10)
        conn.execute("set auto_explain.log_min_duration = -1")
    plan = next(n for n in notices if "update jobs_data.jobs" in n and "state = 'completed'" in n)
    print("\n-- complete_many of 10 with 2,010 running jobs, statistics taken with none\n" + plan)
    assert "Index Scan using jobs_pkey" in plan, plan
    assert "jobs_lease_idx" not in plan, plan
    assert "Seq Scan on jobs" not in plan, plan


@pytest.mark.parametrize("case", ["good statistics", "statistics of an emptied table", "limits, 1000 running"])
def test_a_claim_and_a_settle_of_1000_read_each_job_once(dsn, case):
    """The claim moves its candidates, and complete_many settles a batch, by arrays of ids. A
    statement that joins jobs.jobs to such an array can get a generic plan that rescans the
    array for every job it reads: the claim's UPDATE did when it was planned while the
    statistics said the table was empty (1000 x 1000 rows for a claim of 1000). The limits
    check compared every candidate with every running job under its name and key. Each
    statement must read each row a bounded number of times, whatever the statistics said."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter table jobs_data.jobs set (autovacuum_enabled = false)")  # no ANALYZE mid-test
        if case.startswith("statistics of an emptied"):  # the queue drained, vacuum ran, it refilled
            insert(conn, 20_000, "ready")
            conn.execute("delete from jobs.jobs")
            conn.execute("vacuum jobs_data.jobs")
            insert(conn, 200_000, "ready")
        else:
            insert(conn, 200_000, "ready")
            if case.startswith("limits"):  # every job limited by its name and by a key of its own
                conn.execute("update jobs.jobs set concurrency_key = id::text")
                conn.execute("insert into jobs.job_types (name, concurrency) values ('bulk', 100000)")
            conn.execute("vacuum analyze jobs_data.jobs")
        if case.startswith("limits"):
            assert conn.execute("select count(*) from jobs.claim('holder', max_jobs => 1000)").fetchone()[0] == 1000
        notices = explain_nested(conn)
        for _ in range(2):  # the functions plan generically from the first call
            notices.clear()
            claim_and_complete(conn, 1000)
        conn.execute("set auto_explain.log_min_duration = -1")
    # the claim's UPDATE, complete_many's, and with limits the claim's common case (which
    # moves nothing) and the limits check
    plans = [n for n in notices if "update jobs_data.jobs" in n or "unnest(p_ids" in n]
    assert len(plans) == (4 if case.startswith("limits") else 2), notices
    for plan in plans:
        print(f"\n-- a batch of 1000, {case}\n" + plan)
        rows = rows_processed(plan)
        # A rescan of an array for every row is 1000^2; the limits check passes over its batch
        # in some 30 plan nodes (the candidates, the running jobs, a sort per window, the
        # rate-limit starts), each a few thousand rows at most.
        assert rows < 40 * 1000, f"{rows} rows for a batch of 1000:\n{plan}"


def hold_and_settle(conn):
    """One batch through every fenced statement: a claim of 10, then a heartbeat, complete,
    fail, snooze and assert_claim of one job each, and complete_many of the rest."""
    rows = conn.execute("select id, claim from jobs.claim('planner', max_jobs => 10)").fetchall()
    assert len(rows) == 10
    (a, ac), (b, bc), (c, cc), (d, dc) = rows[:4]
    conn.execute("select jobs.heartbeat(%s, %s::bigint)", (a, ac))
    conn.execute("select jobs.complete(%s, %s::bigint)", (a, ac))
    conn.execute("select jobs.fail(%s, %s::bigint, 'planned')", (b, bc))
    conn.execute("select jobs.snooze(%s, %s::bigint, now() + interval '1 hour')", (c, cc))
    conn.execute("select jobs.assert_claim(%s, %s::bigint)", (d, dc))
    rest = rows[3:]
    landed = conn.execute(
        "select landed from jobs.complete_many(%s, %s)", ([r[0] for r in rest], [r[1] for r in rest])
    ).fetchall()
    assert landed == [(True,)] * len(rest)


@pytest.mark.parametrize("emptied_by", ["truncate", "delete and vacuum", "truncate, no history"])
def test_plans_cached_while_the_table_was_empty_still_go_by_index(server_dsn, dsn, emptied_by):
    """A generic plan lives until the session ends or jobs.jobs is analysed again. One made
    while the table was empty (after a TRUNCATE, or after the queue drained and vacuum ran)
    sees a table of a page or of no rows, where a sequential scan, or a walk of the whole
    primary key joined to the ids given, is cheapest. When the table then fills, such a plan
    reads every job on every call: with 200k jobs, 25 ms per heartbeat, 1 s per claim of 10,
    minutes per complete_many of 10,000 (docs/PLANS.md). Every statement must go by an index
    with a condition, whatever the statistics said when it was planned."""
    no_history = emptied_by.endswith("no history")  # complete and complete_many delete
    if no_history:
        set_retention(server_dsn, "0", dsn)
    try:
        plans_after_emptying(dsn, emptied_by.split(",")[0], no_history)
    finally:
        if no_history:
            set_retention(server_dsn, None, dsn)


def plans_after_emptying(dsn, emptied_by, no_history):
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("alter table jobs_data.jobs set (autovacuum_enabled = false)")  # no ANALYZE mid-test
        insert(setup, 20_000, "ready")
        setup.execute("analyze jobs_data.jobs")
        if emptied_by == "truncate":
            setup.execute("truncate jobs_data.jobs")
            setup.execute("vacuum analyze jobs_data.jobs")
        else:
            setup.execute("delete from jobs.jobs")
            setup.execute("vacuum jobs_data.jobs")
        assert setup.execute("select reltuples from pg_class where oid = 'jobs_data.jobs'::regclass").fetchone()[0] == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):  # the session plans every statement while the table holds a few jobs
            conn.execute(
                """select count(*) from jobs.enqueue_batch(
                     (select jsonb_agg(jsonb_build_object('name', 'bulk')) from generate_series(1, 10)))"""
            )
            hold_and_settle(conn)
        insert(conn, 200_000, "ready")
        notices = explain_nested(conn)
        hold_and_settle(conn)
        conn.execute("set auto_explain.log_min_duration = -1")
    plans = [n for n in notices if "jobs_data.jobs" in n]  # the nested statements that read the table
    # the claim (its common case, one statement), heartbeat, complete, fail, snooze, assert, many
    assert len(plans) >= 7, notices
    # complete_many's delete of the jobs it completes (not the settles' share of retention)
    assert any("Delete on jobs" in plan and "any(ids)" in plan for plan in plans) == no_history, plans
    for plan in plans:
        print(f"\n-- after {emptied_by}, planned with a few jobs, run with 200k\n" + plan)
        assert "Seq Scan on jobs" not in plan, plan
        lines = plan.splitlines()
        for i, line in enumerate(lines):
            if "Index Scan using jobs_pkey" in line:  # a lookup, not a walk of every job
                assert "Index Cond" in lines[i + 1], plan
        assert buffers(plan) < BUFFER_BOUND, plan

