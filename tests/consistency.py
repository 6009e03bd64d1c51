"""A consistency check of a whole namespace, read straight from Redis: after a fault (a truncated
AOF, an eviction), is every job hash in the indexes its state puts it in, exactly once, and does
every index entry name a job that is there?

The rules are docs/redis-layout.md's invariants: a Waiting job is in exactly one of ``blocked``,
``delayed`` and ``ready``; a RetryWaiting job in ``retrying`` and exactly one of ``delayed`` and
``ready``; a Leased job in ``leased``; a finished job in the set of its state (a Succeeded one
maybe in ``expiring`` too); a Waiting job never started with a deadline in ``deadlines`` too; all
of its own queue's. And ``seq`` is at least every job's ``sq``,
so that no two jobs can get one sequence number.

A queue's flow (lua/include/flow_control.lua) is checked too (``flow_problems``): ``gactive``
holds each group's leased jobs; a grouped job in ``ready`` (and ``delayed_pr``) is scored its
priority + ``GROUPED`` and is in its group's ``gready`` (scored its priority), which holds no
other; and every group with ready jobs is in exactly one of ``groups``, ``gwait`` and ``gfull``
(a group joins them at the end of the call that gave it a ready job: a check between calls
finds it there).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from quasar_redis._keys import QUEUE_SETS, KeySpace

READY_PREFIX = 11  # a ready member: available_at (6 bytes) and seq (5), then the id
GROUPED = 10_000_000  # lua/include/flow_control.lua: added to a grouped job's priority in ready

#: The indexes each state puts a job in: every set of ``required``, and exactly one of ``one_of``
#: (when it names any), and maybe the ``optional`` ones.
PLACES: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    "W": (
        frozenset(),
        frozenset({"blocked", "delayed", "ready"}),
        frozenset({"delayed_pr", "deadlines"}),
    ),
    "R": (frozenset({"retrying"}), frozenset({"delayed", "ready"}), frozenset({"delayed_pr"})),
    "L": (frozenset({"leased"}), frozenset(), frozenset()),
    "S": (frozenset({"succeeded"}), frozenset(), frozenset({"expiring"})),
    "F": (frozenset({"failed"}), frozenset(), frozenset()),
    "C": (frozenset({"cancelled"}), frozenset(), frozenset()),
    "E": (frozenset({"expired"}), frozenset(), frozenset()),
}


@dataclass
class Report:
    """What the check found; ``ok`` when nothing is wrong."""

    jobs: int = 0
    states: dict[str, int] = field(default_factory=dict)
    orphans: list[str] = field(default_factory=list)  # a job hash in no index at all
    duplicates: list[str] = field(default_factory=list)  # in more indexes than its state allows
    misplaced: list[str] = field(default_factory=list)  # in indexes, but not the right ones
    dangling: list[str] = field(default_factory=list)  # an index entry naming no job hash
    damaged: list[str] = field(default_factory=list)  # a job hash without a known state or sq
    #: a job whose ``rd`` (dependencies counted without success) is not of policy "run", or
    #: names a job it does not depend on
    miscounted: list[str] = field(default_factory=list)
    seq_behind: bool = False  # ``seq`` below some job's ``sq``
    flow: list[str] = field(default_factory=list)  # a queue's flow keys out of step (see above)

    @property
    def ok(self) -> bool:
        problems = (
            self.orphans,
            self.duplicates,
            self.misplaced,
            self.dangling,
            self.damaged,
            self.miscounted,
        )
        return not any(problems) and not self.seq_behind and not self.flow

    def __str__(self) -> str:
        parts = [f"{self.jobs} jobs {self.states}"]
        names = ("orphans", "duplicates", "misplaced", "dangling", "damaged", "miscounted", "flow")
        for name in names:
            found = getattr(self, name)
            if found:
                parts.append(f"{len(found)} {name} (e.g. {sorted(found)[:5]})")
        if self.seq_behind:
            parts.append("seq behind a job's sq")
        return "; ".join(parts)


def _keys(client: Any, pattern: str) -> list[bytes]:
    return list(client.scan_iter(match=pattern, count=1000))


def _job_fields(client: Any, keys: list[bytes]) -> list[tuple[bytes | None, ...]]:
    out: list[tuple[bytes | None, ...]] = []
    for i in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[i : i + 1000]:
            pipe.hmget(key, "st", "q", "sq", "odf", "dp", "rd")
        out += [tuple(reply) for reply in pipe.execute()]
    return out


def _indexed(client: Any, space: KeySpace, queues: set[str]) -> dict[str, set[tuple[str, str]]]:
    """Every job id named by an index, with the (queue, index) pairs naming it."""
    where: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for queue in queues:
        for what in QUEUE_SETS:
            members = client.zrange(space.queue(queue, what), 0, -1)
            for member in members:
                raw = member[READY_PREFIX:] if what in ("ready", "delayed_pr") else member
                where[raw.decode()].add((queue, what))
    return where


def _judge(state: str, queue: str, places: set[tuple[str, str]], report: Report, job: str) -> None:
    required, one_of, optional = PLACES[state]
    if not places:
        report.orphans.append(job)
        return
    if any(q != queue for q, _ in places):
        report.misplaced.append(job)
        return
    names = [what for _, what in places]
    chosen = [what for what in names if what in one_of]
    if len(chosen) > 1:
        report.duplicates.append(job)
    elif not required <= set(names) or (one_of and not chosen):
        report.misplaced.append(job)
    elif set(names) - required - one_of - optional:
        report.duplicates.append(job)


def check(client: Any, namespace: str) -> Report:
    """Scan the namespace's keys and judge every job hash and every index entry."""
    space = KeySpace(namespace)
    root = space.root
    job_keys = _keys(client, f"{root}job:*")
    queue_keys = _keys(client, f"{root}q:*")
    # (a queue's name holds no ":"; its keys are q:<queue>:<what>, and q:<queue>:gready:<group>)
    queues = {k.decode()[len(root) + 2 :].split(":", 1)[0] for k in queue_keys}
    queues |= {q.decode() for q in client.smembers(space.queues)}
    where = _indexed(client, space, queues)
    report = Report()
    states: dict[str, int] = defaultdict(int)
    top_sq = 0
    ids = {k.decode()[len(root) + 4 :] for k in job_keys}
    for key, (st, q, sq, odf, dp, rd) in zip(job_keys, _job_fields(client, job_keys), strict=True):
        job = key.decode()[len(root) + 4 :]
        report.jobs += 1
        state = (st or b"?").decode()
        if state not in PLACES or sq is None:
            report.damaged.append(job)
            continue
        states[state] += 1
        top_sq = max(top_sq, int(sq))
        _judge(state, (q or b"default").decode(), where.get(job, set()), report, job)
        if rd is not None and (odf != b"run" or not set(rd.split()) <= set((dp or b"").split())):
            report.miscounted.append(job)
    report.dangling = sorted(set(where) - ids)
    report.states = dict(sorted(states.items()))
    report.seq_behind = int(client.get(space.seq) or 0) < top_sq
    for queue in sorted(queues):
        report.flow += flow_problems(client, space, queue)
    return report


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _flow_ready(
    client: Any, space: KeySpace, queue: str, problems: list[str]
) -> dict[str, dict[bytes, float]]:
    """Each group's ready jobs (member -> priority), as the job hashes say; a job scored
    otherwise than its hash says in ready or delayed_pr is a problem."""
    root = f"{space.root}q:{queue}:"
    ready: dict[str, dict[bytes, float]] = defaultdict(dict)
    for index in ("ready", "delayed_pr"):
        for member, score in client.zrange(f"{root}{index}", 0, -1, withscores=True):
            job = member[READY_PREFIX:].decode()
            g, pr = (_text(v) for v in client.hmget(f"{space.root}job:{job}", "g", "pr"))
            want = float(pr or 0) + (GROUPED if g else 0)
            if score != want:
                problems.append(f"{queue}: {job} scored {score} in {index}, not {want}")
            if g and index == "ready":
                ready[g][member] = float(pr or 0)
    return ready


def _leased_by_group(client: Any, space: KeySpace, queue: str) -> dict[str, int]:
    leased: dict[str, int] = defaultdict(int)
    for job in client.zrange(f"{space.root}q:{queue}:leased", 0, -1):
        g = _text(client.hget(f"{space.root}job:{job.decode()}", "g"))
        if g:
            leased[g] += 1
    return dict(leased)


def flow_problems(
    client: Any, space: KeySpace, queue: str, groups: set[str] | None = None
) -> list[str]:
    """What is out of step in the flow keys of ``queue`` (see the module's text), as sentences.
    ``groups``: the groups to look at besides those the keys name (None: found by a scan)."""
    root = f"{space.root}q:{queue}:"
    problems: list[str] = []
    named: set[str] = set(groups or ())
    if groups is None:
        named |= {k.decode()[len(root) + 7 :] for k in _keys(client, f"{root}gready:*")}
    turns = {g.decode() for g in client.zrange(f"{root}groups", 0, -1)}
    waits = {g.decode() for g in client.zrange(f"{root}gwait", 0, -1)}
    full = {g.decode() for g in client.smembers(f"{root}gfull")}
    active = {g.decode(): int(n) for g, n in client.hgetall(f"{root}gactive").items()}
    named |= turns | waits | full | set(active)
    ready = _flow_ready(client, space, queue, problems)
    leased = _leased_by_group(client, space, queue)
    counted = client.hexists(f"{root}flow", "counts")  # (a group cap was set: leases counted)
    if (active != leased) if counted else active:
        problems.append(f"{queue}: gactive {active}, leased jobs by group {leased}")
    for g in sorted(named | set(ready)):
        mine = dict(client.zrange(f"{root}gready:{g}", 0, -1, withscores=True))
        if mine != ready.get(g, {}):
            problems.append(f"{queue}: gready:{g} {sorted(mine)}, ready {sorted(ready.get(g, {}))}")
        places = [
            name
            for name, held in (("groups", turns), ("gwait", waits), ("gfull", full))
            if g in held
        ]
        if len(places) > 1 or (ready.get(g) and not places):
            problems.append(f"{queue}: group {g} with {len(ready.get(g, {}))} ready in {places}")
    return problems


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


#: A batch's terminal counts by the state tag they count (lua/include/batches.lua).
BATCH_COUNTS = {"S": "nS", "F": "nF", "C": "nC", "E": "nE"}
#: A batch's callbacks: their field prefix and the name in their job's id.
BATCH_CALLBACKS = {"s": "on_success", "f": "on_failure", "c": "on_complete"}


def batch_problems(client: Any, space: KeySpace, batch_id: str) -> list[str]:
    """What is out of step in a batch (docs/workflows.md, "Batches"), as sentences: its terminal
    counts are its members' states (every member still there), its count of members its list;
    once it is closed and every member has ended, each callback its state calls for was fired
    (enqueued, or its refusal recorded), and a fired one's job names the batch."""
    fields = {_str(k): _str(v) for k, v in client.hgetall(f"{space.root}batch:{batch_id}").items()}
    if not fields:
        return [f"batch {batch_id}: no hash"]
    members = [_str(m) for m in client.lrange(f"{space.root}members:{batch_id}", 0, -1)]
    problems: list[str] = []
    if int(fields.get("n", "0")) != len(members):
        problems.append(f"batch {batch_id}: n {fields.get('n')}, {len(members)} listed")
    states = [_str(client.hget(f"{space.root}job:{m}", "st")) for m in members]
    counts = {tag: states.count(tag) for tag in BATCH_COUNTS}
    stored = {tag: int(fields.get(name, "0")) for tag, name in BATCH_COUNTS.items()}
    if "" not in states and counts != stored:
        problems.append(f"batch {batch_id}: counts {stored}, members' states {counts}")
    ended = all(s in BATCH_COUNTS for s in states)
    due = {"c": True, "s": counts["S"] == len(members), "f": counts["S"] < len(members)}
    for k, name in BATCH_CALLBACKS.items():
        if f"{k}.s" not in fields:
            continue
        job_id = fields.get(f"{k}.id")
        fired = job_id is not None or f"{k}.x" in fields
        if fields.get("cl") == "1" and ended and due[k] and not fired:
            problems.append(f"batch {batch_id}: {name} due and not fired")
        if fired and fields.get("cl") != "1":
            problems.append(f"batch {batch_id}: {name} fired while open")
        if job_id is not None and job_id != f"{batch_id}@{name}":
            problems.append(f"batch {batch_id}: {name} fired as {job_id}")
        cbo = client.hget(f"{space.root}job:{job_id}", "cbo") if job_id else None
        if cbo is not None and _str(cbo) != batch_id:
            problems.append(f"batch {batch_id}: {name}'s job names batch {_str(cbo)}")
    return problems
