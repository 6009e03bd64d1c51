"""A worker's HTTP endpoints, served from a thread of their own by the standard library's
``http.server`` (no extra needed): ``/livez`` and ``/readyz`` for orchestrators' probes (200 or
503, with the ``HealthReport`` as JSON), and the pages given, such as ``/metrics``
(``quasar_redis.prometheus.MetricsServer``). ``quasar worker --health-port`` and
``--metrics-port`` serve them; docs/deploy.md shows the probes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .._urls import redact_text
from ..client import Quasar
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ._health import HealthReport
    from ._lifecycle import Worker

#: A page: its status, body and content type, made at each request.
Page = Callable[[], tuple[int, bytes, str]]
JSON = "application/json"


class EndpointServer:
    """``worker``'s ``/livez``, ``/readyz`` and ``pages`` at ``http://addr:port``, until
    ``close()``. ``/readyz`` also PINGs Redis on ``client`` (default: a client of the worker's
    app of its own, made at the first PING), which ``close()`` closes. ConfigurationError when
    the port is taken."""

    def __init__(
        self,
        worker: Worker,
        port: int,
        addr: str = "0.0.0.0",
        *,
        client: Quasar | None = None,
        pages: Mapping[str, Page] | None = None,
    ) -> None:
        self.worker = worker
        self.client = client
        self._made = threading.Lock()
        self.pages: dict[str, Page] = {
            "/livez": lambda: self._probe(live=True),
            "/readyz": lambda: self._probe(live=False),
            **(pages or {}),
        }
        try:
            self.server = ThreadingHTTPServer((addr, port), _handler(self.pages))
        except OSError as exc:
            self.close_client()
            raise ConfigurationError(f"cannot serve on {addr}:{port}: {exc}") from None
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="quasar-endpoints", daemon=True
        )
        self.thread.start()

    def report(self) -> HealthReport:
        """The worker's health now (``WorkerHealth.report``), with a PING of Redis."""
        return self.worker.health.report(self._ping())

    def _ping(self) -> str | None:
        try:
            with self._made:  # (a cluster client reaches its nodes as it is made: not before)
                if self.client is None:
                    self.client = self.worker.app.new_client()
            self.client.redis.ping()
        except Exception as exc:  # any failure to answer means not ready, whatever its kind
            return redact_text(f"{type(exc).__name__}: {exc}")
        return None

    def _probe(self, *, live: bool) -> tuple[int, bytes, str]:
        # (liveness never asks Redis: an outage must not restart every worker)
        report = self.worker.health.report() if live else self.report()
        ok = report.live if live else report.ready
        return (200 if ok else 503), json.dumps(report.as_json()).encode() + b"\n", JSON

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
        self.close_client()

    def close_client(self) -> None:
        if self.client is not None:
            self.client.close()


def _handler(pages: Mapping[str, Page]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # (http.server's name)
            page = pages.get(self.path.split("?", 1)[0])
            if page is None:
                status, body, kind = 404, b"not found\n", "text/plain; charset=utf-8"
            else:
                status, body, kind = page()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes are not news
            pass

    return Handler


def serve_health(worker: Worker, port: int, addr: str = "0.0.0.0") -> EndpointServer:
    """Serve ``worker``'s ``/livez`` and ``/readyz`` (``EndpointServer``)."""
    return EndpointServer(worker, port, addr)
