-- One line per table of pg_jobs: its row count and a digest of its rows, and the step
-- sequence's position. An upgrade and a dump and restore must leave every line as it was.
-- Columns added since 0.1.0 are left out of the digests; they are NULL (or false) in every row
-- an upgrade carries over (the last line checks the jobs'), but a running job's started_at,
-- which is its claimed_at.
select 'jobs ' || count(*) || ' ' || md5(coalesce(string_agg(r, '|' order by r), ''))
from (select (to_jsonb(t) - array['timeout', 'deadline', 'claimed_at', 'parent_id', 'close_policy', 'children_live',
                                      'tags', 'meta', 'run_timeout', 'run_deadline', 'ordering_key', 'fair_group',
                                      'enqueued_by', 'child_key', 'started_at'])::text as r from jobs.jobs t) as t;
-- (every step saved before 0.1.1 is completed; that column is kept in the digest)
select 'steps ' || count(*) || ' ' || md5(coalesce(string_agg(r, '|' order by r), ''))
from (select (to_jsonb(t) - array['started_at', 'finished_at', 'error']
              || jsonb_build_object('state', coalesce(to_jsonb(t) ->> 'state', 'completed')))::text as r
      from jobs.steps t) as t;
select 'events ' || count(*) || ' ' || md5(coalesce(string_agg(r, '|' order by r), ''))
from (select (to_jsonb(t) - 'tenant_id')::text as r from jobs.events t) as t;
select 'job_types ' || count(*) || ' ' || md5(coalesce(string_agg(r, '|' order by r), ''))
from (select (to_jsonb(t) - array['timeout', 'rate_limit', 'rate_period', 'rate_limit_per_key',
                                  'run_timeout', 'non_retryable_errors', 'key_concurrency',
                                  'when_busy'])::text as r
      from jobs.job_types t) as t;
select 'queues ' || count(*) || ' ' || md5(coalesce(string_agg(r, '|' order by r), ''))
from (select (t.queue, t.paused)::text as r from jobs.queues t
  where queue <> 'default') as t;
-- (the sequence moved from jobs to jobs_data in 0.1.1)
select 'step sequence ' || coalesce(pg_sequence_last_value(c.oid)::text, 'unused')
  from pg_class as c join pg_namespace as n on n.oid = c.relnamespace
  where c.relname = 'steps_seq_seq' and n.nspname in ('jobs', 'jobs_data');
select 'states ' || string_agg(state::text || '=' || n, ' ' order by state)
  from (select state, count(*) as n from jobs.jobs group by state) s;
select 'new columns set ' || count(*) from jobs.jobs where to_jsonb(jobs) ->> 'timeout' is not null;
