"""The demo's jobs: its tasks (declared on an ``App``) and the mix of jobs ``quasar demo`` runs.

The mix: fast no-ops, short sleeps, a plain function (run in the worker's thread pool), e-mails
that fail at random and are retried by an exponential policy (a few run out of attempts), API
calls that are rate limited once (``Snooze``), reports scheduled up to 1 s ahead, dependency
chains of five steps, and one card charge that fails for good (``PermanentFailure``), whose receipt
was enqueued to be cancelled if it fails.

On a namespace of several partitions a job shares its dependencies' partition: each chain is a
flow (its steps' ids made to be in the flow's partition, ``example.flow_id``), and the receipt,
given no id, goes where the charge is.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import dataclass
from typing import Any

from .._calls import NewJob
from ..app import App, Task
from ..retry import Exponential, PermanentFailure, Snooze
from ..worker import current_job
from .example import flow_id

QUEUES = ("default", "images", "emails", "reports")
CHAIN = ("fetch", "parse", "transform", "load", "publish")
JOBS_PER_CHAIN = 250  # one dependency chain per this many jobs


# --- the tasks ---------------------------------------------------------------------------------


class SmtpBusy(Exception):
    """The e-mail task's transient failure (retried by its policy)."""


@dataclass(frozen=True)
class DemoTasks:
    noop: Task[Any, Any]
    resize: Task[Any, Any]
    checksum: Task[Any, Any]
    send_email: Task[Any, Any]
    call_api: Task[Any, Any]
    report: Task[Any, Any]
    step: Task[Any, Any]
    charge: Task[Any, Any]
    receipt: Task[Any, Any]


async def noop(n: int) -> int:
    return n


async def resize(image: int, ms: int) -> str:
    await asyncio.sleep(ms / 1000)
    return f"image-{image}-128.png"


def checksum(n: int) -> str:
    """A plain function: it runs in the worker's thread pool."""
    return hashlib.sha256(str(n).encode() * 256).hexdigest()[:16]


async def send_email(n: int, failures: int) -> str:
    """Fails its first ``failures`` attempts (the retry policy brings it back)."""
    attempt = current_job().attempt
    if attempt <= failures:
        raise SmtpBusy(f"SMTP server busy (attempt {attempt})")
    return f"sent mail {n}"


async def call_api(n: int) -> str:
    """Rate limited on its first claim: comes back 50 ms later without using an attempt."""
    if current_job().job.fencing_version == 1:
        raise Snooze(0.05)
    return f"called {n}"


async def report(n: int) -> str:
    await asyncio.sleep(0.002)
    return f"report {n}"


async def pipeline_step(chain: int, name: str) -> str:
    await asyncio.sleep(0.005)
    return f"chain {chain}: {name} done"


async def charge_card(order: int) -> None:
    raise PermanentFailure(f"card declined for order {order}")


async def send_receipt(order: int) -> str:
    return f"receipt {order}"


def declare(app: App) -> DemoTasks:
    """The demo's tasks, declared on ``app``."""
    email_retry = Exponential(base=0.05, factor=2.0, cap=0.5)
    return DemoTasks(
        noop=app.task(name="demo.noop")(noop),
        resize=app.task(name="demo.resize", queue="images")(resize),
        checksum=app.task(name="demo.checksum")(checksum),
        send_email=app.task(
            name="demo.send_email", queue="emails", max_attempts=4, retry=email_retry
        )(send_email),
        call_api=app.task(name="demo.call_api")(call_api),
        report=app.task(name="demo.report", queue="reports")(report),
        step=app.task(name="demo.pipeline_step")(pipeline_step),
        charge=app.task(name="demo.charge_card", max_attempts=3)(charge_card),
        receipt=app.task(name="demo.send_receipt", queue="emails")(send_receipt),
    )


# --- the mix -----------------------------------------------------------------------------------


def chain_jobs(tasks: DemoTasks, chain: int, partitions: int | None = None) -> list[NewJob]:
    """Five steps, each depending on the one before (ids given, so they can be named), one flow."""
    jobs: list[NewJob] = []
    previous: list[str] = []
    flow = f"chain-{chain}"
    for name in CHAIN:
        job_id = flow_id(flow, f"{flow}-{name}", partitions)
        step = tasks.step.options(id=job_id, depends_on=previous, flow=flow)
        jobs.append(step.job(chain, name))
        previous = [job_id]
    return jobs


def fixed_jobs(tasks: DemoTasks, total: int, partitions: int | None = None) -> list[NewJob]:
    """The chains, the failing charge and its receipt, and one e-mail that fails once."""
    jobs: list[NewJob] = []
    for chain in range(max(1, total // JOBS_PER_CHAIN)):
        jobs.extend(chain_jobs(tasks, chain, partitions))
    jobs.append(tasks.charge.options(id="order-1-charge").job(1))
    receipt = tasks.receipt.options(depends_on=["order-1-charge"], on_dependency_failure="cancel")
    jobs.append(receipt.job(1))
    jobs.append(tasks.send_email.job(0, 1))
    return jobs


def random_job(tasks: DemoTasks, n: int, rng: random.Random) -> NewJob:
    roll = rng.random()
    if roll < 0.45:
        return tasks.noop.job(n)
    if roll < 0.65:
        return tasks.resize.job(n, rng.randint(2, 20))
    if roll < 0.75:
        return tasks.checksum.job(n)
    if roll < 0.87:
        failures = rng.choices((0, 1, 2, 4), weights=(70, 20, 7, 3))[0]  # 4: out of attempts
        return tasks.send_email.job(n, failures)
    if roll < 0.92:
        return tasks.call_api.job(n)
    return tasks.report.options(delay=rng.uniform(0.1, 1.0)).job(n)


def plan(
    tasks: DemoTasks, total: int, rng: random.Random, partitions: int | None = None
) -> list[NewJob]:
    """``total`` jobs: the fixed ones first (chains start early), then a random mix; for a
    namespace of ``partitions`` partitions (None: one)."""
    jobs = fixed_jobs(tasks, total, partitions)
    while len(jobs) < total:
        jobs.append(random_job(tasks, len(jobs), rng))
    return jobs[:total]
