"""Django (``pip install pg-jobs[django]``): add ``"pg_jobs.contrib.django"`` to
INSTALLED_APPS for

- ``pg_jobs.contrib.django.enqueue(job, payload, using="default", **options)``: enqueue on
  Django's own connection, so inside ``transaction.atomic`` the job commits (or not) with it;
- ``PgJobsBackend``, a backend for Django's tasks framework (``django.tasks`` in Django 6; the
  ``django-tasks`` package before it): ``@task`` functions and ``.enqueue()`` run on pg_jobs;
- ``manage.py pg_jobs_worker``, a worker for those tasks and for the pg_jobs jobs the
  ``PG_JOBS_MODULES`` setting names.

Needs Django's psycopg 3 backend (``django.db.backends.postgresql`` with psycopg installed)."""

from __future__ import annotations

from typing import Any

import psycopg

from ...enqueue import Enqueued
from ...enqueue import enqueue as _enqueue
from ...jobs import JobDefinition


def connection(using: str = "default") -> psycopg.Connection[Any]:
    """The psycopg connection under Django's connection ``using``, in its transaction."""
    from django.db import connections

    wrapper = connections[using]
    wrapper.ensure_connection()
    conn = wrapper.connection
    if not isinstance(conn, psycopg.Connection):
        raise TypeError("pg_jobs.contrib.django: the database must use Django's postgresql backend on psycopg 3")
    return conn


def dsn(using: str = "default") -> str:
    """A libpq connection string for Django's database ``using`` (for a worker)."""
    from django.db import connections

    params = dict(connections[using].get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in params.items() if isinstance(v, (str, int))})


def enqueue(job: JobDefinition[Any] | str, payload: Any = None, *, using: str = "default", **options: Any) -> Enqueued:
    """pg_jobs.enqueue on Django's connection ``using``: inside ``transaction.atomic`` the job
    commits or rolls back with it."""
    return _enqueue(connection(using), job, payload, **options)
