"""docs/testing.md: its example project runs as written. Each ```python block of the page is a file
named on its first line (``# shop.py``, ``# conftest.py``, ``# test_worker.py``); they are written
to an empty folder and run there by pytest, in a process of its own, the way a user who copied
them runs them, with ``TEST_REDIS_URL`` the real Redis of this run. Every test of the page passes
and none skips."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .helpers import REDIS_URL, real_redis

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "testing.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)
_NAME = re.compile(r"^# (\w+\.py)\n")


def files() -> dict[str, str]:
    """Each block of the page, by the file name on its first line."""
    found: dict[str, str] = {}
    for number, block in enumerate(_BLOCK.findall(PAGE.read_text(encoding="utf-8")), 1):
        name = _NAME.match(block)
        assert name, f"block {number} of docs/testing.md does not name its file (# NAME.py)"
        assert name[1] not in found, f"docs/testing.md writes {name[1]} twice"
        found[name[1]] = block
    return found


def test_the_page_shows_each_way_to_test() -> None:
    code = "\n".join(files().values())
    for shown in ("App(", "drain(", "adrain(", ".result(", "Snooze(", "PermanentFailure("):
        assert shown in code, f"no example uses {shown}"
    assert {"shop.py", "conftest.py"} <= set(files())


def test_the_example_project_passes_under_pytest(tmp_path: Path) -> None:
    real_redis().close()  # (skips, or fails under QUASAR_REQUIRE_REDIS=1, without one)
    for name, code in files().items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    tests = sum(len(re.findall(r"^def test_", code, re.M)) for code in files().values())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUASAR_", "PYTEST_"))}
    env |= {"TEST_REDIS_URL": REDIS_URL, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "-rs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"^{tests} passed in ", done.stdout, re.M), done.stdout
