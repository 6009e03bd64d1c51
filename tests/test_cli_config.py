"""One configuration story for every ``quasar`` command (docs/operations.md, "Configuration"):
``--redis-url``, ``--namespace`` and ``--app`` everywhere, one precedence (a flag, then the
application's own settings, then the environment, then the defaults), an ``App`` that imports
without a URL, and one error format with exit 2 for usage errors and 1 for runtime errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import pytest
from click.testing import CliRunner, Result

import quasar_redis
from quasar_redis import App, ConfigurationError, Quasar
from quasar_redis.cli import main

from .helpers import REDIS_URL, delete_namespace, real_redis
from .locked_redis import closed_port

#: every variable a command reads its Redis, namespace or application from
VARIABLES = ("QUASAR_REDIS_URL", "REDIS_URL", "QUASAR_NAMESPACE", "QUASAR_APP")
#: the folder this quasar_redis is imported from, for the processes a test starts
SOURCE = str(Path(quasar_redis.__file__).resolve().parent.parent)
#: commands with a namespace of their own (a fresh one), and those with no namespace (probe asks
#: a health endpoint over HTTP, not Redis)
OWN_NAMESPACE = {"demo", "example"}
NO_NAMESPACE = {"acl roles", "acl load", "probe"}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No Redis, namespace or application in the environment; as it was after the test, even
    where a command set one (``quasar worker`` passes its flags on to its processes)."""
    for variable in VARIABLES:
        monkeypatch.setenv(variable, "")  # (recorded, so that the end of the test restores it)
        monkeypatch.delenv(variable)
    return monkeypatch


@dataclass(frozen=True)
class Project:
    """A folder (the current one) holding an application module of a unique name, whose App
    declares ``namespace`` and no URL; its keys on the real Redis are deleted after the test."""

    path: Path
    module: str
    namespace: str
    redis: Any

    @property
    def app_path(self) -> str:
        return f"{self.module}:app"

    def imported(self) -> Any:
        __import__(self.module)
        return sys.modules[self.module]


APP_MODULE = """
from quasar_redis import App

app = App(namespace={namespace!r})


@app.task(queue="emails")
def send(to: str) -> str:
    return to.upper()
"""


@pytest.fixture
def project(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> Iterator[Project]:
    client = real_redis()
    module = f"shop_tasks_{uuid.uuid4().hex[:10]}"
    namespace = f"cfg-{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{module}.py").write_text(APP_MODULE.format(namespace=namespace))
    clean_env.chdir(tmp_path)
    clean_env.syspath_prepend(str(tmp_path))
    made = Project(tmp_path, module, namespace, client)
    try:
        yield made
    finally:
        module_object = sys.modules.pop(module, None)
        if module_object is not None:
            module_object.app.close()
        for name in (namespace, f"{namespace}-other"):
            delete_namespace(client, name)
        client.close()


def quasar(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def error_line(result: Result, code: int) -> str:
    """The one line of a failed command, ``Error: ...``, and its exit code."""
    assert result.exit_code == code, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@contextlib.contextmanager
def started(args: list[str], env: dict[str, str]) -> Iterator[IO[str]]:
    """``quasar ARGS`` in a process of its own (with ``env``, no other Redis, namespace or app):
    its stdout; the process is ended after."""
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES} | {"PYTHONPATH": SOURCE}
    proc = subprocess.Popen(
        [sys.executable, "-m", "quasar_redis", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=clean | env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout
    finally:
        proc.kill()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def enqueue_emails(project: Project, count: int = 2) -> None:
    """``count`` jobs enqueued through the project's own app (its namespace)."""
    tasks = project.imported()
    for i in range(count):
        tasks.send.enqueue(f"to-{i}")


# --- every command takes the same options ------------------------------------------------------


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def options_of(command: click.Command) -> dict[str, click.Option]:
    return {
        opt: param
        for param in command.params
        if isinstance(param, click.Option)
        for opt in param.opts
    }


def test_every_command_of_a_namespace_takes_redis_url_namespace_and_app() -> None:
    missing = []
    for name, command in commands(main):
        options = options_of(command)
        if name in NO_NAMESPACE or name in OWN_NAMESPACE:
            continue
        wanted = {
            "--redis-url": ["QUASAR_REDIS_URL", "REDIS_URL"],
            "--namespace": "QUASAR_NAMESPACE",
            "--app": "QUASAR_APP",
        }
        missing += [
            f"{name} {flag}"
            for flag, variable in wanted.items()
            if flag not in options or options[flag].envvar != variable
        ]
    assert missing == []
    for name in ("demo", "example"):  # a fresh namespace of their own, on any Redis
        options = options_of(main.commands[name])
        assert {"--redis-url", "--namespace"} <= set(options)


# --- the application's settings ------------------------------------------------------------------


def test_an_app_declaring_tasks_imports_without_a_url(project: Project) -> None:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES} | {"PYTHONPATH": SOURCE}
    code = f"import {project.module} as m; print(m.app.namespace, m.send.name)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project.path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [project.namespace, f"{project.module}.send"]
    tasks = project.imported()
    with pytest.raises(ConfigurationError, match=r"no Redis URL: .*QUASAR_REDIS_URL"):
        tasks.send.enqueue("x")  # the first call that needs Redis says how to give one
    with pytest.raises(ConfigurationError, match="no Redis URL"):
        tasks.app.drain()


def test_an_app_without_a_namespace_takes_quasar_namespace(clean_env: pytest.MonkeyPatch) -> None:
    assert App(REDIS_URL).namespace == "default"
    clean_env.setenv("QUASAR_NAMESPACE", "from-env")
    assert App(REDIS_URL).namespace == "from-env"
    assert App(REDIS_URL, namespace="declared").namespace == "declared"


@pytest.mark.parametrize("how", ["--app", "QUASAR_APP"])
def test_the_readme_flow_finds_the_namespace_the_app_declares(
    project: Project, clean_env: pytest.MonkeyPatch, how: str
) -> None:
    clean_env.setenv("QUASAR_REDIS_URL", REDIS_URL)
    enqueue_emails(project)
    if how == "--app":
        ran = quasar("queues", "--json", "--app", project.app_path)
    else:
        clean_env.setenv("QUASAR_APP", project.app_path)
        ran = quasar("queues", "--json")
    assert ran.exit_code == 0, ran.output
    [queue] = json.loads(ran.output)
    assert queue["name"] == "emails" and queue["counts"]["available"] == 2


def test_a_flag_wins_then_the_app_then_the_environment(
    project: Project, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("QUASAR_REDIS_URL", REDIS_URL)
    enqueue_emails(project)
    # the app's namespace before QUASAR_NAMESPACE
    clean_env.setenv("QUASAR_NAMESPACE", f"{project.namespace}-other")
    ran = quasar("queues", "--json", "--app", project.app_path)
    assert ran.exit_code == 0 and json.loads(ran.output)[0]["name"] == "emails", ran.output
    # --namespace before the app's
    other = quasar("queues", "--app", project.app_path, "--namespace", f"{project.namespace}-other")
    assert f"namespace '{project.namespace}-other' has no queues" in error_line(other, 1)
    # --redis-url before the environment's: a Redis out of reach
    nowhere = f"redis://127.0.0.1:{closed_port()}/0"
    away = quasar("queues", "--app", project.app_path, "--redis-url", nowhere)
    assert f"cannot reach Redis at {nowhere}" in error_line(away, 1)


def test_the_url_an_app_declares_comes_before_the_environments(
    project: Project, clean_env: pytest.MonkeyPatch
) -> None:
    module = f"{project.module}_url"
    (project.path / f"{module}.py").write_text(
        f"from quasar_redis import App\napp = App({REDIS_URL!r}, namespace={project.namespace!r})\n"
    )
    nowhere = f"redis://127.0.0.1:{closed_port()}/0"
    clean_env.setenv("QUASAR_REDIS_URL", nowhere)
    try:
        Quasar(project.redis, project.namespace).enqueue("s", queue="emails")
        ran = quasar("queues", "--json", "--app", f"{module}:app")
        assert ran.exit_code == 0, ran.output
        assert json.loads(ran.output)[0]["name"] == "emails"
    finally:
        sys.modules.pop(module, None)


def test_a_namespace_without_queues_says_which_and_how_to_point_elsewhere(
    clean_env: pytest.MonkeyPatch,
) -> None:
    real_redis().close()
    clean_env.setenv("QUASAR_REDIS_URL", REDIS_URL)
    empty = f"cfg-empty-{uuid.uuid4().hex[:8]}"
    clean_env.setenv("QUASAR_NAMESPACE", empty)
    line = error_line(quasar("queues"), 1)
    assert f"namespace '{empty}' has no queues on {REDIS_URL}" in line
    assert "--namespace" in line and "--app" in line and "QUASAR_NAMESPACE" in line


def test_acl_setuser_takes_its_namespace_by_the_same_rule(
    project: Project, clean_env: pytest.MonkeyPatch
) -> None:
    def keys(*args: str) -> str:
        ran = quasar("acl", "setuser", "u", "reader", *args)
        assert ran.exit_code == 0, ran.output
        return ran.output.split("resetkeys ", 1)[1].split(" resetchannels", 1)[0]

    assert keys() == "'~quasar:{default}:*'"
    clean_env.setenv("QUASAR_NAMESPACE", "from-env")
    assert keys() == "'~quasar:{from-env}:*'"
    assert keys("--app", project.app_path) == f"'~quasar:{{{project.namespace}}}:*'"
    assert keys("--app", project.app_path, "--namespace", "flag") == "'~quasar:{flag}:*'"


# --- the worker ----------------------------------------------------------------------------------


def test_the_worker_takes_redis_url_and_namespace_flags(project: Project) -> None:
    served = f"{project.namespace}-other"
    with App(REDIS_URL, namespace=served) as elsewhere:  # the task, in another namespace
        elsewhere.task(str.upper, name=f"{project.module}.send", queue="emails").enqueue("a")
    own = Quasar(project.redis, project.namespace)
    own.enqueue("s", queue="emails")  # the app's own namespace: not served
    ran = quasar(
        "worker",
        project.app_path,
        *("--redis-url", REDIS_URL, "--namespace", served, "-q", "emails", "--burst"),
    )
    assert ran.exit_code == 0, ran.output
    assert Quasar(project.redis, served).counts("emails").completed == 1
    assert own.counts("emails").available == 1


def test_the_worker_takes_its_app_from_quasar_app(
    project: Project, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("QUASAR_REDIS_URL", REDIS_URL)
    enqueue_emails(project)
    clean_env.setenv("QUASAR_APP", project.app_path)
    ran = quasar("worker", "-q", "emails", "--burst")
    assert ran.exit_code == 0, ran.output
    assert Quasar(project.redis, project.namespace).counts("emails").completed == 2
    both = quasar("worker", f"{project.module}:other", "--app", project.app_path)
    assert "two applications given" in error_line(both, 2)


@pytest.mark.parametrize(
    ("given", "level"),
    [("WARN", "WARNING"), ("warn", "WARNING"), ("Warning", "WARNING"), ("debug", "DEBUG")],
)
def test_log_level_takes_warn_and_any_case(project: Project, given: str, level: str) -> None:
    for name in ("worker", "demo"):
        args = [project.app_path] if name == "worker" else []
        ctx = main.commands[name].make_context(name, [*args, "--log-level", given])
        assert ctx.params["log_level"] == level
    ran = quasar(
        "worker",
        project.app_path,
        *("--redis-url", "memory://", "--burst", "-q", "emails", "--log-level", given),
    )
    assert ran.exit_code == 0, ran.output


# --- events --------------------------------------------------------------------------------------


def test_events_reads_quasar_namespace_and_prints_json_lines_when_following(
    project: Project, clean_env: pytest.MonkeyPatch
) -> None:
    Quasar(project.redis, project.namespace).enqueue("s", id="first", queue="emails")
    env = {"QUASAR_REDIS_URL": REDIS_URL, "QUASAR_NAMESPACE": project.namespace}
    with started(["events", "--json", "--count", "1"], env) as stdout:
        first = json.loads(stdout.readline())
        assert (first["job"], first["event"], first["queue"]) == ("first", "available", "emails")
        # (read from the entry after the one printed: no wait for XREAD to start)
        Quasar(project.redis, project.namespace).enqueue("s", id="second", queue="emails")
        second = json.loads(stdout.readline())
        assert (second["job"], second["event"]) == ("second", "available")
        assert set(second) >= {"id", "at", "event", "queue", "job", "attempt"}


# --- one error format, one exit-code scheme -----------------------------------------------------

#: a command line of each command that talks to a namespace
COMMAND_LINES = [
    ["queues"],
    ["info", "emails"],
    ["jobs", "emails"],
    ["job", "j1"],
    ["workers"],
    ["pause", "emails"],
    ["schedules", "list"],
    ["limits", "show", "emails"],
    ["batch", "b1"],
    ["migrate-keys", "--tag", "t"],
    ["events", "--no-follow"],
    ["dashboard"],
    ["worker", "APP"],
]
BAD_URL = (
    "Error: bad Redis URL 'localhost:6379': it must start with redis://, rediss://, unix://, "
    "redis+cluster://, rediss+cluster://, redis+sentinel://, rediss+sentinel:// (for example "
    "redis://127.0.0.1:6379/0)"
)


def _line(project: Project, args: list[str]) -> list[str]:
    return [project.app_path if arg == "APP" else arg for arg in args]


@pytest.mark.parametrize("args", COMMAND_LINES, ids=lambda a: a[0])
def test_a_bad_url_is_one_answer_from_every_command_flag_or_environment(
    project: Project, clean_env: pytest.MonkeyPatch, args: list[str]
) -> None:
    args = _line(project, args)
    flag = quasar(*args, "--redis-url", "localhost:6379")
    assert error_line(flag, 2) == BAD_URL
    clean_env.setenv("REDIS_URL", "localhost:6379")
    assert error_line(quasar(*args), 2) == BAD_URL
    for extra in (["demo"], ["example"], ["acl", "load"]):
        assert error_line(quasar(*extra), 2) == BAD_URL


@pytest.mark.parametrize("args", COMMAND_LINES, ids=lambda a: a[0])
def test_usage_errors_exit_2_and_runtime_errors_exit_1(
    project: Project, clean_env: pytest.MonkeyPatch, args: list[str]
) -> None:
    args = _line(project, args)
    bad_name = "Error: namespace must be 1-64 characters of letters, digits, '_', '.', '-': got "
    flagged = quasar(*args, "--redis-url", REDIS_URL, "--namespace", "a b")
    assert error_line(flagged, 2) == f"{bad_name}'a b'"
    if args[0] != "worker":  # (the worker's app declares its namespace: it comes first)
        clean_env.setenv("QUASAR_NAMESPACE", "a{b}")
        from_env = quasar(*args, "--redis-url", REDIS_URL)
        assert error_line(from_env, 2) == f"{bad_name}'a{{b}}'"
        clean_env.delenv("QUASAR_NAMESPACE")
        unknown = quasar(*args, "--redis-url", REDIS_URL, "--app", "no_such_module_x:app")
        assert error_line(unknown, 2) == (
            "Error: cannot import 'no_such_module_x': no such module (is the current folder right?)"
        )
    secret = f"redis://:hunter2@127.0.0.1:{closed_port()}/0"
    soon = ["--connect-timeout", "0.2"] if args[0] == "worker" else []
    away = quasar(*args, "--redis-url", secret, *soon)
    line = error_line(away, 1)
    assert "cannot reach Redis at redis://:***@127.0.0.1:" in line and "hunter2" not in line


# --- the dashboard ---------------------------------------------------------------------------


def test_the_dashboard_on_a_port_in_use_says_so_in_one_line(clean_env: pytest.MonkeyPatch) -> None:
    real_redis().close()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        ran = quasar("dashboard", "--redis-url", REDIS_URL, "--port", str(port))
        line = error_line(ran, 1)
        assert line.startswith(f"Error: port {port} on 127.0.0.1 is in use")
        assert "http://" not in ran.output
    finally:
        taken.close()


def test_the_dashboard_serves_on_the_port_it_bound_and_names(
    clean_env: pytest.MonkeyPatch,
) -> None:
    real_redis().close()
    command = ["dashboard", "--redis-url", REDIS_URL, "--namespace", "cfg-dash", "--port", "0"]
    with started(command, {}) as stdout:
        first = stdout.readline()  # (said once the socket listens: no wait needed)
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
        assert found, first
        with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/", timeout=30) as page:
            assert page.status == 200
