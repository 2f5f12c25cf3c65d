-- Child jobs: jobs.spawn (fenced, idempotent per child_key), jobs.await_children (done, or
-- suspended until the last child ends), and the close policy (a parent that ends failed, dead
-- or cancelled cancels its 'terminate' children, recursively, fencing their holders).
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.attempts, jobs_data.job_types, jobs_data.steps;
insert into jobs.job_types (name, max_attempts, backoff_base, jitter) values ('parent', 1, '0', 0);

-- (Parents get ids of their own, so that the refusals naming them read the same every run.)
select jobs.enqueue('parent', '{"n": 2}', id => '00000000-0000-0000-0000-0000000000a1') is not null as enqueued;
select id as parent, claim as parent_claim from jobs.claim('w', array['default']) \gset

-- Refusals change nothing.
create temp table before as select count(*) as jobs from jobs.jobs;
select jobs.spawn(:'parent', :parent_claim, null);
select jobs.spawn(:'parent', :parent_claim, '[]');
select jobs.spawn(:'parent', :parent_claim, '{"name": "child"}');
select jobs.spawn(:'parent', :parent_claim, jsonb_build_object('name', 'child', 'child_key', repeat('k', 201)));
select jobs.spawn(:'parent', :parent_claim, '{"name": "child", "child_key": "a", "close_policy": "orphan"}');
select jobs.spawn(:'parent', :parent_claim, '{"name": "child", "child_key": "a", "idempotency_key": "x"}');
select jobs.spawn(:'parent', :parent_claim, '{"name": "child", "child_key": "a", "tenant_id": "acme"}');
select jobs.spawn(:'parent', :parent_claim, '{"name": "child", "child_key": "a", "colour": "red"}');
select jobs.spawn(:'parent', :parent_claim + 1, '{"name": "child", "child_key": "a"}');
select jobs.spawn(null, :parent_claim, '{"name": "child", "child_key": "a"}');
select jobs.await_children(:'parent', :parent_claim + 1);
select (select count(*) from jobs.jobs) = jobs as unchanged from before;

-- Two children, the second spawned twice: the same child back.
select deduped from jobs.spawn(:'parent', :parent_claim,
  '{"name": "child", "child_key": "a", "queue": "kids", "payload": {"i": 1}}');
select deduped from jobs.spawn(:'parent', :parent_claim,
  '{"name": "child", "child_key": "b", "queue": "kids", "payload": {"i": 2}, "close_policy": "abandon"}');
select deduped from jobs.spawn(:'parent', :parent_claim,
  '{"name": "child", "child_key": "b", "queue": "kids", "payload": {"i": 99}}');
select name, state, payload, close_policy, parent_id = :'parent' as of_parent,
       enqueued_by = 'job ' || :'parent' as enqueued_by_parent
from jobs.jobs where name = 'child' order by payload->>'i';
select children_live from jobs.jobs where id = :'parent';

-- The parent waits: suspended, its attempt given back, its claim gone.
select * from jobs.await_children(:'parent', :parent_claim);
select state, attempt, wait_event, lease_expires_at from jobs.jobs where id = :'parent';
select jobs.heartbeat(:'parent', :parent_claim) as beat;

-- The children run; the last one to end wakes the parent.
select jobs.complete(c.id, c.claim, jsonb_build_object('square', (c.payload->>'i')::int ^ 2))
from jobs.claim('w', array['kids'], 1) as c;
select state from jobs.jobs where id = :'parent';
select jobs.fail(c.id, c.claim, 'no luck', retryable => false) from jobs.claim('w', array['kids'], 1) as c;
select state, wait_event, children_live from jobs.jobs where id = :'parent';

-- Claimed again: done, with each child's state and result.
select id as parent, claim as parent_claim from jobs.claim('w', array['default']) \gset
select status, jsonb_path_query_array(children, '$[*].state') as states,
       jsonb_path_query_array(children, '$[*].result') as results
from jobs.await_children(:'parent', :parent_claim);

-- A child requeued counts as live again; ended, it leaves the count at 0.
select jobs.requeue(id) from jobs.jobs where name = 'child' and state = 'dead';
select children_live from jobs.jobs where id = :'parent';
select jobs.complete(c.id, c.claim) from jobs.claim('w', array['kids'], 1) as c;
select children_live from jobs.jobs where id = :'parent';

-- The close policy: a parent that fails for good cancels its 'terminate' children (a running
-- one loses its claim) and theirs, and leaves its 'abandon' ones.
select jobs.complete(:'parent', :parent_claim);
select jobs.enqueue('parent', '{}', id => '00000000-0000-0000-0000-0000000000a2') is not null as enqueued;
select id as parent, claim as parent_claim from jobs.claim('w', array['default']) \gset
select (jobs.spawn(:'parent', :parent_claim, '{"name": "kid", "child_key": "run", "queue": "kids"}')).deduped;
select (jobs.spawn(:'parent', :parent_claim, '{"name": "kid", "child_key": "wait", "queue": "later", "run_at": "2100-01-01"}')).deduped;
select (jobs.spawn(:'parent', :parent_claim, '{"name": "kid", "child_key": "free", "queue": "later", "close_policy": "abandon"}')).deduped;
select id as kid, claim as kid_claim from jobs.claim('w', array['kids']) \gset
select (jobs.spawn(:'kid', :kid_claim, '{"name": "grandkid", "child_key": "g", "queue": "later"}')).deduped;
select jobs.fail(:'parent', :parent_claim, 'gave up');
select name, state, close_policy from jobs.jobs
where name in ('kid', 'grandkid') or id = :'parent' order by name, close_policy nulls first;
select jobs.complete(:'kid', :kid_claim) as stale_settle_lands;

-- A cancelled parent: the same.
select jobs.enqueue('parent', '{}', id => '00000000-0000-0000-0000-0000000000a3') is not null as enqueued;
select id as parent, claim as parent_claim from jobs.claim('w', array['default']) \gset
select (jobs.spawn(:'parent', :parent_claim, '{"name": "kid2", "child_key": "x", "queue": "later"}')).deduped;
select jobs.cancel(:'parent');
select state from jobs.jobs where name = 'kid2';

-- A producer attaches a child to a live parent of its tenant (jobs.enqueue(..., parent_id));
-- to a finished one, or another tenant's, it is refused, and nothing lands.
select jobs.enqueue('parent', '{}', queue => 'later', id => '00000000-0000-0000-0000-0000000000a4') is not null as enqueued;
select id as parent from jobs.jobs where name = 'parent' and state = 'ready' \gset
select count(*) as before from jobs.jobs \gset
select jobs.enqueue('kid3', parent_id => :'parent') is not null as attached;
select children_live from jobs.jobs where id = :'parent';
select count(*) from jobs.enqueue_batch(jsonb_build_array(
  jsonb_build_object('name', 'kid3', 'parent_id', :'parent', 'close_policy', 'abandon'),
  jsonb_build_object('name', 'kid3', 'parent_id', :'parent')));
select children_live from jobs.jobs where id = :'parent';
select close_policy, count(*) from jobs.jobs where parent_id = :'parent' group by 1 order by 1;
select jobs.enqueue('kid3', parent_id => (select id from jobs.jobs where name = 'parent' and state = 'dead'));
select jobs.enqueue('kid3', tenant_id => 'acme', parent_id => :'parent');
select count(*) from jobs.enqueue_batch('[{"name": "kid3", "close_policy": "terminate"}]');
select count(*) from jobs.enqueue_batch(jsonb_build_array(
  jsonb_build_object('name', 'kid3', 'parent_id', :'parent', 'close_policy', 'orphan')));
select count(*) - :before as added from jobs.jobs;

-- Retention keeps a child while its parent is live: a parent that runs again (here after its
-- lease lapsed) and spawns the same key gets the child back, completed, with its result,
-- however old it is. Once the parent has finished, the child goes by its own retention.
select jobs.enqueue('keeper', '{}', queue => 'fam', id => '00000000-0000-0000-0000-0000000000b1') is not null as enqueued;
select id as parent, claim as parent_claim from jobs.claim('w', array['fam']) \gset
select (jobs.spawn(:'parent', :parent_claim, '{"name": "only", "child_key": "only", "queue": "fam"}')).id as only_child \gset
select id as kid, claim as kid_claim from jobs.claim('w', array['fam']) \gset
select jobs.complete(:'kid', :kid_claim, '{"done": 1}') as completed;
set pg_jobs.clock_offset = '8d';
select count(*) > 0 as swept from jobs.sweep();
select state, result from jobs.jobs where id = :'only_child';
select id as parent, claim as parent_claim from jobs.claim('w', array['fam']) \gset
select (s).id = :'only_child' as same_child, (s).deduped, c.state, c.result
from jobs.spawn(:'parent', :parent_claim, '{"name": "only", "child_key": "only", "queue": "fam"}') as s
join jobs.jobs as c on c.id = (s).id;
select status, children->0->'result' as result from jobs.await_children(:'parent', :parent_claim);
select jobs.complete(:'parent', :parent_claim) as parent_completed;
set pg_jobs.clock_offset = '16d';
select count(*) > 0 as swept from jobs.sweep();
select count(*) as family_left from jobs.jobs where queue = 'fam';
reset pg_jobs.clock_offset;

-- A parent exists before its children: a job its own parent, or two jobs naming each other in
-- one call, are refused (a cycle's close policy would never end), and nothing lands.
select count(*) as before from jobs.jobs \gset
select jobs.enqueue('loop', id => '00000000-0000-0000-0000-0000000000c1',
                    parent_id => '00000000-0000-0000-0000-0000000000c1');
select count(*) from jobs.enqueue_batch('[
  {"name": "a", "id": "00000000-0000-0000-0000-0000000000c2", "parent_id": "00000000-0000-0000-0000-0000000000c3"},
  {"name": "b", "id": "00000000-0000-0000-0000-0000000000c3", "parent_id": "00000000-0000-0000-0000-0000000000c2"}]');
select count(*) - :before as added from jobs.jobs;

-- A chain 1,000 generations deep, its root cancelled: every descendant is cancelled by one
-- statement, with no recursion per generation (a 700-deep chain overflowed the stack), and
-- each count of live children ends at 0.
do $$
declare
  v uuid := (jobs.enqueue('link', queue => 'chain')).id;
begin
  for i in 1 .. 1000 loop
    v := (jobs.enqueue('link', queue => 'chain', parent_id => v)).id;
  end loop;
end
$$;
select jobs.cancel((select id from jobs.jobs where queue = 'chain' and parent_id is null));
select state, count(*) from jobs.jobs where queue = 'chain' group by state;
select count(*) filter (where children_live <> 0) as still_counted from jobs.jobs where queue = 'chain';

-- A parent of 5,000 children failed: its children cancelled in one statement and its count moved
-- once (it was moved once per child, 5,000 new versions of one row, each found by walking the
-- ones before: the square of the family's size).
select jobs.enqueue('big', queue => 'wide', max_attempts => 1) is not null as enqueued;
select id as parent, claim as parent_claim from jobs.claim('w', array['wide']) \gset
select count(*) from jobs.enqueue_batch((
  select jsonb_agg(jsonb_build_object('name', 'leaf', 'queue', 'leaves', 'parent_id', :'parent'))
  from generate_series(1, 5000)));
select children_live from jobs.jobs where id = :'parent';
select jobs.fail(:'parent', :parent_claim, 'gave up');
select state, count(*) from jobs.jobs where queue = 'leaves' group by state;
select children_live from jobs.jobs where id = :'parent';

-- A child keeps its key (child_key), which only jobs.spawn sets: a producer's spec carrying
-- one is refused, and nothing of it lands.
select jobs.enqueue('keeper', queue => 'keys') is not null as enqueued;
select id as keeper, claim as keeper_claim from jobs.claim('w', array['keys']) \gset
select (jobs.spawn(:'keeper', :keeper_claim, '{"name": "kept", "child_key": "order-7", "queue": "keys"}')).action;
select name, child_key from jobs.jobs where parent_id = :'keeper';
select count(*) from jobs.enqueue_batch('[{"name": "sneak", "child_key": "order-7", "queue": "keys"}]');
select count(*) from jobs.jobs where name = 'sneak';
