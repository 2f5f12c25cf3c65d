-- Heartbeat one of the held jobs (bench_held: n, id, claim) at random.
\set n random(1, :held)
select jobs.heartbeat(id, claim) from bench_held where n = :n;
