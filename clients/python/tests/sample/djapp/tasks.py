"""A Django app's tasks (tests/test_django.py), as a user writes them."""

from django.db import connection

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks package
    from django_tasks import task


@task()
def record(address, times=1):
    with connection.cursor() as cur:
        for _ in range(times):
            cur.execute("insert into sent (address) values (%s)", [address])
    return {"recorded": times}


@task(queue_name="other", priority=5)
def elsewhere():
    return None


@task(takes_context=True)
def attempt_of(context, label):
    """A task that takes Django's TaskContext: its result id is the job's id."""
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}
