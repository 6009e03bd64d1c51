"""Bad input: a clear InvalidJob (or a typed exception for set-up errors), and nothing changed."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest

from quasar_redis import (
    BatchRefused,
    ClaimRefused,
    Complete,
    ConfigurationError,
    InvalidJob,
    JobRefused,
    Limits,
    NewJob,
    Quasar,
)
from quasar_redis._calls import Call

from .helpers import T0, applied, claimed, snapshot


def refused_reason(result: object) -> str:
    assert isinstance(result, JobRefused | ClaimRefused), result
    assert isinstance(result.error, InvalidJob), result
    return result.error.reason


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"queue": "has space"}, "queue must be 1-64 characters"),
        ({"queue": "{tag}"}, "queue must be 1-64 characters"),
        ({"queue": "a:b"}, "queue must be 1-64 characters"),
        ({"queue": "q" * 65}, "queue must be 1-64 characters"),
        ({"stage": "bad stage"}, "stage must be at most 128 characters"),
        ({"stage": "s" * 129}, "stage must be at most 128 characters"),
        ({"id": "has space"}, "id must not contain whitespace"),
        ({"id": "tab\tid"}, "id must not contain whitespace"),
        ({"id": "x" * 257}, "id must be at most 256 bytes"),
        ({"priority": 1_000_001}, "priority must be between"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"priority": 1.5}, "priority must be an integer"),
        ({"priority": True}, "priority must be an integer"),
        ({"max_attempts": "3"}, "max_attempts must be an integer"),
        ({"max_attempts": 2**60}, "max_attempts must be an integer"),
        ({"input_revision": None}, "input_revision must be an integer"),
        ({"available_at": 1e3}, "available_at must be an integer"),
        ({"delay_ms": "soon"}, "delay must be an integer"),
        ({"payload": object()}, "payload cannot be encoded as msgpack"),
        ({"payload": b"x" * 2000}, "payload is 200"),
        ({"dependencies": ["a b"]}, "dependency must not contain whitespace"),
        ({"dependencies": ["d", "d"]}, "dependency d is listed twice"),
        ({"dependencies": [f"d{i}" for i in range(6)]}, "at most 5 dependencies"),
        ({"on_dependency_failure": "ignore"}, "on_dependency_failure must be"),
        ({"input_ref": "r" * 9000}, "input_ref must be at most 8192 bytes"),
    ],
)
def test_enqueue_bad_input(
    redis_client: Any, namespace: str, overrides: dict[str, Any], says: str
) -> None:
    q = Quasar(redis_client, namespace, limits=Limits(max_payload_bytes=1000, max_dependencies=5))
    args: dict[str, Any] = {"stage": "s", "id": "j", "now": T0}
    args.update(overrides)
    before = snapshot(q)
    assert says in refused_reason(q.enqueue(**args))
    assert snapshot(q) == before


def test_odd_but_valid_ids_never_collide_with_other_keys(q: Quasar) -> None:
    ids = ["{x}", "a:b", "q:default:ready", "../job", "ü-ñ", "dependents:x", "}{"]
    for job_id in ids:
        applied(q.enqueue("s", {"id": job_id}, id=job_id, now=T0))
    for job_id in ids:
        info = q.get_job(job_id)
        assert info is not None
        assert info.job.payload == {"id": job_id}
    claims = [claimed(q.claim("default", "w", 100, now=T0)).job.id for _ in ids]
    assert sorted(claims) == sorted(ids)
    root = q.keys.root
    keys = set(snapshot(q))
    assert {k for k in keys if k.startswith(f"{root}job:")} == {q.keys.job(i) for i in ids}
    others = {k.removeprefix(root) for k in keys if not k.startswith(f"{root}job:")}
    calls = {k for k in others if k.startswith("call:")}
    assert len(calls) == len(ids)  # a record per claim (an enqueue's job keeps its call id)
    assert others - calls == {"queues", "seq", "events", "q:default:leased", "q:default:wake"}


def test_batch_limits(q: Quasar) -> None:
    small = Quasar(q.redis, q.namespace, limits=Limits(max_batch=2))
    before = snapshot(q)
    too_many = small.enqueue_many([NewJob("s") for _ in range(3)], now=T0)
    assert too_many == BatchRefused(0, InvalidJob("a batch may hold at most 2 jobs"))
    assert q.enqueue_many([], now=T0) == BatchRefused(
        0, InvalidJob("a batch must hold at least one job")
    )
    bad_payload = q.enqueue_many([NewJob("s"), NewJob("s", payload={1, 2})], now=T0)
    assert isinstance(bad_payload, BatchRefused)
    assert bad_payload.index == 1
    assert snapshot(q) == before


def test_duration_and_count_arguments_are_range_checked(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 1000, now=T0)).token
    before = snapshot(q)
    assert "lease_duration must be an integer" in refused_reason(
        q.claim("default", "w", "1s", now=T0)  # type: ignore[arg-type]
    )
    assert "lease_duration must be positive" in refused_reason(q.heartbeat(token, "w", -1, now=T0))
    assert "retry_delay must be an integer" in refused_reason(
        q.fail(token, "w", "x", retry_delay_ms=0.5, now=T0)  # type: ignore[arg-type]
    )
    assert "now must be a nonnegative integer" in refused_reason(
        q.claim("default", "w", 10, now=-1)
    )
    assert "reason must be at most 8192 bytes" in refused_reason(
        q.fail(token, "w", "x" * 9000, now=T0)
    )
    assert "error kind must be" in refused_reason(q.fail(token, "w", "x", kind="no spaces", now=T0))
    assert "result cannot be encoded" in refused_reason(
        q.complete(token, "w", result=object(), now=T0)
    )
    assert "limit must be between 1 and 1000" in refused_reason(
        q.claim_many("default", "w", 10, 1001, now=T0)
    )
    assert "expected_fence must be an integer" in refused_reason(
        q.cancel("j", expected_fence="1", now=T0)  # type: ignore[arg-type]
    )
    assert snapshot(q) == before


@pytest.mark.parametrize(
    "name", ["", "with space", "{tag}", "a:b", "a/b", "a*", "x" * 65, "ünï", "orders\n"]
)
def test_bad_namespace_is_a_configuration_error(name: str) -> None:
    with pytest.raises(ConfigurationError, match="namespace"):
        Quasar(fakeredis.FakeRedis(), name)


def test_a_client_that_decodes_responses_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="decode_responses=False"):
        Quasar(fakeredis.FakeRedis(decode_responses=True), "ns")


def test_times_beyond_the_ready_index_are_refused(q: Quasar) -> None:
    before = snapshot(q)
    far = 16**11
    assert "available_at must be before" in refused_reason(q.enqueue("s", available_at=far, now=T0))
    assert "available_at must be before" in refused_reason(q.enqueue("s", delay_ms=far, now=T0))
    assert snapshot(q) == before
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 1000, now=T0)).token
    before = snapshot(q)
    too_late = q.fail(token, "w", "x", retry_delay_ms=far, now=T0)
    assert "now + retry_delay must be before" in refused_reason(too_late)
    assert "now + delay must be before" in refused_reason(
        q.release(token, "w", delay_ms=far, now=T0)
    )
    assert snapshot(q) == before


@pytest.mark.parametrize(
    ("position", "value"),
    [(4, "2"), (5, "some"), (6, "jobs"), (6, "")],  # job count, mode, reply kind
    ids=["count", "mode", "reply", "no-reply"],
)
def test_a_malformed_enqueue_call_is_refused_whole(q: Quasar, position: int, value: str) -> None:
    # Arguments no client of ours sends (another version, a hand-made call): refused, nothing
    # written. Position 0 is the call id, then now, limits, count, mode, reply.
    good = q.calls.enqueue_many([NewJob("s", id="j")], T0)
    args = list(good.args)
    args[position] = value
    before = snapshot(q)
    result = q.execute(Call(good.script, tuple(args), good.parse))
    assert result == BatchRefused(0, InvalidJob("malformed enqueue call"))
    assert snapshot(q) == before


def test_namespaces_sharing_a_tag_keep_their_jobs_apart(redis_client: Any, namespace: str) -> None:
    mine = Quasar(redis_client, namespace, functions=False)
    other = Quasar(redis_client, "other", tag=namespace, functions=False)
    applied(mine.enqueue("s", id="j", payload=1, now=T0))
    assert other.get_job("j") is None
    assert applied(other.enqueue("s", id="j", payload=2, now=T0)).id == "j"
    assert other.counts("default").available == mine.counts("default").available == 1
    assert other.keys.root == f"quasar:{{{namespace}}}/other:"


def test_a_result_over_the_payload_limit_is_refused_and_nothing_written(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 1000, now=T0)).token
    big = b"x" * (1 << 20)  # encoded with its msgpack header: over the limit of 1 MiB
    before = snapshot(q)
    says = f"result is {(1 << 20) + 5} bytes, over the limit of {1 << 20}"
    assert refused_reason(q.complete(token, "w", result=big, now=T0)) == says
    [report] = q.report_many("w", [Complete(token, big)], now=T0)
    assert refused_reason(report) == says
    assert snapshot(q) == before
