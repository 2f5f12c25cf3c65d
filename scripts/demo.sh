#!/usr/bin/env bash
# The demo: installs what is missing, builds and installs pg_jobs, starts a throwaway
# PostgreSQL 15 cluster with pg_jobs preloaded, enqueues jobs, works them with the Python
# worker in examples/python, prints what became of each, and removes the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bash scripts/setup.sh

dir=$(mktemp -d /tmp/pg_jobs-demo.XXXXXX)
trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
dsn=$(bash scripts/cluster.sh start "$dir" "${PG_JOBS_DEMO_PORT:-54393}")
psql() { command psql "$dsn" -X -q -v ON_ERROR_STOP=1 "$@"; }

echo "== a throwaway cluster in $dir, pg_jobs preloaded; enqueueing 8 jobs"
psql <<'SQL'
create extension pg_jobs;
-- Policy per job name: short backoffs so the demo's retries come quickly.
insert into jobs.job_types (name, max_attempts, backoff_base, jitter) values
  ('send_email', 3, '200 milliseconds', 0),
  ('charge_card', 2, '200 milliseconds', 0);
select count(*) as enqueued from jobs.enqueue_batch('[
  {"name": "resize_image", "payload": {"width": 800, "height": 600}},
  {"name": "resize_image", "payload": {"width": 1024, "height": 768}, "priority": 5},
  {"name": "send_email", "payload": {"to": "ada@example.com"}, "idempotency_key": "welcome-ada"},
  {"name": "send_email", "payload": {"to": "ada@example.com"}, "idempotency_key": "welcome-ada"},
  {"name": "send_email", "payload": {"to": "bob@example.com"}, "idempotency_key": "welcome-bob"},
  {"name": "charge_card", "payload": {"card": "4000-0000-0000-0002"}},
  {"name": "resize_image", "payload": {"width": 640, "height": 480}}
]') where not deduped;
select (jobs.enqueue('resize_image', '{"width": 320, "height": 240}',
                     run_at => now() + interval '1 second')).deduped as later_deduped;
SQL

echo "== the worker (examples/python/worker.py) works the queue until it is empty"
.venv/bin/python examples/python/worker.py --dsn "$dsn" --until-empty --poll 0.2

echo "== what became of each job"
psql <<'SQL'
select name, state, attempt, coalesce(result::text, last_error) as "result or last error"
from jobs.jobs order by name, state, enqueued_at;
select state, count(*) from jobs.jobs group by state order by state;
SQL
