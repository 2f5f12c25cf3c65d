"""The Django app: its system check, that each database checked has pg_jobs, the extension or
the SQL-only edition (``manage.py check --database default``, and before ``migrate``)."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks

from ...errors import INSTALL_HINT


def pg_jobs_installed(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """An error for each database checked that has no pg_jobs."""
    from django.db import connections

    found: list[checks.CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        with connection.cursor() as cursor:
            cursor.execute("select exists (select from pg_extension where extname = 'pg_jobs') "
                           "or to_regnamespace('jobs_config') is not null")
            (installed,) = cursor.fetchone()
        if not installed:
            found.append(checks.Error(f"database {alias!r} has no pg_jobs", hint=INSTALL_HINT,
                                      id="pg_jobs.E001"))
    return found


class PgJobsConfig(AppConfig):  # type: ignore[misc]
    name = "pg_jobs.contrib.django"
    label = "pg_jobs"
    verbose_name = "pg_jobs"

    def ready(self) -> None:
        checks.register(pg_jobs_installed, checks.Tags.database)
