"""docs/performance.md is written by the benchmark (``benchmarks/run.py --write-docs``) and names
the commit it measured. Its figures stay true only while what they measure is unchanged: the Lua
that runs in Redis, the client's path from a task's ``enqueue`` to the socket and back, and the
worker that claims and runs the jobs (the processing and enqueue-to-start figures). A change to
any of them after the measured commit makes the page stale, and this test says so: rerun the
benchmark on a quiet machine and commit what it writes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import REQUIRE

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "performance.md"

#: what the published figures measure: every Lua file, the client's sending path, the worker
MEASURED = [
    "lua",
    "quasar_redis/worker",
    "quasar_redis/_tasks.py",
    "quasar_redis/_base.py",
    "quasar_redis/_enqueue_calls.py",
    "quasar_redis/_call_base.py",
    "quasar_redis/_call_codec.py",
    "quasar_redis/_codec.py",
    "quasar_redis/_sending.py",
    "quasar_redis/_replies.py",
    "quasar_redis/_fast.py",
    "quasar_redis/_coalescing.py",
    "quasar_redis/client.py",
    "quasar_redis/aio.py",
    "quasar_redis/_wait_line.py",
    "quasar_redis/app.py",
]

_MEASURED_AT = re.compile(
    r"^Measured on (\S+) at commit ([0-9a-f]{7,40})( \(with uncommitted[^)]*\))?"
)


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )


def history() -> bool:
    """Whether this checkout has its git history (an unpacked release has none)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return False
    shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    return git("rev-parse", "--verify", "HEAD").returncode == 0 and not shallow


def measured_commit() -> tuple[str, bool]:
    """The commit the page names, and whether it was measured with uncommitted changes."""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        found = _MEASURED_AT.match(line)
        if found:
            return found.group(2), found.group(3) is not None
    raise AssertionError(f"{PAGE} names no commit ('Measured on DATE at commit HASH')")


def test_the_performance_page_names_a_clean_commit() -> None:
    commit, dirty = measured_commit()
    assert not dirty, f"{PAGE.name} was measured with uncommitted changes: rerun the benchmark"
    assert len(commit) >= 7


def test_the_performance_page_measured_the_current_code() -> None:
    if not history():
        if REQUIRE:
            pytest.fail("CI runs on a clone with its history: git or the history is missing")
        pytest.skip("no git history here to compare the measured commit with")
    commit, _ = measured_commit()
    known = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    assert known.returncode == 0, f"{PAGE.name} names commit {commit}, which is not in this history"
    changes = git("log", "--format=%h %s", f"{commit}..HEAD", "--", *MEASURED).stdout.strip()
    assert not changes, (
        f"{PAGE.name} shows the figures of commit {commit}, but what they measure has changed "
        f"since (rerun `python3 benchmarks/run.py --write-docs` on a quiet machine):\n{changes}"
    )
