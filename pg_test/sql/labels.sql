-- Tags and metadata on a job, and a deadline for its whole run (run_timeout). The clock is
-- moved (pg_jobs.clock_offset), not waited for.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.attempts;

-- Tags and meta go in with the job, come out of the claim and of jobs.get_job, and stay
-- through a retry.
select id as tagged from jobs.enqueue('import', '{"file": "a.csv"}', tags => array['customer:42', 'import'],
  meta => '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}') \gset
select id as untagged from jobs.enqueue('import', '{"file": "b.csv"}') \gset
select name, tags, meta from jobs.claim('w1', max_jobs => 2) order by tags nulls last;
select id, claim from jobs.jobs where id = :'tagged' \gset
select jobs.fail(:'id', :claim, 'retry me', retry_at => jobs.clock()) as failed;
select tags, meta->>'traceparent' as traceparent from jobs.get_job(:'tagged');
select tags, meta from jobs.claim('w2');
-- Found by tag, through jobs_tags_idx (only tagged jobs are in it).
set enable_seqscan = off;
select count(*) as customer_42 from jobs.jobs where tags @> array['customer:42'];
explain (costs off) select id from jobs.jobs where tags @> array['customer:42'];
reset enable_seqscan;
-- In a batch, and an empty array is no tags.
select count(*) as enqueued from jobs.enqueue_batch(
  '[{"name": "b", "tags": ["x", "y"], "meta": {"k": 1}}, {"name": "b", "tags": []}]');
select tags, meta from jobs.jobs where name = 'b' order by id;

-- Bad tags and meta are refused, and nothing lands.
select count(*) as before from jobs.jobs \gset
select jobs.enqueue('x', tags => array['a', null]);
select jobs.enqueue('x', tags => array['']);
select jobs.enqueue('x', tags => array_fill('t'::text, array[21]));
select jobs.enqueue('x', tags => array[repeat('t', 101)]);
select jobs.enqueue('x', meta => '[1, 2]');
select jobs.enqueue('x', meta => jsonb_build_object('big', repeat('m', 9000)));
select jobs.enqueue_batch('[{"name": "x", "tags": "one"}]');
select jobs.enqueue_batch('[{"name": "x", "tags": ["ok"]}, {"name": "x", "meta": "text"}]');
select count(*) = :before as unchanged from jobs.jobs;

-- A run deadline: from enqueue, or the job type's. Every attempt's deadline is capped at it.
truncate jobs_data.jobs, jobs_data.attempts;
insert into jobs.job_types (name, run_timeout, max_attempts, backoff_base, jitter, timeout)
values ('slow', '10 minutes', 5, '1 second', 0, '1 hour');
select id as typed from jobs.enqueue('slow') \gset
select id as own from jobs.enqueue('slow', run_timeout => '2 minutes') \gset
select id as plain from jobs.enqueue('other') \gset
select case id when :'typed' then 'typed' when :'own' then 'own' else 'plain' end as job,
       run_timeout, run_deadline - enqueued_at as until_deadline
from jobs.jobs order by run_timeout nulls last;
select id, claim, deadline from jobs.claim('w1', max_jobs => 3) where id = :'own' \gset
select deadline = (select run_deadline from jobs.jobs where id = :'own') as capped_at_run,
       jobs.heartbeat(:'id', :claim, lease => '1 hour') = deadline as heartbeat_capped
from jobs.jobs where id = :'own';

-- Past the run's deadline, the running attempt can change nothing, and the sweep buries the
-- job whatever attempts are left.
set pg_jobs.clock_offset = '121s';
select jobs.complete(:'id', :claim) as completed;
select task, affected from jobs.sweep() where task in ('lapsed_leases', 'run_timeouts');
select state, attempt, max_attempts, last_error, finished_at is not null as finished
from jobs.jobs where id = :'own';
select outcome, error from jobs.attempts where job_id = :'own';

-- A waiting job (a retry put off, a snooze, an event wait) is buried at its run's deadline
-- by the sweep, or by the claim that finds it due.
reset pg_jobs.clock_offset;
truncate jobs_data.jobs, jobs_data.attempts;
select id as retrying from jobs.enqueue('slow', run_timeout => '1 minute') \gset
select id as parked from jobs.enqueue('slow', run_timeout => '1 minute') \gset
select id as due from jobs.enqueue('slow', run_timeout => '1 minute', run_at => jobs.clock() + interval '30 seconds') \gset
select id as ok from jobs.enqueue('slow', run_timeout => '1 hour') \gset
select id, claim from jobs.claim('w1') where id = :'retrying' \gset
select jobs.fail(:'id', :claim, 'later', retry_at => jobs.clock() + interval '1 day') as failed;
select id, claim from jobs.claim('w1') where id = :'parked' \gset
select status from jobs.await_event(:'id', :claim, 'never', timeout => '1 day');
set pg_jobs.clock_offset = '61s';
-- The claim buries the due one (a burial takes no slot) and hands out the job still in time.
select id = :'ok' as in_time from jobs.claim('w2');
select task, affected from jobs.sweep() where task = 'run_timeouts';
select case id when :'retrying' then 'retrying' when :'parked' then 'parked' when :'due' then 'due'
       else 'ok' end as job, state, attempt, last_error
from jobs.jobs order by 1;
select count(*) as attempts_rows from jobs.attempts where job_id in (:'parked', :'due');

-- A ready job whose run ended before any claim found it: the claim buries it (no attempt
-- ended, none taken) and does not hand it out; the next claim hands out the job behind it.
reset pg_jobs.clock_offset;
select id as late from jobs.enqueue('slow', run_timeout => '1 minute', priority => 9,
                                    queue => 'late') \gset
select id as next from jobs.enqueue('slow', queue => 'late') \gset
set pg_jobs.clock_offset = '61s';
select count(*) as handed_out from jobs.claim('w3', array['late']);
select state, attempt, last_error from jobs.jobs where id = :'late';
select id = :'next' as next_handed_out from jobs.claim('w3', array['late']);

-- A requeue starts a new run, with a new deadline.
select jobs.requeue(:'due') as requeued;
select state, run_deadline - jobs.clock() between interval '59 seconds' and interval '61 seconds' as new_deadline
from jobs.jobs where id = :'due';
reset pg_jobs.clock_offset;

-- Bad run timeouts are refused, and nothing lands.
select count(*) as before from jobs.jobs \gset
select jobs.enqueue('x', run_timeout => '0');
select jobs.enqueue('x', run_timeout => '400 days');
select jobs.enqueue_batch('[{"name": "x", "run_timeout": "soon"}]');
select count(*) = :before as unchanged from jobs.jobs;
\set VERBOSITY terse
insert into jobs.job_types (name, run_timeout) values ('neg', '-1 minute');
