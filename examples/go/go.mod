module example.com/pg_jobs_worker

go 1.19

require github.com/lib/pq v1.10.7
