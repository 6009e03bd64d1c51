"""``quasar events``: print (and follow) a namespace's event stream."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

import click
import redis

from .._connect import sync_client
from .._keys import KeySpace
from .._partitions import recorded
from .._views import AUDIT, Event, decode_event
from .._waits import block_ms
from ..errors import QuasarError
from ._config import namespace_options
from ._options import json_option, runtime_error

EVENTS_BLOCK_MS = 5_000
FOLLOW_PAUSE_S = 0.2  # between the rounds of a follow of several streams that found nothing


def format_event(entry_id: Any, fields: dict[Any, Any]) -> list[str]:
    """One stream entry as lines, one per job: UTC time (from the entry id), job, event, queue,
    attempt; an event of a queue (a pause, a resume) is one line with no job."""
    return [event_line(event) for event in decode_event(entry_id, fields)]


def event_line(event: Event) -> str:
    when = datetime.fromtimestamp(event.at_ms / 1000, tz=timezone.utc)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if event.job is None:
        line = f"{stamp} event={event.event} queue={event.queue}"
        return line + (f" {event.message}" if event.message is not None else "")
    attempt = "?" if event.attempt is None else event.attempt
    line = f"{stamp} job={event.job} event={event.event} queue={event.queue} attempt={attempt}"
    if event.value is not None:  # a progress event
        line += f" value={event.value:g}"
    if event.event == AUDIT and event.message is not None:  # what, by whom, its outcome
        line += f" {event.message}"
    elif event.message is not None:  # a progress report's, an operator retry's reason
        line += f" message={json.dumps(event.message, ensure_ascii=False)}"
    return line


def event_json(event: Event) -> str:
    """An event as one line of JSON: its entry id, time, event, queue, job and attempt."""
    document: dict[str, Any] = {"id": event.id, "at": event.at} | {
        "event": event.event,
        "queue": event.queue,
        "job": event.job,
        "attempt": event.attempt,
    }
    if event.value is not None:  # a progress event
        document |= {"value": event.value, "message": event.message}
    elif event.message is not None:  # an operator retry's reason, an operator's action (audit)
        document["message"] = event.message
    return json.dumps(document, ensure_ascii=False)


def lines_of(entry_id: Any, fields: dict[Any, Any], as_json: bool) -> list[str]:
    show = event_json if as_json else event_line
    return [show(event) for event in decode_event(entry_id, fields)]


def print_recent(client: Any, stream: str, count: int, as_json: bool = False) -> Any:
    """Print the last ``count`` events, oldest first; returns the newest entry id (or 0-0)."""
    newest = client.xrevrange(stream, count=max(count, 1))
    lines = [
        line
        for entry_id, fields in reversed(newest)
        for line in lines_of(entry_id, fields, as_json)
    ]
    for line in lines[max(0, len(lines) - count) :]:
        click.echo(line)
    return newest[0][0] if newest else b"0-0"


def _entry_order(entry: tuple[Any, Any]) -> tuple[int, ...]:
    """An entry id (``<ms>-<seq>``) as numbers, to merge the entries of several streams."""
    return tuple(int(part) for part in entry[0].split(b"-"))


def streams_of(client: Any, namespace: str) -> list[str]:
    """The namespace's event stream, or with partitions (its record), every partition's."""
    keys = KeySpace(namespace)
    count = recorded(client.get(keys.partitions)) or 1
    return [keys.events] if count == 1 else [keys.part(i).events for i in range(count)]


def print_merged(client: Any, streams: list[str], count: int, as_json: bool) -> dict[str, Any]:
    """``print_recent`` of several streams (a partitioned namespace's): the last ``count``
    events of them all, by entry id; returns each stream's newest entry id (or 0-0)."""
    newest = {s: client.xrevrange(s, count=max(count, 1)) for s in streams}
    entries = sorted((e for got in newest.values() for e in got), key=_entry_order)
    lines = [line for entry_id, fields in entries for line in lines_of(entry_id, fields, as_json)]
    for line in lines[max(0, len(lines) - count) :]:
        click.echo(line)
    return {s: got[0][0] if got else b"0-0" for s, got in newest.items()}


def follow_merged(client: Any, last: dict[str, Any], as_json: bool) -> None:
    """``follow_stream`` of several streams: each read in turn without blocking (on a cluster
    they are on several slots, which one XREAD cannot block on), a short pause when all were
    quiet; each round's entries printed by entry id."""
    while True:
        entries = []
        for stream, after in last.items():
            for _name, got in client.xread({stream: after}, count=1000) or ():
                entries += got
                last[stream] = got[-1][0]
        for entry_id, fields in sorted(entries, key=_entry_order):
            for line in lines_of(entry_id, fields, as_json):
                click.echo(line)
        if not entries:
            time.sleep(FOLLOW_PAUSE_S)


def follow_stream(client: Any, stream: str, last: Any, as_json: bool = False) -> None:
    """Print every event after ``last`` as it arrives (XREAD BLOCK), until interrupted."""
    while True:
        block = block_ms(client, EVENTS_BLOCK_MS)  # the URL's socket_timeout wins
        reply = client.xread({stream: last}, block=block, count=1000)
        for _name, entries in reply or ():
            for entry_id, fields in entries:
                for line in lines_of(entry_id, fields, as_json):
                    click.echo(line)
                last = entry_id


@click.command()
@namespace_options
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
@json_option("Print each event as one line of JSON, for scripts.")
def events(redis_url: str, namespace: str, follow: bool, count: int, as_json: bool) -> None:
    """Print a namespace's event stream: one line per state change (like tail [-f]); with
    --json one JSON object per event, one per line."""
    client = sync_client(redis_url, socket_timeout=EVENTS_BLOCK_MS / 1000 + 10)
    try:
        streams = streams_of(client, namespace)
        if len(streams) > 1:
            lasts = print_merged(client, streams, count, as_json)
            if follow:
                follow_merged(client, lasts, as_json)
            return
        last = print_recent(client, streams[0], count, as_json)
        if follow:
            follow_stream(client, streams[0], last, as_json)
    except KeyboardInterrupt:
        pass
    except (redis.RedisError, QuasarError) as exc:
        raise runtime_error(exc, redis_url) or exc from None
    finally:
        client.close()
