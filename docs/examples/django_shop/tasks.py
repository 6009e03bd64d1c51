"""The App and its tasks. Views import the tasks to enqueue them; the worker loads this module::

    DJANGO_SETTINGS_MODULE=django_shop.settings quasar worker django_shop.tasks:app

Django is set up first, so that tasks may use the ORM in the worker as in the views.
"""

from __future__ import annotations

import os

import django
from django.conf import settings

from quasar_redis import App

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_shop.settings")
django.setup()

app = App(settings.QUASAR_REDIS_URL, namespace=settings.QUASAR_NAMESPACE)


@app.task(queue="default", max_attempts=3)
def add(a: int, b: int) -> int:
    return a + b
