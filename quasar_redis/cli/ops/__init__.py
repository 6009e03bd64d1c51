"""The operator commands of ``quasar``: look at queues, jobs and workers; retry, cancel, promote,
purge, pause and resume; list and change periodic schedules; show and set a queue's flow
control limits; move a tagged namespace's keys to their current layout (``register`` adds them
to the ``quasar`` group)."""

from __future__ import annotations

import click

from ._batches import batch
from ._bulk import cancel, promote, purge, retry
from ._fleet import info, pause, queues, resume, workers
from ._jobs import job, jobs
from ._limits import limits
from ._migrate import migrate_keys_command
from ._schedules import schedules

COMMANDS = (
    queues,
    info,
    jobs,
    job,
    retry,
    cancel,
    promote,
    purge,
    pause,
    resume,
    workers,
    schedules,
    limits,
    batch,
    migrate_keys_command,
)


def register(group: click.Group) -> None:
    """Add every operator command to ``group``."""
    for command in COMMANDS:
        group.add_command(command)
