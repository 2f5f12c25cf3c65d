-- Run-time limits: jobs.job_types.timeout and timeout in enqueue specs. The clock is moved
-- (pg_jobs.clock_offset), not waited for.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types;
insert into jobs.job_types (name, timeout, backoff_base, jitter, max_attempts)
values ('hangs', '1 minute', '10 seconds', 0, 2);

select jobs.enqueue('hangs') is not null;
-- The claim answers the attempt's deadline; the lease (30 s) ends before it.
select id, claim, deadline as first_deadline from jobs.claim('w1') \gset
select deadline - now() between interval '55 seconds' and interval '65 seconds' as one_minute,
       lease_expires_at < deadline as lease_within
from jobs.jobs;
-- A heartbeat extends the lease up to the deadline and no further, and answers that.
select jobs.heartbeat(:'id', :claim, lease => '10 minutes') = :'first_deadline' as capped_at_deadline;
select lease_expires_at = deadline as lease_is_deadline from jobs.jobs;

-- Past the deadline the job is held no more: every write with its token is refused, however
-- its heartbeat keeps trying.
set pg_jobs.clock_offset = '61s';
select jobs.heartbeat(:'id', :claim) as heartbeat, jobs.complete(:'id', :claim) as completed;
select jobs.fail(:'id', :claim, 'too late') as failed;
\set VERBOSITY sqlstate
select jobs.save_step(:'id', :claim, 'step', '{}');
select jobs.assert_claim(:'id', :claim);
\set VERBOSITY default
select state, attempt from jobs.jobs;

-- The sweep settles it as a failed attempt, retried after the backoff, and says why.
select task, affected from jobs.sweep() where task = 'lapsed_leases';
select state, attempt, last_error, run_at - jobs.clock() between interval '9 seconds' and interval '10 seconds' as backoff
from jobs.jobs;
select count(*) as not_yet from jobs.claim('w2');

-- After the backoff it runs again; on its final attempt a timeout buries it, here by the claim
-- that finds it first: the claim hands it to nobody.
set pg_jobs.clock_offset = '75s';
select id, claim as second_claim, attempt, claim <> :claim as new_token from jobs.claim('w2') \gset
\echo attempt :attempt, new token :new_token
-- Its handler hangs, and its heartbeat keeps the lease up to the deadline.
select jobs.heartbeat(:'id', :second_claim, lease => '10 minutes') is not null as beating;
set pg_jobs.clock_offset = '140s';
select count(*) as handed_out from jobs.claim('w3');
select state, attempt, last_error, finished_at is not null as finished from jobs.jobs;

-- A claim settles a timed-out attempt with attempts left the same way: put off until the
-- backoff, not handed out at once. (A lease that lapsed before the deadline, its worker gone,
-- is a lapse, not a timeout: it runs again at once.)
reset pg_jobs.clock_offset;
truncate jobs_data.jobs;
update jobs.job_types set max_attempts = 3 where name = 'hangs';
select jobs.enqueue('hangs') is not null;
select id, claim from jobs.claim('w1') \gset
select jobs.heartbeat(:'id', :claim, lease => '10 minutes') is not null as beating;
set pg_jobs.clock_offset = '61s';
select count(*) as handed_out from jobs.claim('w2');
select state, attempt, last_error from jobs.jobs;
reset pg_jobs.clock_offset;

-- A job's own timeout (an enqueue spec's) wins over its type's; no timeout, no deadline.
truncate jobs_data.jobs;
select count(*) from jobs.enqueue_batch('[{"name": "hangs", "timeout": "5 seconds"}, {"name": "free"}]');
select name, deadline is not null as has_deadline,
       coalesce(deadline - now() between interval '4 seconds' and interval '6 seconds', false) as five_seconds,
       lease_expires_at - now() between interval '4 seconds' and interval '31 seconds' as leased
from jobs.claim('w', max_jobs => 2) order by name;
select name, timeout from jobs.jobs order by name;

-- Refusals, and nothing written.
truncate jobs_data.jobs;
select jobs.enqueue_batch('[{"name": "x", "timeout": "0 seconds"}]');
select jobs.enqueue_batch('[{"name": "x", "timeout": "8 days"}]');
select jobs.enqueue_batch('[{"name": "x", "timeout": "soon"}]');
insert into jobs.job_types (name, timeout) values ('y', '-1 minute');
select count(*) as jobs from jobs.jobs;
select count(*) as job_types from jobs.job_types;
truncate jobs_data.jobs, jobs_data.job_types;
