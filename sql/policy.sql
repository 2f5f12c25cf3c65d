comment on function jobs.clock() is
  'The time pg_jobs decides by: clock_timestamp() plus pg_jobs.clock_offset (0; superuser only, for tests)';

-- Job-type policy as every statement reads it: the jobs_data.job_types row of a name, or the
-- defaults for a name with no row. The defaults here match the column defaults of
-- jobs_data.job_types; the one addition is the lease, whose column NULL means 30 seconds.
-- STABLE and a single SELECT returning a set, so the planner inlines it into the claim.
create function jobs._policy(p_name text)
returns setof jobs_data.job_types
language sql stable parallel safe
begin atomic
  select p_name,
         coalesce(t.max_attempts, 25),
         coalesce(t.backoff, 'exponential'),
         coalesce(t.backoff_base, interval '1 second'),
         coalesce(t.backoff_max, interval '1 hour'),
         coalesce(t.jitter, 0.1),
         coalesce(t.dead_letter, true),
         coalesce(t.lease, interval '30 seconds'),
         t.concurrency,
         t.timeout,
         t.rate_limit,
         t.rate_period,
         coalesce(t.rate_limit_per_key, false),
         t.run_timeout,
         t.non_retryable_errors,
         coalesce(t.key_concurrency, 1),
         coalesce(t.when_busy, 'queue')
  from (select) as d
  left join jobs_data.job_types t on t.name = p_name;
end;

-- How long a job waits before its next attempt after failing attempt p_attempt:
-- exponential (base * 2^(attempt-1)) or fixed (base), capped at backoff_max, then shortened
-- by up to jitter (a fraction) at random so a burst of failures does not retry in lockstep.
-- Computed in seconds as float8, so no base or attempt overflows an interval.
create function jobs._backoff(p_backoff text, p_base interval, p_max interval, p_jitter float8,
                              p_attempt int)
returns interval
language sql volatile parallel safe
begin atomic
  select make_interval(secs => least(
           extract(epoch from p_base)
             * case when p_backoff = 'fixed' then 1 else power(2, least(greatest(p_attempt - 1, 0), 60)) end,
           extract(epoch from p_max))
         * (1 - p_jitter * random()));
end;

-- Where a job ends when it runs out of attempts: dead-lettered unless its policy says not.
-- STABLE, like jobs._lapse_error: their bodies are (a cast to an enum, format), and the
-- planner inlines only functions declared no stricter than their bodies.
create function jobs._final_state(p_dead_letter boolean)
returns jobs.job_state
language sql stable parallel safe
begin atomic
  select case when p_dead_letter then 'dead' else 'failed' end::jobs.job_state;
end;

-- What a lapsed lease (its worker stopped heartbeating) does to a job: with attempts left it
-- runs again as a new attempt; on the final attempt it is buried (jobs._final_state) and never
-- handed out. The claim and the sweep both decide and word it with these, so they agree.
create function jobs._lapse_buries(p_attempt int, p_max_attempts int)
returns boolean
language sql immutable parallel safe
begin atomic
  select p_attempt >= p_max_attempts;
end;

-- Whether a lapsed lease gives its job back rather than ending an attempt: the job was
-- prefetched (jobs.claim's prefetch) and never started (jobs.mark_started), so no handler ran
-- it. A job is given back so at most 3 times (its rows in jobs.attempts): a handler that kills
-- its worker before the start is recorded would else come back for ever, never charged.
-- (A call is a statement of its own: callers test started_at IS NULL first, so that a lapse of
-- a started job, the usual one, costs none.)
create function jobs._lapse_gives_back(p_started_at timestamptz, p_id uuid)
returns boolean
language sql stable
begin atomic
  select p_started_at is null
     and (select count(*) from jobs_data.attempts as a
          where a.job_id = p_id and a.outcome = 'not_started') < 3;
end;

create function jobs._not_started_error(p_worker text)
returns text
language sql immutable parallel safe
begin atomic
  select format('lease lapsed before the job started: %s prefetched it and stopped settling; '
                'given back, no attempt used', coalesce(p_worker, 'a worker'));
end;

-- Whether a running job's lease ran out at its deadline (jobs.job_types.timeout): its attempt
-- timed out, a failed attempt, not a lapse. Claim and heartbeat never extend a lease past the
-- deadline, so a lease that reached it is one the timeout ended.
create function jobs._timed_out(p_lease_expires_at timestamptz, p_deadline timestamptz)
returns boolean
language sql immutable parallel safe
begin atomic
  select coalesce(p_lease_expires_at >= p_deadline, false);
end;

create function jobs._timeout_error(p_timeout interval, p_attempt int, p_max_attempts int)
returns text
language sql stable parallel safe
begin atomic
  select format('timed out%s on attempt %s of %s: ', ' after ' || p_timeout, p_attempt, p_max_attempts)
    || case when p_attempt >= p_max_attempts then 'no attempt is left'
            else 'retried after the backoff' end;
end;

create function jobs._lapse_error(p_attempt int, p_max_attempts int)
returns text
language sql stable parallel safe
begin atomic
  select case when p_attempt >= p_max_attempts
    then format('lease lapsed on the final attempt (%s of %s): the worker holding it stopped '
                'settling, so the job is not run again', p_attempt, p_max_attempts)
    else format('lease lapsed on attempt %s of %s: the worker holding it stopped settling, '
                'so the job runs again', p_attempt, p_max_attempts)
  end;
end;

-- Whether a job's run is over (run_timeout): its run_deadline has passed. Then it is buried
-- whatever attempts it has left, running or waiting (jobs.claim, jobs.sweep); a running
-- attempt's deadline is never later than the run's, so its lease ends there too.
create function jobs._run_over(p_run_deadline timestamptz, p_now timestamptz)
returns boolean
language sql immutable parallel safe
begin atomic
  select coalesce(p_run_deadline <= p_now, false);
end;

create function jobs._run_timeout_error(p_run_timeout interval, p_attempt int, p_max_attempts int)
returns text
language sql stable parallel safe
begin atomic
  select format('run timed out after %s (run_timeout)%s: the job is not run again', p_run_timeout,
                case when p_attempt > 0 then format(' on attempt %s of %s', p_attempt, p_max_attempts) end);
end;

-- The outcomes of an attempt that ended without its worker settling it (a lapsed lease or a
-- timeout), for jobs.outcome_stats and pg_jobs_dead (jobs._outcome, src/commit/outcomes.rs), from the
-- RETURNING list of the statement that settles it: timed_out or lease_lapsed, and what
-- followed: retried after a timeout, dead or failed on the final attempt (a lapse with attempts
-- left, now ready, runs again).
create function jobs._outcome_ended(p_queue text, p_id uuid, p_state jobs.job_state, p_timed_out boolean)
returns boolean
language sql volatile
begin atomic
  select jobs._outcome(p_queue, case when p_timed_out then 'timed_out' else 'lease_lapsed' end)
    and (p_state = 'ready'
         or jobs._outcome(p_queue, case when p_state = 'delayed' then 'retried' else p_state::text end, p_id));
end;

-- How long finished jobs are kept: jobs._retention(setting, default) (src/functions/clock.rs) reads
-- pg_jobs.completed_retention or pg_jobs.dead_retention.

-- A result or a step's output larger than pg_jobs.max_payload_size is refused (22023), as a
-- payload is: a worker could otherwise store 50 MB a job. Every limit measures a value
-- uncompressed (jobs._size, src/functions/sizes.rs): pg_column_size() would measure one read from a
-- table compressed.
create function jobs._check_size(p_what text, p_value jsonb)
returns void
language plpgsql stable
as $$
begin
  if jobs._size(p_value) > jobs._max_payload_size() then
    perform jobs._raise('22023', format('%s must be at most %s bytes (pg_jobs.max_payload_size), got %s',
      p_what, jobs._max_payload_size(), jobs._size(p_value)),
      'keep large data elsewhere (a table, object storage) and return a reference to it');
  end if;
end
$$;

-- Whether a job of this tenant is the caller's to act on: any, for a role bound to no tenant;
-- else one of its tenants. In every fence of a held job's writes (a role bound to tenants
-- holds only their jobs, and a guessed token of another tenant's job lands nothing).
create function jobs._tenant_ok(p_tenant text)
returns boolean
language sql stable
begin atomic
  select jobs._tenants() is null or p_tenant = any(jobs._tenants());
end;
