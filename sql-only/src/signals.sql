-- The SQL-only edition's wake-ups, signals and counters: what the extension keeps in shared
-- memory or runs at a transaction's commit (src/commit/wakeups.rs, src/commit/relay.rs, src/commit/outcomes.rs,
-- src/commit/async_claims.rs, src/functions/unknown_queues.rs, src/error_context.rs), as the extension does it
-- without shared_preload_libraries, where this edition has no library at all:
-- - a blocking claim polls: it looks again every 100 ms (jobs._await_work);
-- - NOTIFY is the transaction's own (no relay), and a death is signalled per job;
-- - no outcome counters: jobs.outcome_stats answers no rows;
-- - every claim and heartbeat waits for its commit's WAL flush, as synchronous_commit says;
-- - a refusal's CONTEXT keeps the lines of the helpers it went through.

-- `jobs._notify(queue)`: NOTIFY pg_jobs, queue, sent at this transaction's commit.
create function jobs._notify(queue text)
returns void
language sql volatile strict
as $$ select pg_catalog.pg_notify('pg_jobs', queue) $$;

-- `jobs._relays()`: no sweeper relays notifications in this edition.
create function jobs._relays()
returns boolean
language sql volatile strict
as $$ select false $$;

-- `jobs._cancelling(id, was_running, value)`: signals pg_jobs_cancel at this transaction's
-- commit when the job being cancelled was running; answers value.
create function jobs._cancelling(id uuid, was_running boolean, value timestamptz)
returns timestamptz
language plpgsql volatile strict
as $$
begin
  if was_running then
    perform pg_catalog.pg_notify('pg_jobs_cancel', id::text);
  end if;
  return value;
end
$$;

-- `jobs._outcome(queue, outcome, id)`: refuses an outcome it does not know; a job that ends
-- dead is signalled on pg_jobs_dead at this transaction's commit, with the payload the
-- extension sends for one death. True, to sit in a RETURNING list.
create function jobs._outcome(queue text, outcome text, id uuid default null)
returns boolean
language plpgsql volatile
as $$
begin
  if outcome is null or outcome not in ('completed', 'retried', 'dead', 'failed', 'cancelled',
                                        'timed_out', 'lease_lapsed') then
    raise exception 'jobs._outcome: no outcome is called %', coalesce(to_json(outcome)::text, 'None')
      using errcode = '22023';
  end if;
  if outcome = 'dead' and id is not null then
    perform pg_catalog.pg_notify('pg_jobs_dead',
      '{"count":1,"id":"' || id || '","queue":' || to_json(queue)::text || '}');
  end if;
  return true;
end
$$;

-- `jobs._outcome_stats()`: no counters in this edition (as the extension without preload).
create function jobs._outcome_stats()
returns table (queue text, completed bigint, retried bigint, dead bigint, failed bigint,
               cancelled bigint, timed_out bigint, lease_lapsed bigint, since timestamptz)
language sql volatile strict parallel safe
as $$ select null::text, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint,
             0::bigint, null::timestamptz where false $$;

-- `jobs._signal_work(queues)`, `jobs._slot_freed(name, key)`, `jobs._work_seen(queues)`: no
-- shared counters to move or read; a waiting claim looks again instead.
create function jobs._signal_work(queues text[])
returns void
language sql volatile strict
as $$ select $$;

-- `jobs._moving(candidates, max_jobs, queues)`: the first max_jobs candidates, none when one
-- is NULL; no claim to wake (see jobs._signal_work). (PL/pgSQL: a SQL function that cannot be
-- inlined is planned again at each claim, 30 µs.)
create function jobs._moving(candidates uuid[], max_jobs int, queues text[])
returns uuid[]
language plpgsql volatile strict
as $$
begin
  return case when array_position(candidates, null) is null then candidates[1:max_jobs] else '{}' end;
end
$$;

create function jobs._slot_freed(name text, concurrency_key text)
returns boolean
language sql volatile
as $$ select true $$;

create function jobs._work_seen(queues text[])
returns bigint[]
language sql volatile strict
as $$ select '{}'::bigint[] $$;

-- `jobs._await_work(queues, seen, until)`: one step of the poll (100 ms, or what is left until
-- `until`), after which the claim looks again. Interrupted as any statement is.
create function jobs._await_work(queues text[], seen bigint[], until timestamptz)
returns void
language plpgsql volatile strict
as $$
declare
  v_step float8 := least(0.1, extract(epoch from until - clock_timestamp()));
begin
  if v_step > 0 then
    perform pg_catalog.pg_sleep(v_step);
  end if;
end
$$;

-- `jobs._async_if_alone(function)`: called by every claim and heartbeat. The claim keeps the
-- caller's durability (no commit hook); once per connection, it warns when nothing has swept
-- this database for ten minutes: without the background worker, pg_cron runs jobs.sweep()
-- (docs/EDITIONS.md), and without it retention, timeouts, schedules and timed waits stand still.
create function jobs._async_if_alone("function" text)
returns void
language plpgsql volatile strict
as $$
declare
  v_at timestamptz;
begin
  if current_setting('pg_jobs_sweep.checked', true) = 'on' then
    return;
  end if;
  perform set_config('pg_jobs_sweep.checked', 'on', false);
  select l.at into v_at from jobs_config.last_sweep as l;
  if v_at is null or v_at < clock_timestamp() - interval '10 minutes' then
    -- (current_user: the owner, as whom the claim runs)
    raise warning 'pg_jobs: nothing has swept this database %',
      coalesce('since ' || v_at, 'yet')
      using hint = format('schedule jobs.sweep() with pg_cron, to run as the role that owns pg_jobs: in '
                          'pg_cron''s database, select cron.schedule_in_database(''pg_jobs sweep'', '
                          '''* * * * *'', ''select jobs.sweep()'', %L, %L); docs/EDITIONS.md. Warned once '
                          'per connection', current_database(), current_user);
  end if;
end
$$;

-- `jobs._quiet_context()`: nothing to load.
create function jobs._quiet_context()
returns void
language sql immutable strict parallel safe
as $$ select $$;

-- `jobs._warn_unknown_queues(queues)`: a WARNING for each queue never used, once per connection
-- (the queues warned about are kept in a setting of the connection's own).
create function jobs._warn_unknown_queues(queues text[])
returns void
language plpgsql volatile strict
as $$
declare
  v_queue  text;
  v_warned text[] := coalesce(nullif(current_setting('pg_jobs_warned.queues', true), ''), '{}')::text[];
begin
  foreach v_queue in array queues loop
    continue when v_queue is null or v_queue = any(v_warned)
                  or exists (select from jobs_data.queues as q where q.queue = v_queue);
    raise warning 'jobs.claim: queue "%" is unknown: no job is, or lately was, enqueued to it', v_queue
      using hint = 'check the queue''s name (names are case-sensitive: ''default'', not ''Default''); '
                   'jobs.queues lists every queue in use. Warned once per connection';
    v_warned := v_warned || v_queue;
    perform set_config('pg_jobs_warned.queues', v_warned::text, false);
  end loop;
end
$$;
