"""The programs of the failover tests, written into a test's folder: a task module (its app's
namespace has ``LOAD_PARTITIONS`` partitions, one by default) and a producer. The producer
enqueues jobs of known ids, writing each id whose enqueue was acknowledged to
``acked-<name>.txt``; after ``pause_after`` of them it touches ``paused-<name>`` and waits for
the file ``go`` (the test places the fault there). It waits, from a thread, on the result of a
job no worker serves until after the fault, so that the wait spans it. It prints a JSON line:
the result waited for, and how many calls met RedisUnavailable (then sent again); any other
exception ends it with a traceback."""

TASKS = """
import os

from quasar_redis import App, Durable

DURABLE = Durable(replicas=1, timeout_ms=500) if os.environ.get("LOAD_DURABLE") == "1" else None
PARTITIONS = int(os.environ.get("LOAD_PARTITIONS", "1"))
app = App(
    namespace=os.environ["QUASAR_NAMESPACE"],
    durable=DURABLE,
    partitions=PARTITIONS if PARTITIONS > 1 else None,
)


@app.task(queue="work", name="add")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="held", name="held")
def held() -> str:
    return "held"
"""

PRODUCER = """
import json
import sys
import threading
import time
from pathlib import Path

from quasar_redis import DuplicateJob, JobRefusedError, RedisUnavailable

from tasks import add, app, held

name, total, pause_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
acked = open(f"acked-{name}.txt", "a", buffering=1)
unavailable = 0
outcome = {}


def enqueue(task, job_id, *args):
    global unavailable
    while True:
        try:
            return task.options(id=job_id).enqueue(*args)
        except JobRefusedError as exc:
            if isinstance(exc.error, DuplicateJob):  # an earlier try was applied
                return app_handle(job_id)
            raise
        except RedisUnavailable:
            unavailable += 1


def app_handle(job_id):
    from quasar_redis import JobHandle
    return JobHandle(app, job_id)


def wait(handle):
    try:
        outcome["held"] = handle.result(timeout=300)
    except BaseException as exc:
        outcome["held"] = f"{type(exc).__name__}: {exc}"


handle = enqueue(held, f"{name}-held")
acked.write(f"{name}-held\\n")
waiter = threading.Thread(target=wait, args=(handle,))
waiter.start()
for i in range(total):
    enqueue(add, f"{name}-{i}", i, 1)
    acked.write(f"{name}-{i}\\n")
    if i + 1 == pause_after:
        Path(f"paused-{name}").touch()
        while not Path("go").exists():
            time.sleep(0.01)
waiter.join()
print(json.dumps({"held": outcome.get("held"), "unavailable": unavailable}))
"""
