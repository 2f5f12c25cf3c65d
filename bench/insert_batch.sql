-- The baseline for enqueue_batch: a plain INSERT of the same 100 rows into jobs_data.jobs, built
-- from the same JSON, without enqueue's checks, idempotency, queue registry or wake-up.
insert into jobs_data.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts, payload,
                       enqueued_at, created_at, updated_at)
select gen_random_uuid(), gen_random_uuid(), s->>'name', s->>'queue', 'ready', 0, now(), 25,
       s->'payload', now(), now(), now()
from jsonb_array_elements(
  (select jsonb_agg(jsonb_build_object('name', 'bench', 'queue', 'bench', 'payload', jsonb_build_object('n', g)))
   from generate_series(1, 100) g)) as s;
