-- Rate limits (jobs.job_types.rate_limit per rate_period, per name or per name and key), and
-- no head-of-line blocking: a claim looks past candidates a limit holds back to fill its batch.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.rate_starts;
insert into jobs.job_types (name, rate_limit, rate_period) values ('api', 3, '1 minute');

-- Five 'api' jobs ahead of two others: the claim starts three 'api' jobs and, past the two
-- held back, the others.
select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'api', 'priority', 10))
                                         from generate_series(1, 5)));
select count(*) from jobs.enqueue_batch('[{"name": "other"}, {"name": "other"}]');
select name, count(*) from jobs.claim('w', max_jobs => 10) group by name order by name;
-- Held back: still ready, no attempt charged.
select name, state, attempt, count(*) from jobs.jobs group by 1, 2, 3 order by 1, 2;
-- Within the minute, nothing more starts, even with the first three finished.
select count(*) from (select jobs.complete(id, claim) from jobs.jobs where state = 'running') as c;
select count(*) as within_the_window from jobs.claim('w', max_jobs => 10);
-- A minute on, the window has room again.
set pg_jobs.clock_offset = '61s';
select name, attempt from jobs.claim('w', max_jobs => 10) order by name;
reset pg_jobs.clock_offset;
select count(*) as starts_recorded from jobs_data.rate_starts;  -- the last window's two

-- Per key: rate_limit_per_key counts each concurrency_key apart (a per-customer quota).
truncate jobs_data.jobs, jobs_data.rate_starts;
insert into jobs.job_types (name, rate_limit, rate_period, rate_limit_per_key)
values ('per_customer', 2, '1 hour', true);
select count(*) from jobs.enqueue_batch((
  select jsonb_agg(jsonb_build_object('name', 'per_customer', 'concurrency_key', k))
  from unnest(array['acme', 'acme', 'acme', 'globex']) as k));
-- A concurrency_key also runs one job at a time per key: complete each before the next.
select concurrency_key, count(*) from (
  select j.concurrency_key, jobs.complete(c.id, c.claim)
  from jobs.claim('w', max_jobs => 10) as c join jobs.jobs as j on j.id = c.id) as s
group by 1 order by 1;
select concurrency_key, count(*) from (
  select j.concurrency_key, jobs.complete(c.id, c.claim)
  from jobs.claim('w', max_jobs => 10) as c join jobs.jobs as j on j.id = c.id) as s
group by 1 order by 1;
select count(*) as acme_over_its_quota from jobs.claim('w', max_jobs => 10);
select concurrency_key, state, count(*) from jobs.jobs group by 1, 2 order by 1, 2;

-- Concurrency limits no longer block the head of a queue: with one 'serial' job running and
-- more of them first in line, a claim of one job gets the job behind them.
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.rate_starts;
insert into jobs.job_types (name, concurrency) values ('serial', 1);
select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'serial', 'priority', 10))
                                         from generate_series(1, 3)));
select count(*) from jobs.enqueue_batch('[{"name": "free"}]');
select name from jobs.claim('w');
select name from jobs.claim('w');
select name from jobs.claim('w');
-- The same for a concurrency_key.
truncate jobs_data.jobs;
select count(*) from jobs.enqueue_batch('[{"name": "k", "concurrency_key": "acct", "priority": 10},
                                          {"name": "k", "concurrency_key": "acct", "priority": 10},
                                          {"name": "free"}]');
select name from jobs.claim('w');
select name from jobs.claim('w');
select name from jobs.claim('w');

-- Refusals, and nothing written.
insert into jobs.job_types (name, rate_limit) values ('half', 5);
insert into jobs.job_types (name, rate_limit, rate_period) values ('zero', 0, '1 minute');
insert into jobs.job_types (name, rate_limit, rate_period) values ('long', 5, '2 days');
select count(*) as job_types from jobs.job_types;
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.rate_starts;
