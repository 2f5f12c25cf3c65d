"""Every statement the worker and a handler's context send to pg_jobs, in one place (as
procrastinate's queries and graphile-worker's sql/ hold theirs): the engine decides, these only
call it. Producers' and operators' calls stay beside their functions (enqueue.py, status.py,
operate.py), one statement each."""

#: The columns of a claimed job (jobs.claimed_job), Job's fields first and in its order, as
#: context.claimed_row reads them: then the seconds left to the deadline by the server's clock,
#: and whether the claim buried it.
CLAIMED_COLUMNS = (
    "id, run_id, name, queue, payload, attempt, max_attempts, claim, deadline, tenant_id, parent_id, "
    "priority, enqueued_at, last_error, tags, meta, "
    "extract(epoch from deadline - clock_timestamp())::float8 as time_left, buried"
)

# The worker's claims and settles.
CLAIM = f"select {CLAIMED_COLUMNS} from jobs.claim(%s, %b, %s, %s, %s, %s)"
COMPLETE_AND_CLAIM = (f"select {CLAIMED_COLUMNS} from "
                      "jobs.complete_and_claim(%b, %b, %s, %b, %s, %s, %s::jsonb[], %s)")
# A prefetching worker's: claims ahead of its free slots, its settles carry the starts of the
# jobs it took from its local queue since the last one, and it gives back what it will not run.
CLAIM_AHEAD = f"select {CLAIMED_COLUMNS} from jobs.claim(%s, %b, %s, %s, %s, %s, true)"
SETTLE_AHEAD = (f"select {CLAIMED_COLUMNS} from "
                "jobs.complete_and_claim(%b, %b, %s, %b, %s, %s, %s::jsonb[], %s, true, %b, %b)")
MARK_STARTED = "select jobs.mark_started(%b, %b)"
HAND_BACK = "select jobs.hand_back(%s::uuid[], %s::bigint[])"
COMPLETE_MANY = "select id, landed from jobs.complete_many(%b, %b, %s::jsonb[])"
COMPLETE = "select jobs.complete(%s, %s, %s)"
#: A failure: the engine decides the retry (backoff, or retry_at) or the burial, and whether
#: the error's names are among its job type's non-retryable errors.
FAIL = "select jobs.fail(%s, %s, %s, %s, %s, %s, %s)"
#: A job whose result cannot be settled: failed for good.
FAIL_FOR_GOOD = "select jobs.fail(%s, %s, %s, null, false)"
SNOOZE = "select jobs.snooze(%s, %s, %s)"
SNOOZE_NOW = "select jobs.snooze(%s, %s, clock_timestamp())"
SNOOZE_FOR = "select jobs.snooze(%s, %s, clock_timestamp() + %s)"
HEARTBEATS = "select h.id, jobs.heartbeat(h.id, h.claim) from unnest(%s::uuid[], %s::bigint[]) as h(id, claim)"
#: At a stop, the worker's own claims still waiting in the server (never a handler's query).
CANCEL_WAITING_CLAIMS = ("select pg_cancel_backend(a.pid) from pg_stat_activity as a where a.pid = any(%s) "
                         "and a.state = 'active' and a.query like '%%jobs.claim(%%'")
MAX_PAYLOAD_SIZE = "select jobs.max_payload_size()"
#: What the worker logs at its start, and whether pg_jobs is there at all.
SERVER = ("select current_setting('server_version'), "
          "(select setting ~ 'pg_jobs' from pg_settings where name = 'shared_preload_libraries'), "
          # the extension (or its pg_tle form), or the SQL-only edition's file
          "exists (select from pg_extension where extname = 'pg_jobs') "
          "or to_regnamespace('jobs_config') is not null")

# A handler's durable calls (ctx).
START_STEP = "select done, output from jobs.start_step(%s, %s, %s)"
GET_STEPS = "select step, state, output from jobs.get_steps(%s)"
FAIL_STEP = "select jobs.fail_step(%s, %s, %s, %s)"
SAVE_STEP = "select jobs.save_step(%s, %s, %s, %s)"
AWAIT_EVENT = "select status, payload from jobs.await_event(%s, %s, %s, %s, %s)"
SPAWN = "select id, deduped from jobs.spawn(%s, %s, %s)"
SLEEP = "select jobs.sleep(%s, %s, %s, %s)"
AWAIT_CHILDREN = "select status, children from jobs.await_children(%s, %s)"
