"""The ``quasar`` command group: every command of the folder added to it.

- ``quasar demo``: a realistic mix of jobs through in-process workers, with live progress and a
  summary (``demo.py``).
- ``quasar example``: the quick start, every edge of the lifecycle by hand (``example.py``).
- ``quasar worker MODULE:APP``: run a worker for an application's tasks (``--burst``: until its
  queues are empty; ``--reload``: restarted on a code change); the app also ``--app``,
  ``QUASAR_APP``.
- ``quasar events``: print (and follow) a namespace's event stream.
- ``quasar probe``: exit 0 when a worker's (or the dashboard's) health endpoint answers 200.
- ``quasar queues``, ``info``, ``jobs``, ``job``, ``retry``, ``cancel``, ``promote``, ``purge``,
  ``pause``, ``resume``, ``workers``, ``schedules``, ``limits``: the operator commands (``ops``;
  docs/operations.md).

Every command of a namespace takes ``--redis-url``, ``--namespace`` and ``--app``, resolved by
one rule (``_config``; docs/operations.md, "Configuration"); without a URL ``demo`` and
``example`` run on an embedded in-memory server (``memory://``, fakeredis). Every URL shown is
redacted (``redis://:***@host``). Every error is one line ``Error: ...``: exit 2 for a usage
error (a bad option, URL, namespace or app path), exit 1 for a runtime error (Redis out of
reach or refusing the password, a refusal).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import __version__
from . import ops
from ._acl import acl
from ._dashboard import dashboard
from ._events import events
from ._options import Mistake
from ._probe import probe
from ._showcase import demo, example
from ._worker import worker


class OneLineErrors(click.Group):
    """A mistake on the command line is one line, ``Error: ...`` (exit 2), with where to look
    for help (not for a ``Mistake``: its words are the same from every command), rather than
    click's usage block above it."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        *,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = ""
            if exc.ctx is not None and not isinstance(exc, Mistake):  # (a Mistake: same words)
                where = f" (see '{exc.ctx.command_path} --help')"
            click.echo(f"Error: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)  # (an int: what ctx.exit(code) asked for)


@click.group(cls=OneLineErrors)
@click.version_option(__version__)
def main() -> None:
    """quasar_redis: a distributed job queue on Redis."""


for command in (acl, demo, example, worker, events, dashboard, probe):
    main.add_command(command)
ops.register(main)  # queues, info, jobs, job, retry, cancel, promote, purge, pause, limits, ...
