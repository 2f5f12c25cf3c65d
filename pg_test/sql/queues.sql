-- Operating queues: queue_stats, pause_queue / resume_queue, concurrency limits.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps, jobs_data.events;

-- Enqueue registers its queue; queue_stats counts per state and ages the oldest ready job.
select count(*) from jobs.enqueue_batch('[
  {"name": "a", "queue": "mail", "run_at": "2000-01-01T00:00:00Z"},
  {"name": "a", "queue": "mail", "priority": 5},
  {"name": "a", "queue": "mail"},
  {"name": "b", "queue": "mail", "run_at": "2999-01-01T00:00:00Z"},
  {"name": "c", "queue": "reports"}]');
select queue, paused from jobs.queues order by queue;
select id, claim from jobs.claim('w', array['reports']) \gset
select jobs.complete(:'id', :claim);
select count(*) from jobs.claim('w', array['mail']);
select queue, paused, ready, delayed, running, suspended, completed, failed, dead, cancelled,
       oldest_ready_age > interval '20 years' as oldest_is_from_2000
from jobs.queue_stats order by queue;

-- A paused queue hands out nothing; resumed, it does.
select jobs.pause_queue('mail');
select queue, paused from jobs.queue_stats where queue = 'mail';
select count(*) from jobs.claim('w', array['mail'], 10);
select jobs.resume_queue('mail');
select count(*) from jobs.claim('w', array['mail'], 10);
select jobs.pause_queue('nope');
\echo :LAST_ERROR_SQLSTATE
select jobs.resume_queue(null);
\echo :LAST_ERROR_SQLSTATE
select count(*) as paused_queues from jobs.queues where paused;

-- concurrency: at most 2 jobs of this name run at once, across every claimer. The jobs held
-- back are not charged an attempt.
truncate jobs_data.jobs;
insert into jobs.job_types (name, concurrency) values ('limited', 2);
select count(*) from jobs.enqueue_batch('[{"name": "limited"}, {"name": "limited"}, {"name": "limited"},
                                          {"name": "free"}, {"name": "limited"}]');
select name, attempt from jobs.claim('w', max_jobs => 10) order by name;
select name, state, attempt, count(*) from jobs.jobs group by 1, 2, 3 order by 1, 2;
select count(*) from jobs.claim('w', max_jobs => 10);
select id, claim from jobs.jobs where name = 'limited' and state = 'running' limit 1 \gset
select jobs.complete(:'id', :claim);
select name, attempt from jobs.claim('w', max_jobs => 10);

-- concurrency_key: jobs sharing a key run one at a time; other keys and no key are free.
truncate jobs_data.jobs, jobs_data.job_types;
select count(*) from jobs.enqueue_batch('[
  {"name": "sync", "concurrency_key": "acct-1", "payload": {"n": 1}},
  {"name": "sync", "concurrency_key": "acct-1", "payload": {"n": 2}},
  {"name": "sync", "concurrency_key": "acct-2", "payload": {"n": 3}},
  {"name": "sync", "payload": {"n": 4}}]');
select payload from jobs.claim('w', max_jobs => 10) order by payload::text;
select count(*) from jobs.claim('w', max_jobs => 10);
select payload, state, attempt from jobs.jobs where state = 'ready';
