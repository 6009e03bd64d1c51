"""The dashboard's live parts, read anew by the pages and by scrapers: the queues' counts
(JSON), the charts (an HTML part), ``/metrics`` and the ``/healthz`` probe."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from .. import _reading as reading
from .._keys import NAME_RE
from .._reading import arun
from .._urls import redact_text
from .._views import slots_of
from . import _data as data
from ._actions import Problem, refusal
from ._charts import charts as charts_of
from ._security import SECURITY_HEADERS

if TYPE_CHECKING:
    from ._app import Dashboard


async def counts(dashboard: Dashboard, request: Request) -> Response:
    infos = await dashboard.queue_infos()
    return JSONResponse(data.counts_json(infos), headers={"cache-control": "no-store"})


async def charts(dashboard: Dashboard, request: Request) -> Response:
    queue = request.query_params.get("queue") or None
    if queue is not None and not NAME_RE.match(queue):
        return dashboard.problem(request, Problem(404, "No such queue.", queue))
    charts = await charts_of(dashboard.client, queue)
    html = dashboard.templates.get_template("_charts.html").render(charts=charts)
    return HTMLResponse(html, headers=SECURITY_HEADERS)


async def metrics(dashboard: Dashboard, request: Request) -> Response:
    try:  # optional (quasar_redis[prometheus]): imported only when asked for
        prometheus: Any = importlib.import_module("quasar_redis.prometheus")
    except ImportError as exc:
        return refusal(str(exc), 501)
    infos = await dashboard.queue_infos()
    workers = await arun(dashboard.client, reading.workers(dashboard.client.calls))
    flows = await data.flows(dashboard.client, [info.name for info in infos])
    families = prometheus.depth_families(infos) + prometheus.flow_families(flows)
    families += prometheus.slot_families(slots_of(workers))
    registry = prometheus.registry_of(lambda: families, dashboard.namespace)
    body, kind = prometheus.exposition(registry)
    return Response(body, headers={"content-type": kind})


async def healthz(dashboard: Dashboard, request: Request) -> Response:
    """200 while Redis answers, else 503: the dashboard's probe (docs/deploy.md)."""
    try:
        await dashboard.client.redis.ping()
    except Exception as exc:  # any failure to answer means not ready, whatever its kind
        problem = redact_text(f"Redis does not answer: {type(exc).__name__}: {exc}")
        body = {"ready": False, "problems": [problem]}
        return JSONResponse(body, status_code=503, headers={"cache-control": "no-store"})
    return JSONResponse({"ready": True, "problems": []}, headers={"cache-control": "no-store"})
