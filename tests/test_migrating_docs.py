"""docs/migrating.md: each quasar_redis example (a ```python block opening with ``# quasar_redis``)
runs as written on the embedded server, its ``App(namespace="shop")`` given ``memory://``, and a
burst worker then runs what it enqueued. The RQ and Celery examples beside them are not run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "migrating.md"
#: What every quasar example declares its application with (the Redis at QUASAR_REDIS_URL).
DECLARED = 'App(namespace="shop")'
_BLOCK = re.compile(r"^```python\n(# quasar_redis.*?)^```$", re.M | re.S)


def examples() -> list[str]:
    return _BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_a_quasar_example_beside_each_system() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(examples()) == 2
    assert "from rq import" in text and "from celery import" in text


@pytest.mark.parametrize("code", examples(), ids=["from-rq", "from-celery"])
def test_each_quasar_example_runs_as_written(code: str) -> None:
    assert DECLARED in code
    code = code.replace(DECLARED, 'App("memory://", namespace="shop")')
    scope: dict[str, Any] = {"__name__": "docs_migrating"}
    exec(compile(code, "docs/migrating.md", "exec"), scope)
    app = scope["app"]
    try:
        assert app.drain(timeout=30) >= 1
        if "handle" in scope:
            assert scope["handle"].result(timeout=1) == "receipt 42 sent to ada@example.com"
    finally:
        app.close()
