-- jobs.claim: order, batches, queues, leases, lapses and burial.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues;

select jobs.enqueue('low', queue => 'q', priority => 0, run_at => now() - interval '3 seconds') is not null;
select jobs.enqueue('high', queue => 'q', priority => 10) is not null;
select jobs.enqueue('old', queue => 'q', priority => 0, run_at => now() - interval '1 hour') is not null;
select jobs.enqueue('later', queue => 'q', run_at => now() + interval '1 hour') is not null;
select jobs.enqueue('elsewhere', queue => 'r') is not null;

-- Highest priority first, then oldest run_at; a future job is not handed out.
select name, attempt, claim > 0 as token, lease_expires_at > now() as leased from jobs.claim('w1', array['q'], 10);
select count(*) from jobs.claim('w1', array['q'], 10);
select name, claimed_by, state from jobs.jobs where state = 'running' order by name;

-- A delayed job whose time has come is claimable without any promoter.
update jobs.jobs set run_at = now() - interval '1 second' where name = 'later';
select name, attempt from jobs.claim('w2', array['q', 'r'], 10) order by name;

-- The lease: from the argument, else the job type, else 30 seconds.
truncate jobs_data.jobs;
insert into jobs.job_types (name, lease) values ('slow', '10 minutes');
select jobs.enqueue('slow') is not null, jobs.enqueue('fast') is not null, jobs.enqueue('given') is not null;
select name, lease_expires_at - now() between interval '9 minutes' and interval '11 minutes' as ten_minutes
from jobs.claim('w', max_jobs => 1) where name = 'slow';
select name, lease_expires_at - now() between interval '25 seconds' and interval '35 seconds' as thirty_seconds
from jobs.claim('w', max_jobs => 1);
select name, lease_expires_at - now() between interval '50 minutes' and interval '70 minutes' as one_hour
from jobs.claim('w', lease => '1 hour');
-- One claim of several names, in one statement: each job its own name's lease.
truncate jobs_data.jobs;
select jobs.enqueue('slow') is not null, jobs.enqueue('fast') is not null;
select name, floor(extract(epoch from lease_expires_at - now())) as lease_seconds
from jobs.claim('w', max_jobs => 2) order by name;

-- A lapsed lease with attempts left is claimed again as a new attempt, with a greater token.
truncate jobs_data.jobs;
select jobs.enqueue('flaky', max_attempts => 2) is not null;
select id, claim as first_claim from jobs.claim('w1') \gset
update jobs.jobs set lease_expires_at = now() - interval '1 second', lease_scan_at = now() - interval '1 second' where id = :'id';
select attempt, claim > :first_claim as greater_token from jobs.claim('w2');
-- The first worker can change nothing now.
select jobs.complete(:'id', :first_claim);
select jobs.heartbeat(:'id', :first_claim);
-- A lapse on the final attempt is buried by the claim, never handed out.
update jobs.jobs set lease_expires_at = now() - interval '1 second', lease_scan_at = now() - interval '1 second' where id = :'id';
select count(*) from jobs.claim('w3');
select state, attempt, last_error, finished_at is not null as finished from jobs.jobs where id = :'id';

-- A burial takes no slot of the batch: a claim of one job that finds a lapsed final attempt
-- first buries it and still hands out the ready job behind it, under a limit too.
truncate jobs_data.jobs;
insert into jobs.job_types (name, concurrency) values ('limited', 5);
select count(*) from jobs.enqueue_batch('[{"name": "last_try", "max_attempts": 1, "priority": 9},
  {"name": "limited", "max_attempts": 1, "priority": 9, "queue": "lim"}]');
select count(*) from jobs.claim('w1', array['default', 'lim'], 2);
update jobs.jobs set lease_expires_at = now() - interval '1 second',
  lease_scan_at = now() - interval '1 second' where state = 'running';
select count(*) from jobs.enqueue_batch('[{"name": "behind"}, {"name": "limited", "queue": "lim"}]');
select name from jobs.claim('w2', max_jobs => 1);
select name from jobs.claim('w2', array['lim'], max_jobs => 1);
select name, queue, state, attempt from jobs.jobs order by queue, name, state;
delete from jobs.job_types where name = 'limited';

-- One call over several names: each job gets its own name's lease, and a lapse on the final
-- attempt in the batch is buried as its own type says while the others are claimed.
truncate jobs_data.jobs;
insert into jobs.job_types (name, lease, dead_letter) values ('slow_quiet', '20 minutes', false);
select count(*) from jobs.enqueue_batch('[{"name": "slow"}, {"name": "fast"}, {"name": "slow_quiet"},
  {"name": "slow_quiet", "max_attempts": 1, "priority": 5}]');
select name from jobs.claim('w', max_jobs => 1);
update jobs.jobs set lease_expires_at = now() - interval '1 second',
  lease_scan_at = now() - interval '1 second' where state = 'running';
select name, attempt, round(extract(epoch from lease_expires_at - now())) as lease_seconds
from jobs.claim('w', max_jobs => 10) order by name;
select name, state, attempt, lease is null as no_lease, finished_at is not null as finished
from jobs.jobs order by name, state;

-- A paused queue hands out nothing.
select jobs.enqueue('waits') is not null;
select jobs.pause_queue('default');
select count(*) from jobs.claim('w');
select jobs.resume_queue('default');
select name from jobs.claim('w');

-- Across queues a batch takes the highest priorities of them all, in claim order, and a queue
-- named twice is read once.
truncate jobs_data.jobs;
select count(*) from jobs.enqueue_batch('[{"name": "a1", "queue": "a", "priority": 1},
  {"name": "a9", "queue": "a", "priority": 9}, {"name": "b5", "queue": "b", "priority": 5},
  {"name": "b7", "queue": "b", "priority": 7}]');
select name, attempt from jobs.claim('w', array['a', 'b', 'a'], 3);
select name, state from jobs.jobs order by name;

-- Bad input: a clear error, and nothing changes.
select jobs.enqueue('untouched') is not null;
select jobs.claim(null);
\echo :LAST_ERROR_SQLSTATE
select jobs.claim('w', array[]::text[]);
\echo :LAST_ERROR_SQLSTATE
select jobs.claim('w', array['default', null]);
\echo :LAST_ERROR_SQLSTATE
select jobs.claim('w', max_jobs => 0);
\echo :LAST_ERROR_SQLSTATE
select jobs.claim('w', lease => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
select state, attempt from jobs.jobs where name = 'untouched';

-- A claim from a queue no job was ever enqueued to (a typo) warns, once per connection.
select count(*) from jobs.claim('w', array['Default']);
select count(*) from jobs.claim('w', array['Default']);
select count(*) from jobs.claim('w', array['default']);

-- A claim may wait for work (wait => ...). Without preload there is no shared memory and the
-- wait polls: a job present is claimed at once, an empty queue answers nothing at the deadline.
select jobs.enqueue('w1', queue => 'waitq') is not null;
select name from jobs.claim('w', array['waitq'], wait => '10 s');
select count(*) from jobs.claim('w', array['waitq'], wait => '200 ms');
select count(*) from jobs.claim('w', array['waitq'], wait => '2 hours');
select count(*) from jobs.claim('w', array['waitq'], wait => '-1 s');
