-- 100 jobs in one call.
select count(*) from jobs.enqueue_batch(
  (select jsonb_agg(jsonb_build_object('name', 'bench', 'queue', 'bench', 'payload', jsonb_build_object('n', g)))
   from generate_series(1, 100) g));
