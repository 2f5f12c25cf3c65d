-- An application transaction with an outbox enqueue: its own INSERT and jobs.enqueue, committed
-- together (bench/wakeups.py).
\set n random(1, 1000000000)
begin;
insert into app_orders (n) values (:n);
select jobs.enqueue('ship', jsonb_build_object('n', :n::int), queue => 'app');
commit;
