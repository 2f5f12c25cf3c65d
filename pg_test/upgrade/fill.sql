-- Fills a database on the previous release with a job in every state, using only that
-- release's API: what a user's database looks like when they upgrade. Run after
-- CREATE EXTENSION pg_jobs VERSION '<previous>'.
insert into jobs.job_types (name, max_attempts, backoff_base, jitter, lease) values
  ('once', 1, '1 second', 0, '1 hour'), ('report', 3, '1 minute', 0, '1 hour');
select count(*) from jobs.enqueue_batch(
  (select jsonb_agg(jsonb_build_object('name', 'report', 'payload', jsonb_build_object('n', g),
                                       'priority', g % 3))
   from generate_series(1, 20) g));
select jobs.enqueue('report', '{"later": true}', run_at => now() + interval '1 hour');
select jobs.enqueue('report', '{"keyed": true}', idempotency_key => 'report-2026-11');
select jobs.enqueue('report', '{"tenant": true}', tenant_id => 'acme', idempotency_key => 'k');

-- Running, held across the upgrade: the claims are kept to settle afterwards.
select jobs.enqueue('report', jsonb_build_object('held', g), queue => 'held') from generate_series(1, 5) g;
create table upgrade_held as
  select id, run_id, claim from jobs.claim('before-upgrade', array['held'], 5, interval '1 hour');
select jobs.save_step(id, claim, 'charge', '{"charged": 42}') from upgrade_held;

-- Finished: completed, dead (out of attempts), failed (not retryable), cancelled.
select jobs.enqueue('report', '{"done": 1}', queue => 'done'), jobs.enqueue('report', '{"done": 2}', queue => 'done');
select jobs.complete(id, claim, '{"ok": true}') from jobs.claim('w', array['done'], 2);
select jobs.enqueue('once', '{}', queue => 'bad');
select jobs.fail(id, claim, 'boom') from jobs.claim('w', array['bad'], 1);
select jobs.enqueue('report', '{}', queue => 'bad');
select jobs.fail(id, claim, 'not retryable', retryable => false) from jobs.claim('w', array['bad'], 1);
select jobs.cancel((jobs.enqueue('report', '{"cancel": true}', queue => 'bad')).id);

-- Parked: snoozed, and waiting on an event; and a stored event.
select jobs.enqueue('report', '{"snooze": true}', queue => 'parked');
select jobs.snooze(id, claim, now() + interval '1 day') from jobs.claim('w', array['parked'], 1);
select jobs.enqueue('report', '{"wait": true}', queue => 'parked');
select status from jobs.claim('w', array['parked'], 1) as c,
  jobs.await_event(c.id, c.claim, 'order.paid', 'order-7', interval '1 day');
select jobs.publish('invoice.sent', '{"invoice": 9}', 'invoice-9') is not null;
select jobs.pause_queue('parked');
