"""A web dashboard of one namespace (``pip install 'quasar_redis[dashboard]'``).

``quasar dashboard --redis-url URL --namespace NS`` serves it alone (uvicorn); ``create_app``
makes the ASGI application to mount in a Starlette, FastAPI or Django (ASGI) application under
a path of your choosing, behind that application's own authentication. docs/dashboard.md shows
each page.
"""

from ._app import create_app
from ._security import starting

__all__ = ["create_app", "starting"]
