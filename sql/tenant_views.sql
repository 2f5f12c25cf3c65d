-- What a tenant admin (jobs.grant_admin(role, tenant): sql/privileges.sql) reads: the rows of
-- its tenants only, in views of the same columns as jobs.jobs, jobs.attempts, jobs.steps and
-- jobs.events. They are security barriers, so a condition the reader adds (a function of its
-- own, say) runs on its tenants' rows only and learns nothing of another's. A role bound to no
-- tenant reads no rows here, so a binding lost (a role restored without its settings) shows
-- nothing rather than everything. jobs.jobs and the others stay as they were for admins and
-- DBAs: a security barrier stops conditions on operators that are not leakproof (the state
-- enum's = among them) from reaching an index, which only the tenant admin's queries pay.
create view jobs.tenant_jobs with (security_barrier = true) as
select j.* from jobs_data.jobs as j
where j.tenant_id = any((select jobs._tenants())::text[]);
comment on view jobs.tenant_jobs is 'jobs.jobs for a tenant admin: its tenants'' jobs only';

create view jobs.tenant_attempts with (security_barrier = true) as
select a.* from jobs_data.attempts as a
where exists (select from jobs_data.jobs as j
              where j.id = a.job_id and j.tenant_id = any((select jobs._tenants())::text[]));
comment on view jobs.tenant_attempts is 'jobs.attempts for a tenant admin: its tenants'' jobs'' only';

-- A run's steps: its first job's id is the run_id, and later jobs of the run carry it.
create view jobs.tenant_steps with (security_barrier = true) as
select s.* from jobs_data.steps as s
where exists (select from jobs_data.jobs as j
              where j.id = s.run_id and j.tenant_id = any((select jobs._tenants())::text[]))
   or exists (select from jobs_data.jobs as j
              where j.run_id = s.run_id and j.run_id <> j.id
                and j.tenant_id = any((select jobs._tenants())::text[]));
comment on view jobs.tenant_steps is 'jobs.steps for a tenant admin: its tenants'' runs'' only';

-- An event without a tenant is published for every tenant's jobs.
create view jobs.tenant_events with (security_barrier = true) as
select e.* from jobs_data.events as e
where (select jobs._tenants()) is not null
  and (e.tenant_id is null or e.tenant_id = any((select jobs._tenants())::text[]));
comment on view jobs.tenant_events is 'jobs.events for a tenant admin: its tenants'' and every tenant''s';
