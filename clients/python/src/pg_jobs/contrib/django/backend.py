"""A backend for Django's tasks framework on pg_jobs:

    TASKS = {"default": {"BACKEND": "pg_jobs.contrib.django.backend.PgJobsBackend",
                         "QUEUES": ["default"], "OPTIONS": {"database": "default"}}}

A task's job is named by the task's module path (``myapp.tasks.send_email``), in the queue of
its ``queue_name``, with its ``priority`` and ``run_after``; its payload holds the arguments.
``.enqueue()`` goes through Django's connection, so inside ``transaction.atomic`` the job
commits or rolls back with it. ``manage.py pg_jobs_worker`` runs the tasks; a task's result is
its job's (``get_result`` reads ``jobs.jobs``: the role needs ``jobs.grant_admin``). A task runs
outside the job's completing transaction (its ORM writes go through Django's connection), so it
runs at least once, as with Django's database backend; its own retries are the job type's
(``jobs.job_types``)."""

from __future__ import annotations

import datetime as dt
import importlib
import json
from typing import Any

from django.utils import timezone

try:  # Django 6
    from django.tasks import Task, TaskResult, TaskResultStatus  # type: ignore[import-not-found,unused-ignore]
    from django.tasks.backends.base import BaseTaskBackend  # type: ignore[import-not-found,unused-ignore]
    from django.tasks.base import TaskContext, TaskError  # type: ignore[import-not-found,unused-ignore]
    from django.tasks.exceptions import TaskResultDoesNotExist  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # the django-tasks package (Django 5.2)
    from django_tasks.base import Task, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskContext, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist

from . import connection
from ...enqueue import enqueue
from ...jobs import JobDefinition

_STATUS = {"ready": "READY", "delayed": "READY", "suspended": "READY", "running": "RUNNING",
           "completed": "SUCCESSFUL", "failed": "FAILED", "dead": "FAILED", "cancelled": "FAILED"}


class PgJobsBackend(BaseTaskBackend):  # type: ignore[misc]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options.get("database", "default")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        made = enqueue(connection(self.database), task.module_path, {"args": list(args), "kwargs": dict(kwargs)},
                       queue=task.queue_name, priority=task.priority, run_at=task.run_after)
        return self._result(task, str(made.id), "ready", timezone.now(), None, None, None, [], list(args), dict(kwargs))

    def get_result(self, result_id: str) -> Any:
        with connection(self.database).cursor() as cur:
            row = cur.execute(
                # as text: Django's connection leaves jsonb unparsed
                "select name, state::text, payload::text, result::text, enqueued_at, claimed_at, finished_at, "
                "last_error, attempt "
                "from jobs.jobs where id = %s", (result_id,)).fetchone()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        name, state, payload_text, result_text, enqueued_at, started_at, finished_at, error, attempt = row
        payload, result = json.loads(payload_text), json.loads(result_text) if result_text else None
        task = _task(name)
        if task is None:
            raise TaskResultDoesNotExist(result_id)
        errors = [TaskError(exception_class_path="builtins.Exception", traceback=error)] if error else []
        out = self._result(task, result_id, state, enqueued_at, started_at, finished_at, result, errors,
                           payload.get("args", []), payload.get("kwargs", {}), attempt)
        return out

    def _result(self, task: Any, result_id: str, state: str, enqueued_at: dt.datetime | None,
                started_at: dt.datetime | None, finished_at: dt.datetime | None, value: Any, errors: list[Any],
                args: list[Any], kwargs: dict[str, Any], attempts: int = 0) -> Any:
        result = TaskResult(task=task, id=result_id, status=getattr(TaskResultStatus, _STATUS[state]),
                            enqueued_at=enqueued_at, started_at=started_at, last_attempted_at=started_at,
                            finished_at=finished_at, args=args, kwargs=kwargs, backend=self.alias, errors=errors,
                            worker_ids=["pg_jobs"] * attempts)
        object.__setattr__(result, "_return_value", value)
        return result


def _task(name: str) -> Any:
    """The Task a job's name is the module path of, if it is one of an installed app's."""
    from django.apps import apps

    module_name, _, attr = name.rpartition(".")
    if not module_name or not any(module_name == a.name or module_name.startswith(a.name + ".")
                                  for a in apps.get_app_configs()):
        return None  # only modules of installed apps: a producer must not make a worker import anything
    found = getattr(importlib.import_module(module_name), attr, None)
    return found if isinstance(found, Task) else None


def task_job(name: str) -> JobDefinition[Any] | None:
    """The pg_jobs job that runs the Django task ``name`` (a module path), for the worker."""
    task = _task(name)
    if task is None:
        return None

    def arguments(payload: Any, ctx: Any) -> tuple[list[Any], dict[str, Any]]:
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        if task.takes_context:  # Django's TaskContext first: this attempt's result
            result = task.get_backend()._result(task, str(ctx.job.id), "running", ctx.job.enqueued_at,
                                                timezone.now(), None, None, [], args, kwargs, ctx.job.attempt)
            args.insert(0, TaskContext(task_result=result))
        return args, kwargs

    if getattr(task, "func", None) is not None and _is_async(task.func):
        async def run_async(payload: Any, ctx: Any) -> Any:
            args, kwargs = arguments(payload, ctx)
            return await task.acall(*args, **kwargs)
        return JobDefinition(name=name, handler=run_async, transactional=False)

    def run(payload: Any, ctx: Any) -> Any:
        from django.db import close_old_connections

        close_old_connections()
        try:
            args, kwargs = arguments(payload, ctx)
            return task.call(*args, **kwargs)
        finally:
            close_old_connections()
    return JobDefinition(name=name, handler=run, transactional=False)


def _is_async(func: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(func)
