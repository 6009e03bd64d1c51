"""What every operator command shares: its options, its client, its checks and its output.

Each command takes ``--redis-url``, ``--namespace`` and ``--app`` (resolved as every command
resolves them: ``.._config``) and ``--json``. ``Operator``
opens one client for the command and turns whatever goes wrong (Redis out of reach, a refused
password, a namespace or queue that does not exist, bad input) into one line ``Error: ...`` and
a non-zero exit: no traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
from rich.console import Console

from ..._connect import sync_client
from ..._environment import NAMESPACE_VARIABLE
from ..._keys import KeySpace, check_name
from ..._partition_ops import every_keys
from ..._partitions import recorded
from ..._reading import run, server_now
from ..._urls import redact
from ...client import Quasar
from ...errors import (
    ConfigurationError,
)
from .._config import namespace_options
from .._options import json_option, runtime_error

F = TypeVar("F", bound=Callable[..., Any])
CONNECT_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 15.0
#: exit code of a command that ran but could not do all it was asked (a refused retry, say)
PARTIAL = 1
PIPED_WIDTH = 240
ID_MAX_BYTES = 256


def operator_options(command: F) -> F:
    """``--redis-url``, ``--namespace`` and ``--app`` (``namespace_options``: no embedded
    server), and ``--json``."""
    return namespace_options(json_option()(command))


def _console(*, stderr: bool) -> Console:
    """A console; where it is not a terminal (a pipe, a file) and COLUMNS does not say, wide
    enough that a table's rows stay one line each."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, highlight=False, width=PIPED_WIDTH)
    return console


@dataclass
class Operator:
    """One operator command's connection to a namespace, and its output."""

    url: str
    namespace: str
    as_json: bool
    console: Console = field(default_factory=lambda: _console(stderr=False))
    err: Console = field(default_factory=lambda: _console(stderr=True))
    _client: Quasar | None = None

    @property
    def q(self) -> Quasar:
        if self._client is None:
            raw = sync_client(
                self.url,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=SOCKET_TIMEOUT_S,
            )
            try:  # (a namespace of several partitions is read as its record says)
                count = recorded(raw.get(KeySpace(self.namespace).partitions))
            except Exception:
                raw.close()
                raise
            self._client = Quasar.owning(
                raw, self.namespace, check_eviction_policy=False, partitions=count
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # what must exist ---------------------------------------------------------------------------

    def known_queues(self) -> set[str]:
        """Every queue name of the namespace (its ``queues`` set)."""
        return {
            m.decode() for k in every_keys(self.q.calls) for m in self.q.redis.smembers(k.queues)
        }

    def require_namespace(self) -> None:
        """A one-line error when nothing was ever enqueued in the namespace."""
        if not any(self.q.redis.exists(k.queues) for k in every_keys(self.q.calls)):
            raise click.ClickException(
                f"namespace {self.namespace!r} has no queues on {redact(self.url)}: nothing was "
                "ever enqueued in it (point at another with --namespace NAME, --app MODULE:APP "
                f"or {NAMESPACE_VARIABLE})"
            )

    def require_ids(self, job_ids: Sequence[str]) -> None:
        """A one-line error for an id no job can have (as enqueue refuses it)."""
        for job_id in job_ids:
            size = len(job_id.encode("utf-8", "surrogatepass"))
            if not 0 < size <= ID_MAX_BYTES or any(
                c.isspace() or not c.isprintable() for c in job_id
            ):
                raise click.BadParameter(
                    f"{job_id!r} is not a job id (1-{ID_MAX_BYTES} bytes, no whitespace or "
                    "control characters): nothing was changed",
                    param_hint="ID",
                )

    def require_queue(self, queue: str) -> str:
        """``queue`` if the namespace has it, else a one-line error naming those it has."""
        try:
            check_name(queue, "queue")
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="QUEUE") from None
        self.require_namespace()
        known = self.known_queues()
        if queue not in known:
            raise click.ClickException(
                f"no queue {queue!r} in namespace {self.namespace!r} "
                f"(its queues: {', '.join(sorted(known))})"
            )
        return queue

    def server_now(self) -> int:
        """Redis's clock, in ms (the clock every stored time is on)."""
        return run(self.q, server_now(self.q.calls))

    # output ------------------------------------------------------------------------------------

    def emit_json(self, document: Any) -> None:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))

    @property
    def interactive(self) -> bool:
        """Whether progress is worth drawing: a terminal on stderr, and no JSON asked for."""
        return not self.as_json and self.err.is_terminal


@contextlib.contextmanager
def operating(redis_url: str, namespace: str, as_json: bool) -> Iterator[Operator]:
    """The command's ``Operator``, closed at the end; every failure one line (see above)."""
    op = Operator(redis_url, namespace, as_json)
    try:
        yield op
    except (click.ClickException, click.exceptions.Exit, KeyboardInterrupt):
        raise
    except Exception as exc:
        failure = runtime_error(exc, redis_url)
        if failure is None:
            raise
        raise failure from None
    finally:
        with contextlib.suppress(Exception):
            op.close()


def done(changed_everything: bool) -> None:
    """Exit 1 when the command could not do all it was asked (each refusal already shown)."""
    if not changed_everything:
        sys.exit(PARTIAL)
