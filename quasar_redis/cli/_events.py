"""``quasar events``: print (and follow) a namespace's event stream."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import click
import redis

from .._connect import sync_client
from .._environment import URL_VARIABLES
from .._keys import KeySpace
from .._urls import MEMORY_URL, redact, redact_text
from .._waits import block_ms
from ..errors import QuasarError
from ._options import url_checked

EVENTS_BLOCK_MS = 5_000


def format_event(entry_id: Any, fields: dict[Any, Any]) -> list[str]:
    """One stream entry as lines, one per job: UTC time (from the entry id), job, event, queue,
    attempt. An entry lists the jobs of one run of the same event in one call, space-separated;
    an event of a queue (a pause, a resume) is one line with no job.
    """
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    when = datetime.fromtimestamp(int(text.split("-")[0]) / 1000, tz=timezone.utc)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def get(name: str) -> str:
        value = fields.get(name.encode(), b"?")
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    event, queue = get("ev"), get("q")
    if b"job" not in fields:  # an event of the queue itself (QUEUE_EVENTS): a pause, a resume
        return [f"{stamp} event={event} queue={queue}"]
    jobs, attempts = get("job").split(" "), get("a").split(" ")
    attempts += ["?"] * (len(jobs) - len(attempts))
    return [
        f"{stamp} job={job} event={event} queue={queue} attempt={attempt}"
        for job, attempt in zip(jobs, attempts, strict=False)
    ]


def print_recent(client: Any, stream: str, count: int) -> Any:
    """Print the last ``count`` events, oldest first; returns the newest entry id (or 0-0)."""
    newest = client.xrevrange(stream, count=max(count, 1))
    lines = [line for entry in reversed(newest) for line in format_event(*entry)]
    for line in lines[max(0, len(lines) - count) :]:
        click.echo(line)
    return newest[0][0] if newest else b"0-0"


def follow_stream(client: Any, stream: str, last: Any) -> None:
    """Print every event after ``last`` as it arrives (XREAD BLOCK), until interrupted."""
    while True:
        block = block_ms(client, EVENTS_BLOCK_MS)  # the URL's socket_timeout wins
        reply = client.xread({stream: last}, block=block, count=1000)
        for _name, entries in reply or ():
            for entry_id, fields in entries:
                for line in format_event(entry_id, fields):
                    click.echo(line)
                last = entry_id


@click.command()
@click.option(
    "--redis-url",
    envvar=list(URL_VARIABLES),
    callback=url_checked(memory=True),
    help="Redis (also QUASAR_REDIS_URL, REDIS_URL).",
)
@click.option("--namespace", required=True, help="The namespace whose events to print.")
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Keep printing new events as they arrive (Ctrl-C stops).",
)
@click.option(
    "--count",
    "-n",
    default=10,
    show_default=True,
    type=click.IntRange(0),
    help="How many past events to print first.",
)
def events(redis_url: str | None, namespace: str, follow: bool, count: int) -> None:
    """Print a namespace's event stream: one line per state change (like tail [-f])."""
    if not redis_url or redis_url == MEMORY_URL:
        raise click.UsageError(
            "quasar events needs --redis-url (or QUASAR_REDIS_URL, REDIS_URL): "
            "an embedded server is empty"
        )
    try:
        stream = KeySpace(namespace).events
    except QuasarError as exc:
        raise click.BadParameter(str(exc), param_hint="--namespace") from None
    client = sync_client(redis_url, socket_timeout=EVENTS_BLOCK_MS / 1000 + 10)
    try:
        last = print_recent(client, stream, count)
        if follow:
            follow_stream(client, stream, last)
    except KeyboardInterrupt:
        pass
    except redis.RedisError as exc:
        raise click.ClickException(redact_text(f"Redis at {redact(redis_url)}: {exc}")) from None
    finally:
        client.close()
