"""``quasar migrate-keys``: move a tagged namespace's keys from the layout of earlier versions,
``<prefix>:{<tag>}:<namespace>:``, to its root, ``<prefix>:{<tag>}/<namespace>:`` (_keys.py).

The old layout let a namespace named like a key of its tag's own namespace (``job``, ``q``...)
reach into that namespace's keys. The move is ``RENAMENX`` of each key, in SCAN pages of
``PAGE``, so that a key keeps its value and its time to live and nothing is overwritten. It is
refused, before anything moves, when the old keys cannot be told apart from the tag's own (the
namespace is a word of ``FAMILIES`` and the tag's namespace holds keys), when a key there is not
one a namespace has, when a key's new name is taken, while workers of the namespace are
registered, and when its record says it has several partitions (earlier versions wrote none: the
keys there are of one partition, which its clients would not look for at its root). Run it with
the namespace's producers and workers stopped; run again, it moves what is left (none: nothing to
do).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import click

from ..._keys import FAMILIES, SINGLES, KeySpace, check_name
from ..._partitions import recorded
from ...errors import ConfigurationError, InvalidArgument
from ._context import Operator, done, operating, operator_options

PAGE = 1000  # keys asked of each SCAN call, and renamed per pipeline at most


@dataclass(frozen=True, slots=True)
class KeyMove:
    """What a migration found under the old root and what it moved (none on a dry run)."""

    namespace: str
    tag: str
    old_root: str
    new_root: str
    found: int
    moved: int
    gone: int  # (expired or deleted between the SCAN and the RENAMENX: call records, say)
    left: int  # (their new name taken meanwhile: left where they were)
    dry_run: bool


def old_root(keys: KeySpace) -> str:
    """Where earlier versions kept a tagged namespace's keys."""
    return f"{keys.prefix}:{{{keys.tag}}}:{keys.namespace}:"


def is_suffix(suffix: str) -> bool:
    """Whether a key name after its root is one a namespace has."""
    word, colon, rest = suffix.partition(":")
    return (word in FAMILIES and bool(colon) and bool(rest)) or (suffix in SINGLES and not colon)


def scan(redis: Any, root: str) -> Iterator[list[bytes]]:
    """The keys under ``root``, in pages of at most ``PAGE`` (SCAN ... COUNT ``PAGE``)."""
    page: list[bytes] = []
    for key in redis.scan_iter(match=f"{root}*", count=PAGE):
        page.append(key)
        if len(page) == PAGE:
            yield page
            page = []
    if page:
        yield page


def refuse_ambiguous(redis: Any, keys: KeySpace) -> None:
    """Refuse a namespace whose old keys may be its tag's namespace's own."""
    if keys.namespace not in FAMILIES:
        return
    own = KeySpace(keys.tag, prefix=keys.prefix)
    held = [k for k in (f"{own.root}{word}" for word in SINGLES) if redis.exists(k)]
    if held:
        raise InvalidArgument(
            f"namespace {keys.namespace!r} cannot be moved: under the old layout its keys "
            f"({old_root(keys)}*) cannot be told apart from those of namespace {keys.tag!r}, "
            f"which holds keys ({held[0]}); move that namespace's jobs elsewhere first"
        )


def refuse_partitioned(redis: Any, keys: KeySpace) -> None:
    """Refuse a namespace of several partitions (by its record): no earlier version wrote a
    partition's keys, and keys of one partition moved to its root would be found by none of its
    clients."""
    count = recorded(redis.get(keys.partitions))
    if count is not None and count > 1:
        raise InvalidArgument(
            f"namespace {keys.namespace!r} has {count} partitions by its record "
            f"({keys.partitions}): earlier versions wrote no partition's keys, so there is "
            "nothing of its to move, and keys of one partition moved to its root would be "
            "found by none of its clients"
        )


def refuse_live_workers(redis: Any, keys: KeySpace) -> None:
    """Refuse while a worker of the namespace is registered, under either layout."""
    seconds, micros = redis.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    for root in (old_root(keys), keys.root):
        if redis.zcount(f"{root}workers", now, "+inf"):
            raise InvalidArgument(
                f"workers of namespace {keys.namespace!r} are registered ({root}workers): "
                "stop its workers and producers first (quasar workers lists them)"
            )


def check_page(redis: Any, keys: KeySpace, page: list[bytes]) -> None:
    """Refuse a page holding a key no namespace has, or one whose new name is taken."""
    start = len(old_root(keys).encode())
    foreign = [k for k in page if not is_suffix(k[start:].decode(errors="replace"))]
    if foreign:
        raise InvalidArgument(
            f"{foreign[0].decode(errors='replace')} is not a key of namespace "
            f"{keys.namespace!r} (nothing was moved)"
        )
    targets = [keys.root.encode() + k[start:] for k in page]
    if redis.exists(*targets):
        taken = next(k for k in targets if redis.exists(k))
        raise InvalidArgument(
            f"{taken.decode(errors='replace')} exists already: keys of namespace "
            f"{keys.namespace!r} are under both layouts (nothing was moved)"
        )


def migrate_keys(redis: Any, keys: KeySpace, *, dry_run: bool = False) -> KeyMove:
    """Move the keys of the tagged namespace ``keys`` from ``old_root`` to ``keys.root``,
    after every check passed (InvalidArgument saying why not, nothing moved)."""
    if not keys.tag or keys.tag == keys.namespace:
        raise InvalidArgument(
            f"namespace {keys.namespace!r} has no tag of its own: its keys did not move"
        )
    old = old_root(keys)
    refuse_partitioned(redis, keys)
    refuse_ambiguous(redis, keys)
    refuse_live_workers(redis, keys)
    found = 0
    for page in scan(redis, old):
        check_page(redis, keys, page)
        found += len(page)
    moved = gone = left = 0
    for page in () if dry_run else scan(redis, old):
        pipe = redis.pipeline(transaction=False)
        for k in page:
            pipe.renamenx(k, keys.root.encode() + k[len(old.encode()) :])
        replies = pipe.execute(raise_on_error=False)
        gone += sum(isinstance(r, Exception) for r in replies)
        moved += sum(r == 1 for r in replies)
        left += sum(r == 0 for r in replies)
    return KeyMove(keys.namespace, keys.tag, old, keys.root, found, moved, gone, left, dry_run)


def _name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A ``--tag`` / ``--key-prefix`` a key can hold, else a usage error (exit 2); an empty
    one is left to the command, which says what it means."""
    if not value:
        return value
    try:
        return check_name(value, param.name.replace("_", " ") if param.name else "name")
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("migrate-keys")
@operator_options
@click.option("--tag", required=True, callback=_name, help="The namespace's tag= (hash tag).")
@click.option(
    "--key-prefix",
    default="quasar",
    show_default=True,
    callback=_name,
    help="The clients' key_prefix=.",
)
@click.option("--dry-run", is_flag=True, help="Check and count the keys; move nothing.")
def migrate_keys_command(
    redis_url: str, namespace: str, as_json: bool, tag: str, key_prefix: str, dry_run: bool
) -> None:
    """Move a tagged namespace's keys from <prefix>:{TAG}:NAMESPACE: (earlier versions) to
    <prefix>:{TAG}/NAMESPACE:. Stop the namespace's workers and producers first."""
    with operating(redis_url, namespace, as_json) as op:
        report = migrate_keys(op.q.redis, KeySpace(namespace, tag, key_prefix), dry_run=dry_run)
        if as_json:
            op.emit_json(asdict(report))
        elif dry_run:
            click.echo(
                f"{report.found} keys under {report.old_root} would move to {report.new_root}"
            )
        else:
            show(op, report)
    done(not report.left)


def show(op: Operator, report: KeyMove) -> None:
    click.echo(f"moved {report.moved} keys from {report.old_root} to {report.new_root}")
    if report.gone:
        click.echo(f"{report.gone} keys went away meanwhile (expired or deleted)")
    if report.left:
        op.err.print(f"{report.left} keys left under {report.old_root}: their new name was taken")
