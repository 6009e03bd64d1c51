"""The dashboard's ASGI application: its routes, pages and actions (``create_app``)."""

from __future__ import annotations

import contextlib
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
from .._schedules import Fired, NotFired
from .._views import slots_of
from ..aio import AsyncQuasar
from ..errors import AccessDenied, InvalidArgument, PermissionDenied, QuasarError
from . import _data as data
from ._security import COOKIE, FIELD, BasicAuth, cross_site_reason, parse_credentials, token_of

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
#: Each action: what it acts on ("job", "queue" or "schedule"), and its confirmation's words.
ACTIONS = {
    "retry": ("job", "Retry job {target}: run it again, with one more attempt allowed?"),
    "cancel": ("job", "Cancel job {target} and every job that depends on it?"),
    "promote": ("job", "Run job {target} now, rather than at its scheduled time?"),
    "retry-all": ("queue", "Retry every failed job of queue {target}?"),
    "purge": ("queue", "Delete every {status} job of queue {target}, for good?"),
    "pause": ("queue", "Pause queue {target}: workers lease none of its jobs until resumed?"),
    "resume": ("queue", "Resume queue {target}?"),
    "pause-schedule": (
        "schedule",
        "Pause schedule {target}: none of its ticks fires until resumed (a trigger still does)?",
    ),
    "resume-schedule": (
        "schedule",
        "Resume schedule {target}: its ticks fire again, those missed as its setting says?",
    ),
    "trigger-schedule": ("schedule", "Enqueue the job of schedule {target} now (its ticks stay)?"),
    "remove-schedule": (
        "schedule",
        "Remove schedule {target}? A worker that still declares it writes it again.",
    ),
}
#: The schedule actions that ``change_schedule`` makes, by their change.
SCHEDULE_CHANGES = {
    "pause-schedule": "pause",
    "resume-schedule": "resume",
    "remove-schedule": "remove",
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


class Dashboard:
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
            Route("/workers", page(self.workers), name="workers"),
            Route("/schedules", page(self.schedules), name="schedules"),
            Route("/confirm/{action}", page(self.confirm), name="confirm"),
            Route("/actions/{action}", self.act, methods=["POST"], name="act"),
            Route("/api/counts", self.counts, name="counts"),
            Route("/partials/charts", self.charts, name="charts"),
            Route("/metrics", self.metrics, name="metrics"),
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
            info = await self.client.get_job(wanted) if _plausible_id(wanted) else None
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
        page = await data.job_page(self.client, job_id) if _plausible_id(job_id) else None
        if page is None:
            return _missing("No job with that id (it may have been pruned).")
        return "job.html", {
            "title": f"Job {job_id}",
            "page": page,
            "job": page.info.job,
            "status": page.info.status.value,
            "fields": data.job_fields(page.info.job, page.info.now),
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
        return "confirm.html", {
            "title": "Confirm",
            "action": action,
            "what": what,
            "target": target,
            "status": status if action == "purge" else "",
            "question": words.format(target=target, status=status),
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
        families = prometheus.depth_families(infos) + prometheus.slot_families(slots_of(workers))
        body = prometheus.generate_latest(prometheus.registry_of(lambda: families))
        return Response(body, headers={"content-type": prometheus.CONTENT_TYPE_LATEST})

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
        if what == "job" and not _plausible_id(target):
            return refusal("No such job.", 400)
        if what == "schedule" and not NAME_RE.match(target):
            return refusal("No such schedule.", 400)
        status = form.get("status", "")
        if action == "purge" and status not in PURGEABLE:
            msg = "Only completed, discarded, cancelled and expired jobs can be deleted."
            return refusal(msg, 400)
        try:
            notice = await self._apply(action, target, status)
        except AccessDenied as exc:  # (checked before any write: nothing changed)
            grant = exc.permission if isinstance(exc, PermissionDenied) else None
            notice = {"done": "denied", "grant": f"grant {grant}" if grant else ""}
        self._infos = (-float("inf"), [])
        path = _back(what, target)
        return RedirectResponse(self._url(request, path) + "?" + urlencode(notice), 303)

    async def _apply(self, action: str, target: str, status: str) -> dict[str, str]:
        client = self.client
        if ACTIONS[action][0] == "schedule":
            return await self._apply_to_schedule(action, target)
        if action == "retry":
            return _outcome(
                await client.retry(target, reason="retried from the dashboard"), "retried"
            )
        if action == "cancel":
            result = await client.cancel(target, reason="cancelled from the dashboard")
            if isinstance(result, t.CancelApplied):
                return {"done": "cancelled", "n": str(len(result.cascaded))}
            return _outcome(result, "cancelled")
        if action == "promote":
            return _outcome(await client.promote(target), "promoted")
        if action == "retry-all":
            return {"done": "retried-all", "n": str(await data.retry_all_failed(client, target))}
        if action == "purge":
            return {"done": "purged", "n": str(await data.purge(client, target, t.Status(status)))}
        if action == "pause":
            return {"done": "paused" if await client.pause(target) else "unchanged"}
        return {"done": "resumed" if await client.resume(target) else "unchanged"}

    async def _apply_to_schedule(self, action: str, name: str) -> dict[str, str]:
        """What ``quasar schedules pause|resume|remove|trigger`` does; a schedule removed since
        the page was shown is told as such, not as an error."""
        if action == "trigger-schedule":
            fired = await self.client.trigger_schedule(name)
            if isinstance(fired, Fired):
                return {"done": "schedule-triggered", "job": fired.job_id}
            if isinstance(fired, NotFired) and fired.reason == "missing":
                return {"done": "schedule-missing"}
            return {"done": "refused", "why": getattr(fired, "reason", "skipped")}
        change = SCHEDULE_CHANGES[action]
        try:
            changed = await self.client.change_schedule(name, change)
        except InvalidArgument:  # (name and change are valid: the schedule does not exist)
            return {"done": "schedule-missing"}
        return {"done": f"schedule-{change}d" if changed else "unchanged"}

    def _url(self, request: Request, path: str) -> str:
        return str(request.scope.get("root_path", "")) + path


def refusal(text: str, status: int = 403) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain; charset=utf-8")


def _missing(text: str) -> Response:
    return refusal(text, 404)


def _outcome(result: Any, done: str) -> dict[str, str]:
    if isinstance(result, t.JobRefused):
        return {"done": "refused", "why": type(result.error).__name__}
    return {"done": done}


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
        job=job if _plausible_id(job) else "?",
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


def _plausible_id(job_id: str) -> bool:
    """An id a job can have (no whitespace or control characters, at most 256 bytes)."""
    return 0 < len(job_id.encode("utf-8", "replace")) <= 256 and not any(
        c.isspace() or ord(c) < 32 or ord(c) == 127 for c in job_id
    )
