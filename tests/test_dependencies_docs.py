"""The examples of docs/workflows.md's sections on dependencies run as written, on the embedded
server and on a real Redis (``App("memory://")`` replaced by an App of the test server)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .helpers import REDIS_URL, delete_namespace, real_redis

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("Results of dependencies", "When a dependency fails: policies")


def blocks() -> list[str]:
    text = (ROOT / "docs" / "workflows.md").read_text()
    found = []
    for title in SECTIONS:
        section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        found += re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return found


@pytest.mark.parametrize("index", range(len(blocks())))
def test_the_examples_run_as_written(backend: str, namespace: str, index: int) -> None:
    block = blocks()[index]
    assert 'app = App("memory://")' in block
    if backend == "redis":
        real_redis().close()  # (skips, or fails under QUASAR_REQUIRE_REDIS=1, without one)
        made = f"app = App({REDIS_URL!r}, namespace={namespace!r})"
        block = block.replace('app = App("memory://")', made)
    scope: dict[str, Any] = {"__name__": f"docs_workflows_{index}"}
    try:
        exec(compile(block, "docs/workflows.md", "exec"), scope)
    finally:
        if "app" in scope:
            scope["app"].close()
        if backend == "redis":
            client = real_redis()
            delete_namespace(client, namespace)
            client.close()
