-- Prefetch: a worker claims jobs ahead of its free slots (jobs.claim's prefetch), marks each
-- started when its handler begins (jobs.mark_started), and gives back what it will not run
-- (jobs.hand_back). A prefetched job that never started uses no attempt when its lease lapses,
-- even on its final attempt; a started one is a running attempt like any other. The clock is
-- moved, not waited for.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.attempts, jobs_data.job_types;
insert into jobs.job_types (name, max_attempts, timeout) values ('once', 1, '10 minutes');

-- Held, not started: the attempt is counted, but no timeout runs yet; the deadline answered is
-- the one a start now would get.
select count(*) from jobs.enqueue_batch('[{"name": "once"}, {"name": "once"}]');
select attempt, deadline - now() > interval '9 minutes' as answered_deadline
from jobs.claim('w1', max_jobs => 2, lease => '10 seconds', prefetch => true);
select state, attempt, started_at is null as unstarted, deadline is null as no_deadline from jobs.jobs;

-- Its lease lapses (its worker died): the sweep gives both back, no attempt used, though it
-- was the final one; jobs.attempts says so.
set pg_jobs.clock_offset = '11s';
select task, affected from jobs.sweep() where task = 'lapsed_leases';
select state, attempt, last_error from jobs.jobs;
select attempt, worker, outcome from jobs.attempts;

-- Claimed ahead again and lapsed: the claim that finds them gives them back and hands them
-- out, on the same attempt.
reset pg_jobs.clock_offset;
select count(*) as prefetched from jobs.claim('w2', max_jobs => 2, lease => '10 seconds', prefetch => true);
set pg_jobs.clock_offset = '11s';
select name, attempt, max_attempts, last_error from jobs.claim('w3', max_jobs => 2, lease => '10 seconds');
reset pg_jobs.clock_offset;
select outcome, count(*) from jobs.attempts group by outcome;

-- Started: from then on its attempt is used, its timeout counts, and a lapse on the final
-- attempt buries it.
truncate jobs_data.jobs, jobs_data.attempts;
select jobs.enqueue('once') is not null;
select id, claim from jobs.claim('w1', lease => '10 seconds', prefetch => true) \gset
select jobs.mark_started(array[:'id']::uuid[], array[:claim]) as started;
select jobs.mark_started(array[:'id']::uuid[], array[:claim]) as started_again;
select started_at is not null as started, deadline - now() > interval '9 minutes' as deadline_set,
       lease_expires_at <= deadline as lease_capped from jobs.jobs;
set pg_jobs.clock_offset = '11s';
select count(*) as handed_out from jobs.claim('w2');
reset pg_jobs.clock_offset;
select state, attempt from jobs.jobs;
select outcome from jobs.attempts;

-- A stale claim starts nothing and hands nothing back.
truncate jobs_data.jobs, jobs_data.attempts;
select jobs.enqueue('once') is not null;
select id, claim from jobs.claim('w1', prefetch => true) \gset
select jobs.mark_started(array[:'id']::uuid[], array[:claim - 1]) as started,
       jobs.hand_back(array[:'id']::uuid[], array[:claim + 1]) as handed_back;
select state, attempt, started_at is null as unstarted from jobs.jobs;

-- Handed back: ready at once, in its place, no attempt used; the claim is no longer held.
select jobs.hand_back(array[:'id']::uuid[], array[:claim]) as handed_back;
select jobs.hand_back(array[:'id']::uuid[], array[:claim]) as handed_back_again;
select jobs.complete(:'id', :claim) as completed_after;
select state, attempt from jobs.jobs;

-- A job given back 3 times unstarted is charged the fourth: a handler that kills its worker
-- before the start is recorded cannot come back for ever.
truncate jobs_data.jobs, jobs_data.attempts;
select jobs.enqueue('once') is not null;
select count(*) from jobs.claim('w1', lease => '10 seconds', prefetch => true);
set pg_jobs.clock_offset = '11s';
select affected from jobs.sweep() where task = 'lapsed_leases';
reset pg_jobs.clock_offset;
select count(*) from jobs.claim('w1', lease => '10 seconds', prefetch => true);
set pg_jobs.clock_offset = '11s';
select affected from jobs.sweep() where task = 'lapsed_leases';
reset pg_jobs.clock_offset;
select count(*) from jobs.claim('w1', lease => '10 seconds', prefetch => true);
set pg_jobs.clock_offset = '11s';
select affected from jobs.sweep() where task = 'lapsed_leases';
reset pg_jobs.clock_offset;
select state, attempt from jobs.jobs;
select count(*) from jobs.claim('w1', lease => '10 seconds', prefetch => true);
set pg_jobs.clock_offset = '11s';
select affected from jobs.sweep() where task = 'lapsed_leases';
reset pg_jobs.clock_offset;
select state, attempt, last_error from jobs.jobs;
select outcome from jobs.attempts order by seq;

-- complete_and_claim marks the starts first, settles, then claims ahead; max_jobs 0 claims
-- nothing.
truncate jobs_data.jobs, jobs_data.attempts;
select count(*) from jobs.enqueue_batch('[{"name": "e"}, {"name": "e"}, {"name": "e"}]');
select id, claim from jobs.claim('w1', prefetch => true) \gset
select count(*) as claimed from jobs.complete_and_claim('{}', '{}', 'w1', max_jobs => 0, prefetch => true,
  start_ids => array[:'id']::uuid[], start_claims => array[:claim]);
select count(*) filter (where started_at is not null) as started, count(*) filter (where state = 'running') as running
from jobs.jobs;
select count(*) as claimed from jobs.complete_and_claim(array[:'id']::uuid[], array[:claim], 'w1', max_jobs => 5,
  prefetch => true);
select state, started_at is null as unstarted, count(*) from jobs.jobs group by 1, 2 order by 1;

-- Bad input is refused and changes nothing.
select jobs.mark_started(null, '{1}');
select jobs.mark_started('{}', '{1}');
select jobs.hand_back(array[null]::uuid[], '{1}');
select jobs.hand_back(array_fill(gen_random_uuid(), array[10001]), array_fill(1::bigint, array[10001]));
select state, started_at is null as unstarted, count(*) from jobs.jobs group by 1, 2 order by 1;
truncate jobs_data.jobs, jobs_data.attempts, jobs_data.job_types;
