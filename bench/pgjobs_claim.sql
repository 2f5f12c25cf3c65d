-- pg_jobs: claim one job and leave it running (a claim's cost alone; fill the queue first).
select count(*) from jobs.claim('bench', array['bench'], 1);
