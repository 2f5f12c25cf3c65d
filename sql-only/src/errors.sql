-- The SQL-only edition's list of documented errors: jobs.error_codes() of src/error.rs, whose
-- rows tests/test_sql_only.py holds these to.
create function jobs.error_codes()
returns table (name text, sqlstate text, meaning text)
language sql immutable strict parallel safe
as $$
  values
    ('lease_lost', 'PJ001', 'the claim is no longer held (lease lapsed, re-claimed or cancelled): roll back'),
    ('duplicate_job', 'PJ002', 'a live job of this name and tenant holds the idempotency key (on_conflict => ''error'', or requeue)'),
    ('job_not_found', 'PJ003', 'no job has this id'),
    ('not_requeueable', 'PJ004', 'only failed, dead, cancelled and completed jobs can be requeued'),
    ('not_cancellable', 'PJ005', 'only live jobs (ready, delayed, running, suspended) can be cancelled'),
    ('not_promotable', 'PJ006', 'only delayed jobs can be promoted'),
    ('not_deletable', 'PJ009', 'only a finished root job whose family is finished can be deleted (jobs.delete)'),
    ('invalid_parameter_value', '22023', 'a bad argument: empty, out of range, oversized or unknown'),
    ('null_value_not_allowed', '22004', 'NULL where a value is required'),
    ('serialization_failure', '40001', 'an idempotency key was taken and freed twice during one enqueue: retry the call'),
    ('tenant_not_allowed', 'PJ007', 'the role is bound to other tenants (jobs.grant_producer / grant_worker with a tenant)'),
    ('wait_needs_read_committed', 'PJ008', 'claim with wait runs in READ COMMITTED: a REPEATABLE READ or SERIALIZABLE snapshot never sees new work'),
    ('insufficient_privilege', '42501', 'the role holds pg_jobs rights through roles bound to tenants and through one bound to none: bind the role itself')
$$;
