"""``manage.py pg_jobs_worker``: runs Django's tasks (PgJobsBackend) and the pg_jobs jobs of the
modules the PG_JOBS_MODULES setting names, until SIGTERM or SIGINT."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from pg_jobs import Worker, jobs_in
from pg_jobs.contrib import django as pgj
from pg_jobs.contrib.django.backend import task_job


class Command(BaseCommand):  # type: ignore[misc]
    help = "Runs Django's tasks and the pg_jobs jobs of PG_JOBS_MODULES until SIGTERM or SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", action="append", dest="queues", help="a queue to work (repeatable; default)")
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--shutdown-grace", type=float, default=10.0)
        parser.add_argument("--database", default="default", help="the DATABASES alias to work from")

    def handle(self, *args: Any, **options: Any) -> None:
        # Django's LOGGING may give the pg_jobs logger (or the root) a handler: then it is
        # used, and no second one prints each line again.
        if not logging.getLogger("pg_jobs").hasHandlers():
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        jobs = [j for m in getattr(settings, "PG_JOBS_MODULES", []) for j in jobs_in(vars(importlib.import_module(m)).values())]
        Worker(pgj.dsn(options["database"]), jobs=jobs, queues=options["queues"] or ["default"],
               concurrency=options["concurrency"], shutdown_grace=options["shutdown_grace"], resolve=task_job).run()
