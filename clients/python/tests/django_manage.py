"""manage.py of the Django sample project (tests/test_django.py): settings from the test's
database, PG_JOBS_TEST_DJANGO_DSN."""

import os
import sys

import django
from django.conf import settings
from django.core.management import execute_from_command_line

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_django import settings_for  # noqa: E402

settings.configure(**settings_for(os.environ["PG_JOBS_TEST_DJANGO_DSN"]))
django.setup()
execute_from_command_line(sys.argv)
