"""The behaviour every pg_jobs library promises, checked from outside against its conformance
worker (README.md). Each scenario names what it guards; the waits below are bounds, not
timing assertions: a scenario that passes does so by what the database holds."""

import os
import re
import time
import urllib.request

import psycopg
from psycopg.types.json import Jsonb

METRICS_PORT = int(os.environ.get("PG_JOBS_CONFORMANCE_METRICS_PORT", "54479"))


def test_a_drain_with_a_worker_killed_completes_every_job_once(db, start_worker):
    """1. 10,000 jobs, 4 workers of concurrency 8, one SIGKILLed mid-run: every job completes,
    and the handlers' writes through the transaction land exactly once each (the killed
    worker's open transactions roll back; its jobs run again once their 2 s leases lapse)."""
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
               "'name', 'write', 'payload', jsonb_build_object('n', g))) from generate_series(1, 10000) as g))")
    workers = [start_worker(db, concurrency=8, lease=2) for _ in range(4)]
    db.eventually("select count(*) >= 2000 from jobs.jobs where state = 'completed'", True)
    workers[0].kill()
    db.eventually("select count(*) from jobs.jobs where state = 'completed'", 10000, timeout=240)
    rows, jobs = db.one("select count(*), count(distinct job_id) from conformance_rows")
    assert (rows, jobs) == (10000, 10000)
    assert db.one("select count(*) from conformance_rows as r join jobs.jobs as j on j.id = r.job_id "
                  "where (j.payload->>'n')::int = r.n")[0] == 10000


def test_a_slow_job_holds_back_no_other(db, start_worker):
    """2. One 10 s job among 100 quick ones, concurrency 4: the quick ones all complete while
    the slow one still runs (a free slot claims at once; nothing waits for a batch)."""
    slow = db.enqueue("sleep", {"ms": 10000}, priority=10)
    start_worker(db, concurrency=4)
    db.eventually("select state::text from jobs.jobs where id = %s", "running", args=(slow,))
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'noop')) "
               "from generate_series(1, 100)))")
    db.eventually("select count(*) from jobs.jobs where name = 'noop' and state = 'completed'", 100, timeout=30)
    assert db.one("select state::text from jobs.jobs where id = %s", (slow,))[0] == "running"


def test_an_unknown_name_keeps_its_attempts(db, start_worker):
    """3. A job no handler knows is parked, not failed: no attempt used, no error recorded,
    and the worker goes on with the jobs it knows."""
    unknown = db.enqueue("no_such_job", max_attempts=1)
    known = db.enqueue("noop")
    start_worker(db, concurrency=2)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(known,))
    db.eventually("select state::text from jobs.jobs where id = %s", "suspended", args=(unknown,))
    assert db.one("select attempt, max_attempts, last_error from jobs.jobs where id = %s", (unknown,)) == (0, 1, None)


def test_a_killed_heartbeat_connection_does_not_lose_the_job(db, start_worker):
    """4. The worker's heartbeat connection terminated (pg_terminate_backend) while a job
    runs past several leases: the connection is made again and the job completes on its first
    attempt, its lease never lapsed."""
    job = db.enqueue("sleep", {"ms": 7000})
    start_worker(db, concurrency=1, lease=2)
    db.eventually("select state::text from jobs.jobs where id = %s", "running", args=(job,))
    db.eventually("select count(*) > 0 from pg_stat_activity where application_name like 'pg-jobs heartbeat %' "
                  "and datname = current_database()", True)
    db.execute("select pg_terminate_backend(pid) from pg_stat_activity "
               "where application_name like 'pg-jobs heartbeat %' and datname = current_database()")
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
    assert db.one("select attempt from jobs.jobs where id = %s", (job,))[0] == 1


def test_a_cancelled_job_is_stopped_and_its_writes_do_not_commit(db, start_worker):
    """6. A running job cancelled: its handler's signal aborts for the cancel (the
    pg_jobs_cancel listener heartbeats it at once; a lapse would say 'lost', 30 s later), the
    job ends cancelled, and the row its handler wrote is rolled back."""
    job = db.enqueue("write", {"n": 1, "ms": 60000})
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "running", args=(job,))
    time.sleep(0.5)  # the handler has written its row (uncommitted) and sleeps
    assert db.one("select jobs.cancel(%s)", (job,))[0] is True
    db.eventually("select reason from conformance_aborts where job_id = %s", "cancelled", args=(job,), timeout=10)
    assert db.one("select state::text from jobs.jobs where id = %s", (job,))[0] == "cancelled"
    assert db.one("select count(*) from conformance_rows where job_id = %s", (job,))[0] == 0


def test_a_handler_past_its_deadline_is_stopped_and_retried_as_timed_out(db, start_worker):
    """7. A job type with a 1 s timeout and a handler that would sleep 60 s: the handler's
    signal aborts at the deadline, and the attempt is settled as timed out and retried."""
    db.execute("insert into jobs.job_types (name, timeout, backoff_base) values ('sleep', '1 second', '1 hour')")
    job = db.enqueue("sleep", {"ms": 60000}, max_attempts=3)
    start_worker(db, concurrency=1)
    db.eventually("select reason from conformance_aborts where job_id = %s", "deadline", args=(job,), timeout=15)
    db.eventually("select last_error like 'timed out%%' from jobs.jobs where id = %s", True, args=(job,), timeout=15)
    assert db.one("select state::text, attempt from jobs.jobs where id = %s", (job,)) == ("delayed", 1)


def test_sigterm_lets_running_jobs_finish_within_the_grace_and_hands_back_the_rest(db, start_worker):
    """8. SIGTERM with a 7 s grace while two 5 s jobs and two 60 s jobs run under a 3 s lease:
    the short ones complete (heartbeats go on through the grace: the Python worker's stopped at
    the signal, and its short jobs' leases lapsed; 5 s is past a lease and a heartbeat's
    interval after the signal), the long ones are stopped at the grace and handed back with
    their attempts unchanged (claimable again at once), and the worker exits 0. (With a 1.5 s
    lease, a loaded machine that ran no heartbeat for 1.5 s lost the long jobs' claims.)"""
    short = [db.enqueue("sleep", {"ms": 5000}) for _ in range(2)]
    long = [db.enqueue("sleep", {"ms": 60000}) for _ in range(2)]
    worker = start_worker(db, concurrency=4, grace=7, lease=3)
    db.eventually("select count(*) from jobs.jobs where state = 'running'", 4)
    worker.terminate()
    assert worker.wait(timeout=15) == 0, worker.output()
    for job in short:
        assert db.one("select state::text from jobs.jobs where id = %s", (job,))[0] == "completed"
    for job in long:
        state, attempt, due = db.one("select state::text, attempt, run_at <= now() from jobs.jobs where id = %s", (job,))
        assert (state, attempt, due) == ("suspended", 0, True), worker.output()
        assert db.one("select reason from conformance_aborts where job_id = %s", (job,))[0] == "shutdown"


def test_a_step_done_before_a_failure_is_not_run_again(db, start_worker):
    """9. A job that fails after its first step runs again (attempt 2) and completes; its first
    step ran once, and the second attempt got its saved result."""
    job = db.enqueue("two_steps", {"fail_after_first": True})
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('two_steps', '100 milliseconds', 0)")
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
    assert db.all("select step, count(*) from conformance_step_runs where job_id = %s group by step order by step",
                  (job,)) == [("one", 1), ("two", 1)]
    assert db.one("select attempt, result from jobs.jobs where id = %s", (job,)) == (
        2, {"one": {"first": 1}, "two": {"second": 2}})


def test_a_job_waiting_for_an_event_gets_its_payload(db, start_worker):
    """10. A job waits for an event: suspended (no attempt used) until jobs.publish, then runs
    again and its handler gets the event's payload."""
    job = db.enqueue("wait_event", {"event": "paid", "key": "order-1"})
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "suspended", args=(job,))
    db.execute("select jobs.publish('paid', %s, 'order-1')", (Jsonb({"amount": 5}),))
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
    assert db.one("select result from jobs.jobs where id = %s", (job,))[0] == {
        "status": "received", "payload": {"amount": 5}}


def test_a_fan_out_of_100_children_sums_their_results(db, start_worker):
    """11. A job spawns 100 children, awaits them (parked, no attempt used) and sums their
    results once they are done; each child knows its parent."""
    job = db.enqueue("fan_out", {"children": 100})
    start_worker(db, concurrency=8)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=60)
    assert db.one("select result, attempt from jobs.jobs where id = %s", (job,)) == (
        {"sum": 4950, "children": 100}, 1)
    assert db.one("select count(*) from jobs.jobs where name = 'child' and result->>'parent' = %s::text",
                  (job,))[0] == 100


def test_a_worker_killed_mid_spawn_leaves_no_child_twice(db, start_worker):
    """11. The worker is SIGKILLed while the job spawns its children (one every 50 ms): once
    its 2 s lease lapses, the next attempt spawns the rest, getting the same child for each
    key already spawned, and the sum is whole: 100 children, each run once. (The second
    worker's lease is 10 s, so that only the kill, not a loaded machine, ends an attempt.)"""
    job = db.enqueue("fan_out", {"children": 100, "pause_ms": 50})
    first = start_worker(db, concurrency=4, lease=2)
    db.eventually("select count(*) >= 20 from jobs.jobs where parent_id = %s", True, args=(job,))
    first.kill()
    spawned = db.one("select count(*) from jobs.jobs where parent_id = %s", (job,))[0]
    # (On a loaded machine the first worker's 2 s lease can lapse before the kill, and the job
    # be claimed again: the kill then ends that later attempt.)
    killed_attempt = db.one("select attempt from jobs.jobs where id = %s", (job,))[0]
    assert spawned < 100, "the spawning ended before the kill: nothing was tested"
    start_worker(db, concurrency=4, lease=10)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=90)
    assert db.one("select result, attempt from jobs.jobs where id = %s", (job,)) == (
        {"sum": 4950, "children": 100}, killed_attempt + 1)
    assert db.one("select count(*), count(distinct payload) from jobs.jobs where parent_id = %s",
                  (job,)) == (100, 100)


def test_a_durable_sleep_is_slept_once_however_often_the_job_runs(db, start_worker):
    """14. A job sleeps (suspended, no attempt used), wakes, fails, and runs again: its second
    attempt's sleep (asking for ten minutes) returns at once, as the step is done. A sleep that
    is not durable (a snooze) would park it for ten minutes, past the bound."""
    job = db.enqueue("nap", {"ms": 1000, "fail_once": True})
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('nap', '100 milliseconds', 0)")
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
    assert db.one("select result, attempt from jobs.jobs where id = %s", (job,)) == ({"attempt": 2}, 2)
    assert db.one("select count(*) from conformance_step_runs where job_id = %s and step = 'woke'", (job,))[0] == 2
    assert db.one("select count(*) from jobs.steps where run_id = %s and step = 'nap'", (job,))[0] == 1


def test_a_run_past_its_run_timeout_is_stopped_and_buried(db, start_worker):
    """15. A job whose run_timeout (2 s) ends while its handler runs: the handler is stopped at
    the run's deadline (its attempt's deadline is the run's) and the job is buried, its other
    four attempts unused."""
    job = db.enqueue("sleep", {"ms": 60000}, run_timeout="2 seconds", max_attempts=5)
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "dead", args=(job,), timeout=30)
    assert db.one("select attempt, last_error like 'run timed out%%' from jobs.jobs where id = %s", (job,)) == (1, True)
    db.eventually("select array_agg(reason) from conformance_aborts where job_id = %s", ["deadline"], args=(job,))


def test_tags_and_meta_reach_the_handler(db, start_worker):
    """16. The tags and meta a job was enqueued with are the handler's, as the claim answers them."""
    job = db.enqueue("job_info", tags=["customer:42", "import"], meta={"traceparent": "00-ab", "k": 1})
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
    assert db.one("select result from jobs.jobs where id = %s", (job,))[0] == {
        "tags": ["customer:42", "import"], "meta": {"traceparent": "00-ab", "k": 1}}


def test_a_fair_queue_runs_a_small_tenants_job_among_a_big_ones_backlog(db, start_worker):
    """17. In a queue shared fairly by tenant (jobs.set_fairness), 200 jobs of tenant big
    enqueued first, then one of tenant small: the worker's claims take turns, so small's job
    finishes before more than a handful of big's (in claim order it would be the 201st). A
    library that claimed ahead of its free slots, or reordered what it claimed, fails this.
    Checked to fail with the queue's fairness left 'none': 199 of big's finished before it."""
    db.execute("select jobs.set_fairness('default', 'tenant')")
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
               "'name', 'sleep', 'tenant_id', 'big', 'payload', jsonb_build_object('ms', 50))) "
               "from generate_series(1, 200)))")
    small = db.enqueue("noop", tenant_id="small")
    start_worker(db, concurrency=2)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(small,), timeout=60)
    before = db.one("select count(*) from jobs.jobs where tenant_id = 'big' and state = 'completed' "
                    "and finished_at <= (select finished_at from jobs.jobs where id = %s)", (small,))[0]
    assert before <= 4, f"{before} of big's jobs finished before small's"


def test_a_result_that_cannot_be_settled_fails_its_own_job_only(db, start_worker):
    """18. Among 100 jobs at concurrency 8, three whose results cannot be settled: one of 2 MB
    (over pg_jobs.max_payload_size, checked by the worker before it settles), one JSON cannot
    encode (checked as the handler returns), one the server refuses (a NUL character: the
    settle of its batch is refused, so its jobs are settled one by one). Each of the three
    fails for good with its cause, the 97 others complete, the worker goes on claiming and
    stops when told. Checked to fail without the guard: at d7d86e0 the 2 MB result got its
    whole batch refused and sent again for ever (0 of the others completed after 12 s, and
    the stop never returned)."""
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'noop')) "
               "from generate_series(1, 97)))")
    bad = {name: db.enqueue(name, max_attempts=5) for name in ("big_result", "unencodable_result", "refused_result")}
    worker = start_worker(db, concurrency=8)
    db.eventually("select count(*) from jobs.jobs where name = 'noop' and state = 'completed'", 97, timeout=60)
    for name, job in bad.items():
        db.eventually("select state::text from jobs.jobs where id = %s", "dead", args=(job,), timeout=30)
        attempt, error = db.one("select attempt, last_error from jobs.jobs where id = %s", (job,))
        assert attempt == 1, (name, error)
    assert "max_payload_size" in db.one("select last_error from jobs.jobs where id = %s", (bad["big_result"],))[0]
    assert "JSON" in db.one("select last_error from jobs.jobs where id = %s", (bad["unencodable_result"],))[0]
    assert "refused" in db.one("select last_error from jobs.jobs where id = %s", (bad["refused_result"],))[0]
    after = db.enqueue("noop")
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(after,), timeout=30)
    worker.terminate()
    assert worker.wait(timeout=20) == 0, worker.output()


def test_a_failure_that_cannot_be_made_text_of_fails_its_attempt(db, start_worker):
    """20. A handler throws what cannot be made text of: its attempt fails as any failure does
    (retried, its error saying what it could), not left to its lease to run again. Checked to
    fail without the guard: at d7d86e0 both libraries left the job running until its lease
    lapsed."""
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('odd_failure', '1 hour', 0)")
    job = db.enqueue("odd_failure", max_attempts=3)
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "delayed", args=(job,), timeout=30)
    attempt, error = db.one("select attempt, last_error from jobs.jobs where id = %s", (job,))
    assert attempt == 1 and error



def test_the_settle_hooks_hear_each_settled_attempt_and_each_exhausted_job_once(db, start_worker):
    """21. A worker with onSettled and onExhausted (--hooks): each attempt it settles is told
    once with its outcome (completed, retried, dead, snoozed for a wait for an event,
    cancelled); each job out of attempts is told once to onExhausted: the one a failure
    dead-lettered, and the one its claim buried (a final attempt whose worker died: the claim,
    not the sweeper, buries it, and answers it to the library marked buried). A hook that throws
    is logged with PGJOBS_ON_SETTLED_FAILED and changes nothing: its job stays completed and
    the worker goes on. Checked to fail (Node.js) with the claim's report left off: no
    exhausted row for the buried job."""
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('fail', '1 hour', 0)")
    ghost = db.enqueue("noop", max_attempts=1)
    assert db.one("select count(*) from jobs.claim('ghost', array['default'], 1, '1 second')")[0] == 1
    db.eventually("select lease_expires_at < clock_timestamp() from jobs.jobs where id = %s", True, args=(ghost,))
    jobs = {"completed": db.enqueue("noop"), "dead": db.enqueue("fail", max_attempts=1),
            "retried": db.enqueue("fail", max_attempts=3), "snoozed": db.enqueue("wait_event", {"event": "never"}),
            "cancelled": db.enqueue("sleep", {"ms": 60000}), "thrower": db.enqueue("noop", {"hook_throws": True})}
    worker = start_worker(db, concurrency=8, hooks=True)
    db.eventually("select state::text from jobs.jobs where id = %s", "running", args=(jobs["cancelled"],))
    db.execute("select jobs.cancel(%s)", (jobs["cancelled"],))
    db.eventually("select count(*) from conformance_hooks", 8, timeout=30)
    after = db.enqueue("noop")
    db.eventually("select count(*) from conformance_hooks where job_id = %s", 1, args=(after,), timeout=30)
    worker.terminate()
    assert worker.wait(timeout=20) == 0, worker.output()
    got = sorted((str(j), h, o) for j, h, o in db.all("select job_id, hook, outcome from conformance_hooks"))
    wanted = sorted([(str(jobs["completed"]), "settled", "completed"), (str(jobs["dead"]), "settled", "dead"),
                     (str(jobs["dead"]), "exhausted", None), (str(jobs["retried"]), "settled", "retried"),
                     (str(jobs["snoozed"]), "settled", "snoozed"), (str(jobs["cancelled"]), "settled", "cancelled"),
                     (str(jobs["thrower"]), "settled", "completed"), (str(ghost), "exhausted", None),
                     (str(after), "settled", "completed")])
    assert got == wanted, worker.output()
    assert db.one("select state::text from jobs.jobs where id = %s", (jobs["thrower"],))[0] == "completed"
    assert db.one("select state::text from jobs.jobs where id = %s", (ghost,))[0] == "dead"
    assert "PGJOBS_ON_SETTLED_FAILED" in worker.output()


def test_an_error_its_job_type_declares_non_retryable_dead_letters_at_once(db, start_worker):
    """22. jobs.job_types.non_retryable_errors names ValidationError and E_INVALID: an error of
    that class, of a class extending it, or with that code dead-letters on its first attempt of
    five; another error is retried. The library passes the names (class, bases, code) and the
    engine matches them, so a worker of any language decides the same. Checked to fail with the
    names left out of jobs.fail: every job was retried."""
    db.execute("insert into jobs.job_types (name, non_retryable_errors, backoff_base, jitter) "
               "values ('throw_named', array['ValidationError', 'E_INVALID'], '1 hour', 0)")
    dead = [db.enqueue("throw_named", {"name": "ValidationError"}, max_attempts=5),
            db.enqueue("throw_named", {"name": "EmailInvalid", "base": "ValidationError"}, max_attempts=5),
            db.enqueue("throw_named", {"name": "HttpError", "code": "E_INVALID"}, max_attempts=5)]
    retried = db.enqueue("throw_named", {"name": "Timeout", "code": "E_AGAIN"}, max_attempts=5)
    start_worker(db, concurrency=4)
    for job in dead:
        db.eventually("select state::text from jobs.jobs where id = %s", "dead", args=(job,), timeout=30)
        assert db.one("select attempt from jobs.jobs where id = %s", (job,))[0] == 1
    db.eventually("select state::text from jobs.jobs where id = %s", "delayed", args=(retried,), timeout=30)
    assert db.one("select attempt, last_error like '%%Timeout%%' from jobs.jobs where id = %s", (retried,)) == (1, True)


def test_a_keys_jobs_run_at_most_key_concurrency_at_once_and_a_busy_key_skips(db, start_worker):
    """23. A job type with key_concurrency 2 (@ultimat3's KeyedConcurrency) and when_busy
    'skip' (WHEN_BUSY): six jobs of one key at concurrency 8 run two at a time (no three
    runs of the key overlap), however many slots are free, and jobs of
    another key run beside them. An enqueue while two run inserts nothing and answers a running
    job (deduped, 'skipped'). The claim decides: a library that claimed past it, or ran two
    claims' jobs as one, fails this.

    Overlap is read from the order in which the key's jobs started and stopped running, as a
    trigger numbers those changes, not from claimed_at and finished_at: a claim's time is
    taken as it begins, so a claim that found a slot freed while it ran could have a time
    before the settle's that freed it, and three seemed to overlap."""
    db.execute("create table key_runs (seq bigserial, job_id uuid not null, running boolean not null)")
    db.execute("create function public.note_key_run() returns trigger language plpgsql as $$ begin "
               "insert into public.key_runs (job_id, running) values (new.id, new.state = 'running'); "
               "return null; end $$")
    db.execute("create trigger note_key_run after update of state on jobs_data.jobs for each row "
               "when (new.concurrency_key = 'acct-1' and (old.state = 'running') <> (new.state = 'running')) "
               "execute function public.note_key_run()")
    db.execute("insert into jobs.job_types (name, key_concurrency, when_busy) values ('sleep', 2, 'skip')")
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'sleep', "
               "'concurrency_key', 'acct-1', 'payload', jsonb_build_object('ms', 300))) from generate_series(1, 6)))")
    other = db.enqueue("sleep", {"ms": 300}, concurrency_key="acct-2")
    start_worker(db, concurrency=8)
    db.eventually("select count(*) from jobs.jobs where state = 'running' and concurrency_key = 'acct-1'", 2)
    deduped, action = db.one("select deduped, action from jobs.enqueue('sleep', '{}', concurrency_key => 'acct-1')")
    assert (deduped, action) == (True, "skipped")
    db.eventually("select count(*) from jobs.jobs where state = 'completed'", 7, timeout=60)
    assert db.one("select state::text from jobs.jobs where id = %s", (other,))[0] == "completed"
    # Each ran once (attempt 1): the most of the key's runs under way at any one's start.
    assert db.one("select max(attempt) from jobs.jobs where concurrency_key = 'acct-1'")[0] == 1
    assert db.one("select count(*) filter (where running), count(*) filter (where not running) "
                  "from key_runs") == (6, 6)
    overlap = db.one("select max((select count(*) from key_runs as b join key_runs as e "
                     "on e.job_id = b.job_id and not e.running "
                     "where b.running and b.seq <= a.seq and e.seq > a.seq)) "
                     "from key_runs as a where a.running")[0]
    assert overlap == 2

def test_a_runs_steps_show_running_and_failed_and_a_step_timeout_fails_the_attempt(db, start_worker):
    """24. A run's steps as jobs.get_steps shows them: a step is running while its function
    runs; one whose function throws is failed with its error (the attempt retried), completed
    by the next attempt, and the step before it ran once. A step past its own timeout (1.5 s of
    60) has its function stopped (reason step_timeout), is failed, and its attempt is recorded
    as timed out. Checked to fail with the library's step left as a get_step and a save_step:
    no running or failed row, and the attempt recorded as failed."""
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('two_steps', '1 hour', 0)")
    failing = db.enqueue("two_steps", {"fail_in_second": True})
    slow = db.enqueue("slow_step", {"ms": 60_000, "timeout_ms": 1500}, max_attempts=1)
    start_worker(db, concurrency=2)
    db.eventually("select state from jobs.get_steps(%s) where step = 'slow'", "running", args=(slow,))
    db.eventually("select state::text from jobs.jobs where id = %s", "delayed", args=(failing,))
    assert db.all("select step, state, attempt, error like '%%the step failed on purpose%%' "
                  "from jobs.get_steps(%s)", (failing,)) == [("one", "completed", 1, None), ("two", "failed", 1, True)]
    db.eventually("select state::text from jobs.jobs where id = %s", "dead", args=(slow,))
    assert db.one("select state, error like '%%timed out after%%', finished_at is not null "
                  "from jobs.get_steps(%s) where step = 'slow'", (slow,)) == ("failed", True, True)
    assert db.all("select outcome from jobs.attempts where job_id = %s", (slow,)) == [("timed_out",)]
    db.eventually("select count(*) from conformance_aborts where job_id = %s and reason = 'step_timeout'", 1,
                  args=(slow,))
    db.execute("select jobs.promote(%s)", (failing,))
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(failing,))
    assert db.all("select step, state, attempt from jobs.get_steps(%s)", (failing,)) == [
        ("one", "completed", 1), ("two", "completed", 2)]
    assert db.all("select step, count(*) from conformance_step_runs where job_id = %s group by step order by step",
                  (failing,)) == [("one", 1), ("two", 2)]


def test_who_enqueued_a_job_is_kept_with_it(db, start_worker):
    """25. Provenance: a job the library enqueues from a handler (on the job's transaction) is
    kept as enqueued by the worker's role with the label given (enqueuedBy / enqueued_by), or
    else its connection's application_name (`pg-jobs worker WORKER_ID`, cut to 63 bytes); a spawned
    child is enqueued by its parent."""
    labelled = db.enqueue("enqueue_one", {"by": "billing-api"})
    plain = db.enqueue("enqueue_one")
    parent = db.enqueue("fan_out", {"children": 2})
    start_worker(db, concurrency=2)
    for job in (labelled, plain, parent):
        db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,))
    made = {job: db.one("select result->>'id' from jobs.jobs where id = %s", (job,))[0] for job in (labelled, plain)}
    assert db.one("select enqueued_by from jobs.jobs where id = %s", (made[labelled],))[0] == "postgres (billing-api)"
    worker = db.one("select claimed_by from jobs.jobs where id = %s", (plain,))[0]
    application = f"pg-jobs worker {worker}".encode()[:63].decode(errors="ignore")
    assert db.one("select enqueued_by from jobs.jobs where id = %s", (made[plain],))[0] == f"postgres ({application})"
    assert db.all("select distinct enqueued_by from jobs.jobs where parent_id = %s", (parent,)) == [(f"job {parent}",)]


def test_a_backfill_resumes_after_its_last_finished_pass(db, start_worker):
    """26. A backfill (ctx.backfill, @ultimat3's backfill-pass and backfill-ledger) of rows 1 to
    10 in passes of 3, whose pass from row 6 fails on attempt 1: attempt 2 resumes at that pass
    (the passes before it ran once), every row is written once, and jobs.backfills lists the
    run with its 5 passes (the last, of 0 rows, ends it), 10 rows and its cursor."""
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('backfill', '100 milliseconds', 0)")
    job = db.enqueue("backfill", {"total": 10, "batch": 3, "fail_at": 6})
    start_worker(db, concurrency=1)
    db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
    assert db.one("select attempt, result from jobs.jobs where id = %s", (job,)) == (
        2, {"passes": 5, "rows": 10, "cursor": 10})
    assert db.all("select n, count(*) from conformance_rows where job_id = %s group by n order by n",
                  (job,)) == [(n, 1) for n in range(1, 11)]
    assert db.all("select step, count(*) from conformance_step_runs where job_id = %s group by step "
                  "order by step", (job,)) == [("from 0", 1), ("from 10", 1), ("from 3", 1), ("from 6", 2),
                                              ("from 9", 1)]
    assert db.one("select name, state::text, passes, rows, cursor from jobs.backfills where run_id = %s",
                  (job,)) == ("backfill", "completed", 5, 10, 10)


def test_a_superusers_worker_calls_no_code_a_less_trusted_role_owns(db, start_worker):
    """19. A function of jobs owned by a role that is not a superuser (as the SQL-only edition's
    are, by the role that ran its file), replaced by that owner with code that would make it a
    superuser: a worker started as a superuser refuses to start, naming the owner and the fix,
    and runs nothing (the job stays ready, the owner is no superuser). Checked to fail without
    the guard: with the owner check skipped, the worker started and ran the planted code."""
    owner = "owner_" + db.url.rsplit("/", 1)[1]
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(f"create role {owner} login")
        conn.execute(f"grant create on schema public to {owner}")
        conn.execute(f"alter function jobs.max_payload_size() owner to {owner}")
        conn.execute(f"alter schema jobs owner to {owner}")
    try:
        mallory = type(db)(db.dsn, db.url.replace("postgresql://postgres@", f"postgresql://{owner}@"))
        mallory.execute("create or replace function jobs.max_payload_size() returns bigint language plpgsql "
                        f"security invoker as $$ begin execute 'alter role {owner} superuser'; return 1048576; end $$")
        job = db.enqueue("noop")
        worker = start_worker(db, concurrency=1)
        assert worker.wait(timeout=30) != 0
        assert owner in worker.output() and "superuser" in worker.output()
        assert db.one("select rolsuper from pg_roles where rolname = %s", (owner,))[0] is False
        assert db.one("select state::text from jobs.jobs where id = %s", (job,))[0] == "ready"
    finally:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("alter schema jobs owner to postgres")
            conn.execute("alter function jobs.max_payload_size() owner to postgres")
            conn.execute(f"drop owned by {owner}")
            conn.execute(f"drop role {owner}")


def test_a_worker_started_before_the_server_accepts_connections_keeps_trying(db, start_worker):
    """A database error never ends the worker: with connections refused for its role at first
    (CONNECTION LIMIT 0), it retries with backoff and works once they are allowed."""
    role = "late_" + db.url.rsplit("/", 1)[1]  # roles are the cluster's: one per test database
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(f"create role {role} login connection limit 0")
        conn.execute(f"select jobs.grant_worker('{role}')")
        conn.execute(f"grant insert on conformance_rows, conformance_step_runs, conformance_aborts to {role}")
    try:
        late = type(db)(db.dsn, db.url.replace("postgresql://postgres@", f"postgresql://{role}@"))
        job = db.enqueue("noop")
        worker = start_worker(late, concurrency=1)
        time.sleep(2)
        assert worker.process.poll() is None, worker.output()
        db.execute(f"alter role {role} connection limit -1")
        try:
            db.eventually("select state::text from jobs.jobs where id = %s", "completed", args=(job,), timeout=30)
        except BaseException:
            print(worker.output())
            raise
        worker.terminate()
        assert worker.wait(timeout=15) == 0
    finally:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s", (role,))
            conn.execute(f"drop owned by {role}")
            conn.execute(f"drop role {role}")



def test_the_metrics_count_what_happened(db, start_worker):
    """13. The worker's metrics (Prometheus's text format) count each attempt by outcome: five
    completed, two retried and then two dead (two attempts each), one unknown name parked."""
    db.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('fail', '10 milliseconds', 0)")
    for _ in range(5):
        db.enqueue("noop")
    for _ in range(2):
        db.enqueue("fail", max_attempts=2)
    db.enqueue("no_such_job")
    start_worker(db, concurrency=2, metrics_port=METRICS_PORT)
    db.eventually("select count(*) from jobs.jobs where state in ('completed', 'dead')", 7, timeout=30)
    db.eventually("select count(*) from jobs.jobs where name = 'no_such_job' and state = 'suspended'", 1)
    wanted = {("noop", "completed"): 5, ("fail", "retried"): 2, ("fail", "dead"): 2, ("no_such_job", "unknown_name"): 1}
    deadline = time.monotonic() + 10
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read().decode()
        counts = {(m["name"], m["outcome"]): float(m["n"]) for m in re.finditer(
            r'^jobs_total\{(?=[^}]*name="(?P<name>[^"]*)")(?=[^}]*outcome="(?P<outcome>[^"]*)")[^}]*\} (?P<n>\S+)$',
            text, re.M)}
        if all(counts.get(k) == v for k, v in wanted.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {k: counts.get(k) for k in wanted} == wanted, text


def test_a_server_restart_mid_drain_leaves_the_worker_working(restartable, start_worker):
    """5. The server restarted (fast shutdown) mid-drain: the worker does not exit, makes its
    connections again, and finishes; every job completes and its row is written once (the
    attempts the restart cut rolled back, and ran again once their 3 s leases lapsed)."""
    db, restart = restartable
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
               "'name', 'write', 'payload', jsonb_build_object('n', g))) from generate_series(1, 3000) as g))")
    worker = start_worker(db, concurrency=8, lease=3)
    db.eventually("select count(*) >= 500 from jobs.jobs where state = 'completed'", True)
    restart()
    db.eventually("select count(*) from jobs.jobs where state = 'completed'", 3000, timeout=120)
    assert worker.process.poll() is None, worker.output()
    assert db.one("select count(*), count(distinct job_id) from conformance_rows") == (3000, 3000)


def test_through_pgbouncer_with_the_producers_through_it_too(db, bouncer, start_worker):
    """12. PgBouncer in transaction pooling, sized as docs/OPERATIONS.md says: the worker
    (concurrency 4) through a pool of its own, producers through another of the same PgBouncer.
    While the worker's claims wait in the server (30 s each, as nothing comes to their queue),
    50 jobs enqueued to another queue go through and the waits are the same ones (no claim
    ended to let a producer in); then 200 enqueued one at a time are all completed, each written
    once and on its first attempt. Checked to fail with one pool of 1 for workers and producers alike: the first enqueue
    waited for the claim's wait to end, and the wait was a new one."""
    start_worker(bouncer["workers"], concurrency=4, poll=30, prepared=False)
    waiting = ("select array_agg(pid::text || '@' || query_start::text order by pid) from pg_stat_activity "
               "where datname = current_database() and query like '%%jobs.claim(%%' and state = 'active' "
               "and wait_event_type = 'Extension' and pid <> pg_backend_pid()")  # asleep in the claim
    db.eventually(f"select cardinality(({waiting})) >= 1", True)
    before = db.one(waiting)[0]
    with psycopg.connect(bouncer["producers"].dsn, autocommit=True, prepare_threshold=None) as producer:
        for n in range(50):
            producer.execute("select jobs.enqueue('write', jsonb_build_object('n', %s::int), queue => 'later')", (n,))
    assert db.one(waiting)[0] == before, "a producer got in only when a waiting claim ended"
    with psycopg.connect(bouncer["producers"].dsn, autocommit=True, prepare_threshold=None) as producer:
        for n in range(200):
            producer.execute("select jobs.enqueue('write', jsonb_build_object('n', %s::int))", (n,))
    db.eventually("select count(*) from jobs.jobs where state = 'completed'", 200, timeout=60)
    assert db.one("select count(*), count(distinct job_id) from conformance_rows") == (200, 200)
    # Each on its first attempt: no statement of the worker's failed through the pooler (a
    # statement prepared on one server connection and run on another did).
    assert db.one("select max(attempt) from jobs.jobs where state = 'completed'")[0] == 1


def test_through_pgbouncer_with_prepared_statements_left_on(db, bouncer, start_worker):
    """12b. The same PgBouncer, the worker left with its prepared statements (the library's
    default): the pooler hands its calls server connections that never prepared them, and the
    worker, told so by the server, goes on without them. 300 jobs are completed, each written
    once and on its first attempt (a claim or settle that failed that way changed nothing).
    Checked to fail (Node.js) with neither the switch-off nor the closing of a connection whose
    statement failed: the calls on that connection kept failing, and the drain stalled."""
    worker = start_worker(bouncer["workers"], concurrency=4, poll=1)
    db.execute("select jobs.enqueue('write', jsonb_build_object('n', n)) from generate_series(1, 300) as n")
    db.eventually("select count(*) from jobs.jobs where state = 'completed'", 300, timeout=60)
    assert db.one("select count(*), count(distinct job_id) from conformance_rows") == (300, 300)
    assert db.one("select max(attempt) from jobs.jobs where state = 'completed'")[0] == 1
    assert worker.process.poll() is None, worker.output()


def test_a_worker_killed_holding_jobs_it_fetched_ahead_spends_none_of_their_attempts(db, start_worker):
    """27. A worker of concurrency 1 and prefetch 20 runs a slow job and holds 20 quick ones
    fetched ahead, each on its final attempt, when it is SIGKILLed: once its 2 s lease lapses,
    the quick ones are given back, not buried, and a second worker completes each on that same
    attempt; the slow one, which had started, has used its attempt. Checked to fail (Node.js)
    with the starts marked at the claim (jobs.claim without prefetch): the 20 were buried."""
    slow = db.enqueue("sleep", {"ms": 60000}, priority=10, max_attempts=2)
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
               "'name', 'write', 'max_attempts', 1, 'payload', jsonb_build_object('n', g))) "
               "from generate_series(1, 20) as g))")
    first = start_worker(db, concurrency=1, lease=2, prefetch=20)
    db.eventually("select count(*) from jobs.jobs where state = 'running'", 21)
    db.eventually("select started_at is not null from jobs.jobs where id = %s", True, args=(slow,))
    first.kill()
    start_worker(db, concurrency=4, lease=30)
    db.eventually("select count(*) from jobs.jobs where name = 'write' and state = 'completed'", 20, timeout=60)
    assert db.one("select max(attempt), count(*) filter (where state = 'dead') from jobs.jobs where name = 'write'") \
        == (1, 0)
    assert db.one("select count(*) from conformance_rows") == (20,)
    assert db.one("select count(*) from jobs.attempts where outcome = 'not_started'") == (20,)
    db.eventually("select attempt from jobs.jobs where id = %s", 2, args=(slow,))


def test_a_stop_hands_back_the_jobs_fetched_ahead_at_once(db, start_worker):
    """28. SIGTERM to a worker of concurrency 1 and prefetch 10 that runs a slow job and holds
    10 more: the 10 are ready again at once, no attempt used, long before their 60 s leases
    would lapse, while the slow job finishes within the grace; the worker exits 0."""
    slow = db.enqueue("sleep", {"ms": 2000}, priority=10)
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'noop')) "
               "from generate_series(1, 10)))")
    worker = start_worker(db, concurrency=1, lease=60, prefetch=10, grace=20)
    db.eventually("select count(*) from jobs.jobs where state = 'running'", 11)
    worker.terminate()
    db.eventually("select count(*) from jobs.jobs where name = 'noop' and state = 'ready' and attempt = 0", 10,
                  timeout=10)
    assert worker.wait(30) == 0
    assert db.one("select state::text from jobs.jobs where id = %s", (slow,)) == ("completed",)


def test_a_drain_fetched_ahead_with_a_worker_killed_completes_every_job_once(db, start_worker):
    """29. Scenario 1 with prefetch 100: 5,000 jobs, 3 workers of concurrency 8, one SIGKILLed
    mid-run; every job completes and its write lands exactly once, none is buried (each has one
    attempt: the killed worker's jobs fetched ahead come back unused)."""
    db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
               "'name', 'write', 'max_attempts', 2, 'payload', jsonb_build_object('n', g))) "
               "from generate_series(1, 5000) as g))")
    workers = [start_worker(db, concurrency=8, lease=2, prefetch=100) for _ in range(3)]
    db.eventually("select count(*) >= 1000 from jobs.jobs where state = 'completed'", True)
    workers[0].kill()
    db.eventually("select count(*) from jobs.jobs where state = 'completed'", 5000, timeout=240)
    assert db.one("select count(*), count(distinct job_id) from conformance_rows") == (5000, 5000)


def test_a_sharded_worker_works_each_shard_and_outlives_one_stopped(shards, start_worker):
    """30. The library's sharded worker (--shard, once per shard, in shard order) over two shards,
    2,000 `write` jobs on each, concurrency 4 per shard: shard 1's server stopped once a quarter
    of its jobs are done, started again once shard 0 went on completing jobs without it; the
    worker does not exit, connects to shard 1 again and finishes. Every job completes on its
    own shard and its row is written there exactly once (the attempts the stop cut rolled back,
    and ran again once their 3 s leases lapsed); SIGTERM then ends the worker, exit 0.
    Checked to fail with the worker given shard 0 alone: shard 1's jobs were never worked."""
    dbs, server = shards
    for db in dbs:
        db.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
                   "'name', 'write', 'payload', jsonb_build_object('n', g))) from generate_series(1, 2000) as g))")
    worker = start_worker(dbs[0], concurrency=4, lease=3, shards=dbs)
    done = "select count(*) from jobs.jobs where state = 'completed'"
    dbs[1].eventually("select count(*) >= 500 from jobs.jobs where state = 'completed'", True)
    server(1, "stop")
    stopped_at = dbs[0].one(done)[0]
    dbs[0].eventually(f"select count(*) > {stopped_at} or count(*) = 2000 from jobs.jobs "
                      "where state = 'completed'", True)
    assert worker.process.poll() is None, worker.output()
    server(1, "start")
    for db in dbs:
        db.eventually(done, 2000, timeout=180)
        assert db.one("select count(*), count(distinct job_id) from conformance_rows") == (2000, 2000)
        assert db.one("select count(*) from jobs.jobs where state <> 'completed'")[0] == 0
    worker.terminate()
    assert worker.wait(60) == 0, worker.output()
