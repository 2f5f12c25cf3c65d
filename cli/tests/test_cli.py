"""`pgjobs`, the operators' command (cli/): each command against a database holding jobs in
every state. Bulk actions change exactly what --dry-run listed and nothing else; a refused
command changes nothing; `doctor` finds each problem it names, set up for real.

The binary is target/debug/pgjobs (scripts/test.sh builds it: cargo build -p pgjobs), or
$PGJOBS_BIN.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
import uuid

import psycopg
import pytest

from clusters import ROOT, own_cluster
from polling import one

BIN = os.environ.get("PGJOBS_BIN", os.path.join(ROOT, "target/debug/pgjobs"))
PORT = int(os.environ.get("PG_JOBS_CLI_PORT", "54445"))

# One job in each state, in three queues, with errors to filter on.
EVERY_STATE = """
insert into jobs.job_types (name, dead_letter) values ('no_dead_letter', false);
select jobs.enqueue('send_email', '{"to": "a@example.com"}');                         -- ready
select jobs.enqueue('send_email', run_at => now() + interval '1 hour');               -- delayed
select jobs.enqueue('report', queue => 'reports');
select jobs.claim('w1', array['reports'], lease => '1 hour');                           -- running
select jobs.enqueue('report', queue => 'reports');
select jobs.snooze(id, claim, now() + interval '1 hour') from jobs.claim('w1', array['reports']);  -- suspended
select jobs.enqueue('cleanup', queue => 'maintenance');
select jobs.complete(id, claim, '{"ok": true}') from jobs.claim('w1', array['maintenance']);   -- completed
select jobs.enqueue('no_dead_letter', queue => 'maintenance', max_attempts => 1);
select jobs.fail(id, claim, 'disk full') from jobs.claim('w1', array['maintenance']);          -- failed
select jobs.enqueue('send_email', queue => 'mail', max_attempts => 1);
select jobs.enqueue('send_email', queue => 'mail', max_attempts => 1);
select jobs.fail(id, claim, 'timeout talking to smtp') from jobs.claim('w1', array['mail'], 2); -- dead x2
select jobs.enqueue('send_email', queue => 'mail', max_attempts => 1);
select jobs.fail(id, claim, 'mailbox unavailable') from jobs.claim('w1', array['mail']);        -- dead
select jobs.cancel((jobs.enqueue('send_email', queue => 'mail')).id);                           -- cancelled
"""


def pgjobs(dsn, *args, env=None):
    """Runs the command: (exit status, standard output, standard error)."""
    if not os.path.exists(BIN):
        pytest.fail(f"{BIN} is missing: cargo build -p pgjobs")
    run = subprocess.run([BIN, *args] + ([] if dsn is None else ["--dsn", dsn]), capture_output=True,
                         text=True, timeout=60, env=env)
    return run.returncode, run.stdout, run.stderr


def pgjobs_json(dsn, *args):
    code, out, err = pgjobs(dsn, "--json", *args)
    assert code in (0, 1), err
    return json.loads(out)


def snapshot(dsn):
    """Every job's row as text, and the queues' paused flags: what a refused or dry run must
    leave as it was."""
    with psycopg.connect(dsn) as conn:
        jobs = conn.execute("select j::text from jobs.jobs as j order by j.id").fetchall()
        queues = conn.execute("select q::text from jobs.queues as q order by q.queue").fetchall()
        return jobs, queues


@pytest.fixture
def jobs_db(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EVERY_STATE)
    return dsn


@pytest.mark.library(reason='no outcome counters')
def test_status_counts_each_queues_jobs_per_state(jobs_db):
    doc = pgjobs_json(jobs_db, "status")
    queues = {q["queue"]: q for q in doc["queues"]}
    assert {k: queues["mail"][k] for k in ("dead", "cancelled", "ready")} == {"dead": 3, "cancelled": 1, "ready": 0}
    assert (queues["reports"]["running"], queues["reports"]["suspended"]) == (1, 1)
    assert (queues["maintenance"]["completed"], queues["maintenance"]["failed"]) == (1, 1)
    assert (queues["default"]["ready"], queues["default"]["delayed"]) == (1, 1)
    # The test cluster preloads pg_jobs: the outcome counters are there (server-wide since start).
    assert {o["queue"] for o in doc["outcomes"]} >= {"mail"}
    code, out, _ = pgjobs(jobs_db, "status")
    assert code == 0 and "queues:" in out and "maintenance" in out
    # --watch looks again and reports rates between looks; --count ends it.
    code, out, err = pgjobs(jobs_db, "--json", "status", "--watch", "1", "--count", "2")
    looks = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(looks) == 2 and "per_minute" in looks[1], err


def test_jobs_filters_and_pages_newest_first(jobs_db):
    every = pgjobs_json(jobs_db, "jobs", "--limit", "100")
    assert len(every) == 10
    assert [j["id"] for j in every] == sorted((j["id"] for j in every), reverse=True)
    dead = pgjobs_json(jobs_db, "jobs", "--state", "dead", "--error-like", "timeout")
    assert [(j["state"], j["last_error"]) for j in dead] == [("dead", "timeout talking to smtp")] * 2
    assert len(pgjobs_json(jobs_db, "jobs", "--state", "dead,failed")) == 4
    assert len(pgjobs_json(jobs_db, "jobs", "--queue", "mail", "--name", "send_email")) == 4
    assert len(pgjobs_json(jobs_db, "jobs", "--error-like", "MAIL%")) == 1  # a pattern as given
    assert len(pgjobs_json(jobs_db, "jobs", "--since", "1 hour", "--queue", "maintenance")) == 2
    # Pages: --before the last id of a page gives the next, without repeats or gaps.
    seen, before = [], []
    while True:
        page = pgjobs_json(jobs_db, "jobs", "--limit", "4", *before)
        seen += [j["id"] for j in page]
        if len(page) < 4:
            break
        before = ["--before", page[-1]["id"]]
    assert seen == [j["id"] for j in every]
    code, out, _ = pgjobs(jobs_db, "jobs", "--limit", "4")
    assert f"more: add --before {every[3]['id']}" in out
    # A table of 120 columns at most: short ids and relative times; --wide shows them whole.
    table = out.split("more:")[0]
    assert max(len(line) for line in out.splitlines()) <= 120, out
    assert every[0]["id"][-8:] in table and every[0]["id"] not in table
    assert re.search(r"\b(now|\d+ (s|min|h|d) ago|in \d+ (s|min|h|d))\b", table), table
    _, wide, _ = pgjobs(jobs_db, "jobs", "--limit", "4", "--wide")
    assert every[0]["id"] in wide.split("more:")[0] and "priority" in wide
    # A state that does not exist is refused by the command line itself.
    code, _, err = pgjobs(jobs_db, "jobs", "--state", "runing")
    assert code == 2 and "possible values" in err


@pytest.mark.parametrize("sort, column", [
    (["--sort", "name", "--asc"], "name"),
    (["--sort", "queue"], "queue"),
    (["--sort", "finished"], "extract(epoch from coalesce(finished_at, '-infinity'))"),  # live jobs last
])
def test_jobs_sorts_by_a_column_and_pages_on_in_that_order(jobs_db, sort, column):
    with psycopg.connect(jobs_db) as conn:
        rows = conn.execute(f"select id::text, {column} from jobs.jobs").fetchall()
    want = [r[0] for r in sorted(rows, key=lambda r: (r[1], r[0]), reverse="--asc" not in sort)]
    seen, before = [], []
    while True:  # pages of 3 keep the order across ties (ids break them) without repeats or gaps
        page = pgjobs_json(jobs_db, "jobs", "--limit", "3", *sort, *before)
        seen += [j["id"] for j in page]
        if len(page) < 3:
            break
        before = ["--before", page[-1]["id"]]
    assert seen == want
    code, _, err = pgjobs(jobs_db, "jobs", "--sort", "payload")
    assert code == 2 and "possible values" in err


def test_show_has_the_payload_result_attempts_steps_and_children(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('parent', '{\"n\": 1}', max_attempts => 3)")
        job, claim = conn.execute("select id, claim from jobs.claim('w1')").fetchone()
        conn.execute("select jobs.fail(%s, %s, 'first try broke', retry_at => now())", (job, claim))
        job, claim = conn.execute("select id, claim from jobs.claim('w2')").fetchone()
        conn.execute("select jobs.save_step(%s, %s, 'fetch', '{\"rows\": 2}')", (job, claim))
        conn.execute("select jobs.spawn(%s, %s, '{\"name\": \"child\", \"child_key\": \"c1\"}')", (job, claim))
    doc = pgjobs_json(dsn, "show", str(job))
    assert (doc["job"]["state"], doc["job"]["attempt"], doc["job"]["claimed_by"]) == ("running", 2, "w2")
    assert doc["job"]["payload"] == {"n": 1} and doc["job"]["lease_expires_at"]
    assert [(a["attempt"], a["outcome"], a["error"]) for a in doc["attempts"]] == [(1, "failed", "first try broke")]
    assert [(s["step"], s["output"]) for s in doc["steps"]] == [("fetch", {"rows": 2})]
    assert [(c["name"], c["state"]) for c in doc["children"]] == [("child", "ready")]
    code, out, _ = pgjobs(dsn, "show", str(job))
    assert code == 0 and "first try broke" in out and "fetch" in out and "child" in out
    code, _, err = pgjobs(dsn, "show", "01a238bf-e703-74c4-8c3e-a46d5ebae9a9")
    assert code == 2 and "no job has id" in err and "retention" in err
    code, _, err = pgjobs(dsn, "show", "not-an-id")
    assert code == 2 and "22P02" in err


def test_jobs_by_tag_and_show_has_tags_meta_and_the_run_deadline(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        a = conn.execute("select id from jobs.enqueue('imp', tags => array['customer:42', 'import'], "
                         "meta => '{\"traceparent\": \"00-ab\"}', run_timeout => '1 hour')").fetchone()[0]
        b = conn.execute("select id from jobs.enqueue('imp', tags => array['customer:7', 'import'])").fetchone()[0]
        conn.execute("select jobs.enqueue('imp')")
        conn.execute("select jobs.cancel(%s)", (b,))
    assert [j["id"] for j in pgjobs_json(dsn, "jobs", "--tag", "customer:42")] == [str(a)]
    assert sorted(j["id"] for j in pgjobs_json(dsn, "jobs", "--tag", "import")) == sorted([str(a), str(b)])
    assert pgjobs_json(dsn, "jobs", "--tag", "import", "--tag", "customer:7") == [
        j for j in pgjobs_json(dsn, "jobs", "--tag", "customer:7")]
    # A bulk action takes a tag as a selection: the cancelled job of the tag is requeued.
    code, out, err = pgjobs(dsn, "requeue", "--tag", "customer:7")
    assert code == 0, err
    assert pgjobs_json(dsn, "jobs", "--tag", "customer:7")[0]["state"] == "ready"
    doc = pgjobs_json(dsn, "show", str(a))["job"]
    assert (doc["tags"], doc["meta"]) == (["customer:42", "import"], {"traceparent": "00-ab"})
    assert doc["run_deadline"]


@pytest.mark.parametrize("action, args, changed_state", [
    ("requeue", ["--state", "dead", "--error-like", "timeout"], "ready"),
    ("requeue", ["--queue", "maintenance"], "ready"),
    ("cancel", ["--name", "send_email"], "cancelled"),
    ("promote", ["--all"], "ready"),
])
def test_a_bulk_action_changes_exactly_what_its_dry_run_listed(jobs_db, action, args, changed_state):
    before = snapshot(jobs_db)
    listed = pgjobs_json(jobs_db, action, *args, "--dry-run")["jobs"]
    assert listed, "the filter selects some jobs"
    assert snapshot(jobs_db) == before, "a dry run changes nothing"
    done = pgjobs_json(jobs_db, action, *args)
    verb = {"requeue": "requeued", "cancel": "cancelled", "promote": "promoted"}[action]
    assert sorted(j["id"] for j in done[verb]) == sorted(j["id"] for j in listed) and done["refused"] == []
    with psycopg.connect(jobs_db) as conn:
        after = dict(conn.execute("select id::text, state::text from jobs.jobs").fetchall())
        untouched = conn.execute("select j::text from jobs.jobs as j where not (j.id::text = any(%s)) order by j.id",
                                 ([j["id"] for j in listed],)).fetchall()
    assert {after[j["id"]] for j in listed} == {changed_state}
    assert untouched == [row for row in before[0] if not any(j["id"] in row[0] for j in listed)]


def test_a_bulk_action_without_a_selection_or_outside_its_states_is_refused_and_changes_nothing(jobs_db):
    before = snapshot(jobs_db)
    for args, said in [
        (["cancel"], "no jobs selected"),
        (["requeue", "--state", "running"], "takes jobs that are completed, failed, dead, cancelled only"),
        (["promote", "--state", "ready,dead"], "selects none"),
        (["cancel", "--queue", "mail", "01a238bf-e703-74c4-8c3e-a46d5ebae9a9"], "not both"),
        (["cancel", "01a238bf-e703-74c4-8c3e-a46d5ebae9a9"], "no job has id"),
    ]:
        code, out, err = pgjobs(jobs_db, *args)
        assert code == 2 and said in err, (args, out, err)
    assert snapshot(jobs_db) == before


def test_the_engine_refusing_one_job_leaves_the_others_changed_and_says_why(jobs_db):
    with psycopg.connect(jobs_db) as conn:
        live = conn.execute("select id::text from jobs.jobs where state = 'ready'").fetchone()[0]
        dead = conn.execute("select id::text from jobs.jobs where state = 'dead' limit 1").fetchone()[0]
    code, out, _ = pgjobs(jobs_db, "requeue", live, dead)
    assert code == 1 and "requeued 1 job(s)" in out and "refused 1 job(s)" in out
    assert "PJ004" in out and "it waits to be claimed already" in out  # the engine's refusal and hint
    assert one(jobs_db, "select state::text from jobs.jobs where id = %s", (dead,)) == "ready"
    assert one(jobs_db, "select state::text from jobs.jobs where id = %s", (live,)) == "ready"


def test_delete_takes_finished_roots_with_their_families_and_nothing_else(jobs_db):
    with psycopg.connect(jobs_db, autocommit=True) as conn:
        conn.execute("""
            select jobs.enqueue('parent', queue => 'family');
            create temp table held as select id, claim from jobs.claim('w1', array['family']);
            select jobs.spawn(h.id, h.claim, '{"name": "kid", "child_key": "a", "queue": "family"}') from held as h;
            select jobs.complete(h.id, h.claim) from held as h;
            select jobs.complete(c.id, c.claim) from jobs.claim('w1', array['family']) as c;""")
        live = conn.execute("select id::text from jobs.jobs where state = 'ready' limit 1").fetchone()[0]
        kid = conn.execute("select id::text from jobs.jobs where name = 'kid'").fetchone()[0]
    before = snapshot(jobs_db)
    listed = pgjobs_json(jobs_db, "delete", "--state", "completed", "--dry-run")["jobs"]
    assert sorted(j["name"] for j in listed) == ["cleanup", "parent"], "a child goes with its root"
    assert snapshot(jobs_db) == before
    code, out, _ = pgjobs(jobs_db, "delete", live, kid)
    assert code == 1 and "refused 2 job(s)" in out and "PJ009" in out and "deleted with its root" in out
    assert snapshot(jobs_db) == before, "a refused delete changes nothing"
    done = pgjobs_json(jobs_db, "delete", "--state", "completed")
    assert sorted(j["id"] for j in done["deleted"]) == sorted(j["id"] for j in listed) and done["refused"] == []
    with psycopg.connect(jobs_db) as conn:
        gone = conn.execute("select count(*) from jobs.jobs where state = 'completed'").fetchone()[0]
        left = conn.execute("select j::text from jobs.jobs as j order by j.id").fetchall()
    assert gone == 0, "the child went with its parent"
    assert left == [row for row in before[0] if "completed" not in row[0]]


def test_pause_resume_and_schedules(jobs_db):
    code, out, _ = pgjobs(jobs_db, "pause", "mail")
    assert code == 0 and one(jobs_db, "select paused from jobs.queues where queue = 'mail'") is True
    code, out, _ = pgjobs(jobs_db, "resume", "mail")
    assert code == 0 and one(jobs_db, "select paused from jobs.queues where queue = 'mail'") is False
    before = snapshot(jobs_db)
    code, _, err = pgjobs(jobs_db, "pause", "no_such_queue")
    assert code == 2 and "unknown queue" in err and "[22023]" in err
    assert snapshot(jobs_db) == before
    code, out, _ = pgjobs(jobs_db, "fairness", "mail", "tenant")
    assert code == 0 and "turns among its tenants" in out
    assert one(jobs_db, "select fairness from jobs.queues where queue = 'mail'") == "tenant"
    before = snapshot(jobs_db)
    code, _, err = pgjobs(jobs_db, "fairness", "mail", "tenants")
    assert code == 2 and "invalid value 'tenants'" in err
    assert snapshot(jobs_db) == before
    one(jobs_db, "select jobs.schedule('nightly', '0 3 * * *', '{\"name\": \"report\"}')")
    rows = pgjobs_json(jobs_db, "schedules")
    assert [(s["name"], s["cron"], s["enabled"]) for s in rows] == [("nightly", "0 3 * * *", True)]
    assert rows[0]["next_slot"]
    _, out, _ = pgjobs(jobs_db, "schedules")  # a table of 120 columns; --wide has every column
    assert "in " in out and max(len(line) for line in out.splitlines()) <= 120, out
    _, wide, _ = pgjobs(jobs_db, "schedules", "--wide")
    assert "catch_up" in wide and "catch_up" not in out


def test_jobs_lists_a_spawned_child_by_its_enqueue_time_and_pages_on_in_that_order(dsn):
    """A parent enqueued first spawns its child after another job was enqueued: newest first,
    the list has the job enqueued after the spawn, the child, the job before it, the parent;
    paged one at a time with --before, the same. Checked to fail with the child's id the
    parent's and key's digest alone: the child sorted by chance among the others."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in ("fan", "early"):
            conn.execute("select jobs.enqueue(%s, queue => %s)", (name, name))
            time.sleep(0.005)
        parent, claim = conn.execute("select id, claim from jobs.claim('w', array['fan'])").fetchone()
        conn.execute("""select jobs.spawn(%s, %s, '{"name": "kid", "child_key": "k"}')""", (parent, claim))
        time.sleep(0.005)
        conn.execute("select jobs.enqueue('late')")
    every = [j["name"] for j in pgjobs_json(dsn, "jobs")]
    assert every == ["late", "kid", "early", "fan"]
    seen, before = [], []
    while page := pgjobs_json(dsn, "jobs", "--limit", "1", *before):
        seen += [j["name"] for j in page]
        before = ["--before", page[-1]["id"]]
    assert seen == every


def test_find_takes_an_id_its_end_a_run_id_a_key_or_text_and_nothing_else(dsn):
    """--find finds a job by its whole id, the start or the end of its id (the short ids show
    ends), its run id, its idempotency key, or text in its payload; a like-pattern's own % and _
    match nothing but themselves, and a bulk action by --find previews only that job.
    `pgjobs search` is the same."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        job = str(conn.execute("""select (jobs.enqueue('mailer', '{"to": "ann@example.com"}',
                                   idempotency_key => 'order-77')).id""").fetchone()[0])
        conn.execute("select jobs.enqueue('receipt', run_id => %s)", (job,))
        conn.execute("""select jobs.enqueue('other', '{"to": "bob@example.com"}', idempotency_key => 'order-78')""")
    found = {}
    for text in (job, job[-8:], job[-8:].upper(), job[:24], "order-77", "ANN@example", "%", "_"):
        found[text] = sorted(j["name"] for j in pgjobs_json(dsn, "jobs", "--find", text))
        assert sorted(j["name"] for j in pgjobs_json(dsn, "search", text)) == found[text]
    assert found[job] == ["mailer", "receipt"]  # its id, and the run it starts
    assert found[job[-8:]] == found[job[-8:].upper()] == found[job[:24]] == found["order-77"] \
        == found["ANN@example"] == ["mailer"]
    assert found["%"] == found["_"] == []
    before = snapshot(dsn)
    code, out, _ = pgjobs(dsn, "cancel", "--find", "order-77", "--dry-run")
    assert code == 0 and "1 job" in out and snapshot(dsn) == before


def lapse(conn, worker):
    """Lets the leases of what this worker holds lapse a minute ago, where no sweep looks yet
    (their next lapse scan stays an hour ahead)."""
    conn.execute("update jobs_data.jobs set lease_expires_at = clock_timestamp() - interval '1 minute' "
                 "where claimed_by = %s and state = 'running'", (worker,))


def test_workers_lists_each_claimer_and_which_are_gone(jobs_db):
    """Three claimers: one whose leases lapsed (gone), one holding a live lease (working), one
    that only finished a job in the last hour (idle); the gone one first. A worker's connections
    (the libraries name them `pg-jobs ROLE WORKER_ID`) are its own, with their backends; a worker
    only connected is listed idle. A prefetching worker's jobs fetched ahead, not yet started,
    are counted apart; started, they are not. And the connections that say they are workers'."""
    with psycopg.connect(jobs_db, autocommit=True) as conn:
        conn.execute("select jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'w', 'queue', 'crew')) "
                     "from generate_series(1, 8)))")
        ahead = conn.execute("select array_agg(id), array_agg(claim) from jobs.claim("
                             "'host-e:5', array['crew'], 3, lease => '1 hour', prefetch => true)").fetchone()
        conn.execute("select jobs.mark_started(%s, %s)", ([ahead[0][0]], [ahead[1][0]]))
        conn.execute("select count(*) from jobs.claim('host-a:1', array['crew'], 2, lease => '1 hour')")
        conn.execute("select count(*) from jobs.claim('host-b:2', array['crew'], 2, lease => '1 hour')")
        conn.execute("select jobs.complete(id, claim) from jobs.claim('host-c:3', array['crew'], 1)")
        lapse(conn, "host-a:1")
    with psycopg.connect(jobs_db, application_name="pg-jobs heartbeat host-b:2") as connected, \
            psycopg.connect(jobs_db, application_name="pg-jobs heartbeat host-d:4") as waiting:
        pid, other = connected.info.backend_pid, waiting.info.backend_pid
        doc = pgjobs_json(jobs_db, "workers")
        code, out, _ = pgjobs(jobs_db, "workers")
    rows = doc["workers"]
    assert [(c["application_name"], c["connections"], c["backends"]) for c in doc["connections"]] \
        == [("pg-jobs heartbeat host-b:2", 1, str(pid)), ("pg-jobs heartbeat host-d:4", 1, str(other))]
    assert code == 0 and "connected:" in out and "pg-jobs heartbeat host-b:2" in out
    seen = {(w["worker"], w["status"], w["held"], w["ahead"], w["lapsed"], w["finished_last_hour"], w["connections"])
            for w in rows}
    assert {("host-a:1", "gone", 2, 0, 2, 0, 0), ("host-b:2", "working", 2, 0, 0, 0, 1),
            ("host-c:3", "idle", 0, 0, 0, 1, 0), ("host-d:4", "idle", 0, 0, 0, 0, 1),
            ("host-e:5", "working", 3, 2, 0, 0, 0)} <= seen
    assert next(w["backends"] for w in rows if w["worker"] == "host-b:2") == str(pid)
    assert rows[0]["status"] == "gone"
    assert "host-a:1" in out and "gone" in out
    assert max(len(line) for line in out.splitlines()) <= 120, out


#: The characters that reorder the text around them (bidirectional marks, embeddings,
#: overrides and isolates).
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def test_hostile_text_never_reaches_the_terminal_as_control_characters(dsn):
    """A payload, an error and a queue name holding escape sequences (retitle the window,
    recolour, the C1 CSI) and bidirectional controls (an override that makes the text after
    it read backwards, an isolate): printed as tables they come out as visible \\u{..} text;
    as JSON, escaped and read back unchanged. Checked to fail without the guard: at d7d86e0
    U+202E and U+2066 reached the terminal as they are."""
    hostile = "\x1b]0;pwned\x07<script>alert(1)</script>\x1b[31m\u009b2J\x7f\u202egnp.exe\u2066x\u2069"
    with psycopg.connect(dsn, autocommit=True) as conn:
        job = conn.execute("select (jobs.enqueue('x', jsonb_build_object('p', %s::text), queue => %s, max_attempts => 1)).id",
                           (hostile, hostile)).fetchone()[0]
        conn.execute("select jobs.fail(id, claim, %s) from jobs.claim('w', array[%s])", (hostile, hostile))
    for args in (["jobs"], ["show", str(job)], ["status"], ["doctor"], ["pause", hostile + "x"]):
        _, out, err = pgjobs(dsn, *args)
        for text in (out, err):
            assert not any(0x7F <= ord(c) <= 0x9F or (ord(c) < 0x20 and c not in "\n") or c in BIDI
                           for c in text), (args, text)
    _, out, _ = pgjobs(dsn, "--json", "show", str(job))
    assert not any(0x7F <= ord(c) <= 0x9F or c in BIDI for c in out)
    doc = json.loads(out)
    assert (doc["job"]["payload"]["p"], doc["job"]["last_error"], doc["job"]["queue"]) == (hostile, hostile, hostile)


def test_it_connects_as_libpq_would(dsn):
    """--dsn, else DATABASE_URL, else the PG* variables, which also complete a connection
    string that leaves something out."""
    params = dict(p.split("=", 1) for p in dsn.split())
    # (PGJOBS_TRUST_OWNER as the run sets it: the SQL-only edition belongs to a role that is not a
    # superuser, whom that run trusts)
    base = {"PATH": os.environ["PATH"], **{k: v for k, v in os.environ.items() if k == "PGJOBS_TRUST_OWNER"}}
    pg = {"PGHOST": params["host"], "PGPORT": params["port"], "PGUSER": params["user"], "PGDATABASE": params["dbname"]}
    url = f"postgres://{params['user']}@{params['host']}:{params['port']}/{params['dbname']}"
    for env in (pg, {"DATABASE_URL": url}, {**pg, "PGDATABASE": "", "DATABASE_URL": f"dbname={params['dbname']}"}):
        code, out, err = pgjobs(None, "--json", "status", env={**base, **env})
        assert code == 0 and "queues" in json.loads(out), (env, err)
    code, _, err = pgjobs(None, "status", env={**base, **pg, "PGPORT": "1"})
    assert code == 2 and "cannot connect" in err and "DATABASE_URL" in err


@pytest.mark.library(reason="doctor's preload and sweeper checks of the library (sql-only/tests checks the edition's)")
def test_a_monitor_reads_and_is_told_which_grant_acting_needs(jobs_db):
    with psycopg.connect(jobs_db, autocommit=True) as conn:
        conn.execute("drop role if exists cli_monitor")
        conn.execute("create role cli_monitor login")
        conn.execute("select jobs.grant_monitor('cli_monitor')")
    try:
        monitor = jobs_db + " user=cli_monitor"
        assert pgjobs_json(monitor, "status")["queues"]
        before = snapshot(jobs_db)
        code, out, err = pgjobs(monitor, "requeue", "--all")
        assert code in (1, 2) and "grant_admin" in out + err, (out, err)
        assert snapshot(jobs_db) == before
        doc = {c["check"]: c for c in pgjobs_json(monitor, "doctor")}
        assert doc["grants"]["ok"] is False and "grant_admin('cli_monitor')" in doc["grants"]["fix"]
        # Without pg_read_all_stats a role sees no other process: doctor says it cannot tell.
        assert doc["preload"]["ok"] is True
        for check in ("sweeper", "long transactions"):
            assert doc[check]["ok"] is None and "GRANT pg_read_all_stats TO it" in doc[check]["unknown"]
        assert doc["queues"]["ok"] is None and "grant_admin" in doc["queues"]["unknown"]  # reads jobs.jobs
    finally:
        with psycopg.connect(jobs_db, autocommit=True) as conn:
            conn.execute("drop owned by cli_monitor cascade")
            conn.execute("drop role cli_monitor")


def test_a_tenant_admin_sees_and_acts_on_its_tenants_jobs_only(jobs_db):
    """As a tenant admin of acme (jobs.grant_admin(role, 'acme')), every command reads and acts
    on acme's jobs only: the engine's tenant views and checks, not the command, keep it there.
    Checked to fail without the guard: with cli/src/role.rs reading jobs.jobs for a bound role
    the listing failed (no grant), and with the views' WHERE clauses removed it listed globex's."""
    with psycopg.connect(jobs_db, autocommit=True) as conn:
        conn.execute("drop role if exists cli_acme")
        conn.execute("create role cli_acme login")
        conn.execute("select jobs.grant_admin('cli_acme', 'acme')")
        for tenant in ("acme", "globex"):
            for _ in range(2):
                conn.execute("select jobs.enqueue('bill', queue => 'billing', tenant_id => %s, max_attempts => 1)",
                             (tenant,))
            conn.execute("select jobs.fail(id, claim, 'card declined') from jobs.claim('w', array['billing'], 2)")
        globex = conn.execute("select id::text from jobs.jobs where tenant_id = 'globex' limit 1").fetchone()[0]
    try:
        acme = jobs_db + " user=cli_acme"
        listed = pgjobs_json(acme, "jobs", "--queue", "billing")
        assert len(listed) == 2 and {j["tenant"] for j in listed} == {"acme"}
        queues = {q["queue"]: q for q in pgjobs_json(acme, "status")["queues"]}
        assert queues["billing"]["dead"] == 2 and queues["mail"]["dead"] == 0
        code, _, err = pgjobs(acme, "show", globex)
        assert code == 2 and "no job has id" in err
        before = snapshot(jobs_db)
        code, out, err = pgjobs(acme, "pause", "billing")
        assert code != 0 and "tenant admin" in out + err, (out, err)
        assert snapshot(jobs_db) == before
        dry = pgjobs_json(acme, "requeue", "--state", "dead", "--dry-run")["jobs"]
        done = pgjobs_json(acme, "requeue", "--state", "dead")
        assert sorted(j["id"] for j in done["requeued"]) == sorted(j["id"] for j in dry) and len(dry) == 2
        with psycopg.connect(jobs_db) as conn:
            states = conn.execute("select tenant_id, state::text, count(*) from jobs.jobs where queue = 'billing' "
                                  "group by 1, 2 order by 1").fetchall()
        assert states == [("acme", "ready", 2), ("globex", "dead", 2)]
    finally:
        with psycopg.connect(jobs_db, autocommit=True) as conn:
            conn.execute("drop owned by cli_acme cascade")
            conn.execute("drop role cli_acme")


def checks(dsn, *args):
    """doctor's answer: exit status and each check by name."""
    code, out, err = pgjobs(dsn, "--json", "doctor", *args)
    assert code in (0, 1), err
    return code, {c["check"]: c for c in json.loads(out)}


def test_doctor_finds_a_pending_upgrade(server_dsn):
    from clusters import database
    with database(server_dsn, "t_", "drop extension pg_jobs; create extension pg_jobs version '0.1.0'") as (_, db):
        code, found = checks(db)
        assert code == 1 and found["upgrade"]["ok"] is False
        assert "0.1.0" in found["upgrade"]["problem"] and "ALTER EXTENSION pg_jobs UPDATE" in found["upgrade"]["fix"]
        assert "queues" not in found  # (read after the upgrade)
        one(db, "alter extension pg_jobs update")
        assert checks(db)[1]["upgrade"]["ok"] is True


@pytest.mark.library(reason="doctor's preload and sweeper checks of the library (sql-only/tests checks the edition's)")
def test_doctor_finds_a_long_transaction_and_no_sweeper_here(jobs_db):
    # The test cluster sweeps only the database named by pg_jobs.database_name (tests/cluster.conf).
    code, found = checks(jobs_db, "--ready-age", "1 day")
    assert found["sweeper"]["ok"] is False and "pg_jobs.database_name is 'postgres'" in found["sweeper"]["problem"]
    assert found["long transactions"]["ok"] is True
    with psycopg.connect(jobs_db) as idle:
        pid = idle.execute("select pg_backend_pid()").fetchone()[0]
        idle.execute("select txid_current()")  # and idles in its transaction
        time.sleep(1.2)
        code, found = checks(jobs_db, "--transaction-age", "1 second")
        assert code == 1 and f"pid {pid}" in found["long transactions"]["problem"]
        assert "idle_in_transaction_session_timeout" in found["long transactions"]["fix"]
    assert checks(jobs_db, "--transaction-age", "1 second")[1]["long transactions"]["ok"] is True


def test_doctor_finds_a_paused_queue_a_waiting_one_and_lapsed_leases(jobs_db):
    assert checks(jobs_db, "--ready-age", "1 day")[1]["queues"]["ok"] is True
    one(jobs_db, "select jobs.pause_queue('default')")
    code, out, _ = pgjobs(jobs_db, "doctor", "--ready-age", "1 day")
    assert code == 1 and "queue default is paused with 1 ready job(s)" in out and "pgjobs resume default" in out
    one(jobs_db, "select jobs.resume_queue('default')")
    time.sleep(1.1)
    code, out, _ = pgjobs(jobs_db, "doctor", "--ready-age", "1 second")
    assert "queue default: its oldest ready job has waited" in out
    one(jobs_db, "update jobs_data.jobs set lease_expires_at = now() - interval '2 minutes', "
                 "lease_scan_at = now() - interval '2 minutes' where state = 'running'")
    code, out, _ = pgjobs(jobs_db, "doctor", "--ready-age", "1 day")
    assert "queue reports: 1 running job(s) whose lease ended over a minute ago" in out


def test_doctor_without_preload_says_what_is_missing_and_how_to_preload():
    with own_cluster("pg_jobs-cli.", PORT, "shared_preload_libraries = ''\n") as s:
        one(s["dsn"], "create extension pg_jobs")
        code, found = checks(s["dsn"])
        assert code == 1 and found["preload"]["ok"] is False
        assert "shared_preload_libraries = 'pg_jobs'" in found["preload"]["fix"]
        assert "jobs.sweep()" in found["preload"]["fix"]
        assert "sweeper" not in found  # (the preload problem says it)
        code, out, _ = pgjobs(s["dsn"], "status")
        assert code == 0 and "they need shared_preload_libraries" in out


def test_every_command_and_page_walks_indexes_with_a_million_finished_jobs(dsn):
    """1M completed jobs, 1,000 dead and 100k ready ones in 10 queues: the plans of every
    statement `pgjobs` and the dashboard run (auto_explain, at NOTICE, which both print as psql
    does) read no table of jobs from end to end. Each command's time is printed (pytest -s)."""
    from test_ui import request, ui

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """insert into jobs.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts, attempt,
                                      payload, enqueued_at, created_at, updated_at, finished_at, last_error, tenant_id)
               select gen_random_uuid(), gen_random_uuid(),
                      case when g <= 1001000 then 'report' else 'send_email' end,
                      'q' || (g % 10), s.state, 0, now() - make_interval(secs => g), 25, 1, '{"n": 1}',
                      now() - make_interval(secs => g), now(), now(),
                      case when s.state <> 'ready' then now() - make_interval(secs => g) end,
                      case when s.state = 'dead' then 'smtp timeout ' || (g % 10) end, 't' || (g % 100)
               from generate_series(1, 1101000) as g
               cross join lateral (select case when g <= 1000000 then 'completed' when g <= 1001000 then 'dead'
                                               else 'ready' end::jobs.job_state as state) as s""")
        conn.execute("vacuum analyze jobs_data.jobs")
        job = conn.execute("select id::text from jobs.jobs where state = 'dead' limit 1").fetchone()[0]
    explain = (" options='-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0"
               " -c auto_explain.log_nested_statements=on -c auto_explain.log_level=notice'")
    plans = []
    for args in (["status"], ["jobs"], ["jobs", "--state", "dead"], ["jobs", "--queue", "q3", "--state", "ready"],
                 ["jobs", "--name", "send_email", "--state", "ready", "--limit", "5"],
                 ["jobs", "--state", "dead", "--error", "smtp timeout 3"], ["show", job],
                 ["requeue", "--state", "dead", "--error-like", "timeout 3", "--dry-run"],
                 ["doctor", "--ready-age", "100 years"], ["workers"]):
        started = time.monotonic()
        code, out, err = pgjobs(dsn + explain, *args)
        slowest = max((float(ms) for ms in re.findall(r"duration: ([0-9.]+) ms", err)), default=0)
        print(f"pgjobs {' '.join(args)}: {1000 * (time.monotonic() - started):.0f} ms, slowest statement {slowest:.0f} ms")
        assert code in (0, 1), err
        assert "Query Text" in err
        plans.append((" ".join(args), err))
    served = []
    with ui(dsn + explain, log=served) as base:
        for path in ("/", "/jobs", "/jobs?state=dead&queue=q3", f"/jobs/{job}", "/dead", "/jobs?queue=q5&state=ready",
                     "/workers", "/?hours=168"):
            started = time.monotonic()
            assert request(base, "GET", path)[0] == 200, path
            print(f"GET {path}: {1000 * (time.monotonic() - started):.0f} ms")
    plans.append(("ui", served[0]))  # (the server's notices: its standard error)
    for what, err in plans:
        scans = re.findall(r"(?:Parallel )?Seq Scan on jobs\b.*", err)
        assert not scans, f"pgjobs {what}: {scans}\n{err}"


def test_doctor_finds_a_role_with_part_of_a_grant(jobs_db):
    """A worker missing one of its functions (a grant made by hand, or older than the function)
    is named with the function and the grant that gives the whole set; a full grant is fine,
    which also checks doctor's lists match sql/privileges.sql's."""
    with psycopg.connect(jobs_db, autocommit=True) as conn:
        conn.execute("drop role if exists cli_worker")
        conn.execute("create role cli_worker login")
        conn.execute("select jobs.grant_worker('cli_worker')")
    try:
        assert checks(jobs_db)[1]["other roles' grants"]["ok"] is True
        one(jobs_db, "revoke execute on function jobs.get_job(uuid) from cli_worker")
        code, out, _ = pgjobs(jobs_db, "doctor")
        assert code == 1 and "role cli_worker may call some of a worker's functions but not get_job" in out
        assert "select jobs.grant_worker('cli_worker')" in out
        one(jobs_db, "select jobs.grant_worker('cli_worker')")
        assert checks(jobs_db)[1]["other roles' grants"]["ok"] is True
    finally:
        with psycopg.connect(jobs_db, autocommit=True) as conn:
            conn.execute("drop owned by cli_worker cascade")
            conn.execute("drop role cli_worker")


def test_tls_follows_sslmode_as_libpq_does():
    """A server that accepts TLS connections only (hostssl, hostnossl reject), with a
    self-signed certificate: sslmode=disable is refused by it; prefer (the default) and require
    connect without checking the certificate; verify-full checks it against sslrootcert (or
    PGSSLROOTCERT) and the host name, and refuses a server it cannot verify (checked to fail
    with verify-full made to accept any certificate). Then, with pg_hba.conf asking for a client
    certificate, one signed by the server's CA connects (sslcert and sslkey, or PGSSLCERT and
    PGSSLKEY), none does not, and a key others may read is refused as libpq refuses it."""
    certs = pathlib.Path(tempfile.mkdtemp(prefix="pg_jobs-cli-certs."))  # (the server reads it)
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", str(certs / "key.pem"), "-out", str(certs / "cert.pem"), "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
        # A certificate authority, and a client certificate it signs for the user postgres.
        ssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        subprocess.run(ssl + ["-keyout", str(certs / "ca.key"), "-out", str(certs / "ca.pem"), "-subj", "/CN=test ca"],
                       check=True, capture_output=True)
        subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(certs / "client.key"),
                        "-out", str(certs / "client.csr"), "-subj", "/CN=postgres"], check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", str(certs / "client.csr"), "-CA", str(certs / "ca.pem"),
                        "-CAkey", str(certs / "ca.key"), "-CAcreateserial", "-days", "1",
                        "-out", str(certs / "client.pem")], check=True, capture_output=True)
        os.chmod(certs / "client.key", 0o600)
        shutil.chown(certs, "postgres")
        for f in ("key.pem", "cert.pem", "ca.pem"):
            shutil.chown(certs / f, "postgres")
        os.chmod(certs / "key.pem", 0o600)
        conf = (f"ssl = on\nssl_cert_file = '{certs}/cert.pem'\nssl_key_file = '{certs}/key.pem'\n"
                f"ssl_ca_file = '{certs}/ca.pem'\n")
        port = int(os.environ.get("PG_JOBS_CLI_TLS_PORT", "54448"))
        with own_cluster("pg_jobs-cli-tls.", port, conf) as s:
            one(s["dsn"], "create extension pg_jobs")
            with open(os.path.join(s["dir"], "pg_hba.conf"), "w") as hba:
                hba.write("local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n")
            one(s["dsn"] + " host=" + s["dir"], "select pg_reload_conf()")
            time.sleep(0.5)
            base = f"port={port} user=postgres dbname=postgres"
            cert = str(certs / "cert.pem")
            for extra, env, ok in [
                ("sslmode=disable", {}, False),
                ("", {}, True),
                ("sslmode=require", {}, True),
                (f"sslmode=verify-full sslrootcert={cert} host=localhost hostaddr=127.0.0.1", {}, True),
                ("sslmode=verify-full host=localhost hostaddr=127.0.0.1", {"PGSSLROOTCERT": cert}, True),
                ("sslmode=verify-full host=localhost hostaddr=127.0.0.1", {}, False),  # not a trusted root
            ]:
                host = "" if "host=" in extra else "host=127.0.0.1"
                code, out, err = pgjobs(f"{base} {host} {extra}", "--json", "status", env={**os.environ, **env})
                assert (code == 0) == ok, (extra, env, err)
                if not ok:
                    assert "cannot connect" in err, err
            url = f"postgres://postgres@127.0.0.1:{port}/postgres?sslmode=verify-ca&sslrootcert={cert}"
            code, _, err = pgjobs(url, "status")
            assert code == 0, err
            # A client certificate, for a server that asks for one (cert in pg_hba.conf).
            with open(os.path.join(s["dir"], "pg_hba.conf"), "w") as hba:
                hba.write("local all all trust\nhostssl all all 127.0.0.1/32 cert\n")
            one(s["dsn"] + " host=" + s["dir"], "select pg_reload_conf()")
            time.sleep(0.5)
            client = f"sslcert={certs / 'client.pem'} sslkey={certs / 'client.key'}"
            for extra, env, ok in [
                ("", {}, False),  # no certificate
                (client, {}, True),
                ("", {"PGSSLCERT": str(certs / "client.pem"), "PGSSLKEY": str(certs / "client.key")}, True),
            ]:
                code, _, err = pgjobs(f"{base} host=127.0.0.1 {extra}", "--json", "status", env={**os.environ, **env})
                assert (code == 0) == ok, (extra, env, err)
            os.chmod(certs / "client.key", 0o644)
            code, _, err = pgjobs(f"{base} host=127.0.0.1 {client}", "status")
            assert code == 2 and "others may read it" in err and "chmod 0600" in err, err
    finally:
        shutil.rmtree(certs)


def test_a_superuser_calls_no_code_a_less_trusted_role_owns(dsn):
    """Schema jobs and jobs._tenants (which pgjobs calls at every connection) owned by a role
    that is not a superuser (as the SQL-only edition is, by the role that ran its file), the
    function replaced by that owner with code that would make it a superuser: pgjobs status,
    doctor and ui as a superuser refuse, naming the owner and the fix, and run nothing;
    --trust-owner (or PGJOBS_TRUST_OWNER=1) overrides it. Checked to fail without the guard: at
    d7d86e0 pgjobs status made the owner a superuser."""
    env = {k: v for k, v in os.environ.items() if k != "PGJOBS_TRUST_OWNER"}
    was = one(dsn, "select nspowner::regrole::text from pg_namespace where nspname = 'jobs'")
    # The SQL-only edition is owned by a role that is not a superuser already (its functions run
    # as that owner, so it keeps them); the extension is given such an owner.
    given = one(dsn, "select rolsuper from pg_roles where rolname = %s", (was,))
    owner = f"owner_{uuid.uuid4().hex[:8]}" if given else was
    if given:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"create role {owner} login")
            conn.execute(f"alter schema jobs owner to {owner}")
            conn.execute(f"alter function jobs._tenants() owner to {owner}")
    code, _, err = pgjobs(dsn, "status", env={**env, "PGJOBS_TRUST_OWNER": "1"})
    assert code == 0, err
    try:
        with psycopg.connect(f"{dsn} user={owner}", autocommit=True) as mallory:
            mallory.execute("create or replace function jobs._tenants() returns text[] language plpgsql "
                            f"security invoker as $$ begin execute 'alter role {owner} superuser'; "
                            "return null; end $$")
        for args, env_ in ((["status"], env), (["doctor"], env), (["status"], {**env, "PGJOBS_TRUST_OWNER": "0"})):
            code, _, err = pgjobs(dsn, *args, env=env_)
            assert code == 2 and owner in err and "--trust-owner" in err, err
        run = subprocess.run([BIN, "--dsn", dsn, "ui", "--listen", "127.0.0.1:0"], capture_output=True,
                             text=True, timeout=60, env=env)
        assert run.returncode == 2 and owner in run.stderr, run.stderr
        assert one(dsn, "select rolsuper from pg_roles where rolname = %s", (owner,)) is False
        code, _, err = pgjobs(dsn, "--trust-owner", "status", env=env)
        assert code == 0, err
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"alter role {owner} nosuperuser")
            if given:
                conn.execute(f"alter schema jobs owner to {was}")
                conn.execute(f"alter function jobs._tenants() owner to {was}")
                conn.execute(f"drop owned by {owner}")
                conn.execute(f"drop role {owner}")
