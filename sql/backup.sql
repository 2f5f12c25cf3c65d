-- Backups. pg_dump leaves out the rows of an extension's tables unless the extension marks
-- them as its configuration: these are marked, so a dump of a database using pg_jobs carries
-- its jobs, steps, events, job types and queues, and restoring it (CREATE EXTENSION, then the
-- rows) loses none of them. The 'default' queue's row comes with CREATE EXTENSION, so the dump
-- leaves it out: a paused default queue comes back resumed.
select pg_catalog.pg_extension_config_dump('jobs_data.jobs', '');
select pg_catalog.pg_extension_config_dump('jobs_data.steps', '');
select pg_catalog.pg_extension_config_dump('jobs_data.steps_seq_seq', '');
select pg_catalog.pg_extension_config_dump('jobs_data.events', '');
select pg_catalog.pg_extension_config_dump('jobs_data.job_types', '');
select pg_catalog.pg_extension_config_dump('jobs_data.attempts', '');
select pg_catalog.pg_extension_config_dump('jobs_data.attempts_seq_seq', '');
select pg_catalog.pg_extension_config_dump('jobs_data.queues', $$where queue <> 'default'$$);
