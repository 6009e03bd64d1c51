"""The dashboard's ASGI application: its routes, pages and actions (``create_app``)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import _reading as reading
from .. import _types as t
from .._keys import NAME_RE, check_name
from .._reading import arun
from .._urls import redact_text
from .._views import slots_of
from ..aio import AsyncQuasar
from ..errors import InvalidArgument, QuasarError
from . import _data as data
from ._actions import ACTIONS, LIMIT_ACTIONS, Actions, limits_asked, plausible_id, refusal
from ._security import (
    COOKIE,
    FIELD,
    HEALTH_PATH,
    BasicAuth,
    cross_site_reason,
    parse_credentials,
    token_of,
)

HERE = Path(__file__).parent
FORM_MAX = 16_384
COUNTS_MAX_AGE_S = 0.5  # bytes of an action's form
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
NOTICES = {
    "retried": "Job retried.",
    "cancelled": "Job cancelled ({n} dependents with it).",
    "promoted": "Job due now.",
    "retried-all": "{n} failed jobs retried.",
    "purged": "{n} jobs deleted.",
    "paused": "Queue paused.",
    "resumed": "Queue resumed.",
    "unchanged": "Nothing changed: it already was.",
    "refused": "Refused: {why}.",
    "not-found": "No job with that id.",
    "schedule-paused": "Schedule paused.",
    "schedule-resumed": "Schedule resumed.",
    "schedule-triggered": "Schedule triggered: job {job} enqueued.",
    "schedule-removed": "Schedule removed.",
    "schedule-missing": "No schedule with that name (it may have been removed).",
    "limits-set": "Limits set: every worker's next claim follows them.",
    "denied": (
        "Not allowed: the dashboard's Redis user lacks a permission this action needs "
        "({grant}); docs/security.md lists each role's."
    ),
}
PURGEABLE = frozenset(s.value for s in t.TERMINAL_STATUSES)
STATUS_ORDER = (
    t.Status.AVAILABLE,
    t.Status.SCHEDULED,
    t.Status.EXECUTING,
    t.Status.RETRYABLE,
    t.Status.BLOCKED,
    t.Status.COMPLETED,
    t.Status.DISCARDED,
    t.Status.CANCELLED,
    t.Status.EXPIRED,
)


def create_app(
    redis_url: str | None = None,
    namespace: str = "default",
    *,
    client: AsyncQuasar | None = None,
    read_only: bool = False,
    basic_auth: str | None = None,
    trusted_origins: Collection[str] = (),
    partitions: int | None = None,
) -> Any:
    """The dashboard of one namespace, as an ASGI application.

    Give it ``redis_url`` (a client is made at the first request and closed at shutdown) or an
    ``AsyncQuasar`` of your own as ``client``. ``read_only`` shows no action and refuses every
    POST. ``basic_auth`` (``"user:password"``) asks every request for those credentials: meant
    for the standalone server; mounted in an application, put it behind that application's own
    authentication instead. ``trusted_origins`` (``"https://ops.example.com"``) are accepted as
    the origin of an action besides the request's own host (a proxy that rewrites ``Host``).
    Mount it under any path (``Mount("/queues", app=create_app(...))``): its links follow.
    ``partitions``: the namespace's, for the client made of ``redis_url`` (docs/scaling.md).
    """
    if client is None and redis_url is None:
        raise InvalidArgument("create_app needs a redis_url or a client")
    if client is None:
        check_name(namespace, "namespace")
    if client is None and partitions is not None:  # (closed at shutdown, as one made later)
        client = AsyncQuasar.from_url(str(redis_url), namespace, partitions=partitions)
    dashboard = Dashboard(redis_url, namespace, client, read_only, set(trusted_origins))
    app: Any = Starlette(routes=dashboard.routes(), lifespan=dashboard.lifespan)
    if basic_auth is not None:
        user, password = parse_credentials(basic_auth)
        app = BasicAuth(app, user, password)
    return app


class Dashboard(Actions):
    """The state of one dashboard: its client, its templates and its settings."""

    def __init__(
        self,
        redis_url: str | None,
        namespace: str,
        client: AsyncQuasar | None,
        read_only: bool,
        trusted_origins: set[str],
    ) -> None:
        self.redis_url = redis_url
        self.namespace = client.namespace if client is not None else namespace
        self._client = client
        self.read_only = read_only
        self.trusted = trusted_origins
        self._infos: tuple[float, list[Any]] = (-float("inf"), [])
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every value shown is escaped, whatever the template's name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["q"] = lambda s: quote(str(s), safe="")
        self.templates.filters["readable"] = t.readable_time
        self.templates.filters["limit"] = data.limit_text
        self.templates.filters["own"] = data.own_text
        self.templates.filters["progress_bar"] = data.progress_bar

    @property
    def client(self) -> AsyncQuasar:
        if self._client is None:
            assert self.redis_url is not None
            self._client = AsyncQuasar.from_url(self.redis_url, self.namespace)
        return self._client

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        yield
        await self.close()

    async def close(self) -> None:
        if self._client is not None and self.redis_url is not None:
            await self._client.aclose()
            self._client = None

    async def queue_infos(self) -> list[Any]:
        """Every queue's counts (one ``queues()`` call), shared by the requests of the next
        ``COUNTS_MAX_AGE_S``: many open pages and scrapers cost one call a second."""
        at, infos = self._infos
        if time.monotonic() - at >= COUNTS_MAX_AGE_S:
            infos = await data.queue_infos(self.client)
            self._infos = (time.monotonic(), infos)
        return infos

    def routes(self) -> list[Any]:
        page = self._page
        return [
            Route("/", page(self.overview), name="overview"),
            Route("/queues/{queue}", page(self.queue), name="queue"),
            Route("/jobs/{job_id:path}", page(self.job), name="job"),
            Route("/batches/{batch_id:path}", page(self.batch), name="batch"),
            Route("/workers", page(self.workers), name="workers"),
            Route("/schedules", page(self.schedules), name="schedules"),
            Route("/confirm/{action}", page(self.confirm), name="confirm"),
            Route("/actions/{action}", self.act, methods=["POST"], name="act"),
            Route("/api/counts", self.counts, name="counts"),
            Route("/partials/charts", self.charts, name="charts"),
            Route("/metrics", self.metrics, name="metrics"),
            Route(HEALTH_PATH, functools.partial(healthz, self), name="healthz"),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ]

    # rendering ----------------------------------------------------------------------------------

    def _page(
        self, handler: Callable[[Request], Awaitable[tuple[str, dict[str, Any]] | Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A GET page: ``handler`` gives its template and values; errors show as a page."""

        async def endpoint(request: Request) -> Response:
            try:
                made = await handler(request)
            except QuasarError as exc:
                made = ("error.html", {"title": "Error", "error": f"{type(exc).__name__}: {exc}"})
            if isinstance(made, Response):
                return made
            return self.render(request, *made)

        return endpoint

    def render(
        self, request: Request, template: str, values: dict[str, Any], status: int = 200
    ) -> Response:
        token, new = token_of(request)
        root = request.scope.get("root_path", "")
        notice = _notice(request.query_params)
        html = self.templates.get_template(template).render(
            root=root,
            namespace=self.namespace,
            read_only=self.read_only,
            csrf_field=FIELD,
            csrf=token,
            notice=notice,
            statuses=STATUS_ORDER,
            **values,
        )
        response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
        if new:
            response.set_cookie(
                COOKIE,
                token,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path=root or "/",
            )
        return response

    # pages --------------------------------------------------------------------------------------

    async def overview(self, request: Request) -> tuple[str, dict[str, Any]]:
        infos = await self.queue_infos()
        workers = await arun(self.client, reading.workers(self.client.calls))
        charts = await data.charts(self.client)
        return "overview.html", {
            "title": "Overview",
            "queues": infos,
            "workers": workers,
            "running_total": sum(len(w.running) for w in workers),
            "charts": charts,
        }

    async def queue(self, request: Request) -> tuple[str, dict[str, Any]] | Response:
        name = request.path_params["queue"]
        params = request.query_params
        wanted = params.get("id", "").strip()
        if wanted:
            info = await self.client.get_job(wanted) if plausible_id(wanted) else None
            if info is not None:
                return RedirectResponse(self._url(request, f"/jobs/{quote(wanted, safe='')}"), 303)
        status = _status(params.get("status", "available"))
        if not NAME_RE.match(name) or status is None:
            return _missing("No such queue or status.")
        after = params.get("after") or None
        page = await data.queue_page(self.client, name, status, after)
        if page is None:
            return _missing(f"No queue named {name} in namespace {self.namespace}.")
        return "queue.html", {
            "title": f"Queue {name}",
            "page": page,
            "searched": wanted,
            "found": not wanted,
            "charts": await data.charts(self.client, name),
        }

    async def job(self, request: Request) -> tuple[str, dict[str, Any]] | Response:
        job_id = request.path_params["job_id"]
        page = await data.job_page(self.client, job_id) if plausible_id(job_id) else None
        if page is None:
            return _missing("No job with that id (it may have been pruned).")
        return "job.html", {
            "title": f"Job {job_id}",
            "page": page,
            "job": page.info.job,
            "status": page.info.status.value,
            "fields": data.job_fields(page.info.job, page.info.now),
        }

    async def batch(self, request: Request) -> tuple[str, dict[str, Any]] | Response:
        """A batch (docs/workflows.md, "Batches"): counts, progress, callbacks, its first
        ``BATCH_MEMBERS_SHOWN`` members."""
        batch_id = request.path_params["batch_id"]
        info = await self.client.batch(batch_id) if plausible_id(batch_id) else None
        if info is None:
            return _missing("No batch with that id.")
        try:
            page = await self.client.batch_results(batch_id, count=BATCH_MEMBERS_SHOWN)
        except InvalidArgument:  # (pruned since it was read: as missing as one never there)
            return _missing("No batch with that id.")
        members = [
            (m.id, m.job.status(page.now).value if m.job else "deleted") for m in page.members
        ]
        return "batch.html", {
            "title": f"Batch {batch_id}",
            "batch": info,
            "members": members,
            "more": page.next_start is not None,
        }

    async def workers(self, request: Request) -> tuple[str, dict[str, Any]]:
        workers = await arun(self.client, reading.workers(self.client.calls))
        return "workers.html", {"title": "Workers", "workers": workers}

    async def schedules(self, request: Request) -> tuple[str, dict[str, Any]]:
        found = await self.client.schedules()
        return "schedules.html", {"title": "Schedules", "schedules": found}

    async def confirm(self, request: Request) -> tuple[str, dict[str, Any]] | Response:
        action = request.path_params["action"]
        if self.read_only:
            return refusal("This dashboard is read-only.")
        if action not in ACTIONS:
            return _missing("No such action.")
        what, words = ACTIONS[action]
        target = request.query_params.get(what, "")
        status = request.query_params.get("status", "")
        if action == "purge" and status not in PURGEABLE:
            return _missing("Only completed, discarded, cancelled and expired jobs can be deleted.")
        if what == "schedule" and not NAME_RE.match(target):
            return _missing("No such schedule.")
        extra: list[tuple[str, str]] = []
        changes = ""
        group = request.query_params.get("group", "")
        if action in LIMIT_ACTIONS:
            if not NAME_RE.match(target):
                return _missing("No such queue.")
            made = limits_asked(action, dict(request.query_params))
            if isinstance(made, Response):
                return made
            changes = data.change_words(made, LIMIT_ACTIONS[action])
            names = data.GROUP_LIMITS if LIMIT_ACTIONS[action] else data.QUEUE_LIMITS
            extra = [(n, request.query_params.get(n, "").strip()) for n in names]
            extra += [("group", group)] if LIMIT_ACTIONS[action] else []
        return "confirm.html", {
            "title": "Confirm",
            "action": action,
            "what": what,
            "target": target,
            "status": status if action == "purge" else "",
            "extra": extra,
            "question": words.format(target=target, status=status, changes=changes, group=group),
            "back": _back(what, target),
        }

    # live parts ---------------------------------------------------------------------------------

    async def counts(self, request: Request) -> Response:
        infos = await self.queue_infos()
        return JSONResponse(data.counts_json(infos), headers={"cache-control": "no-store"})

    async def charts(self, request: Request) -> Response:
        queue = request.query_params.get("queue") or None
        if queue is not None and not NAME_RE.match(queue):
            return _missing("No such queue.")
        charts = await data.charts(self.client, queue)
        html = self.templates.get_template("_charts.html").render(charts=charts)
        return HTMLResponse(html, headers=SECURITY_HEADERS)

    async def metrics(self, request: Request) -> Response:
        try:  # optional (quasar_redis[prometheus]): imported only when asked for
            prometheus: Any = importlib.import_module("quasar_redis.prometheus")
        except ImportError as exc:
            return refusal(str(exc), 501)
        infos = await self.queue_infos()
        workers = await arun(self.client, reading.workers(self.client.calls))
        flows = await data.flows(self.client, [info.name for info in infos])
        families = prometheus.depth_families(infos) + prometheus.flow_families(flows)
        families += prometheus.slot_families(slots_of(workers))
        body, kind = prometheus.exposition(prometheus.registry_of(lambda: families, self.namespace))
        return Response(body, headers={"content-type": kind})

    # actions ------------------------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        if self.read_only:
            return refusal("This dashboard is read-only: it takes no action.")
        body = await request.body()
        if len(body) > FORM_MAX:
            return refusal("The form is too large.", 413)
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        reason = cross_site_reason(request, form.get(FIELD, ""), self.trusted)
        if reason is not None:
            return refusal(f"Refused: {reason}.")
        action = request.path_params["action"]
        if action not in ACTIONS:
            return _missing("No such action.")
        what, _ = ACTIONS[action]
        target = form.get(what, "")
        if what == "queue" and not NAME_RE.match(target):
            return refusal("No such queue.", 400)
        if what == "job" and not plausible_id(target):
            return refusal("No such job.", 400)
        if what == "schedule" and not NAME_RE.match(target):
            return refusal("No such schedule.", 400)
        status = form.get("status", "")
        if action == "purge" and status not in PURGEABLE:
            msg = "Only completed, discarded, cancelled and expired jobs can be deleted."
            return refusal(msg, 400)
        made = await self._acting(action, target, status, form)
        if isinstance(made, Response):
            return made
        self._infos = (-float("inf"), [])
        path = _back(what, target)
        return RedirectResponse(self._url(request, path) + "?" + urlencode(made), 303)

    def _url(self, request: Request, path: str) -> str:
        return str(request.scope.get("root_path", "")) + path


#: Members a batch's page lists (the first ones, in the order they joined).
BATCH_MEMBERS_SHOWN = 100


async def healthz(dashboard: Dashboard, request: Request) -> Response:
    """200 while Redis answers, else 503: the dashboard's probe (docs/deploy.md)."""
    try:
        await dashboard.client.redis.ping()
    except Exception as exc:  # any failure to answer means not ready, whatever its kind
        problem = redact_text(f"Redis does not answer: {type(exc).__name__}: {exc}")
        body = {"ready": False, "problems": [problem]}
        return JSONResponse(body, status_code=503, headers={"cache-control": "no-store"})
    return JSONResponse({"ready": True, "problems": []}, headers={"cache-control": "no-store"})


def _missing(text: str) -> Response:
    return refusal(text, 404)


def _notice(params: Any) -> str:
    text = NOTICES.get(params.get("done", ""), "")
    why = re.sub(r"[^A-Za-z]", "", params.get("why", ""))[:40]
    grant = re.sub(r"[^\w +~|:{}*.-]", "", params.get("grant", ""))[:80]
    job = params.get("job", "")
    count = params.get("n", "0")
    return text.format(
        n=count if count.isdigit() else "0",
        why=why or "unknown",
        grant=grant or "Redis did not say which",
        job=job if plausible_id(job) else "?",
    )


def _back(what: str, target: str) -> str:
    """The page an action on ``target`` (a ``what``) is made from, and returns to."""
    if what == "job":
        return f"/jobs/{quote(target, safe='')}"
    return "/schedules" if what == "schedule" else f"/queues/{target}"


def _status(value: str) -> t.Status | None:
    try:
        return t.Status(value)
    except ValueError:
        return None
