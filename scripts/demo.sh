#!/usr/bin/env bash
# The demo: installs what is missing for it and builds pg_jobs (scripts/setup.sh --demo),
# starts a throwaway cluster with pg_jobs preloaded (PostgreSQL 15; PG_JOBS_PG=16, 17 or 18 for
# another release), enqueues jobs as an application would, works them with the Python worker
# in examples/python, tells what became of each, removes the cluster, and says what it left on
# the machine.
#   bash scripts/demo.sh                 PG_JOBS_PG=18 bash scripts/demo.sh
#   bash scripts/demo.sh --deb FILE      pg_jobs from a release's .deb (PostgreSQL 15): nothing
#                                        compiled, the first job in under two minutes
# PG_JOBS_DEMO_PORT picks the cluster's port (default: the first free one from 54393).
# PG_JOBS_DEMO_SKIP_SETUP=1 skips the set-up (the test command has done it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

deb=""
if [ "${1:-}" = --deb ]; then
  deb=$(realpath "${2:?usage: scripts/demo.sh [--deb FILE]}")
  if [ "$PG_MAJOR" != 15 ]; then echo "demo: --deb is for PostgreSQL 15 (Debian 12's)" >&2; exit 2; fi
fi
if [ -n "$deb" ]; then
  echo "== 1. Set-up: PostgreSQL 15 and pg_jobs from $(basename "$deb"), nothing to compile"
else
  echo "== 1. Set-up: packages, cargo-pgrx, pg_jobs built and installed for PostgreSQL $PG_MAJOR"
fi
if [ -z "${PG_JOBS_DEMO_SKIP_SETUP:-}" ]; then
  if [ -n "$deb" ]; then bash scripts/setup.sh --deb "$deb"; else bash scripts/setup.sh --demo; fi
fi

port=${PG_JOBS_DEMO_PORT:-$(free_port 54393)}
if port_in_use "$port"; then
  echo "demo: port $port (PG_JOBS_DEMO_PORT) is in use; set PG_JOBS_DEMO_PORT to a free one, or unset it" >&2
  exit 1
fi
dir=$(mktemp -d /tmp/pg_jobs-demo.XXXXXX)
# On a failure, the cluster's log is shown before the cluster goes.
trap 'rc=$?; if [ $rc != 0 ] && [ -f "$dir/log" ]; then echo "demo: the end of the cluster log:" >&2; tail -20 "$dir/log" >&2; fi
      bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
if ! dsn=$(bash scripts/cluster.sh start "$dir" "$port"); then
  echo "demo: the cluster did not start on port $port (its log is above)" >&2
  exit 1
fi
psql() { command psql "$dsn" -X -q -v ON_ERROR_STOP=1 "$@"; }

echo
echo "== 2. A throwaway PostgreSQL $PG_MAJOR cluster in $dir, on port $port, pg_jobs preloaded"
psql <<'SQL'
create extension pg_jobs;
-- Policy per job name. send_email: 3 attempts; charge_card: 2. Short backoffs, no jitter,
-- so the demo's retries come quickly.
insert into jobs.job_types (name, max_attempts, backoff_base, jitter) values
  ('send_email', 3, '200 milliseconds', 0),
  ('charge_card', 2, '200 milliseconds', 0);
SQL
echo "   job types: send_email may take 3 attempts, charge_card 2, everything else 25"

echo
echo "== 3. Enqueueing 8 jobs, as an application would (jobs.enqueue)"
psql -t -A <<'SQL'
create function pg_temp.enqueue(what text, name text, payload jsonb, key text default null,
                                priority int default 0, run_at timestamptz default null)
returns text language sql as $$
  select format('   %-42s -> %s', what,
    case when e.deduped
         then format('deduplicated: job %s holds the key %s and is live, so it is handed back '
                     'and nothing new is queued', right(e.id::text, 8), key)
         else format('new job %s%s', right(e.id::text, 8),
                     case when run_at is not null then ' (delayed: runs in 1 s)' else '' end)
    end)
  from jobs.enqueue(name, payload, idempotency_key => key, priority => priority, run_at => run_at) as e
$$;
select pg_temp.enqueue('resize_image 800x600', 'resize_image', '{"width": 800, "height": 600}');
select pg_temp.enqueue('resize_image 1024x768, priority 5', 'resize_image',
                       '{"width": 1024, "height": 768}', priority => 5);
select pg_temp.enqueue('send_email to ada, key welcome-ada', 'send_email',
                       '{"to": "ada@example.com"}', 'welcome-ada');
select pg_temp.enqueue('send_email to ada again, key welcome-ada', 'send_email',
                       '{"to": "ada@example.com"}', 'welcome-ada');
select pg_temp.enqueue('send_email to bob, key welcome-bob', 'send_email',
                       '{"to": "bob@example.com"}', 'welcome-bob');
select pg_temp.enqueue('charge_card 4000-0000-0000-0002', 'charge_card',
                       '{"card": "4000-0000-0000-0002"}');
select pg_temp.enqueue('resize_image 640x480', 'resize_image', '{"width": 640, "height": 480}');
select pg_temp.enqueue('resize_image 320x240, in 1 second', 'resize_image',
                       '{"width": 320, "height": 240}', run_at => now() + interval '1 second');
select format('   %s jobs queued from 8 enqueues', count(*)) from jobs.jobs;
SQL

echo
echo "== 4. The worker (examples/python/worker.py) works the queue until it is empty"
echo "   Its handlers: resize_image succeeds; send_email fails its first attempt (an SMTP"
echo "   timeout) and then succeeds; charge_card always fails (the card is declined)."
.venv/bin/python examples/python/worker.py --dsn "$dsn" --until-empty --poll 0.2

echo
echo "== 5. What became of each job"
psql <<'SQL'
select right(id::text, 8) as job, name, state, attempt,
       coalesce(result::text, last_error) as "result, or the last error"
from jobs.jobs order by enqueued_at;
SQL
psql -t -A <<'SQL'
select format('   %s completed (%s of them after a failed attempt: the worker called jobs.fail, '
              'and the job was retried after its backoff)',
              count(*) filter (where state = 'completed'),
              count(*) filter (where state = 'completed' and attempt > 1))
from jobs.jobs;
select format('   %s dead-lettered after its %s attempts ran out (jobs.requeue runs it again): %s',
              count(*), max(max_attempts), string_agg(name, ', '))
from jobs.jobs where state = 'dead';
select '   1 enqueue deduplicated by its idempotency key (welcome-ada): no second email to ada';
SQL

echo
echo "== 6. What the demo leaves on this machine"
echo "   The cluster in $dir goes away now. Left, for the next run and for your own work:"
echo "   - pg_jobs installed into PostgreSQL $PG_MAJOR: $("$PG_CONFIG" --pkglibdir)/pg_jobs.so and"
echo "     $("$PG_CONFIG" --sharedir)/extension/pg_jobs*"
if [ -s .setup-installed ]; then
  echo "   - the Debian packages the set-up installed (listed in .setup-installed):"
  echo "     $(sort -u .setup-installed | tr '\n' ' ')"
fi
if [ -n "$deb" ]; then
  echo "   - the package postgresql-15-pg-jobs (apt remove postgresql-15-pg-jobs takes it away);"
  echo "     in this clone, the Python venv in .venv/"
else
  echo "   - cargo-pgrx in ${CARGO_HOME:-~/.cargo}/bin and its configuration in ${PGRX_HOME:-~/.pgrx};"
  echo "     in this clone, the build in target/ and the Python venv in .venv/"
fi
echo "   For a server to keep working on (pg_jobs preloaded, its data kept, its port and psql"
echo "   line printed): bash scripts/dev-server.sh start"
