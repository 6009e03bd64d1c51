"""Redis itself failing under load, on a ``redis-server`` of the test's own, with a producer
enqueueing and ``quasar worker`` processes running jobs throughout: killed with ``appendfsync
everysec``, stopped with SIGTERM, and restarted from an append-only file cut at an arbitrary byte
(its workers dead, or living on through the rollback).

Each test keeps what the producer was told (every batch acknowledged, and when) and the tasks'
log (every attempt's start and end, see ``worker_tasks``), and checks after the restart what
survived against what the fault may take: nothing acknowledged before the window, nothing at all
on SIGTERM, only what lies after the cut of the file. The loss each test saw is printed.
"""

from __future__ import annotations

import bisect
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from quasar_redis import BatchApplied, NewJob, Quasar, QuasarError, Succeeded

from . import worker_tasks as wt
from .consistency import check
from .helpers import server_bin
from .servers import RedisServer, server_in
from .test_worker_processes import (
    Fleet,
    WorkerProcess,
    check_reconnected,
    enqueue,
    get_jobs,
    new_job,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

QUEUE = "default"
BATCH = 50


# --- a producer that never gives up on a batch -------------------------------------------------


@dataclass
class Producer:
    """Enqueues batches of ``stage`` jobs named ``<prefix>-<n>`` from a thread until stopped.

    A batch whose call fails (Redis away, loading its data) is sent again as the same call (the
    same call id), until Redis answers: so every job is either acknowledged or never written,
    and a batch Redis applied before its reply was lost is answered as applied, not duplicated.
    """

    url: str
    namespace: str
    stage: str
    prefix: str
    acked: list[tuple[float, list[str]]] = field(default_factory=list)  # (when, ids) per batch
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        q = Quasar(redis.Redis.from_url(self.url, socket_timeout=5), self.namespace)
        try:
            n = 0
            while not self.stop.is_set():
                ids = [f"{self.prefix}-{n + i:06d}" for i in range(BATCH)]
                jobs = [new_job(self.stage, id=job_id) for job_id in ids]
                self._send(q, jobs)
                self.acked.append((time.monotonic(), ids))
                n += BATCH
                time.sleep(0.005)
        except BaseException as exc:  # (seen by the test, in ``finish``)
            self.error = exc
        finally:
            q.redis.close()

    def _send(self, q: Quasar, jobs: Sequence[NewJob]) -> None:
        call = q.calls.enqueue_many(jobs)
        deadline = time.monotonic() + 60
        while True:
            try:
                result = q.execute(call)
            except QuasarError:
                self.failures += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            assert isinstance(result, BatchApplied), result
            return

    def ids(self) -> list[str]:
        return [job_id for _, batch in self.acked for job_id in batch]

    def finish(self) -> list[str]:
        """Stops after the batch in flight is acknowledged; every acknowledged id."""
        self.stop.set()
        assert self._thread is not None
        self._thread.join(90)
        assert not self._thread.is_alive(), "the producer did not stop"
        if self.error is not None:
            raise self.error
        return self.ids()


def present(q: Quasar, ids: Sequence[str]) -> set[str]:
    """The jobs of ``ids`` that Redis holds."""
    found: set[str] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        found |= {
            j
            for j, info in zip(
                chunk, q.execute_many([q.calls.get_job(j) for j in chunk]), strict=True
            )
            if info is not None
        }
    return found


def done_count(q: Quasar) -> int:
    try:
        c = q.counts(QUEUE)
    except QuasarError:
        return 0
    return c.completed + c.discarded + c.cancelled


@dataclass
class Stage:
    """One test's Redis, workers, producers and client."""

    server: RedisServer
    fleet: Fleet
    q: Quasar
    lease_ms: int
    producers: list[Producer] = field(default_factory=list)

    def start_worker(self, name: str) -> WorkerProcess:
        return self.fleet.start(name, lease_ms=self.lease_ms, concurrency=16)

    def produce(self, stage: str, prefix: str) -> Producer:
        """A producer of ``stage`` jobs, stopped when the test ends."""
        made = Producer(self.server.url, self.fleet.namespace, stage, prefix)
        self.producers.append(made)
        return made


@pytest.fixture
def stage(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[Stage]:
    fsync, config, lease_ms = request.param
    with server_in(tmp_path / "redis", durable=True, fsync=fsync, config=config) as server:
        server.start()
        fleet = Fleet(tmp_path, server.url, namespace)
        q = Quasar(redis.Redis.from_url(server.url, socket_timeout=5), namespace)
        made = Stage(server, fleet, q, lease_ms)
        try:
            yield made
        finally:
            for producer in made.producers:
                producer.stop.set()
            fleet.close()
            q.redis.close()


def finish_all(stage: Stage, expected: set[str]) -> Counter[str]:
    """Keeps two workers running until every job of ``expected`` succeeded; how many times each
    job ran to its end (the tasks' log)."""
    n = len(expected)
    stage.fleet.keep_running(
        lambda name: stage.start_worker(f"K{name}"), 2, lambda: done_count(stage.q) >= n
    )
    jobs = get_jobs(stage.q, sorted(expected))
    assert all(isinstance(j.state, Succeeded) for j in jobs.values())
    return Counter(x.job for x in stage.fleet.log() if x.how == "ok")


def acked_after(producer: Producer, moment: float) -> int:
    return sum(len(batch) for t, batch in list(producer.acked) if t > moment)


def restarted_under_load(
    stage: Stage, producer: Producer, moment: float, survivors: Sequence[WorkerProcess], mark: int
) -> list[str]:
    """After Redis came back: the producer goes on for 200 more jobs, and until every worker
    that lived through the restart ran one (a worker backing off may find the first ones taken),
    then stops; every id it was told was enqueued."""

    def went_on() -> bool:
        ran = {x.worker for x in stage.fleet.log()[mark:] if x.how == "ok"}
        return acked_after(producer, moment) >= 200 and {w.name for w in survivors} <= ran

    wait_for(went_on, 60, "the producer and every worker to go on")
    return producer.finish()


def stop_and_check_survivors(stage: Stage, survivors: Sequence[WorkerProcess], mark: int) -> None:
    """The workers that lived through the restart ran jobs after it and stop cleanly; the
    namespace is consistent."""
    after = {x.worker for x in stage.fleet.log()[mark:] if x.how == "ok"}
    for worker in stage.fleet.alive():
        stage.fleet.started(worker).signal(signal.SIGTERM)
    for worker in stage.fleet.workers:
        worker.wait_exit(30)
    for worker in survivors:
        check_reconnected(worker, after)
    report = check(stage.q.redis, stage.fleet.namespace)
    assert report.ok, report


# --- a crash with appendfsync everysec -----------------------------------------------------------

EVERYSEC = ("everysec", (), wt.LONG_LEASE_MS)
# What Redis may hold back from the file under everysec: it writes each reply's changes to the
# file (the OS's cache, which a process crash keeps) before replying, except while a background
# fsync is slow, when it postpones that write for up to 2 s. A machine crash also loses what
# the OS had not written yet: up to the last second's fsync.
WINDOW_S = 2.0


@pytest.mark.parametrize("stage", [EVERYSEC], indirect=True, ids=["everysec"])
def test_a_crash_with_everysec_loses_at_most_the_last_seconds(stage: Stage) -> None:
    survivors = [stage.fleet.started(stage.start_worker(f"E{i}")) for i in (1, 2)]
    producer = stage.produce("wt.quick", "e")
    wait_for(lambda: done_count(stage.q) >= 1000, 60, "the workers to run 1,000 jobs")
    crash = time.monotonic()
    stage.server.kill(signal.SIGKILL)
    log = stage.fleet.log()
    ran_before = Counter(x.job for x in log if x.how == "ok")
    started_before = {x.job for x in log if x.event == "start"}
    stage.server.start()
    mark = len(stage.fleet.log())
    ids = restarted_under_load(stage, producer, crash, survivors, mark)
    kept = present(stage.q, ids)
    before = [(t, job_id) for t, batch in producer.acked if t <= crash for job_id in batch]
    lost = [(t, job_id) for t, job_id in before if job_id not in kept]
    window = crash - min(t for t, _ in lost) if lost else 0.0
    assert window <= WINDOW_S, f"jobs acknowledged {window:.2f}s before the crash were lost"
    assert set(ids) - kept == {job_id for _, job_id in lost}, "a job acknowledged after was lost"

    ran = finish_all(stage, kept)
    assert set(ran) - kept <= {job_id for _, job_id in lost}
    again = [job_id for job_id in kept if ran[job_id] > 1]
    assert set(again) <= started_before, "ran twice, though Redis lost nothing of it"
    print(
        f"everysec, kill -9 under load: {len(before)} jobs acknowledged before the crash, "
        f"{len(lost)} lost (window {window:.2f}s); {len(ran_before)} had succeeded by then, "
        f"{len(again)} ran again (their outcome lost); producer resends {producer.failures}"
    )
    stop_and_check_survivors(stage, survivors, mark)


# --- a graceful stop (SIGTERM) -------------------------------------------------------------------


@pytest.mark.parametrize("stage", [EVERYSEC], indirect=True, ids=["everysec"])
def test_redis_stopped_with_sigterm_under_load_loses_nothing_and_runs_nothing_twice(
    stage: Stage,
) -> None:
    survivors = [stage.fleet.started(stage.start_worker(f"T{i}")) for i in (1, 2)]
    producer = stage.produce("wt.quick", "s")
    wait_for(lambda: done_count(stage.q) >= 1000, 60, "the workers to run 1,000 jobs")
    stopped = time.monotonic()
    stage.server.kill(signal.SIGTERM)
    assert stage.server.proc is not None and stage.server.proc.returncode == 0
    assert "ready to exit, bye bye" in stage.server.log()
    stage.server.start()
    mark = len(stage.fleet.log())
    ids = restarted_under_load(stage, producer, stopped, survivors, mark)
    assert present(stage.q, ids) == set(ids), "an acknowledged job was lost"

    finish_all(stage, set(ids))
    starts = Counter(x.job for x in stage.fleet.log() if x.event == "start")
    twice = sorted(job_id for job_id, n in starts.items() if n > 1)
    assert not twice, f"{len(twice)} jobs ran twice, e.g. {twice[:5]}"
    assert set(starts) == set(ids)
    assert all(j.attempt == 1 for j in get_jobs(stage.q, ids).values())
    print(
        f"SIGTERM under load: {len(ids)} jobs, none lost, none run twice; "
        f"producer resends {producer.failures}"
    )
    stop_and_check_survivors(stage, survivors, mark)
    assert all("lease lost" not in w.stderr() for w in stage.fleet.workers)


# --- a truncated append-only file ----------------------------------------------------------------

TRUNCATED = ("always", ("--auto-aof-rewrite-percentage", "0"), wt.SHORT_LEASE_MS)


def incr_file(folder: Path) -> Path:
    """The file of the multi-part AOF (Redis 7) that writes go to: the manifest's last ``incr``."""
    manifest = (folder / "appendonlydir" / "appendonly.aof.manifest").read_text()
    names = re.findall(r"^file (\S+) seq \d+ type i$", manifest, re.MULTILINE)
    assert names, manifest
    return folder / "appendonlydir" / str(names[-1])


def units(data: bytes) -> Iterator[tuple[int, list[list[bytes]]]]:
    """Each unit the AOF replays whole (a MULTI ... EXEC block, or a command alone): its end
    offset and its commands, each a list of arguments; a unit cut short ends the walk."""
    pos, in_multi = 0, False
    block: list[list[bytes]] = []
    while pos < len(data):
        try:
            args, pos = _command(data, pos)
        except (ValueError, IndexError):
            return
        name = args[0].upper()
        if name == b"MULTI":
            in_multi, block = True, []
        elif name == b"EXEC":
            in_multi = False
            yield pos, block
        elif in_multi:
            block.append(args)
        else:
            yield pos, [args]


def _command(data: bytes, pos: int) -> tuple[list[bytes], int]:
    """One RESP array of bulk strings at ``pos``; raises when it is cut short."""
    end = data.index(b"\r\n", pos)
    if data[pos : pos + 1] != b"*":
        raise ValueError(f"not a command at {pos}")
    count = int(data[pos + 1 : end])
    pos, args = end + 2, []
    for _ in range(count):
        end = data.index(b"\r\n", pos)
        size = int(data[pos + 1 : end])
        start = end + 2
        if start + size + 2 > len(data):
            raise ValueError("cut short")
        args.append(data[start : start + size])
        pos = start + size + 2
    return args, pos


def created_before(data: bytes, cut: int, prefix: bytes) -> set[str]:
    """The job ids whose hash some unit wholly before ``cut`` wrote (their enqueue's unit)."""
    ids: set[str] = set()
    for end, commands in units(data):
        if end > cut:
            break
        ids |= {
            a[len(prefix) :].decode() for args in commands for a in args if a.startswith(prefix)
        }
    return ids


def repair(folder: Path) -> None:
    """``redis-check-aof --fix`` on the server's files: cuts the last file back to its last whole
    unit (before a MULTI block cut short). The tool is the server binary by that name."""
    manifest = folder / "appendonlydir" / "appendonly.aof.manifest"
    done = subprocess.run(
        ["redis-check-aof", "--fix", str(manifest)],
        executable=server_bin(),
        input=b"y\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode(errors="replace")[-3000:]


def rewritten(client: redis.Redis) -> bool:
    info = client.info("persistence")
    idle = not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]
    return bool(idle and info["aof_last_bgrewrite_status"] == "ok")


def inside_an_enqueue(data: bytes, start: int, root: bytes, acked: set[str]) -> int:
    """A byte inside the second job's ``HSET`` of the first enqueue block (one that takes
    sequence numbers) after ``start`` of an acknowledged batch (one the producer does not send
    again): the file then ends with a MULTI, the enqueue's first writes and one job's hash."""
    pos, enqueue, hsets = 0, False, 0
    prefix = root + b"job:"
    while True:
        args, end = _command(data, pos)
        name = args[0].upper()
        if name == b"MULTI":
            enqueue, hsets = False, 0
        elif name == b"INCRBY" and args[1] == root + b"seq":
            enqueue = pos >= start
        elif enqueue and name == b"HSET" and args[1].startswith(prefix):
            hsets += 1
            enqueue = args[1][len(prefix) :].decode() in acked
            if hsets == 2:
                return pos + (end - pos) // 2
        pos = end


def open_block(data: bytes) -> list[list[bytes]] | None:
    """The commands of the MULTI block ``data`` (whole commands) ends inside (no EXEC after its
    MULTI), or None when it ends outside any block."""
    pos = 0
    block: list[list[bytes]] | None = None
    while pos < len(data):
        args, pos = _command(data, pos)
        name = args[0].upper()
        if name == b"MULTI":
            block = []
        elif name == b"EXEC":
            block = None
        elif block is not None:
            block.append(args)
    return block


def left_in_multi(server: RedisServer, data: bytes) -> tuple[int, list[list[bytes]]] | None:
    """After Redis loaded a cut file: where it cut the file and the commands of the MULTI block
    it left the file ending inside (the block's first commands, its EXEC lost), or None when it
    cut the file before the block."""
    found = re.findall(r"Truncating the AOF \S+ at offset (\d+)", server.log())
    if not found:
        return None
    end = int(found[-1])
    block = open_block(data[:end])
    return None if block is None else (end, block)


def has_a_block(data: bytes) -> bool:
    """Whether ``data`` (whole commands, read from a command's start) holds a whole MULTI ...
    EXEC block."""
    pos, opened = 0, False
    while pos < len(data):
        args, pos = _command(data, pos)
        name = args[0].upper()
        if name == b"EXEC" and opened:
            return True
        opened = opened or name == b"MULTI"
    return False


def load_cut_file(server: RedisServer, remedy: str) -> None:
    """Starts ``server`` on its cut file, as the operator's ``remedy`` says: "check-aof", repair
    the file first; "rewrite", load it as it is (aof-load-truncated) and rewrite it at once;
    "none", load it as it is."""
    if remedy == "check-aof":
        repair(server.folder)
        server.start()
        assert "aof-load-truncated" not in server.log()
        return
    server.start()
    if remedy == "none":
        return
    client = redis.Redis.from_url(server.url)
    try:
        client.bgrewriteaof()
        wait_for(lambda: rewritten(client), 60, "the AOF rewrite")
    finally:
        client.close()


@pytest.mark.parametrize("remedy", ["check-aof", "rewrite", "none"])
@pytest.mark.parametrize("stage", [TRUNCATED], indirect=True, ids=["aof-cut"])
def test_an_aof_cut_at_any_byte_loses_only_what_was_cut(stage: Stage, remedy: str) -> None:
    # A machine crash: Redis and its workers die, the file loses its tail (cut at an arbitrary
    # byte); Redis restarts on it, then new workers come; later Redis restarts once more.
    for i in (1, 2):
        stage.fleet.started(stage.start_worker(f"A{i}"))
    producer = stage.produce("wt.quick_short", "a")
    wait_for(lambda: done_count(stage.q) >= 1500, 60, "the workers to run 1,500 jobs")
    stage.server.kill(signal.SIGKILL)
    crash = time.monotonic()
    stage.fleet.close()
    ids = producer.ids()
    producer.stop.set()  # (its batch in flight, if any, is sent again once Redis is back)

    path = incr_file(stage.server.folder)
    data = path.read_bytes()
    cut = int(len(data) * random.Random(len(data)).uniform(0.5, 0.95))
    if remedy == "none":
        start = int(len(data) * random.Random(len(data)).uniform(0.4, 0.7))
        cut = inside_an_enqueue(data, start, stage.q.keys.root.encode(), set(ids))
    with path.open("r+b") as f:
        f.truncate(cut)
    load_cut_file(stage.server, remedy)
    left = left_in_multi(stage.server, data)
    resent = set(producer.finish()) - set(ids)
    # Writes follow the load, whatever the crash left in flight: a batch of the test's own (a
    # script's MULTI block in the file; the producer may have had no batch to send again, and
    # every job Redis kept may have succeeded already, so that nothing else would write).
    more = [new_job("wt.quick_short", id=f"b-{i:06d}") for i in range(BATCH)]
    after = set(enqueue(stage.q, more))

    prefix = f"{stage.q.keys.root}job:".encode()
    expected = created_before(data, cut, prefix)
    kept = present(stage.q, ids)
    assert kept == expected & set(ids), "jobs lost that the cut did not take, or kept that it did"
    assert expected - set(ids) <= resent, "a job no call created"
    lost = [t for t, batch in producer.acked for job_id in batch if job_id not in kept]
    assert lost, "the cut took no acknowledged job: it cut nothing that matters"
    report = check(stage.q.redis, stage.fleet.namespace)
    assert report.ok, report
    print(
        f"AOF of {len(data):,} bytes cut at {cut:,} ({remedy}): "
        f"{len(ids) - len(kept)} of {len(ids)} acknowledged jobs lost, those "
        f"acknowledged in the last {crash - min(lost):.2f}s; after the restart and "
        f"{len(after)} jobs enqueued then: {report}"
    )

    everything = kept | resent | after
    finish_all(stage, everything)
    stage.fleet.close()
    stage.server.kill(signal.SIGTERM)
    stage.server.start()  # (the file as it was left: a cut MULTI block would come back now)
    report = check(stage.q.redis, stage.fleet.namespace)
    if remedy == "none":
        # Redis kept the cut enqueue's first writes in the file, and the writes that followed
        # went after them: its MULTI now takes in the next block, up to that block's EXEC, and
        # the replay applies half a script, a job hash in no index (Redis 7.0; Valkey cuts the
        # file before the MULTI). What a remedy is for.
        assert left is not None, "Redis cut the file before the block: this Redis needs no remedy"
        end, block = left
        assert has_a_block(incr_file(stage.server.folder).read_bytes()[end:]), "no block followed"
        half = {a[len(prefix) :].decode() for args in block for a in args if a.startswith(prefix)}
        assert half, block
        assert "MULTI calls can not be nested" in stage.server.log()
        assert set(report.orphans) == half and not report.dangling, report
        print(f"loaded with no remedy, then restarted: {report}")
        return
    assert "MULTI calls can not be nested" not in stage.server.log()
    assert report.ok and report.states == {"S": len(everything)}, report


def states_written(data: bytes, prefix: bytes) -> list[tuple[int, str, bytes]]:
    """Every job state the file writes, in order: the end offset of the unit that writes it,
    the job's id and the state (the job hash's ``st``)."""
    found = []
    for end, commands in units(data):
        for args in commands:
            if args[0].upper() == b"HSET" and args[1].startswith(prefix):
                fields = dict(zip(args[2::2], args[3::2], strict=True))
                if b"st" in fields:
                    found.append((end, args[1][len(prefix) :].decode(), fields[b"st"]))
    return found


def forgotten_at(writes: Sequence[tuple[int, str, bytes]], cut: int, before: int) -> set[str]:
    """The jobs a cut at ``cut`` leaves leased though their run had succeeded: the last state
    written before the cut is Leased, the next one Succeeded, written before ``before``."""
    last: dict[str, bytes] = {}
    after: dict[str, tuple[int, bytes]] = {}
    for end, job_id, state in writes:
        if end <= cut:
            last[job_id] = state
        else:
            after.setdefault(job_id, (end, state))
    return {
        job_id
        for job_id, (end, state) in after.items()
        if state == b"S" and end <= before and last.get(job_id) == b"L"
    }


def cut_between_claims_and_outcomes(data: bytes, prefix: bytes) -> tuple[int, set[str]]:
    """Where to cut the file: the end of a unit between 50% and 80% of it, the one that leaves
    the most jobs leased whose success the file recorded before its last 10% (outcomes Redis
    acknowledged long before it died, so no worker sends them again); the cut and those jobs.
    Where no such unit ends there (a stretch of the file without a claim in flight: a worker
    held up, or one large enqueue), the end of a unit anywhere between 20% and 85%."""
    writes = states_written(data, prefix)
    ends = [end for end, _ in units(data)]
    before = len(data) * 9 // 10
    best: tuple[set[str], int] = (set(), 0)
    for percents in (range(50, 81, 3), range(20, 86)):
        marks = (bisect.bisect_left(ends, len(data) * p // 100) for p in percents)
        cuts = {ends[i] for i in marks if i < len(ends)}
        tried = ((forgotten_at(writes, cut, before), cut) for cut in cuts)
        best = max(tried, key=lambda x: len(x[0]), default=best)
        if best[0]:
            return best[1], best[0]
    where = {
        state.decode(): [round(100 * end / len(data)) for end, _, st in writes if st == state][::50]
        for state in {st for _, _, st in writes}
    }
    raise AssertionError(
        "the file holds no claim whose outcome came later: nothing ran under load "
        f"({len(data):,} bytes, {len(ends)} units, {len(writes)} states written; where each "
        f"state was written, in % of the file, every 50th: {where})"
    )


def _unit(*commands: tuple[bytes, ...]) -> bytes:
    """A MULTI ... EXEC unit of an AOF holding ``commands``, in RESP."""

    def one(args: tuple[bytes, ...]) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    return one((b"MULTI",)) + b"".join(one(c) for c in commands) + one((b"EXEC",))


def test_the_cut_falls_back_to_a_wider_stretch_where_no_claim_is_in_flight() -> None:
    # Claims and their outcomes at the file's start, then one large write filling its middle:
    # no unit between 50% and 80% leaves a success forgotten, one near 25% does.
    prefix = b"quasar:{t}:job:"
    leased = _unit(*((b"HSET", prefix + b"j%d" % i, b"st", b"L") for i in range(20)))
    done = _unit(*((b"HSET", prefix + b"j%d" % i, b"st", b"S") for i in range(20)))
    start = _unit((b"SET", b"quasar:{t}:other", b"x" * 2 * len(leased)))
    head = start + leased + done
    large = _unit((b"SET", b"quasar:{t}:other", b"x" * 2 * len(head)))
    data = head + large + done
    assert 20 < 100 * len(start + leased) / len(data) < 50  # (the claims end before 50%)
    assert 100 * len(head + large) / len(data) > 80
    cut, forgotten = cut_between_claims_and_outcomes(data, prefix)
    assert cut == len(start + leased) and forgotten == {f"j{i}" for i in range(20)}
    with pytest.raises(AssertionError, match="nothing ran under load"):
        cut_between_claims_and_outcomes(large + leased, prefix)


@pytest.mark.parametrize("stage", [TRUNCATED], indirect=True, ids=["aof-cut"])
def test_workers_that_live_through_a_rollback_never_make_a_stale_result_stand(
    stage: Stage,
) -> None:
    """Redis comes back from a cut file while its workers live on: it has forgotten claims and
    outcomes they saw applied, as after a failover to a replica that lagged. The fences it hands
    out again repeat the forgotten ones; the nonces do not, so a worker holding a forgotten
    lease is refused, and every job's result is the run of the lease Redis holds.

    The file is cut where it keeps claims and loses their outcomes (the jobs then run again);
    the producer goes on after the restart until each surviving worker ran a job."""
    survivors = [stage.fleet.started(stage.start_worker(f"L{i}")) for i in (1, 2)]
    producer = stage.produce("wt.quick_short", "r")
    wait_for(lambda: done_count(stage.q) >= 1500, 60, "the workers to run 1,500 jobs")
    stage.server.kill(signal.SIGKILL)
    path = incr_file(stage.server.folder)
    data = path.read_bytes()
    cut, forgotten = cut_between_claims_and_outcomes(data, f"{stage.q.keys.root}job:".encode())
    with path.open("r+b") as f:
        f.truncate(cut)
    stage.server.start()
    assert "aof-load-truncated" not in stage.server.log(), "the cut fell inside a unit"
    mark = len(stage.fleet.log())
    everything = present(
        stage.q, restarted_under_load(stage, producer, time.monotonic(), survivors, mark)
    )
    assert forgotten <= everything

    ran = finish_all(stage, everything)
    namespace = stage.fleet.namespace
    for job_id, done in get_jobs(stage.q, sorted(everything)).items():
        raw = stage.q.redis.hgetall(stage.q.keys.job(job_id))
        assert isinstance(done.result, dict), done
        holder = f"{done.result['worker']}-{namespace}"
        assert raw[b"w"].decode() == holder and done.attempt == done.result["attempt"], (
            f"{job_id}: the result of {done.result} stands, the lease was {raw[b'w']!r}"
        )
    once = sorted(job_id for job_id in forgotten if ran[job_id] < 2)
    assert not once, f"Redis forgot their success, yet they did not run again: {once[:5]}"
    refused = sum(w.stderr().count("lease lost") for w in survivors)
    print(
        f"rollback under live workers: AOF of {len(data):,} bytes cut at {cut:,}; "
        f"{len(everything)} jobs; {len(forgotten)} succeeded jobs left leased ran again, "
        f"{refused} leases held by a live worker refused"
    )
    stop_and_check_survivors(stage, survivors, mark)
