-- jobs.publish and jobs.await_event: received, waiting, woken, timed out, memoised.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps, jobs_data.events;

-- An event published before anyone waits is received by the first waiter.
select jobs.publish('order_paid', '{"amount": 42}', key => 'order-1') is not null as published;
select jobs.enqueue('ship', max_attempts => 1, id => '00000000-0000-0000-0000-0000000000e1') is not null;
select id, claim from jobs.claim('w') \gset
select * from jobs.await_event(:'id', :claim, 'order_paid', 'order-1');
-- Memoised as a step: a newer event does not change the answer.
select jobs.publish('order_paid', '{"amount": 43}', key => 'order-1') is not null as published;
select * from jobs.await_event(:'id', :claim, 'order_paid', 'order-1');
select step, output from jobs.steps;
select jobs.complete(:'id', :claim);

-- No event yet: the job suspends (no attempt used, claim released) until it is published.
select jobs.enqueue('invoice', max_attempts => 1, id => '00000000-0000-0000-0000-0000000000e2') is not null;
select id, claim from jobs.claim('w') \gset
select * from jobs.await_event(:'id', :claim, 'approved', 'inv-7');
select state, attempt, run_at, wait_event, wait_key from jobs.jobs where id = :'id';
select jobs.complete(:'id', :claim);
select count(*) from jobs.claim('w');
-- Another key does not wake it; its own key does, in the publishing transaction.
select jobs.publish('approved', '{"by": "eve"}', key => 'inv-8') is not null as published;
select state from jobs.jobs where id = :'id';
select jobs.publish('approved', '{"by": "bob"}', key => 'inv-7') is not null as published;
select state from jobs.jobs where id = :'id';
select attempt, max_attempts, claim > :claim as new_claim from jobs.claim('w') \gset
\echo attempt :attempt of :max_attempts, new claim :new_claim
select claim from jobs.jobs where id = :'id' \gset
select * from jobs.await_event(:'id', :claim, 'approved', 'inv-7');

-- A timeout: the waiter becomes claimable when it passes, without any sweeper, and its next
-- await_event answers timed_out.
select jobs.enqueue('remind', id => '00000000-0000-0000-0000-0000000000e3') is not null;
select id, claim from jobs.claim('w') \gset
select * from jobs.await_event(:'id', :claim, 'reply', timeout => '1 hour');
select state, run_at - now() between interval '59 minutes' and interval '61 minutes' as in_an_hour
from jobs.jobs where id = :'id';
update jobs.jobs set run_at = now() - interval '1 second', wait_until = now() - interval '1 second'
where id = :'id';
select claim from jobs.claim('w') \gset
select * from jobs.await_event(:'id', :claim, 'reply');
select step, output from jobs.steps where step = 'event:reply';

-- An expired event is invisible at once, before any sweep.
select jobs.publish('flash', '{"n": 1}', ttl => '1 hour') is not null as published;
update jobs.events set expires_at = now() - interval '1 second' where name = 'flash';
select jobs.enqueue('late', id => '00000000-0000-0000-0000-0000000000e4') is not null;
select id, claim from jobs.claim('w') \gset
select * from jobs.await_event(:'id', :claim, 'flash');

-- Bad input: a clear error, and nothing changes.
select count(*) as events_before from jobs.events \gset
select jobs.publish(null);
\echo :LAST_ERROR_SQLSTATE
select jobs.publish('x', ttl => '-1 day');
\echo :LAST_ERROR_SQLSTATE
select * from jobs.await_event(:'id', :claim, 'x', timeout => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
select * from jobs.await_event(:'id', :claim + 100, 'x');
\echo :LAST_ERROR_SQLSTATE
select count(*) = :events_before as unchanged from jobs.events;

-- A key of up to 512 bytes memoises its answer too (the step is named by a digest when name
-- and key pass a step name's 200 characters).
select jobs.enqueue('waits_long', queue => 'longq') is not null as enqueued;
select id, claim from jobs.claim('w', array['longq']) \gset
select status from jobs.await_event(:'id', :claim, 'long_key', repeat('k', 500));
select jobs.publish('long_key', '{"n": 1}', key => repeat('k', 500)) is not null as published;
select id, claim from jobs.claim('w', array['longq']) \gset
select status, payload from jobs.await_event(:'id', :claim, 'long_key', repeat('k', 500));
select step like 'event#%' as digest, length(step) from jobs.steps where run_id = :'id';
