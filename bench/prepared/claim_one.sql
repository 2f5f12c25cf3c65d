-- One autocommit claim of one job (its latency, in pgbench's per-transaction log).
select id, claim from jobs.claim('bench', array['bench'], 1);
