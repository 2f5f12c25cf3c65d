//! Tests that run inside the server (`cargo pgrx test`): internals, and every error code
//! raised with the SQLSTATE that `error.rs` documents. Each test runs in its own transaction,
//! rolled back at the end.

use pgrx::prelude::*;

#[pg_schema]
mod tests {
    use crate::error::JobError;
    use pgrx::prelude::*;

    /// The SQLSTATE that `sql` raises, or None when it succeeds.
    fn sqlstate_of(sql: &str) -> Option<String> {
        Spi::run(
            "create or replace function pg_temp.sqlstate_of(p_sql text) returns text
             language plpgsql as $$
             begin execute p_sql; return null;
             exception when others then return sqlstate; end $$",
        )
        .unwrap();
        Spi::get_one_with_args::<String>("select pg_temp.sqlstate_of($1)", &[sql.into()]).unwrap()
    }

    fn count(sql: &str) -> i64 {
        Spi::get_one::<i64>(sql).unwrap().unwrap()
    }

    /// Enqueues a job named `name` and claims it; answers (id, claim token) as text.
    fn enqueue_and_claim(name: &str, max_attempts: i32) -> (String, i64) {
        Spi::run_with_args(
            "select jobs.enqueue($1, max_attempts => $2, queue => 'pgtest')",
            &[name.into(), max_attempts.into()],
        )
        .unwrap();
        let id = Spi::get_one::<String>(
            "select id::text from jobs.claim('w', array['pgtest'], 1) limit 1",
        )
        .unwrap()
        .unwrap();
        let claim = Spi::get_one_with_args::<i64>(
            "select claim from jobs.jobs where id = $1::uuid",
            &[id.as_str().into()],
        )
        .unwrap()
        .unwrap();
        (id, claim)
    }

    fn lapse(id: &str) {
        Spi::run_with_args(
            "update jobs.jobs set lease_expires_at = now() - interval '1 second', lease_scan_at = now() - interval '1 second' where id = $1::uuid",
            &[id.into()],
        )
        .unwrap();
    }

    #[pg_test]
    fn error_codes_are_listed_once_each() {
        assert_eq!(
            count("select count(*) from jobs.error_codes()"),
            JobError::ALL.len() as i64
        );
        assert_eq!(
            count("select count(distinct sqlstate) from jobs.error_codes()"),
            JobError::ALL.len() as i64
        );
    }

    #[pg_test]
    fn lease_lost_is_raised_by_assert_claim_when_not_held() {
        let (id, claim) = enqueue_and_claim("assert_me", 3);
        assert_eq!(
            sqlstate_of(&format!("select jobs.assert_claim('{id}', {claim})")),
            None
        );
        assert_eq!(
            sqlstate_of(&format!("select jobs.assert_claim('{id}', {})", claim + 1)).as_deref(),
            Some(JobError::LeaseLost.sqlstate())
        );
        lapse(&id);
        assert_eq!(
            sqlstate_of(&format!("select jobs.assert_claim('{id}', {claim})")).as_deref(),
            Some(JobError::LeaseLost.sqlstate())
        );
    }

    #[pg_test]
    fn duplicate_job_is_raised_under_on_conflict_error_and_changes_nothing() {
        Spi::run("select jobs.enqueue('dup', idempotency_key => 'k1')").unwrap();
        let before = count("select count(*) from jobs.jobs");
        assert_eq!(
            sqlstate_of(
                "select jobs.enqueue('dup', idempotency_key => 'k1', on_conflict => 'error')"
            )
            .as_deref(),
            Some(JobError::DuplicateJob.sqlstate())
        );
        // In a batch, the refusal of one spec takes back the specs inserted before it.
        assert_eq!(
            sqlstate_of(
                r#"select * from jobs.enqueue_batch('[{"name": "fresh"},
                   {"name": "dup", "idempotency_key": "k1", "on_conflict": "error"}]')"#
            )
            .as_deref(),
            Some(JobError::DuplicateJob.sqlstate())
        );
        assert_eq!(count("select count(*) from jobs.jobs"), before);
    }

    #[pg_test]
    fn bad_arguments_raise_22023_or_22004_and_change_nothing() {
        Spi::run("select jobs.enqueue('seed')").unwrap();
        let before = count("select count(*) from jobs.jobs");
        let null = Some(JobError::NullValueNotAllowed.sqlstate());
        let invalid = Some(JobError::InvalidParameterValue.sqlstate());
        for (sql, want) in [
            ("select jobs.enqueue(null)", null),
            ("select jobs.enqueue('x', payload => null)", null),
            ("select jobs.enqueue('x', queue => '')", invalid),
            ("select jobs.enqueue(repeat('x', 201))", invalid),
            ("select jobs.enqueue('x', max_attempts => 0)", invalid),
            ("select jobs.enqueue('x', on_conflict => 'ignore')", invalid),
            (
                "select jobs.enqueue('x', idempotency_key => repeat('k', 513))",
                invalid,
            ),
            ("select jobs.enqueue_batch(null)", null),
            ("select jobs.enqueue_batch('{}')", invalid),
            (
                r#"select jobs.enqueue_batch('[{"name": "a"}, 3]')"#,
                invalid,
            ),
            (
                r#"select jobs.enqueue_batch('[{"name": "a", "prority": 3}]')"#,
                invalid,
            ),
            (
                r#"select jobs.enqueue_batch('[{"name": "a", "priority": "high"}]')"#,
                invalid,
            ),
            (
                r#"select jobs.enqueue_batch('[{"name": "a"}, {"payload": {}}]')"#,
                null,
            ),
            ("select jobs.claim(null)", null),
            ("select jobs.claim('w', array[]::text[])", invalid),
            ("select jobs.claim('w', null)", null),
            ("select jobs.claim('w', max_jobs => 0)", invalid),
            ("select jobs.claim('w', max_jobs => 1001)", invalid),
            ("select jobs.claim('w', lease => '-1 second')", invalid),
            ("select jobs.claim('w', lease => '100 years')", invalid),
            ("select jobs.enqueue('x', run_at => 'infinity')", invalid),
            ("select jobs.enqueue('x', run_at => '-infinity')", invalid),
            ("select jobs.enqueue('x', tenant_id => '')", invalid),
            (
                "select jobs.enqueue('x', concurrency_key => repeat('c', 201))",
                invalid,
            ),
            ("select jobs.claim(repeat('w', 201))", invalid),
            (
                "select jobs.heartbeat(gen_random_uuid(), 1, '8 days')",
                invalid,
            ),
            (
                "select jobs.fail(gen_random_uuid(), 1, 'e', retry_at => 'infinity')",
                invalid,
            ),
            (
                "select jobs.snooze(gen_random_uuid(), 1, 'infinity')",
                invalid,
            ),
            ("select jobs.publish('e', ttl => '100 years')", invalid),
            ("select jobs.publish('e', ttl => null)", null),
            ("select jobs.pause_queue('no_such_queue')", invalid),
            ("select jobs.resume_queue(null)", null),
            ("select jobs.sweep(0)", invalid),
            ("select jobs.heartbeat(null, 1)", null),
            (
                "select jobs.heartbeat(gen_random_uuid(), 1, '0 seconds')",
                invalid,
            ),
            ("select jobs.complete(gen_random_uuid(), null)", null),
            (
                "select jobs.complete_many(array[gen_random_uuid()], array[]::bigint[])",
                invalid,
            ),
            ("select jobs.complete_many(null, null)", null),
            ("select jobs.fail(gen_random_uuid(), 1, null)", null),
            ("select jobs.snooze(gen_random_uuid(), 1, null)", null),
            ("select jobs.assert_claim(null, 1)", null),
        ] {
            assert_eq!(sqlstate_of(sql).as_deref(), want, "{sql}");
        }
        assert_eq!(count("select count(*) from jobs.jobs"), before);
        assert_eq!(
            count("select count(*) from jobs.jobs where state <> 'ready'"),
            0
        );
    }

    #[pg_test]
    fn exponential_backoff_doubles_then_caps_and_jitter_only_shortens() {
        let secs = |attempt: i32| {
            Spi::get_one_with_args::<f64>(
                "select extract(epoch from jobs._backoff('exponential', '2 seconds', '60 seconds', 0, $1))::float8",
                &[attempt.into()],
            )
            .unwrap()
            .unwrap()
        };
        assert_eq!(secs(1), 2.0);
        assert_eq!(secs(2), 4.0);
        assert_eq!(secs(5), 32.0);
        assert_eq!(secs(6), 60.0);
        assert_eq!(secs(1_000_000), 60.0);
        let fixed = Spi::get_one::<f64>(
            "select extract(epoch from jobs._backoff('fixed', '5 seconds', '1 hour', 0, 9))::float8",
        )
        .unwrap()
        .unwrap();
        assert_eq!(fixed, 5.0);
        let (lo, hi) = Spi::get_two::<f64, f64>(
            "select min(s), max(s) from (select extract(epoch from
               jobs._backoff('exponential', '10 seconds', '1 hour', 0.5, 1))::float8 as s
             from generate_series(1, 500)) x",
        )
        .unwrap();
        assert!(lo.unwrap() >= 5.0 && hi.unwrap() <= 10.0, "{lo:?} {hi:?}");
    }

    #[pg_test]
    fn policy_defaults_apply_to_names_without_a_job_type() {
        let (attempts, lease, dead) = Spi::get_three::<i32, String, bool>(
            "select max_attempts, lease::text, dead_letter from jobs._policy('unknown')",
        )
        .unwrap();
        assert_eq!(attempts, Some(25));
        assert_eq!(lease.as_deref(), Some("00:00:30"));
        assert_eq!(dead, Some(true));
        Spi::run("insert into jobs.job_types (name, max_attempts, lease) values ('short', 2, '5 minutes')")
            .unwrap();
        Spi::run("select jobs.enqueue('short', queue => 'pgtest')").unwrap();
        let (max_attempts, lease) = Spi::get_two::<i32, String>(
            "select max_attempts, (lease_expires_at - clock_timestamp() > interval '4 minutes')::text
             from jobs.claim('w', array['pgtest'])",
        )
        .unwrap();
        assert_eq!(max_attempts, Some(2));
        assert_eq!(lease.as_deref(), Some("true"));
    }

    #[pg_test]
    fn every_claim_hands_out_a_greater_token_and_a_new_attempt() {
        let (id, first) = enqueue_and_claim("retoken", 5);
        lapse(&id);
        let (second, attempt) = Spi::get_two::<i64, i32>(
            "select claim, attempt from jobs.claim('w2', array['pgtest'])",
        )
        .unwrap();
        assert!(second.unwrap() > first);
        assert_eq!(attempt, Some(2));
        // The first holder's token changes nothing any more.
        let landed = Spi::get_one::<bool>(&format!("select jobs.complete('{id}', {first})"))
            .unwrap()
            .unwrap();
        assert!(!landed);
    }

    #[pg_test]
    fn a_final_attempt_lapse_is_buried_by_the_claim_not_handed_out() {
        let (id, claim) = enqueue_and_claim("poison", 1);
        lapse(&id);
        assert_eq!(
            count("select count(*) from jobs.claim('w2', array['pgtest'])"),
            0
        );
        let (state, error) = Spi::get_two_with_args::<String, String>(
            "select state::text, last_error from jobs.jobs where id = $1::uuid",
            &[id.as_str().into()],
        )
        .unwrap();
        assert_eq!(state.as_deref(), Some("dead"));
        assert!(error.unwrap().contains("lease lapsed on the final attempt"));
        let landed = Spi::get_one::<bool>(&format!("select jobs.complete('{id}', {claim})"))
            .unwrap()
            .unwrap();
        assert!(!landed);
        // Where the job type does not dead-letter, the burial ends `failed`.
        Spi::run("insert into jobs.job_types (name, dead_letter) values ('poison2', false)")
            .unwrap();
        let (id2, _) = enqueue_and_claim("poison2", 1);
        lapse(&id2);
        assert_eq!(
            count("select count(*) from jobs.claim('w2', array['pgtest'])"),
            0
        );
        assert_eq!(
            count(&format!(
                "select count(*) from jobs.jobs where id = '{id2}' and state = 'failed'"
            )),
            1
        );
    }

    #[pg_test]
    fn snooze_uses_no_attempt_and_fail_retries_then_dead_letters() {
        let (id, claim) = enqueue_and_claim("snoozer", 2);
        let parked = Spi::get_one::<bool>(&format!(
            "select jobs.snooze('{id}', {claim}, now() - interval '1 second')"
        ))
        .unwrap()
        .unwrap();
        assert!(parked);
        let (claim, attempt) =
            Spi::get_two::<i64, i32>("select claim, attempt from jobs.claim('w', array['pgtest'])")
                .unwrap();
        assert_eq!(attempt, Some(1));
        let outcome = Spi::get_one::<String>(&format!(
            "select jobs.fail('{id}', {}, 'boom', retry_at => now() - interval '1 second')",
            claim.unwrap()
        ))
        .unwrap();
        assert_eq!(outcome.as_deref(), Some("retried"));
        let claim = Spi::get_one::<i64>("select claim from jobs.claim('w', array['pgtest'])")
            .unwrap()
            .unwrap();
        let outcome =
            Spi::get_one::<String>(&format!("select jobs.fail('{id}', {claim}, 'boom again')"))
                .unwrap();
        assert_eq!(outcome.as_deref(), Some("dead"));
        // A second settle with the same token is refused: NULL, nothing changed.
        let again =
            Spi::get_one::<String>(&format!("select jobs.fail('{id}', {claim}, 'x')")).unwrap();
        assert_eq!(again, None);
    }

    #[pg_test]
    fn operator_refusals_have_their_codes_and_change_nothing() {
        let (id, claim) = enqueue_and_claim("ops", 3);
        Spi::run(&format!(
            "select jobs.save_step('{id}', {claim}, 'one', '1')"
        ))
        .unwrap();
        let code = |sql: &str| sqlstate_of(sql);
        assert_eq!(
            code("select jobs.cancel(gen_random_uuid())").as_deref(),
            Some(JobError::JobNotFound.sqlstate())
        );
        assert_eq!(
            code(&format!("select jobs.requeue('{id}')")).as_deref(),
            Some(JobError::NotRequeueable.sqlstate())
        );
        assert_eq!(
            code(&format!("select jobs.promote('{id}')")).as_deref(),
            Some(JobError::NotPromotable.sqlstate())
        );
        let landed = Spi::get_one::<bool>(&format!("select jobs.complete('{id}', {claim})"))
            .unwrap()
            .unwrap();
        assert!(landed);
        assert_eq!(
            code(&format!("select jobs.cancel('{id}')")).as_deref(),
            Some(JobError::NotCancellable.sqlstate())
        );
        assert_eq!(
            code(&format!("select jobs.requeue('{id}', 'no_such_step')")).as_deref(),
            Some(JobError::InvalidParameterValue.sqlstate())
        );
        assert_eq!(
            count(&format!(
                "select count(*) from jobs.jobs j join jobs.steps s using (run_id)
                 where j.id = '{id}' and j.state = 'completed'"
            )),
            1
        );
    }

    #[pg_test]
    fn requeue_is_refused_with_duplicate_job_when_a_live_job_holds_the_key() {
        Spi::run("select jobs.enqueue('keyed', idempotency_key => 'k', queue => 'pgtest')")
            .unwrap();
        let (id, claim) = Spi::get_two::<String, i64>(
            "select id::text, claim from jobs.claim('w', array['pgtest'])",
        )
        .unwrap();
        let (id, claim) = (id.unwrap(), claim.unwrap());
        Spi::run(&format!("select jobs.complete('{id}', {claim})")).unwrap();
        Spi::run("select jobs.enqueue('keyed', idempotency_key => 'k', queue => 'pgtest')")
            .unwrap();
        assert_eq!(
            sqlstate_of(&format!("select jobs.requeue('{id}')")).as_deref(),
            Some(JobError::DuplicateJob.sqlstate())
        );
        assert_eq!(
            count(&format!(
                "select count(*) from jobs.jobs where id = '{id}' and state = 'completed'"
            )),
            1
        );
    }

    #[pg_test]
    fn step_and_event_writes_raise_lease_lost_when_not_held_and_write_nothing() {
        let (id, claim) = enqueue_and_claim("stale", 3);
        let stale = claim + 1;
        assert_eq!(
            sqlstate_of(&format!("select jobs.save_step('{id}', {stale}, 's')")).as_deref(),
            Some(JobError::LeaseLost.sqlstate())
        );
        assert_eq!(
            sqlstate_of(&format!(
                "select * from jobs.await_event('{id}', {stale}, 'e')"
            ))
            .as_deref(),
            Some(JobError::LeaseLost.sqlstate())
        );
        assert_eq!(count("select count(*) from jobs.steps"), 0);
        assert_eq!(
            count(&format!(
                "select count(*) from jobs.jobs where id = '{id}' and state = 'running'"
            )),
            1
        );
        let null = Some(JobError::NullValueNotAllowed.sqlstate());
        let invalid = Some(JobError::InvalidParameterValue.sqlstate());
        for (sql, want) in [
            (
                format!("select jobs.save_step('{id}', {claim}, null)"),
                null,
            ),
            (
                format!("select jobs.save_step('{id}', {claim}, repeat('s', 201))"),
                invalid,
            ),
            ("select * from jobs.get_step(null, 's')".to_string(), null),
            ("select jobs.publish(null)".to_string(), null),
            (
                "select jobs.publish('e', ttl => '0 seconds')".to_string(),
                invalid,
            ),
            (
                "select jobs.publish('e', key => repeat('k', 513))".to_string(),
                invalid,
            ),
            (
                format!("select * from jobs.await_event('{id}', {claim}, null)"),
                null,
            ),
            (
                format!("select * from jobs.await_event('{id}', {claim}, 'e', timeout => '-1 s')"),
                invalid,
            ),
            ("select jobs.cancel(null)".to_string(), null),
            ("select jobs.requeue(null)".to_string(), null),
            ("select jobs.promote(null)".to_string(), null),
        ] {
            assert_eq!(sqlstate_of(&sql).as_deref(), want, "{sql}");
        }
        assert_eq!(count("select count(*) from jobs.steps"), 0);
        assert_eq!(count("select count(*) from jobs.events"), 0);
    }

    #[pg_test]
    fn clock_offset_moves_the_time_pg_jobs_decides_by() {
        let shift = |offset: &str| {
            Spi::run(&format!("set pg_jobs.clock_offset = '{offset}'")).unwrap();
            Spi::get_one::<f64>(
                "select extract(epoch from jobs.clock() - clock_timestamp())::float8",
            )
            .unwrap()
            .unwrap()
        };
        assert!((shift("1h") - 3600.0).abs() < 5.0);
        assert!((shift("-2d") + 172_800.0).abs() < 5.0);
        assert!(shift("0").abs() < 5.0);
    }

    #[pg_test]
    fn settings_have_their_documented_defaults_and_the_prefix_is_reserved() {
        for (name, value) in [
            ("pg_jobs.sweep_interval", "1s"),
            ("pg_jobs.completed_retention", "7d"),
            ("pg_jobs.dead_retention", "30d"),
            ("pg_jobs.clock_offset", "0"),
        ] {
            let shown = Spi::get_one::<String>(&format!("show {name}")).unwrap();
            assert_eq!(shown.as_deref(), Some(value), "{name}");
        }
        assert_eq!(
            sqlstate_of("set pg_jobs.no_such_setting = 1").as_deref(),
            Some("42602")
        );
    }

    #[pg_test]
    fn heartbeats_leave_the_indexed_lease_scan_time_alone_until_it_passes() {
        let (id, claim) = enqueue_and_claim("beats", 3);
        let scan = || {
            Spi::get_two_with_args::<String, bool>(
                "select lease_scan_at::text, lease_scan_at <= lease_expires_at from jobs.jobs where id = $1::uuid",
                &[id.as_str().into()],
            )
            .unwrap()
        };
        let (first, ok) = scan();
        assert_eq!(ok, Some(true));
        Spi::run(&format!("select jobs.heartbeat('{id}', {claim})")).unwrap();
        assert_eq!(
            scan().0,
            first,
            "a heartbeat within the scan time must not move it"
        );
        // A shorter lease pulls the scan time back to the new expiry.
        Spi::run(&format!(
            "select jobs.heartbeat('{id}', {claim}, '1 second')"
        ))
        .unwrap();
        let (shorter, ok) = scan();
        assert_ne!(shorter, first);
        assert_eq!(ok, Some(true));
        // Once the scan time has passed, the next heartbeat moves it to the new expiry.
        Spi::run(&format!(
            "update jobs.jobs set lease_scan_at = now() - interval '1 second' where id = '{id}'"
        ))
        .unwrap();
        Spi::run(&format!("select jobs.heartbeat('{id}', {claim}, '1 hour')")).unwrap();
        assert_eq!(
            count(&format!(
                "select count(*) from jobs.jobs where id = '{id}' and lease_scan_at = lease_expires_at"
            )),
            1
        );
    }

    #[pg_test]
    fn completing_settles_delete_a_share_of_the_completed_jobs_past_retention() {
        // 300 jobs completed 8 days ago, past the default 7-day pg_jobs.completed_retention.
        Spi::run(
            "insert into jobs.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                    payload, enqueued_at, created_at, updated_at, finished_at)
             select g, g, 'old', 'pgtest', 'completed', 0, now(), 1, '{}', now(), now(), now(),
                    now() - interval '8 days'
             from (select gen_random_uuid() as g from generate_series(1, 300)) as s",
        )
        .unwrap();
        let old = || count("select count(*) from jobs.jobs where name = 'old'");
        // One settle in 8 prunes, at random: a fixed seed makes the draws the same every run.
        Spi::run("select setseed(0.25)").unwrap();
        for _ in 0..40 {
            let (id, claim) = enqueue_and_claim("new", 1);
            Spi::run(&format!("select jobs.complete('{id}', {claim})")).unwrap();
        }
        let after_singles = old();
        assert!(
            after_singles < 300,
            "40 completes deleted none of the expired jobs"
        );
        for _ in 0..30 {
            Spi::run(
                "select count(*) from jobs.enqueue_batch(
                   (select jsonb_agg(jsonb_build_object('name', 'new', 'queue', 'pgtest'))
                    from generate_series(1, 5)))",
            )
            .unwrap();
            Spi::run(
                "select count(*) from (select array_agg(id) as ids, array_agg(claim) as claims
                                       from jobs.claim('w', array['pgtest'], 5)) as c,
                                      jobs.complete_many(c.ids, c.claims)",
            )
            .unwrap();
        }
        assert!(
            old() < after_singles,
            "30 complete_many calls deleted none of the expired jobs"
        );
        // What retention still keeps is never touched.
        assert_eq!(
            count("select count(*) from jobs.jobs where name = 'new' and state = 'completed'"),
            190
        );
    }

    #[pg_test]
    fn a_refusals_context_keeps_its_public_function_and_the_callers_frames() {
        let context = "PL/pgSQL function jobs._raise(text,text,text) line 3 at RAISE\n\
                       SQL statement \"SELECT jobs._raise(p_code, ...)\"\n\
                       PL/pgSQL function jobs._refuse(text,uuid,text,text,text) line 13 at PERFORM\n\
                       SQL statement \"SELECT jobs._refuse('jobs.cancel', ...)\"\n\
                       PL/pgSQL function jobs.cancel(uuid) line 9 at PERFORM\n\
                       SQL statement \"SELECT jobs.cancel(v_id)\"\n\
                       PL/pgSQL function app.stop(uuid) line 4 at PERFORM";
        assert_eq!(
            crate::error_context::trimmed(context).as_deref(),
            Some(
                "PL/pgSQL function jobs.cancel(uuid) line 9 at PERFORM\n\
                 SQL statement \"SELECT jobs.cancel(v_id)\"\n\
                 PL/pgSQL function app.stop(uuid) line 4 at PERFORM"
            )
        );
        // Errors not raised by jobs._raise keep their whole context.
        assert_eq!(
            crate::error_context::trimmed(
                "PL/pgSQL function jobs.claim(text) line 3 at SQL statement"
            ),
            None
        );
    }
}
