// Every statement the library sends to pg_jobs, in one place (as procrastinate's queries.sql
// and graphile-worker's sql/ hold theirs): the engine decides, these only call it.

/** The columns of a claimed job (jobs.claimed_job), as the worker reads them (by position:
 * context.ts's ClaimedRow): times in ms. */
export const CLAIMED_COLUMNS =
  'id, run_id, name, queue, payload, attempt, max_attempts, claim::text as claim, '
  + "date_part('epoch', deadline) * 1000 as deadline_ms, tenant_id, parent_id, priority, "
  + "date_part('epoch', enqueued_at) * 1000 as enqueued_ms, last_error, tags, meta, "
  + "date_part('epoch', deadline - clock_timestamp()) * 1000 as time_left_ms, buried";

// The worker's claims and settles.
export const CLAIM = `select ${CLAIMED_COLUMNS} from jobs.claim($1, $2, $3, $4::interval, $5::interval, $6)`;
export const COMPLETE_AND_CLAIM = `select ${CLAIMED_COLUMNS} from `
  + 'jobs.complete_and_claim($1::uuid[], $2::bigint[], $3, $4, $5, $6::interval, $7::jsonb[], $8)';
// A prefetching worker's: claims ahead of its free slots, its settles carry the starts of the
// jobs it took from its local queue since the last one, and it gives back what it will not run.
export const CLAIM_AHEAD = `select ${CLAIMED_COLUMNS} from jobs.claim($1, $2, $3, $4::interval, $5::interval, $6, true)`;
export const SETTLE_AHEAD = `select ${CLAIMED_COLUMNS} from `
  + 'jobs.complete_and_claim($1::uuid[], $2::bigint[], $3, $4, $5, $6::interval, $7::jsonb[], $8, true, '
  + '$9::uuid[], $10::bigint[])';
export const MARK_STARTED = 'select jobs.mark_started($1::uuid[], $2::bigint[]) as started';
export const HAND_BACK = 'select jobs.hand_back($1::uuid[], $2::bigint[]) as handed_back';
export const COMPLETE_MANY = 'select id::text, landed from jobs.complete_many($1::uuid[], $2::bigint[], $3::jsonb[])';
export const COMPLETE = 'select jobs.complete($1, $2::bigint, $3::jsonb) as landed';
/** A failure: the engine decides the retry (backoff, or `retry_at`) or the burial, and
 * whether the error's names are among its job type's non-retryable errors. */
export const FAIL = 'select jobs.fail($1, $2::bigint, $3, $4, $5, $6::text[], $7) as outcome';
export const SNOOZE = 'select jobs.snooze($1, $2::bigint, $3)';
export const SNOOZE_NOW = 'select jobs.snooze($1, $2::bigint, clock_timestamp())';
export const SNOOZE_FOR = 'select jobs.snooze($1, $2::bigint, clock_timestamp() + $3::interval)';
export const HEARTBEATS = 'select h.id::text, jobs.heartbeat(h.id, h.claim) as until '
  + 'from unnest($1::uuid[], $2::bigint[]) as h(id, claim)';
/** At a stop, the worker's own claims still waiting in the server (never a handler's query). */
export const CANCEL_WAITING_CLAIMS = 'select pg_cancel_backend(a.pid) from pg_stat_activity as a '
  + "where a.pid = any($1::int[]) and a.state = 'active' and a.query like '%jobs.claim(%'";
export const MAX_PAYLOAD_SIZE = 'select jobs.max_payload_size() as size';
/** What the worker logs at its start, and whether pg_jobs is there at all. */
export const SERVER = "select current_setting('server_version') as version, "
  // NULL where the role may not read the setting (pg_read_all_settings)
  + "(select setting ~ 'pg_jobs' from pg_settings where name = 'shared_preload_libraries') as preloaded, "
  // the extension (or its pg_tle form), or the SQL-only edition's file (docs/EDITIONS.md)
  + "(exists (select from pg_extension where extname = 'pg_jobs')"
  + " or to_regnamespace('jobs_config') is not null) as installed";

// A handler's durable calls (ctx).
export const START_STEP = 'select done, output from jobs.start_step($1, $2::bigint, $3)';
export const GET_STEPS = 'select step, state, output from jobs.get_steps($1)';
export const FAIL_STEP = 'select jobs.fail_step($1, $2::bigint, $3, $4)';
export const SAVE_STEP = 'select jobs.save_step($1, $2, $3, $4::jsonb)';
export const AWAIT_EVENT = 'select status, payload from jobs.await_event($1, $2, $3, $4, $5::interval)';
export const SPAWN = 'select id, deduped from jobs.spawn($1, $2, $3::jsonb)';
export const AWAIT_CHILDREN = 'select status, children from jobs.await_children($1, $2)';
export const SLEEP = 'select jobs.sleep($1, $2, $3, $4) as slept';

// Producers and operators.
export const ENQUEUE_BATCH = 'select id, run_id, deduped, action from jobs.enqueue_batch($1::jsonb) order by ordinal';
export const GET_JOBS = 'select * from jobs.get_jobs($1::uuid[])';
export const WAIT_FOR_JOB = 'select * from jobs.wait_for_job($1::uuid, $2::interval)';
export const CANCEL = 'select jobs.cancel($1::uuid)';
export const REQUEUE = 'select jobs.requeue($1::uuid, $2::text)';
export const PROMOTE = 'select jobs.promote($1::uuid)';
export const DELETE = 'select jobs.delete($1::uuid) as deleted';
