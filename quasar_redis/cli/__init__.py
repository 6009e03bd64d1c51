"""The ``quasar`` command line (``main``), every command in this folder.

- ``_main``: the group, one-line errors; ``_options``: what the commands share; ``_config``:
  where a command's Redis and namespace come from (``--redis-url``, ``--namespace``, ``--app``).
- ``_showcase``: ``demo`` (``demo.py``, ``_demo_jobs.py``) and ``example`` (``example.py``).
- ``_worker``: ``worker`` (``_loading``: the ``MODULE:APP`` of it and of ``--app``);
  ``_events``: ``events``.
- ``_dashboard``: ``dashboard``; ``_acl``: ``acl``; ``ops/``: the operator commands.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
