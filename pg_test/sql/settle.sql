-- heartbeat, complete, complete_many, fail, snooze, assert_claim: all fenced on the token.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues;

-- heartbeat extends a held lease; with no lease given, by the lease of the claim.
select jobs.enqueue('beat') is not null;
select id, claim from jobs.claim('w', lease => '1 hour') \gset
select jobs.heartbeat(:'id', :claim) - now() > interval '50 minutes' as extended;
select jobs.heartbeat(:'id', :claim, '5 minutes') - now() < interval '6 minutes' as shortened;
select jobs.heartbeat(:'id', :claim + 1) is null as refused_wrong_token;

-- complete lands once; the same token again changes nothing.
select jobs.complete(:'id', :claim, '{"sent": true}');
select jobs.complete(:'id', :claim, '{"sent": false}');
select jobs.heartbeat(:'id', :claim) is null as refused_after_settle;
select state, result, finished_at is not null as finished, lease_expires_at from jobs.jobs where id = :'id';

-- complete_many: each job fenced on its own token, answers in the order given.
truncate jobs_data.jobs;
select count(*) from jobs.enqueue_batch('[{"name": "m"}, {"name": "m"}, {"name": "m"}]');
select array_agg(id order by id) as ids, array_agg(claim order by id) as claims from jobs.claim('w', max_jobs => 3) \gset
select landed from jobs.complete_many(:'ids', array[(:'claims'::bigint[])[1], 999, (:'claims'::bigint[])[3]],
                                      array['{"r": 1}', null, '{"r": 3}']::jsonb[]);
select state, result from jobs.jobs order by id;
select jobs.complete_many(:'ids', array[1, 2]);
\echo :LAST_ERROR_SQLSTATE
-- Results follow their ids in any order; an id given twice, with a stale and the current
-- claim, lands once, with the result given beside the current claim.
truncate jobs_data.jobs;
select count(*) from jobs.enqueue_batch('[{"name": "m"}, {"name": "m"}, {"name": "m"}]');
select array_agg(id order by id desc) as ids, array_agg(claim order by id desc) as claims,
       (array_agg(id order by id))[1] as first_id
from jobs.claim('w', max_jobs => 3) \gset
select landed from jobs.complete_many(:'ids'::uuid[] || :'first_id'::uuid,
                                      :'claims'::bigint[] || 0::bigint,
                                      array['{"r": "c"}', '{"r": "b"}', '{"r": "a"}', '{"r": "stale"}']::jsonb[]);
select result from jobs.jobs order by id;

-- fail: retried with the backoff, or at retry_at; dead when out of attempts or not retryable.
truncate jobs_data.jobs;
insert into jobs.job_types (name, max_attempts, backoff, backoff_base, jitter)
values ('retry_fixed', 2, 'fixed', '1 minute', 0);
select jobs.enqueue('retry_fixed') is not null;
select id, claim from jobs.claim('w') \gset
select jobs.fail(:'id', :claim, 'timeout talking to smtp');
select state, attempt, last_error, run_at - now() between interval '55 seconds' and interval '65 seconds' as backoff
from jobs.jobs where id = :'id';
select jobs.fail(:'id', :claim, 'again') is null as refused;
update jobs.jobs set run_at = now() where id = :'id';
select id, claim from jobs.claim('w') \gset
select jobs.fail(:'id', :claim, 'timeout again');
select state, attempt, last_error, finished_at is not null as finished from jobs.jobs where id = :'id';
-- retryable => false dead-letters at once; a job type without dead letters ends failed.
insert into jobs.job_types (name, dead_letter) values ('no_dlq', false);
select jobs.enqueue('no_dlq') is not null;
select id, claim from jobs.claim('w') \gset
select jobs.fail(:'id', :claim, 'bad input', retryable => false);
-- An explicit retry_at wins over the backoff.
select jobs.enqueue('at', max_attempts => 5) is not null;
select id, claim from jobs.claim('w') \gset
select jobs.fail(:'id', :claim, 'later', retry_at => '2999-01-01');
select state, run_at from jobs.jobs where id = :'id';

-- snooze parks the job without using an attempt.
select jobs.enqueue('snoozy', max_attempts => 1, id => '00000000-0000-0000-0000-00000000005a') is not null;
select id, claim from jobs.claim('w') \gset
select jobs.snooze(:'id', :claim, now() - interval '1 second');
select state, attempt from jobs.jobs where id = :'id';
select attempt, max_attempts from jobs.claim('w');

-- assert_claim: silent while held, lease_lost (with the reason) otherwise.
select id, claim from jobs.jobs where name = 'snoozy' \gset
select jobs.assert_claim(:'id', :claim);
select jobs.assert_claim(:'id', :claim - 1);
\echo :LAST_ERROR_SQLSTATE
update jobs.jobs set lease_expires_at = '2000-01-01', lease_scan_at = '2000-01-01' where id = :'id';
select jobs.assert_claim(:'id', :claim);
\echo :LAST_ERROR_SQLSTATE
select jobs.assert_claim('00000000-0000-0000-0000-000000000000', 1);
\echo :LAST_ERROR_SQLSTATE

-- Bad input: a clear error, and nothing changes.
select state, attempt, claim = :claim as same_token from jobs.jobs where id = :'id';
select jobs.complete(null, 1);
\echo :LAST_ERROR_SQLSTATE
select jobs.fail(:'id', :claim, null);
\echo :LAST_ERROR_SQLSTATE
select jobs.snooze(:'id', :claim, null);
\echo :LAST_ERROR_SQLSTATE
select jobs.heartbeat(:'id', :claim, '-1 second');
\echo :LAST_ERROR_SQLSTATE
select jobs.heartbeat(:'id', :claim, '8 days');
\echo :LAST_ERROR_SQLSTATE
select jobs.heartbeat(null, :claim);
\echo :LAST_ERROR_SQLSTATE
select jobs.heartbeat(:'id', null);
\echo :LAST_ERROR_SQLSTATE
select jobs.complete(:'id', null);
\echo :LAST_ERROR_SQLSTATE
select jobs.fail(null, :claim, 'e');
\echo :LAST_ERROR_SQLSTATE
select jobs.fail(:'id', null, 'e');
\echo :LAST_ERROR_SQLSTATE
select jobs.fail(:'id', :claim, 'e', retry_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
select jobs.snooze(null, :claim, now());
\echo :LAST_ERROR_SQLSTATE
select jobs.snooze(:'id', null, now());
\echo :LAST_ERROR_SQLSTATE
select jobs.snooze(:'id', :claim, '-infinity');
\echo :LAST_ERROR_SQLSTATE
select jobs.assert_claim(null, :claim);
\echo :LAST_ERROR_SQLSTATE
select jobs.assert_claim(:'id', null);
\echo :LAST_ERROR_SQLSTATE
select state, attempt, claim = :claim as same_token from jobs.jobs where id = :'id';
