"""The dashboard's ASGI application: its routes, pages and actions (``create_app``)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import re
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
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import _reading as reading
from .. import _types as t
from .._keys import NAME_RE, check_name
from .._reading import arun
from .._views import counts_of, slots_of
from ..aio import AsyncQuasar
from ..errors import InvalidArgument, QuasarError
from . import _data as data
from ._actions import (
    ACTIONS,
    BULK_MAX,
    BULK_WORDS,
    LIMIT_ACTIONS,
    Actions,
    Problem,
    limits_asked,
    plausible_id,
    refusal,
)
from ._security import (
    COOKIE,
    FIELD,
    BasicAuth,
    cross_site_reason,
    exposure_warning,
    parse_credentials,
    token_of,
)

HERE = Path(__file__).parent
FORM_MAX = 16_384  # bytes of an action's form
COUNTS_MAX_AGE_S = 0.5
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
    "jobs-retry": "{n} of {total} jobs retried.",
    "jobs-cancel": "{n} of {total} jobs cancelled.",
    "jobs-promote": "{n} of {total} jobs due now.",
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
#: What a notice of several jobs adds when some were refused.
REFUSED_TOO = " {m} refused: their status does not allow it (or they are gone)."
PURGEABLE = frozenset(s.value for s in t.TERMINAL_STATUSES)
#: The statuses in the order ``quasar queues`` shows them.
STATUS_ORDER = data.ORDER
#: The views of a queue's jobs: each status, and every status at once.
VIEWS = frozenset([data.ALL, *(s.value for s in STATUS_ORDER)])
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
            Route("/api/counts", self.counts, name="counts"),
            Route("/partials/charts", self.charts, name="charts"),
            Route("/metrics", self.metrics, name="metrics"),
            Route("/favicon.svg", favicon, name="favicon"),
            Route("/favicon.ico", favicon, name="favicon.ico"),
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
        notice = _notice(request.query_params)
        html = self.templates.get_template(template).render(
            root=root,
            namespace=self.namespace,
            read_only=self.read_only,
            warning=self.warning,
            csrf_field=FIELD,
            csrf=token,
            notice=notice,
            statuses=STATUS_ORDER,
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
        charts = await data.charts(self.client)
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
                return RedirectResponse(self._url(request, f"/jobs/{quote(wanted, safe='')}"), 303)
            found, more = await data.find_jobs(self.client, name, wanted)
        busiest = data.busiest(info.counts)
        view = params.get("status") or (busiest.value if busiest else data.ALL)
        back = f"/queues/{name}"
        if view not in VIEWS:
            words = ", ".join(sorted(VIEWS))
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
            "views": [data.ALL, *(s.value for s in STATUS_ORDER)],
            "total": sum(counts_of(info.counts).values()),
            "charts": await data.charts(self.client, name),
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
        action = request.path_params["action"]
        if self.read_only:
            return refusal("This dashboard is read-only.")
        if action not in ACTIONS:
            return Problem(404, "No such action.", action)
        what, words = ACTIONS[action]
        params = request.query_params
        targets = _targets(params.getlist(what))
        target = targets[0] if targets else ""
        status = params.get("status", "")
        bad = _bad_targets(what, targets) if what == "job" else None
        if bad is not None:
            return Problem(400, bad, ", ".join(targets))
        if action == "purge" and status not in PURGEABLE:
            msg = "Only completed, discarded, cancelled and expired jobs can be deleted."
            return Problem(400, msg, status, f"/queues/{target}", target)
        if what == "schedule" and not NAME_RE.match(target):
            return Problem(404, "No such schedule.", target, "/schedules", "the schedules")
        extra: list[tuple[str, str]] = []
        changes = ""
        group = params.get("group", "")
        if action in LIMIT_ACTIONS:
            asked = _limits_form(action, target, params)
            if isinstance(asked, Problem):
                return asked
            changes, extra = asked
        from_queue = _from_queue(params)
        if what == "job" and from_queue:
            extra += [("from_queue", from_queue[0]), ("from_view", from_queue[1])]
        question = words.format(target=target, status=status, changes=changes, group=group)
        if len(targets) > 1:
            question = BULK_WORDS[action].format(n=len(targets))
        return "confirm.html", {
            "title": "Confirm",
            "action": action,
            "what": what,
            "targets": targets if what == "job" else [target],
            "status": status if action == "purge" else "",
            "extra": extra,
            "question": question,
            "back": _back(what, targets, from_queue),
        }

    # live parts ---------------------------------------------------------------------------------

    async def counts(self, request: Request) -> Response:
        infos = await self.queue_infos()
        return JSONResponse(data.counts_json(infos), headers={"cache-control": "no-store"})

    async def charts(self, request: Request) -> Response:
        queue = request.query_params.get("queue") or None
        if queue is not None and not NAME_RE.match(queue):
            return self.problem(request, Problem(404, "No such queue.", queue))
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
        body = prometheus.generate_latest(prometheus.registry_of(lambda: families))
        return Response(body, headers={"content-type": prometheus.CONTENT_TYPE_LATEST})

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
        if action not in ACTIONS:
            return self.problem(request, Problem(404, "No such action.", action))
        what, _ = ACTIONS[action]
        targets = _targets(fields.get(what, []))
        bad = _bad_targets(what, targets)
        status = form.get("status", "")
        if bad is None and action == "purge" and status not in PURGEABLE:
            bad = "Only completed, discarded, cancelled and expired jobs can be deleted."
        if bad is not None:
            return self.problem(request, Problem(400, bad, ", ".join(targets)))
        from_queue = _from_queue(form)
        if what == "job":
            made: dict[str, str] | Problem = await self._acting_on_jobs(action, targets)
        else:
            made = await self._acting(action, targets[0], status, form)
        if isinstance(made, Problem):
            return self.problem(request, _from(made, targets[0]))
        if from_queue:
            made = {**made, "queue": from_queue[0]}
        await self._audit(request, action, targets, made)
        made.pop("queue", None)
        self._infos = (-float("inf"), [])
        path = _back(what, targets, from_queue)
        joiner = "&" if "?" in path else "?"
        return RedirectResponse(self._url(request, path) + joiner + urlencode(made), 303)

    def _url(self, request: Request, path: str) -> str:
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


def _limits_form(
    action: str, queue: str, params: Any
) -> tuple[str, list[tuple[str, str]]] | Problem:
    """The words of the limits a confirmation of ``action`` sets, and the fields its form
    passes on; or why they are refused."""
    if not NAME_RE.match(queue):
        return Problem(404, f"No queue named {queue}.", queue)
    made = limits_asked(action, dict(params))
    if isinstance(made, Problem):
        return _from(made, queue)
    group = LIMIT_ACTIONS[action]
    names = data.GROUP_LIMITS if group else data.QUEUE_LIMITS
    extra = [(n, params.get(n, "").strip()) for n in names]
    extra += [("group", params.get("group", ""))] if group else []
    return data.change_words(made, group), extra


def _from(problem: Problem, queue: str) -> Problem:
    """``problem`` of a form of ``queue``'s page, back to that page."""
    return dataclasses.replace(problem, back=f"/queues/{queue}", back_name=f"queue {queue}")


def _targets(given: list[str]) -> list[str]:
    """The targets a form names, each once, in order."""
    return list(dict.fromkeys(given))


def _bad_targets(what: str, targets: list[str]) -> str | None:
    """Why an action's targets are refused (400), or None."""
    if what == "job":
        if not targets:
            return "Select one job or more."
        if not all(plausible_id(job) for job in targets):
            return "No such job."
        return f"At most {BULK_MAX} jobs at once." if len(targets) > BULK_MAX else None
    if len(targets) != 1 or not NAME_RE.match(targets[0]):
        return f"No such {what}."
    return None


def _from_queue(params: Any) -> tuple[str, str] | None:
    """The queue page (queue, view) a job action was asked from, to go back to; None if none."""
    queue, view = params.get("from_queue", ""), params.get("from_view", "")
    return (queue, view) if NAME_RE.match(queue) and view in VIEWS else None


def _notice(params: Any) -> str:
    done = params.get("done", "")
    text = NOTICES.get(done, "")
    why = re.sub(r"[^A-Za-z]", "", params.get("why", ""))[:40]
    grant = re.sub(r"[^\w +~|:{}*.-]", "", params.get("grant", ""))[:80]
    job = params.get("job", "")
    count, refused = (_count(params.get(name, "0")) for name in ("n", "m"))
    if done.startswith("jobs-") and refused:
        text += REFUSED_TOO
    return text.format(
        n=count,
        m=refused,
        total=count + refused,
        why=why or "unknown",
        grant=grant or "Redis did not say which",
        job=job if plausible_id(job) else "?",
    )


def _count(text: str) -> int:
    return int(text) if text.isdigit() and len(text) < 10 else 0


def _back(what: str, targets: list[str], from_queue: tuple[str, str] | None = None) -> str:
    """The page an action on ``targets`` (a ``what``) is made from, and returns to."""
    if from_queue is not None:
        return f"/queues/{from_queue[0]}?status={from_queue[1]}"
    if what == "job":
        return f"/jobs/{quote(targets[0], safe='')}" if len(targets) == 1 else "/"
    return "/schedules" if what == "schedule" else f"/queues/{targets[0]}"
