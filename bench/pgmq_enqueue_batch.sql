select count(*) from pgmq.send_batch('bench',
  (select array_agg(jsonb_build_object('n', g)) from generate_series(1, 100) g));
