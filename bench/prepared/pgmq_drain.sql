-- pgmq 1.1.4, prepared: read a batch under a 30 s visibility timeout, then delete it.
select coalesce(array_agg(msg_id), '{}') as ids from pgmq.read('bench', 30, :batch) \gset
select count(*) from pgmq.delete('bench', :ids::bigint[]);
