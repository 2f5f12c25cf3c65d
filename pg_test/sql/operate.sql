-- jobs.cancel, jobs.requeue, jobs.promote, jobs.delete: what each accepts, and every refusal.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps;

-- cancel: live jobs only; a running holder loses its claim.
select jobs.enqueue('c', id => '00000000-0000-0000-0000-0000000000c1') is not null;
select id, claim from jobs.claim('w') \gset
select jobs.cancel(:'id');
select state, claim > :claim as token_advanced, finished_at is not null as finished from jobs.jobs where id = :'id';
select jobs.complete(:'id', :claim);
select jobs.heartbeat(:'id', :claim);
select jobs.cancel(:'id');
\echo :LAST_ERROR_SQLSTATE
select jobs.cancel('00000000-0000-0000-0000-000000000000');
\echo :LAST_ERROR_SQLSTATE

-- requeue: finished jobs go back to ready with attempts reset and a new token.
select jobs.requeue(:'id');
select state, attempt, claim > :claim as token_advanced, finished_at from jobs.jobs where id = :'id';
select jobs.requeue(:'id');
\echo :LAST_ERROR_SQLSTATE
-- Steps are kept, or dropped from from_step on, in the same statement.
select id, claim from jobs.claim('w') \gset
select jobs.save_step(:'id', :claim, 'a', '1'), jobs.save_step(:'id', :claim, 'b', '2'),
       jobs.save_step(:'id', :claim, 'c', '3');
select jobs.fail(:'id', :claim, 'broken', retryable => false);
select jobs.requeue(:'id', 'nope');
\echo :LAST_ERROR_SQLSTATE
select jobs.requeue(:'id', 'b');
select step from jobs.steps order by seq;
-- A live job holding the key refuses the requeue, and nothing is deleted.
select jobs.enqueue('k', idempotency_key => 'key-1', id => '00000000-0000-0000-0000-0000000000c2') is not null;
update jobs.jobs set state = 'dead', finished_at = now() where id = '00000000-0000-0000-0000-0000000000c2';
select jobs.enqueue('k', idempotency_key => 'key-1') is not null;
select jobs.requeue('00000000-0000-0000-0000-0000000000c2');
\echo :LAST_ERROR_SQLSTATE
select state from jobs.jobs where id = '00000000-0000-0000-0000-0000000000c2';

-- promote: a delayed job becomes claimable now; anything else is refused.
select jobs.enqueue('p', run_at => now() + interval '1 day', id => '00000000-0000-0000-0000-0000000000c3') is not null;
select count(*) from jobs.claim('w', array['default'], 10) where name = 'p';
select jobs.promote('00000000-0000-0000-0000-0000000000c3');
select name from jobs.claim('w', array['default'], 10) where name = 'p';
select jobs.promote('00000000-0000-0000-0000-0000000000c3');
\echo :LAST_ERROR_SQLSTATE
select jobs.promote('00000000-0000-0000-0000-000000000000');
\echo :LAST_ERROR_SQLSTATE
select jobs.promote(null);
\echo :LAST_ERROR_SQLSTATE
-- A snoozed job runs now, with its attempt as the snooze left it; one waiting for an event keeps
-- waiting (refused).
select jobs.enqueue('s', id => '00000000-0000-0000-0000-0000000000c5') is not null;
select id, claim from jobs.claim('w', array['default'], 1) \gset
select jobs.snooze(:'id', :claim, now() + interval '1 day');
select jobs.promote(:'id');
select state, attempt, run_at <= now() as due from jobs.jobs where id = :'id';
select name, attempt from jobs.claim('w', array['default'], 1);
select jobs.enqueue('e', id => '00000000-0000-0000-0000-0000000000c6') is not null;
select id, claim from jobs.claim('w', array['default'], 1) \gset
select status from jobs.await_event(:'id', :claim, 'paid');
select jobs.promote(:'id');
\echo :LAST_ERROR_SQLSTATE
select state from jobs.jobs where id = :'id';

-- Each refusal's hint fits the state the job is in.
select jobs.enqueue('c', id => '00000000-0000-0000-0000-0000000000c4') is not null;
select jobs.cancel('00000000-0000-0000-0000-0000000000c4');
select jobs.promote('00000000-0000-0000-0000-0000000000c4');
select jobs.requeue('00000000-0000-0000-0000-0000000000c4') and jobs.requeue('00000000-0000-0000-0000-0000000000c4');

-- delete: a finished root goes now with its family, their attempts and their runs' steps; a
-- live job, a child, and a family with a live job are refused (not_deletable), changing nothing.
truncate jobs_data.jobs, jobs_data.steps, jobs_data.attempts;
-- A refusal as text, a child's id (version 8, made at the spawn) shown as <child>.
create function pg_temp.refusal(p_sql text) returns text language plpgsql as $$
begin
  execute p_sql;
  return 'done';
exception when others then
  return sqlstate || ': ' || regexp_replace(sqlerrm, '[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f-]{21}', '<child>', 'g');
end $$;
select jobs.enqueue('root', id => '00000000-0000-0000-0000-0000000000d1', max_attempts => 2) is not null;
select id, claim from jobs.claim('w', array['default'], 1) \gset
select jobs.fail(:'id', :claim, 'first try');
select jobs.promote(:'id');
select id, claim from jobs.claim('w', array['default'], 1) \gset
select jobs.save_step(:'id', :claim, 'a', '1');
select (jobs.spawn(:'id', :claim, '{"name": "kid", "child_key": "k1"}')).action;
select jobs.delete(:'id');
\echo :LAST_ERROR_SQLSTATE
select jobs.complete(:'id', :claim);
select pg_temp.refusal(format('select jobs.delete(%L)', :'id'));
select c.id as kid, c.claim as kid_claim from jobs.claim('w', array['default'], 1) as c \gset
select jobs.save_step(:'kid', :kid_claim, 'b', '2');
select jobs.fail(:'kid', :kid_claim, 'kid broke', retryable => false);
select pg_temp.refusal(format('select jobs.delete(%L)', :'kid'));
select (select count(*) from jobs.jobs) as jobs, (select count(*) from jobs.steps) as steps,
       (select count(*) from jobs.attempts) as attempts;
select jobs.delete(:'id');
select (select count(*) from jobs.jobs) as jobs, (select count(*) from jobs.steps) as steps,
       (select count(*) from jobs.attempts) as attempts;
select jobs.delete(:'id');
\echo :LAST_ERROR_SQLSTATE
select jobs.delete(null);
\echo :LAST_ERROR_SQLSTATE

-- A refusal's CONTEXT names the public function that refused and the caller's own frames,
-- not the helpers in between (jobs._refuse, jobs._raise).
\set SHOW_CONTEXT errors
create schema app;
create function app.stop(p_id uuid) returns boolean language plpgsql as $$
begin
  return jobs.cancel(p_id);
end $$;
select jobs.cancel('00000000-0000-0000-0000-000000000000');
select app.stop('00000000-0000-0000-0000-000000000000');
\set SHOW_CONTEXT never
drop schema app cascade;
