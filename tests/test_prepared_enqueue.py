"""A task's enqueue of a plain call: worked out once but for the job's id and payload
(``prepare``), sent at once by ``_enqueue_prepared``, its common reply read without a ``Job``
made of it. It must write what the general enqueue writes, refuse what it refuses, and fall back
to the general way wherever that way does more (the eviction policy to ask, durable mode, a
payload msgpack cannot encode, a refusal or a missing library in the reply)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
import redis
import redis.exceptions as rex

from quasar_redis import (
    App,
    AsyncQuasar,
    Connector,
    CrossPartition,
    Durable,
    JobRefused,
    JobRefusedError,
    NewJob,
    Quasar,
    RedisUnavailable,
)
from quasar_redis._enqueue_calls import created_id, prepare
from quasar_redis._partitions import hashed

from .helpers import REDIS_URL, applied, comparable, delete_namespace, raw_job, snapshot

T0 = int(time.time() * 1000) + 86_400_000  # (absolute times a day ahead: still to come)

# The job options a task's options may give every call alike, each shape one prepared job.
SHAPES: dict[str, dict[str, Any]] = {
    "plain": {},
    "delay": {"delay_ms": 5_000},
    "run_at": {"available_at": T0 + 5_000},
    "deadline": {"deadline": T0 + 60_000},
    "expires_in": {"delay_ms": 5_000, "expires_in_ms": 60_000},
    "options": {
        "queue": "other",
        "priority": -3,
        "max_attempts": 7,
        "input_revision": 2,
        "on_dependency_failure": "cancel",
    },
    "flow": {"flow": "tenant-1"},
}
TIMES = ("at", "ins", "dl")


def _ready(q: Any) -> None:
    """Enqueue jobs to the queue "warm" until the client would send the next prepared job the
    prepared way (the eviction policy asked once its connections are made, the script loaded):
    what a test of that way needs first."""
    client = getattr(q, "client", q)  # (the asyncio client behind tests/clients.py's face)
    warm = prepare(NewJob("s", queue="warm"))
    assert warm is not None
    for _ in range(5):
        assert isinstance(q._enqueue_prepared(warm, 0), str)
        if client._prepared_call(warm, 0) is not None:
            return
    raise AssertionError("the client never got ready to send the prepared way")


def _relative(q: Quasar, job_id: str) -> dict[str, Any]:
    """The namespace's keys and values with the job's id hidden and every time taken from the
    moment the job was inserted (the two ways run at different moments; a time the shape gives
    kept): a time field of the hash, a score that is a time, and the member of an index whose
    prefix holds a time (only its length kept)."""
    raw = raw_job(q, job_id)
    ins = int(raw.get("ins", raw["at"]))
    jid = job_id.encode()

    def time(v: float) -> Any:  # (a time the shape gives is T0's, far after any server's now)
        return ("given", v - T0) if v >= T0 else v - ins

    out: dict[str, Any] = {}
    for key, (kind, found) in snapshot(q).items():
        name = key.removeprefix(q.keys.root).replace(job_id, "<id>")
        value: Any = found
        if kind == "hash":
            value = [
                (f, time(int(v)) if f.decode() in TIMES else v)
                for f, v in found.items()
                if f != b"ec"
            ]
        elif kind == "zset":
            value = [
                (
                    len(m) if m.endswith(jid) and m != jid else m.replace(jid, b"<id>"),
                    time(score) if score > 1e12 else score,
                )
                for m, score in found
            ]
        elif kind == "stream":
            entries = [f for _, f in q.redis.xrange(key)]
            value = [{k: v.replace(jid, b"<id>") for k, v in f.items()} for f in entries]
        elif kind == "list":
            value = q.redis.lrange(key, 0, -1)
        out[name] = (kind, value)
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_prepared_enqueue_writes_what_the_general_enqueue_writes(
    q: Quasar, redis_client: Any, backend: str, namespace: str, shape: str
) -> None:
    # The same job in two namespaces: by _enqueue_prepared, and by enqueue_job (the general
    # way). The same keys, fields, index entries, wake-ups and events; the same times from
    # each job's own insertion.
    job = NewJob("s", None, **SHAPES[shape])
    prepared = prepare(job)
    assert prepared is not None
    general_ns = f"{namespace}-general"
    general = Quasar(redis_client, general_ns, functions=backend == "redis")
    try:
        got = q._enqueue_prepared(prepared, {"n": 1})
        assert isinstance(got, str), got
        made = applied(general.enqueue_job(dataclasses.replace(job, payload={"n": 1})))
        assert q.get_job(got) is not None
        assert _relative(q, got) == _relative(general, made.id)
        mine = q.get_job(got)
        assert mine is not None and mine.job.payload == {"n": 1} and mine.job.stage == "s"
    finally:
        delete_namespace(redis_client, general_ns)


def test_only_a_job_whose_every_call_is_alike_is_prepared() -> None:
    # An id, dependencies, a dedup key or a group of its own vary from call to call (or
    # matter to where and whether it is written): such a job goes the general way.
    from quasar_redis import Unique

    assert prepare(NewJob("s")) is not None
    for varying in (
        {"id": "j1"},
        {"dependencies": ["j0"]},
        {"dedup": Unique(key="k")},
        {"group": "g"},
    ):
        assert prepare(NewJob("s", **varying)) is None, varying
    # what the general way would refuse at each call is refused there, not prepared
    assert prepare(NewJob("s", on_dependency_failure="never")) is None  # type: ignore[arg-type]
    assert prepare(NewJob("s", flow="")) is None


def test_a_prepared_jobs_call_is_the_job_it_was_prepared_from_with_its_payload() -> None:
    # What a coalesced call of a prepared job enqueues the general way: every field the same.
    job = NewJob(
        "s",
        None,
        queue="q",
        input_ref="s3://b/k",
        input_revision=4,
        priority=-2,
        max_attempts=9,
        available_at=T0,
        delay_ms=7,
        on_dependency_failure="run",
        flow="f1",
        deadline=T0 + 1,
        expires_in_ms=11,
        batch="b1",
    )
    prepared = prepare(job)
    assert prepared is not None
    assert prepared.new({"n": 1}) == dataclasses.replace(job, payload={"n": 1})
    # (every field a prepared job may hold is set above, off its default)
    plain = NewJob("s")
    unset = {
        f.name for f in dataclasses.fields(NewJob) if getattr(job, f.name) == getattr(plain, f.name)
    }
    assert unset == {"stage", "payload", "id", "dependencies", "dedup", "group"}


def test_a_refusal_in_the_reply_is_read_the_general_way_and_writes_nothing(
    q: Quasar, redis_client: Any, namespace: str
) -> None:
    # The script refuses the job (its payload over the client's limit): the reply is no
    # "created", and the general reading makes the refusal of it.
    prepared = prepare(NewJob("s"))
    assert prepared is not None
    # (the connections the client and comparable() need made first: the client asks the policy
    # again on a new one, and keeps one of the pool's for its own calls)
    _ready(q)
    comparable(q)
    _ready(q)
    before = comparable(q)
    assert getattr(q, "client", q)._prepared_call(prepared, 1) is not None
    sent: list[Any] = []
    if isinstance(q, Quasar):  # (the blocking client's sends counted: the call went once)
        send = q._send

        def counting(command: Any) -> Any:
            sent.append(command[0])
            return send(command)

        q._send = counting
    got = q._enqueue_prepared(prepared, "x" * (q.calls.limits.max_payload_bytes + 1))
    assert isinstance(got, JobRefused) and "payload" in str(got.error), got
    assert comparable(q) == before
    assert sent == (["FCALL" if q.functions else "EVALSHA"] if isinstance(q, Quasar) else [])


def test_a_task_sends_a_plain_call_the_prepared_way_and_any_other_the_general_way(
    app: App,
) -> None:
    @app.task(name="t", queue="tq")
    def t(n: int) -> int:
        return n

    sent: list[str] = []
    client = app.client
    _ready(client)
    prepared, general = client._enqueue_prepared, client.enqueue_job

    def counting_prepared(*args: Any) -> Any:
        sent.append("prepared")
        return prepared(*args)

    def counting_general(*args: Any, **kwargs: Any) -> Any:
        sent.append("general")
        return general(*args, **kwargs)

    client._enqueue_prepared = counting_prepared  # type: ignore[method-assign,assignment]
    client.enqueue_job = counting_general  # type: ignore[method-assign]
    plain = t.enqueue(1)
    delayed = t.options(delay=30).enqueue(2)
    named = t.options(id="mine").enqueue(3)
    after = t.options(depends_on=[plain]).enqueue(4)
    assert sent == ["prepared", "prepared", "general", "general"]
    assert named.id == "mine"
    for handle, n, queue in ((plain, 1, "tq"), (delayed, 2, "tq"), (after, 4, "tq")):
        info = client.get_job(handle.id)
        assert info is not None and info.job.queue == queue
        assert app.call_of(info.job) == ([n], {})
    delayed_info = client.get_job(delayed.id)
    assert delayed_info is not None
    job = delayed_info.job
    assert job.state.available_at - job.inserted_at == 30_000  # type: ignore[union-attr]
    # a refusal the prepared way raises as the general way's does, naming task and queue
    with pytest.raises(JobRefusedError, match=r"task 't'.*queue 'tq'.*payload"):
        t.enqueue("x" * (client.calls.limits.max_payload_bytes + 1))  # type: ignore[arg-type]
    assert sent[-1] == "prepared"


def test_what_the_client_must_do_first_sends_the_call_the_general_way(
    redis_client: Any, backend: str, namespace: str
) -> None:
    # Before the eviction policy is known, in durable mode, or with a payload msgpack cannot
    # encode, there is no prepared call: the general way asks, waits or refuses.
    prepared = prepare(NewJob("s"))
    assert prepared is not None
    q = Quasar(redis_client, namespace, functions=backend == "redis")
    assert q._prepared_call(prepared, 1) is None  # (the policy not asked yet)
    assert isinstance(q._enqueue_prepared(prepared, 1), str)
    _ready(q)
    assert q._prepared_call(prepared, 1) is not None
    refused = q._enqueue_prepared(prepared, object())
    assert isinstance(refused, JobRefused) and "payload" in str(refused.error), refused
    durable = Quasar(
        redis_client, namespace, functions=backend == "redis", durable=Durable(replicas=0)
    )
    for _ in range(3):
        durable.counts("default")  # (the policy asked, on the connections it makes)
    assert durable._policy_checked and durable._prepared_call(prepared, 1) is None
    if backend == "redis":  # (fakeredis has no WAIT)
        assert isinstance(durable._enqueue_prepared(prepared, 1), str)


def test_a_broken_connection_on_the_prepared_way_is_our_error_and_the_policy_is_asked_again(
    redis_client: Any, backend: str, namespace: str
) -> None:
    q = Quasar(redis_client, namespace, functions=backend == "redis")
    prepared = prepare(NewJob("s"))
    assert prepared is not None
    assert isinstance(q._enqueue_prepared(prepared, 1), str)
    _ready(q)
    send = q._send

    def broken(command: Any) -> Any:
        raise rex.ConnectionError("connection reset")

    q._send = broken
    with pytest.raises(RedisUnavailable, match="connection reset"):
        q._enqueue_prepared(prepared, 2)
    assert q._prepared_call(prepared, 3) is None  # (the server may be another: asked again)
    q._send = send
    assert isinstance(q._enqueue_prepared(prepared, 3), str)
    assert q.counts("default").available == 2


@pytest.mark.own_server
def test_a_prepared_enqueue_that_finds_no_library_or_script_loads_it_and_is_sent_again(
    redis_url: str, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        q = Quasar(client, namespace)
        prepared = prepare(NewJob("s"))
        assert prepared is not None
        assert isinstance(q._enqueue_prepared(prepared, 1), str)
        _ready(q)
        with redis.Redis.from_url(redis_url) as other:  # (gone, by another client)
            if q.functions:
                other.function_flush()
            else:  # (Redis 6.2: the scripts)
                other.script_flush()
        assert q._prepared_call(prepared, 2) is not None
        got = q._enqueue_prepared(prepared, 2)
        assert isinstance(got, str), got
        info = q.get_job(got)
        assert info is not None and info.job.payload == 2
        assert q.counts("default").available == 2
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_a_prepared_call_reads_its_own_id_from_the_common_reply() -> None:
    from quasar_redis._calls import CallBuilder
    from quasar_redis._keys import KeySpace

    prepared = prepare(NewJob("s"))
    assert prepared is not None
    call = CallBuilder(KeySpace("ns")).prepared(prepared, b"\x01")
    job_id = created_id(call, [b"BatchApplied", b"1700000000000", b"0"])
    result = call.parse([b"BatchApplied", b"1700000000000", b"0"])
    assert job_id is not None and result.job.id == job_id  # type: ignore[union-attr]
    for other in ([b"BatchApplied", b"", b"0"], [b"BatchRefused", b"0"], b"x", None):
        assert created_id(call, other) is None


def test_a_partitioned_namespace_places_prepared_jobs_as_enqueue_does(
    redis_client: Any, backend: str, namespace: str
) -> None:
    q = Quasar(redis_client, namespace, functions=backend == "redis", partitions=3)
    anywhere, flowed = prepare(NewJob("s")), prepare(NewJob("s", flow="tenant-1"))
    assert anywhere is not None and flowed is not None
    spread = {str(q._enqueue_prepared(anywhere, i)).split("~")[0] for i in range(6)}
    assert spread == {"0", "1", "2"}
    general = applied(q.enqueue_job(NewJob("s", flow="tenant-1")))
    places = {str(q._enqueue_prepared(flowed, i)).split("~")[0] for i in range(3)}
    assert places == {general.id.split("~")[0]}
    assert q.counts("default").available == 10


def test_a_prepared_job_of_no_partition_is_refused_as_enqueue_refuses_it(
    redis_client: Any, backend: str, namespace: str
) -> None:
    # A task's flow key and batch of two partitions: no partition takes the job, and the
    # prepared way refuses it before sending, as the general way does.
    q = Quasar(redis_client, namespace, functions=backend == "redis", partitions=3)
    flow = next(f"tenant-{n}" for n in range(50) if hashed(f"tenant-{n}", 3) == 0)
    prepared = prepare(NewJob("s", flow=flow, batch="1~b"))
    assert prepared is not None
    _ready(q)
    before, sent, send = snapshot(q), [], q._send

    def counting(command: Any) -> Any:
        sent.append(command[0])
        return send(command)

    q._send = counting
    got = q._enqueue_prepared(prepared, 1)
    assert sent == []  # (refused before it is sent)
    assert got == q.enqueue_job(prepared.new(1))
    assert got == JobRefused(CrossPartition("1~b", 1, 0))
    assert snapshot(q) == before


def test_an_async_task_call_alone_goes_at_once_and_concurrent_ones_are_coalesced(
    backend: str, namespace: str
) -> None:
    url = "memory://" if backend == "fake" else REDIS_URL
    app = App(connector=Connector(url), namespace=namespace)

    @app.task(name="t")
    async def t(n: int) -> int:
        return n

    async def flow() -> None:
        aq: AsyncQuasar = app.aclient()
        await t.aenqueue(0)  # (the policy asked)
        commands: list[Any] = []
        send = aq._send

        async def counting(command: Any) -> Any:
            commands.append(command)
            return await send(command)

        aq._send = counting
        alone = await t.aenqueue(1)
        assert len(commands) == 1 and aq._lone == 0
        handles = await asyncio.gather(*(t.aenqueue(i) for i in range(2, 12)))
        assert len(commands) == 2  # (ten calls of one turn: one command)
        assert len({h.id for h in [alone, *handles]}) == 11
        counts = await aq.counts("default")
        assert counts.available == 12
        await app.aclose()

    try:
        asyncio.run(flow())
    finally:
        if backend == "redis":
            delete_namespace(app.client.redis, namespace)
        app.close()
