"""Django: pg_jobs.contrib.django's enqueue on Django's connection inside transaction.atomic, and
its backend for Django's tasks framework (the django-tasks package on Django 5.2): a task
enqueued with Django's task API, rolled back (no job) and committed, run by the worker the
management command starts, its result read back through the task API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import django
import psycopg
import pytest
from django.conf import settings
from shared import killed_unless_exited, stopped

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "sample")


class Rollback(Exception):
    pass


def settings_for(dsn: str) -> dict[str, object]:
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    return {
        "DATABASES": {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": p["dbname"], "USER": p["user"],
                                  "HOST": p["host"], "PORT": p["port"]}},
        # Django 6 has the tasks framework; 5.2 has it from the django-tasks package, an app.
        "INSTALLED_APPS": [*(["django_tasks"] if django.VERSION < (6,) else []), "pg_jobs.contrib.django", "djapp"],
        "TASKS": {"default": {"BACKEND": "pg_jobs.contrib.django.backend.PgJobsBackend",
                              "QUEUES": ["default", "other"]}},
        "USE_TZ": True,
        # A handler of the application's for the pg_jobs logger (its lines are then printed once).
        **({"LOGGING": {"version": 1, "handlers": {"err": {"class": "logging.StreamHandler"}},
                        "loggers": {"pg_jobs": {"handlers": ["err"], "level": "INFO"}}}}
           if os.environ.get("PG_JOBS_TEST_DJANGO_LOGGING") else {}),
    }


@pytest.fixture
def django_db(dsn: str):
    sys.path.insert(0, SAMPLE)
    if not settings.configured:
        settings.configure(**settings_for(dsn))
        django.setup()
    else:  # another test's database: point Django at this one
        from django.db import connections
        connections.close_all()
        settings.DATABASES["default"]["NAME"] = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        connections["default"].settings_dict["NAME"] = settings.DATABASES["default"]["NAME"]
    yield dsn
    from django.db import connections
    connections.close_all()


def jobs(dsn: str, name: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("select state::text, queue, priority from jobs.jobs where name = %s", (name,)).fetchall()


def test_enqueue_on_djangos_connection_in_atomic(django_db: str) -> None:
    from django.db import transaction

    from pg_jobs.contrib import django as pgj
    with pytest.raises(Rollback), transaction.atomic():
        pgj.enqueue("plain_job", {"n": 1})
        raise Rollback
    assert jobs(django_db, "plain_job") == []
    with transaction.atomic():
        pgj.enqueue("plain_job", {"n": 2})
    assert len(jobs(django_db, "plain_job")) == 1


def test_djangos_task_api_runs_on_pg_jobs(django_db: str) -> None:
    from django.db import transaction
    from djapp.tasks import attempt_of, elsewhere, record
    with pytest.raises(Rollback), transaction.atomic():
        record.enqueue("rolled@example.com")
        raise Rollback
    assert jobs(django_db, "djapp.tasks.record") == []
    with transaction.atomic():
        result = record.enqueue("ada@example.com", times=2)
    other = elsewhere.enqueue()
    with_context = attempt_of.enqueue("first")
    assert jobs(django_db, "djapp.tasks.elsewhere") == [("ready", "other", 5)]
    assert result.status == "READY" and not result.is_finished
    env = {**os.environ, "PYTHONPATH": SAMPLE + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PG_JOBS_TEST_DJANGO_DSN": django_db}
    worker = subprocess.Popen([sys.executable, os.path.join(HERE, "django_manage.py"), "pg_jobs_worker",
                               "--queue", "default", "--queue", "other"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            result.refresh()
            if result.is_finished or time.monotonic() > deadline or worker.poll() is not None:
                break
            time.sleep(0.1)
        assert result.status == "SUCCESSFUL", worker.stderr.read() if worker.poll() is not None else result.status
        assert result.return_value == {"recorded": 2}
        with psycopg.connect(django_db) as conn:
            assert conn.execute("select count(*) from sent where address = 'ada@example.com'").fetchone() == (2,)
        other.refresh()
        assert other.id != result.id
        # A task that takes Django's TaskContext gets this attempt's (its result id is the job's).
        while not with_context.is_finished and time.monotonic() < deadline:
            time.sleep(0.1)
            with_context.refresh()
        assert with_context.return_value == {"label": "first", "attempt": 1, "id": with_context.id}
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0 and "Traceback" not in err, err
    finally:
        if worker.poll() is None:
            worker.kill()


def test_a_job_named_after_a_module_of_no_installed_app_is_not_imported(django_db: str) -> None:
    from pg_jobs.contrib.django.backend import task_job
    assert task_job("os.system") is None
    assert task_job("subprocess.run") is None
    assert task_job("djapp.tasks.record") is not None


def manage(dsn: str, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, os.path.join(HERE, "django_manage.py"), *args],
                            env={**os.environ, "PYTHONPATH": SAMPLE + os.pathsep + os.environ.get("PYTHONPATH", ""),
                                 "PG_JOBS_TEST_DJANGO_DSN": dsn, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_database_without_pg_jobs_is_told_with_its_fix_by_check_and_enqueue(django_db: str) -> None:
    """manage.py check --database passes with pg_jobs and names the fix without it; an enqueue
    there raises NotInstalled with the same hint (it raised psycopg's InvalidSchemaName)."""
    import pg_jobs
    from pg_jobs.contrib import django as pgj

    ok = manage(django_db, "check", "--database", "default")
    assert ok.wait(60) == 0, ok.communicate()
    with psycopg.connect(django_db, autocommit=True) as conn:
        conn.execute("drop extension pg_jobs cascade")
    check = manage(django_db, "check", "--database", "default")
    out, err = check.communicate(timeout=60)
    assert check.returncode != 0 and "pg_jobs.E001" in err and "CREATE EXTENSION pg_jobs" in err, err
    with pytest.raises(pg_jobs.NotInstalled) as raised:
        pgj.enqueue("plain_job", {"n": 1})
    assert raised.value.hint and "CREATE EXTENSION pg_jobs" in raised.value.hint


def test_the_worker_logs_each_line_once_through_djangos_logging(django_db: str) -> None:
    """With LOGGING giving the pg_jobs logger a handler, manage.py pg_jobs_worker adds none of
    its own: its start and stop are printed once each (they were printed twice)."""
    worker = manage(django_db, "pg_jobs_worker", PG_JOBS_TEST_DJANGO_LOGGING="1")
    with killed_unless_exited(worker):
        deadline = time.monotonic() + 30
        with psycopg.connect(django_db, autocommit=True) as conn:
            while time.monotonic() < deadline and not conn.execute(
                    "select from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() "
                    "and query like '%jobs.%'").fetchall():
                time.sleep(0.1)
        err = stopped(worker)
    assert worker.returncode == 0, err
    assert err.count("pg_jobs worker started") == 1 and err.count("pg_jobs worker stopped") == 1, err
