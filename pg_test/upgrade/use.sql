-- After the upgrade, the jobs filled in before it keep working: a claim taken before the
-- upgrade settles with its token (and a stale one does not), its saved step is there, the
-- ready jobs are claimed in order, the waiting job wakes on its event, the idempotency key
-- still dedupes. Any failed check raises, and psql (ON_ERROR_STOP) exits non-zero.
do $$
declare
  v_held record;
  v_n    int;
begin
  select * into v_held from upgrade_held order by id limit 1;
  if not (select done from jobs.get_step(v_held.run_id, 'charge')) then
    raise exception 'the step saved before the upgrade is gone';
  end if;
  if jobs.complete(v_held.id, v_held.claim + 1) then
    raise exception 'a wrong claim token settled a job after the upgrade';
  end if;
  if not jobs.complete(v_held.id, v_held.claim, '{"after": "upgrade"}') then
    raise exception 'a claim taken before the upgrade could not settle its job';
  end if;
  select count(*) into v_n from jobs.claim('after-upgrade', array['default'], 100);
  if v_n <> 22 then
    raise exception 'claimed % ready jobs after the upgrade, not 22', v_n;
  end if;
  if (jobs.enqueue('report', '{}', idempotency_key => 'report-2026-11')).deduped is not true then
    raise exception 'the idempotency key of a job enqueued before the upgrade no longer dedupes';
  end if;
  perform jobs.resume_queue('parked');
  perform jobs.publish('order.paid', '{"paid": true}', 'order-7');
  select count(*) into v_n from jobs.claim('after-upgrade', array['parked'], 10);
  if v_n <> 1 then
    raise exception 'the job waiting on an event was not woken by it after the upgrade (% claimed)', v_n;
  end if;
end
$$;
select 'use after upgrade: ok';
