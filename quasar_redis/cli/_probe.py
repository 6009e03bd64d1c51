"""``quasar probe [livez|readyz|healthz]``: ask a worker's (or the dashboard's) health endpoint
on this host and exit 0 when it answers 200, else 1: the exec-style check for a host without
HTTP probes (Docker's ``HEALTHCHECK``, an exec probe; docs/deploy.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import click

from .._environment import HEALTH_PORT_VARIABLE

ENDPOINTS = ("livez", "readyz", "healthz")


@click.command()
@click.argument("endpoint", type=click.Choice(ENDPOINTS), default="readyz")
@click.option(
    "--port",
    envvar=HEALTH_PORT_VARIABLE,
    required=True,
    type=click.IntRange(1, 65535),
    help="The port of the endpoints (also QUASAR_HEALTH_PORT, as quasar worker --health-port).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Where the endpoints are.")
@click.option(
    "--timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds to wait for the answer.",
)
def probe(endpoint: str, port: int, host: str, timeout: float) -> None:
    """Exit 0 if http://HOST:PORT/ENDPOINT answers 200 (livez: the worker is live; readyz: it
    serves and reaches Redis; healthz: the dashboard reaches Redis), else print why and exit 1."""
    url = f"http://{host}:{port}/{endpoint}"
    try:
        urllib.request.urlopen(url, timeout=timeout).close()
        return
    except urllib.error.HTTPError as exc:
        why = _problems(exc.read()) or f"HTTP {exc.code}"
    except OSError as exc:  # refused, timed out, unreachable
        why = str(getattr(exc, "reason", exc))
    raise click.ClickException(f"{url}: {why}")


def _problems(body: bytes) -> str:
    """The problems a worker's report names, else the body's first line."""
    try:
        problems = json.loads(body).get("problems")
    except (ValueError, AttributeError):
        return body.decode(errors="replace").strip().split("\n")[0]
    return "; ".join(str(p) for p in problems) if isinstance(problems, list) else ""
