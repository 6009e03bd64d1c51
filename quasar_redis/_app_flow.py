"""The queue limits an app declares (docs/flow-control.md): ``App.limit`` keeps them in
``queue_limits``; every worker of the app writes those of its queues to Redis as it starts
(``worker/_serving.py``), where operators may change them at run time."""

from __future__ import annotations

from typing import Any

from ._flow import KEEP, CapArg, RateArg
from ._flow_calls import limit_pairs
from ._keys import check_name
from .errors import InvalidArgument


class AppFlow:
    """What ``App`` does with queue limits."""

    #: The limits it declares, by queue: ``set_limits``' keyword arguments.
    queue_limits: dict[str, dict[str, Any]]

    def limit(
        self,
        queue: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        group_rate: RateArg = KEEP,
        group_concurrency: CapArg = KEEP,
    ) -> None:
        """Declare the limits of ``queue`` (as ``Quasar.set_limits`` takes them): every worker
        of the app that serves the queue sets them in Redis as it starts, so a deploy carries
        them; an operator's change at run time holds until the next start. InvalidArgument for
        a bad limit, before anything is declared."""
        check_name(queue, "queue")
        given = {
            "rate": rate,
            "concurrency": concurrency,
            "group_rate": group_rate,
            "group_concurrency": group_concurrency,
        }
        if not limit_pairs(False, **given):
            raise InvalidArgument("give at least one limit")
        declared = self.queue_limits.setdefault(queue, {})
        declared.update({name: value for name, value in given.items() if value is not KEEP})
