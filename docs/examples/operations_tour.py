"""Runs every operator command of docs/operations.md against a real Redis and writes what each
printed into the page: the output shown there is captured, never typed.

    python docs/examples/operations_tour.py [--redis-url redis://127.0.0.1:6379/0]

It uses the namespace ``docs-tour`` (its keys are deleted before and after), a tasks module
written to a temporary folder, ``quasar worker --burst`` runs, and one live worker for
``quasar workers``. In the page, each ``<!-- run: ARGS -->`` line is followed by a ``console``
block: the block is replaced by ``$ quasar ARGS`` and the command's output (stdout, then
stderr, as a terminal shows them both).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

NAMESPACE = "docs-tour"
PAGE = Path(__file__).resolve().parent.parent / "operations.md"
QUASAR = str(Path(sys.executable).parent / "quasar")
TASKS = """
import os

from quasar_redis import App
from quasar_redis.retry import Fixed

app = App(namespace=os.environ["QUASAR_NAMESPACE"])


class MailboxMissing(KeyError):
    pass


@app.task(queue="emails", max_attempts=2, retry=Fixed(0))
def send_receipt(order_id: int, to: str) -> str:
    if order_id % 7 == 0:
        lookup_mailbox(to)
    return f"receipt {order_id} sent to {to}"


def lookup_mailbox(to: str) -> None:
    raise MailboxMissing(f"no mailbox for {to}")


@app.task(queue="reports")
def build_report(day: str) -> dict[str, object]:
    return {"day": day, "orders": 20}
"""
MARKER = re.compile(r"<!-- run: (.+?) -->\n```console\n.*?```\n", re.S)


def delete_namespace(url: str) -> None:
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"quasar:{{{NAMESPACE}}}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])
    client.close()


def run(folder: Path, env: dict[str, str], args: str) -> str:
    done = subprocess.run(
        [QUASAR, *shlex.split(args)], cwd=folder, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


def set_up(folder: Path, env: dict[str, str]) -> None:
    (folder / "tasks.py").write_text(TASKS)
    script = """
import tasks
from datetime import timedelta
for order in range(1001, 1021):
    tasks.send_receipt.options(id=f"receipt-{order}").enqueue(order, f"c{order}@example.com")
day1 = tasks.build_report.options(id="report-2026-12-01").enqueue("2026-12-01")
tasks.build_report.options(id="report-2026-12-02", depends_on=[day1]).enqueue("2026-12-02")
tasks.build_report.options(id="report-2026-12-03", delay=3600).enqueue("2026-12-03")
"""
    subprocess.run([sys.executable, "-c", script], cwd=folder, env=env, check=True)
    burst = [QUASAR, "worker", "tasks:app", "-q", "emails", "--burst", "--log-level", "ERROR"]
    subprocess.run(burst, cwd=folder, env=env, check=True, stderr=subprocess.DEVNULL)
    more = (
        "import tasks\nfor o in range(1021, 1031): tasks.send_receipt.enqueue(o, 'x@example.com')"
    )
    subprocess.run([sys.executable, "-c", more], cwd=folder, env=env, check=True)


def capture(url: str) -> list[str]:
    """Every command of the page, in its order, run against ``url``: their outputs."""
    page = PAGE.read_text()
    env = {**os.environ, "QUASAR_REDIS_URL": url, "QUASAR_NAMESPACE": NAMESPACE, "COLUMNS": "150"}
    env.pop("REDIS_URL", None)
    outputs: list[str] = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        set_up(folder, env)
        worker, waited = None, False
        for args in MARKER.findall(page):
            if args.startswith("workers") and worker is None:
                cmd = [QUASAR, "worker", "tasks:app", "-q", "reports", "-c", "4"]
                worker = subprocess.Popen(cmd, cwd=folder, env=env, stderr=subprocess.DEVNULL)
                time.sleep(3)
            if args.startswith("purge") and not waited:
                time.sleep(61)  # jobs finished within the last minute stay (the re-send window)
                waited = True
            outputs.append(run(folder, env, args))
        if worker is not None:
            worker.terminate()
            worker.wait(60)
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    url = parser.parse_args().redis_url
    delete_namespace(url)
    try:
        outputs = capture(url)
    finally:
        delete_namespace(url)

    printed = iter(outputs)

    def block(found: re.Match[str]) -> str:
        args = found.group(1)
        lines = "\n".join(line.rstrip() for line in next(printed).rstrip().splitlines())
        return f"<!-- run: {args} -->\n```console\n$ quasar {args}\n{lines}\n```\n"

    PAGE.write_text(MARKER.sub(block, PAGE.read_text()))
    print(f"wrote {len(outputs)} outputs into {PAGE}")


if __name__ == "__main__":
    main()
