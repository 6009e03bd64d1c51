"""The dashboard's ASGI application: its routes, pages and actions (``create_app``)."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import _reading as reading
from .. import _types as t
from .._keys import NAME_RE, check_name
from .._reading import arun
from .._views import counts_of
from ..aio import AsyncQuasar
from ..errors import InvalidArgument, QuasarError
from . import _data as data
from . import _forms as forms
from . import _live as live
from ._actions import (
    Actions,
    Problem,
    plausible_id,
    refusal,
)
from ._charts import charts as charts_of
from ._security import (
    COOKIE,
    FIELD,
    HEALTH_PATH,
    SECURITY_HEADERS,
    BasicAuth,
    cross_site_reason,
    exposure_warning,
    parse_credentials,
    token_of,
)

HERE = Path(__file__).parent
FORM_MAX = 16_384  # bytes of an action's form
COUNTS_MAX_AGE_S = 0.5
FAVICON = (HERE / "static" / "favicon.svg").read_bytes()


def create_app(
    redis_url: str | None = None,
    namespace: str = "default",
    *,
    client: AsyncQuasar | None = None,
    read_only: bool = False,
    basic_auth: str | None = None,
    trusted_origins: Collection[str] = (),
    partitions: int | None = None,
    app: Any = None,
    host: str | None = None,
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
    ``app``: your ``App``, whose tasks name the arguments a job's page shows. ``host``: the
    address the standalone server listens on; a public one without ``basic_auth`` puts a
    warning on every page.
    """
    if client is None and redis_url is None:
        raise InvalidArgument("create_app needs a redis_url or a client")
    if client is None:
        check_name(namespace, "namespace")
    if client is None and partitions is not None:  # (closed at shutdown, as one made later)
        client = AsyncQuasar.from_url(str(redis_url), namespace, partitions=partitions)
    dashboard = Dashboard(redis_url, namespace, client, read_only, set(trusted_origins))
    dashboard.app = app
    dashboard.warning = exposure_warning(host, basic_auth is not None) if host else None
    handlers = {404: dashboard.not_found, 405: dashboard.not_found}
    made: Any = Starlette(
        routes=dashboard.routes(), lifespan=dashboard.lifespan, exception_handlers=handlers
    )
    if basic_auth is not None:
        user, password = parse_credentials(basic_auth)
        made = BasicAuth(made, user, password)
    return made


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
        self.app: Any = None  # the App whose tasks name a job's arguments
        self.warning: str | None = None  # shown on every page (a public address, no auth)
        self._infos: tuple[float, list[Any]] = (-float("inf"), [])
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every value shown is escaped, whatever the template's name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["q"] = lambda s: quote(str(s), safe="")
        self.templates.filters["when"] = jinja2.pass_context(
            lambda context, ms: when(ms, context.get("now_ms"))
        )
        self.templates.filters["limit"] = data.limit_text
        self.templates.filters["own"] = data.own_text
        self.templates.filters["progress_bar"] = data.progress_bar
        self.templates.filters["span"] = lambda ms: data.span(ms / 1000)
        self.templates.filters["iso"] = lambda ms: t.readable_time(int(ms))
        self.templates.tests["time"] = lambda value: isinstance(value, data.At)

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
            Route("/api/counts", functools.partial(live.counts, self), name="counts"),
            Route("/partials/charts", functools.partial(live.charts, self), name="charts"),
            Route("/metrics", functools.partial(live.metrics, self), name="metrics"),
            Route("/favicon.svg", favicon, name="favicon"),
            Route("/favicon.ico", favicon, name="favicon.ico"),
            Route(HEALTH_PATH, functools.partial(live.healthz, self), name="healthz"),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ]

    # rendering ----------------------------------------------------------------------------------

    def _page(
        self,
        handler: Callable[[Request], Awaitable[tuple[str, dict[str, Any]] | Problem | Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A GET page: ``handler`` gives its template and values, or a problem (404, 400) shown
        as a page of its own; errors show as a page."""

        async def endpoint(request: Request) -> Response:
            try:
                made = await handler(request)
            except QuasarError as exc:
                made = ("error.html", {"title": "Error", "error": f"{type(exc).__name__}: {exc}"})
            if isinstance(made, Response):
                return made
            if isinstance(made, Problem):
                return self.problem(request, made)
            return self.render(request, *made)

        return endpoint

    def problem(self, request: Request, problem: Problem) -> Response:
        """``problem`` as a page in the layout: what was looked for, and the way back."""
        title = "Not found" if problem.status == 404 else "Bad request"
        values = {"title": title, "problem": problem}
        return self.render(request, "problem.html", values, problem.status)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        """Any other path (404), or a method a page does not take (405), as a page."""
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        if status != 404:
            return refusal("This page takes no such request.", status)
        path = request.url.path
        return self.problem(request, Problem(404, "No page here.", looked_for=path))

    def render(
        self, request: Request, template: str, values: dict[str, Any], status: int = 200
    ) -> Response:
        token, new = token_of(request)
        root = request.scope.get("root_path", "")
        notice = forms.notice_text(request.query_params)
        html = self.templates.get_template(template).render(
            root=root,
            namespace=self.namespace,
            read_only=self.read_only,
            warning=self.warning,
            csrf_field=FIELD,
            csrf=token,
            notice=notice,
            statuses=forms.STATUS_ORDER,
            now_ms=values.pop("now_ms", None) or time.time() * 1000,
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
        charts = await charts_of(self.client)
        return "overview.html", {
            "title": "Overview",
            "queues": infos,
            "workers": workers,
            "running_total": sum(len(w.running) for w in workers),
            "charts": charts,
        }

    async def queue(self, request: Request) -> tuple[str, dict[str, Any]] | Problem | Response:
        """A queue's page: its counts, limits, charts and a page of its jobs, opened on its
        busiest status (``?status=all``: every status); ``?id=`` goes to the job of that id, or
        lists the jobs whose id starts so."""
        name = request.path_params["queue"]
        params = request.query_params
        missing = Problem(404, f"No queue named {name} in namespace {self.namespace}.", name)
        if not NAME_RE.match(name):
            return missing
        info = next((i for i in await data.queue_infos(self.client) if i.name == name), None)
        if info is None:
            return missing
        wanted = params.get("id", "").strip()
        found: list[str] = []
        more = False
        if wanted and plausible_id(wanted):
            if await self.client.get_job(wanted) is not None:
                return RedirectResponse(url_of(request, f"/jobs/{quote(wanted, safe='')}"), 303)
            found, more = await data.find_jobs(self.client, name, wanted)
        busiest = data.busiest(info.counts)
        view = params.get("status") or (busiest.value if busiest else data.ALL)
        back = f"/queues/{name}"
        if view not in forms.VIEWS:
            words = ", ".join(sorted(forms.VIEWS))
            return Problem(400, f"No status named {view}: one of {words}.", view, back, name)
        status = None if view == data.ALL else t.Status(view)
        try:
            page = await data.queue_page(self.client, info, status, params.get("after") or None)
        except ValueError:
            return Problem(400, "That page's cursor is not this list's.", back=back, back_name=name)
        return "queue.html", {
            "title": f"Queue {name}",
            "page": page,
            "searched": wanted,
            "found": found,
            "more_found": more,
            "scanned": data.SEARCH_SCANNED,
            "views": [data.ALL, *(s.value for s in forms.STATUS_ORDER)],
            "total": sum(counts_of(info.counts).values()),
            "charts": await charts_of(self.client, name),
            "now_ms": info.counts.now,
        }

    async def job(self, request: Request) -> tuple[str, dict[str, Any]] | Problem:
        job_id = request.path_params["job_id"]
        page = await data.job_page(self.client, job_id, self.app) if plausible_id(job_id) else None
        if page is None:
            return Problem(404, "No job with that id (it may have been pruned).", job_id)
        fields, internals = data.job_fields(page.info.job, page.info.now)
        return "job.html", {
            "title": f"Job {job_id}",
            "page": page,
            "job": page.info.job,
            "status": page.info.status.value,
            "fields": fields,
            "internals": internals,
            "now_ms": page.info.now,
        }

    async def batch(self, request: Request) -> tuple[str, dict[str, Any]] | Problem:
        """A batch (docs/workflows.md, "Batches"): counts, progress, callbacks, its first
        ``BATCH_MEMBERS_SHOWN`` members."""
        batch_id = request.path_params["batch_id"]
        missing = Problem(404, "No batch with that id.", batch_id)
        info = await self.client.batch(batch_id) if plausible_id(batch_id) else None
        if info is None:
            return missing
        try:
            page = await self.client.batch_results(batch_id, count=BATCH_MEMBERS_SHOWN)
        except InvalidArgument:  # (pruned since it was read: as missing as one never there)
            return missing
        members = [
            (m.id, m.job.status(page.now).value if m.job else "deleted") for m in page.members
        ]
        return "batch.html", {
            "title": f"Batch {batch_id}",
            "batch": info,
            "members": members,
            "more": page.next_start is not None,
            "now_ms": page.now,
        }

    async def workers(self, request: Request) -> tuple[str, dict[str, Any]]:
        workers = await arun(self.client, reading.workers(self.client.calls))
        now = await self.client.server_time_ms()
        return "workers.html", {"title": "Workers", "workers": workers, "now_ms": now}

    async def schedules(self, request: Request) -> tuple[str, dict[str, Any]]:
        found = await self.client.schedules()
        return "schedules.html", {"title": "Schedules", "schedules": found}

    async def confirm(self, request: Request) -> tuple[str, dict[str, Any]] | Problem | Response:
        if self.read_only:
            return refusal("This dashboard is read-only.")
        return forms.confirm_page(request.path_params["action"], request.query_params)

    # actions ------------------------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        """A confirmed action (POST): checked (read-only, size, cross-site, its targets), done,
        audited, then back to the page it was made from with its notice."""
        if self.read_only:
            return refusal("This dashboard is read-only: it takes no action.")
        body = await request.body()
        if len(body) > FORM_MAX:
            return refusal("The form is too large.", 413)
        fields = parse_qs(body.decode("utf-8", "replace"))
        form = {k: v[0] for k, v in fields.items()}
        reason = cross_site_reason(request, form.get(FIELD, ""), self.trusted)
        if reason is not None:
            return refusal(f"Refused: {reason}.")
        action = request.path_params["action"]
        asked = forms.action_asked(action, fields, form)
        if isinstance(asked, Problem):
            return self.problem(request, asked)
        what, targets, status = asked
        from_queue = forms.from_queue_of(form)
        if what == "job":
            made: dict[str, str] | Problem = await self._acting_on_jobs(action, targets)
        else:
            made = await self._acting(action, targets[0], status, form)
        if isinstance(made, Problem):
            return self.problem(request, forms.back_to_queue(made, targets[0]))
        if from_queue:
            made = {**made, "queue": from_queue[0]}
        await self._audit(request, action, targets, made)
        made.pop("queue", None)
        self._infos = (-float("inf"), [])
        path = forms.back_path(what, targets, from_queue)
        joiner = "&" if "?" in path else "?"
        return RedirectResponse(url_of(request, path) + joiner + urlencode(made), 303)


def url_of(request: Request, path: str) -> str:
    """``path`` under the dashboard's mount point (its root path)."""
    return str(request.scope.get("root_path", "")) + path


#: Members a batch's page lists (the first ones, in the order they joined).
BATCH_MEMBERS_SHOWN = 100


async def favicon(request: Request) -> Response:
    """The dashboard's icon (an SVG, also at /favicon.ico: browsers that ask there take it)."""
    headers = {"cache-control": "public, max-age=86400", "x-content-type-options": "nosniff"}
    return Response(FAVICON, media_type="image/svg+xml", headers=headers)


def when(ms: int | float | None, now_ms: float | None = None) -> Markup:
    """A time as ``<time>``: relative ("3 min ago", "in 20 s"), its ISO 8601 form (UTC) in its
    ``datetime`` and on hover; "-" for none."""
    if ms is None:
        return Markup("-")
    iso = t.readable_time(int(ms))
    text = data.relative(int(ms), time.time() * 1000 if now_ms is None else now_ms)
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(iso, text)
