"""The ``quasar`` command line when the user gets something wrong, and what it shows of secrets.

Every mistake is one line ``Error: ...`` and a non-zero exit, never a traceback: checked through
the installed ``quasar`` entry point for a few, through click's CliRunner for the rest. Every
command run with a password in its URL, right or wrong, shows the password nowhere: not in its
output, not in a log record.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from quasar_redis import App, Quasar
from quasar_redis.cli import main

from .helpers import NO_URL, REDIS_URL, delete_namespace, real_redis, wait_for
from .locked_redis import PASSWORD, WRONG, LockedRedis, closed_port, locked

__all__ = ["locked"]  # (the fixture)

QUASAR = Path(sys.executable).parent / "quasar"
TASKS = """
import os
from quasar_redis import App

app = App(namespace=os.environ.get("QUASAR_TEST_NS", "cli-errors"))


@app.task(queue="emails")
def send(to: str) -> str:
    return to
"""


def installed(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the installed ``quasar``: its exit code and its output (stdout and stderr)."""
    done = subprocess.run(
        [str(QUASAR), *args],
        check=False,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def one_error_line(code: int, output: str) -> str:
    """The one ``Error:`` line of a failed command; no traceback."""
    assert code != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, output
    return errors[0]


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**NO_URL, **(env or {})})


MODULES = ("tasks", "syntax_slip", "key_slip")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder (the current one) with tasks.py and some broken modules, imported afresh."""
    (tmp_path / "tasks.py").write_text(TASKS)
    (tmp_path / "syntax_slip.py").write_text("x = 1\ndef broken(:\n    pass\n")
    (tmp_path / "key_slip.py").write_text("settings = {}\n\nURL = settings['REDIS_URL']\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in MODULES:
        sys.modules.pop(name, None)


# --- through the installed entry point -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["worker", "tasks:app", "--log-level", "verbose"], "'verbose' is not one of"),
        (["worker", "tasks:app", "--grace", "-5"], "-5.0 is not in the range x>=0"),
        (["worker", "tasks:app", "--lease-ms", "10"], "10 is not in the range x>=1000"),
        (["worker", "../x:app"], "MODULE is a module name, not a file path"),
        (["worker", "syntax_slip:app"], "cannot import 'syntax_slip' (syntax_slip.py:2)"),
        (["worker", "key_slip:app"], "cannot import 'key_slip' (key_slip.py:3): KeyError"),
        (["example", "--redis-url", "localhost:6379"], "must start with redis://"),
    ],
)
def test_mistakes_through_the_installed_quasar(project: Path, args: list[str], said: str) -> None:
    code, output = installed(*args, cwd=project)
    line = one_error_line(code, output)
    assert said in line
    assert output.strip() == line  # that line alone: no usage block, no traceback


# --- through CliRunner ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["worker", "tasks:app", "-c", "0"], "'--concurrency'"),
        (["worker", "tasks:app", "--max-jobs", "0"], "'--max-jobs'"),
        (["worker", "tasks:app", "--connect-timeout", "0"], "'--connect-timeout'"),
        (["worker", "tasks:app", "--grace", "soon"], "'--grace'"),
        (["worker", "tasks"], "expected MODULE:APP"),
        (["worker", "tasks:"], "expected MODULE:APP"),
        (["worker", "tasks.py:app"], "not a file path (run from the folder that holds it"),
        (["worker", "my-tasks:app"], "expected MODULE:APP"),
        (["worker", "no_such_module:app"], "cannot import 'no_such_module': no such module"),
        (["worker", "tasks:nope"], "module 'tasks' has no attribute 'nope'"),
        (["worker", "tasks:send"], "'tasks:send' is a Task, not a quasar_redis App"),
        (["demo", "--redis-url", "127.0.0.1:6379"], "must start with redis://"),
        (["events", "--namespace", "x", "--redis-url", "http://h"], "must start with redis://"),
    ],
)
def test_mistakes_are_one_line(project: Path, args: list[str], said: str) -> None:
    result = invoke(*args, env={"QUASAR_REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert said in one_error_line(result.exit_code, result.output)


def test_a_module_without_a_url_imports_and_the_worker_says_what_to_give(project: Path) -> None:
    result = invoke("worker", "tasks:app", "--burst")  # App() without a URL: imported all right
    line = one_error_line(result.exit_code, result.output)
    assert line.startswith("Error: no Redis URL: give --redis-url or set QUASAR_REDIS_URL")
    assert result.exit_code == 2


def test_an_app_url_without_a_scheme_is_one_line(project: Path) -> None:
    result = invoke("worker", "tasks:app", "--burst", env={"REDIS_URL": "localhost:6379"})
    line = one_error_line(result.exit_code, result.output)
    assert line.startswith("Error: bad Redis URL 'localhost:6379': it must start with")
    assert result.exit_code == 2


def test_every_option_has_help_text() -> None:
    missing = [
        f"{name} {param.name}"
        for name, command in sorted(main.commands.items())
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert missing == []
    assert all(command.help for command in main.commands.values())


def test_an_unreachable_redis_ends_the_worker_after_its_connect_timeout(project: Path) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{closed_port()}/0"
    began = time.monotonic()
    result = invoke("worker", "tasks:app", "--connect-timeout", "0.5", env={"REDIS_URL": url})
    line = one_error_line(result.exit_code, result.output)
    assert line.startswith("Error: cannot reach Redis at redis://:***@127.0.0.1:")
    assert time.monotonic() - began < 10
    assert PASSWORD not in result.output


# --- secrets -------------------------------------------------------------------------------------


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def shown(result: Result, records: pytest.LogCaptureFixture) -> str:
    """Everything a command showed: its output, and every log record."""
    return result.output + "\n".join(r.getMessage() for r in records.records)


@pytest.mark.parametrize("password", [PASSWORD, WRONG])
def test_no_command_shows_the_password(
    locked: LockedRedis, project: Path, records: pytest.LogCaptureFixture, password: str
) -> None:
    namespace = f"cli-secret-{uuid.uuid4().hex[:8]}"
    url = locked.url("", password)
    runs = [
        invoke("example", "--redis-url", url),
        invoke("demo", "--redis-url", url, "--jobs", "10", "--log-level", "DEBUG"),
        invoke("events", "--redis-url", url, "--namespace", namespace, "--no-follow"),
        invoke("worker", "tasks:app", "-q", "emails", "--burst", env={"REDIS_URL": url}),
    ]
    for result in runs:
        text = shown(result, records)
        assert password not in text, text
        assert (result.exit_code == 0) is (password == PASSWORD), text
    assert "redis://:***@127.0.0.1" in shown(runs[0], records)


@pytest.mark.parametrize("password", [PASSWORD, WRONG])
def test_the_installed_worker_shows_no_password(
    locked: LockedRedis, project: Path, password: str
) -> None:
    env = {"QUASAR_REDIS_URL": locked.url("", password), "QUASAR_TEST_NS": "cli-secret"}
    code, output = installed("worker", "tasks:app", "-q", "emails", "--burst", cwd=project, env=env)
    assert password not in output, output
    if password == PASSWORD:
        assert code == 0 and "Redis redis://:***@127.0.0.1" in output, output
    else:
        assert "Redis refused the user or password" in one_error_line(code, output) and code == 1


# --- --burst and --max-jobs ----------------------------------------------------------------------


def test_max_jobs_and_burst_end_the_worker_with_exit_0(project: Path) -> None:
    client = real_redis()
    namespace = f"cli-max-{uuid.uuid4().hex[:8]}"
    env = {"QUASAR_REDIS_URL": REDIS_URL, "QUASAR_TEST_NS": namespace}
    try:
        app = App(REDIS_URL, namespace=namespace)
        send = app.task(str.upper, name="tasks.send", queue="emails")  # the worker's task's name
        for i in range(5):
            send.enqueue(f"to-{i}")
        app.close()
        first = invoke("worker", "tasks:app", "-q", "emails", "--max-jobs", "2", env=env)
        assert first.exit_code == 0, first.output
        counts = Quasar(client, namespace).counts("emails")
        assert counts.completed == 2 and counts.available == 3
        sys.modules.pop("tasks", None)
        rest = invoke("worker", "tasks:app", "-q", "emails", "--burst", env=env)
        assert rest.exit_code == 0, rest.output
        assert Quasar(client, namespace).counts("emails").completed == 5
    finally:
        delete_namespace(client, namespace)
        client.close()


# --- --reload ------------------------------------------------------------------------------------


def test_reload_restarts_the_worker_when_a_py_file_changes(project: Path) -> None:
    log = project / "reload.log"
    env = {**os.environ, "QUASAR_REDIS_URL": "memory://"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(QUASAR), "worker", "tasks:app", "-q", "emails", "--reload", "--grace", "0"],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:

        def starts() -> int:
            assert proc.poll() is None, log.read_text()
            return log.read_text().count(" started: queues ")

        wait_for(starts, 30, "the worker to start")
        (project / "tasks.py").write_text(
            TASKS
            + textwrap.dedent("""
            @app.task(queue="emails")
            def added() -> None:
                pass
            """)
        )
        wait_for(lambda: starts() >= 2, 30, "the worker to start again")
        assert "tasks.added (emails)" in log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(30)


def test_reload_without_watchfiles_says_what_to_install(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # import fails
    result = invoke("worker", "tasks:app", "--reload")
    line = one_error_line(result.exit_code, result.output)
    assert "pip install 'quasar_redis[dev]'" in line
