"""The recipes of docs/deploy.md, tested as written (the files under docs/deploy/): the systemd
units pass ``systemd-analyze verify``; the Dockerfile's CMD runs a worker here and its
HEALTHCHECK passes against it; the compose file and the Kubernetes manifests parse, name the same
commands, probe the endpoints those serve, give a stop more time than the worker's grace and
the hand-back that follows; and their commands and probes answer on this machine, against real
Redis. No image is built and nothing is downloaded: no Docker engine or cluster is needed."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import REDIS_URL, REQUIRE, delete_namespace, free_port, real_redis, wait_for
from .probes import ROOT, Process, answer

RECIPES = ROOT / "docs" / "deploy"
#: A stop takes at most the worker's --grace, then 10 s for the jobs handed back to end, then the
#: last reports and the shutdown hooks (docs/deploy.md): what every recipe's stop timeout covers.
STOP_MARGIN_S = 20
#: An application as the recipes expect one: tasks.py holding ``app`` (its namespace from the
#: environment here, so that the test has its own).
TASKS_PY = """\
import os

from quasar_redis import App

app = App(namespace=os.environ["QUASAR_NAMESPACE"])


@app.task
def ping() -> str:
    return "pong"
"""


@pytest.fixture
def folder(tmp_path: Path, namespace: str) -> Iterator[Path]:
    """The application's folder, and its namespace's keys deleted after."""
    client = real_redis()
    app = tmp_path / "app"
    app.mkdir()
    (app / "tasks.py").write_text(TASKS_PY)
    try:
        yield app
    finally:
        delete_namespace(client, namespace)
        client.close()


def environment(namespace: str, **more: str) -> dict[str, str]:
    """What a container or unit would have: this Python's ``quasar`` on the PATH, the test's
    Redis and namespace."""
    path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    return {"PATH": path, "QUASAR_REDIS_URL": REDIS_URL, "QUASAR_NAMESPACE": namespace, **more}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, cwd=cwd, env=full, capture_output=True, text=True, timeout=60, check=False
    )


def grace_of(command: list[str]) -> float:
    """The ``--grace`` of a worker's command line (its default, 30 s, without one)."""
    return float(command[command.index("--grace") + 1]) if "--grace" in command else 30.0


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def with_port(command: list[str], port: int) -> list[str]:
    """``command`` with its ``--port`` value replaced (a free port of this machine)."""
    made = list(command)
    made[made.index("--port") + 1] = str(port)
    return made


# --- systemd --------------------------------------------------------------------------------------


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if REQUIRE or os.environ.get("CI") == "true":
            pytest.fail("systemd-analyze is missing: CI checks the systemd units with it")
        pytest.skip("systemd-analyze is missing")
    return found


def unit_root(tmp_path: Path, units: list[Path]) -> Path:
    """A file system root holding the system's own units, the recipes' units, and an
    executable where each recipe's ExecStart points (verify checks that it exists)."""
    root = tmp_path / "root"
    system = next(
        p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()
    )
    (root / "usr/lib/systemd/system").mkdir(parents=True)
    for made in system.iterdir():  # (the targets and slices a service's defaults pull in)
        if made.suffix in (".target", ".slice") and made.is_file() and not made.is_symlink():
            shutil.copy(made, root / "usr/lib/systemd/system" / made.name)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in units:
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
        binary = root / shlex.split(unit_settings(unit)["ExecStart"])[0].lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    return root


def unit_settings(unit: Path) -> dict[str, str]:
    """The unit's ``Name=value`` lines (the last of each name)."""
    settings = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            name, _, value = line.partition("=")
            settings[name.strip()] = value.strip()
    return settings


def test_the_systemd_units_verify_and_outlast_the_worker_stop(tmp_path: Path) -> None:
    analyze = systemd_analyze()
    units = sorted(RECIPES.glob("*.service"))
    assert {u.name for u in units} == {"quasar-worker@.service", "quasar-dashboard.service"}
    root = unit_root(tmp_path, units)
    for name in ("quasar-worker@1.service", "quasar-dashboard.service"):
        done = subprocess.run(
            [analyze, "verify", f"--root={root}", name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (done.returncode, done.stdout + done.stderr) == (0, ""), name
    worker = unit_settings(RECIPES / "quasar-worker@.service")
    command = shlex.split(worker["ExecStart"])
    assert command[1:3] == ["worker", "tasks:app"]
    assert worker["KillSignal"] == "SIGTERM" and worker["KillMode"] == "mixed"
    assert int(worker["TimeoutStopSec"]) >= grace_of(command) + STOP_MARGIN_S
    assert worker["Restart"] == "always"
    assert worker["EnvironmentFile"] == "/etc/quasar/quasar.env"
    env = dict(
        line.split("=", 1)
        for line in (RECIPES / "quasar.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(env) == {"QUASAR_REDIS_URL", "QUASAR_NAMESPACE"}


# --- Docker ---------------------------------------------------------------------------------------


def dockerfile() -> dict[str, Any]:
    """The Dockerfile's ENV (a dict), STOPSIGNAL, HEALTHCHECK (its options and command) and
    CMD (exec form, as lists)."""
    text = re.sub(r"\\\n\s*", " ", (RECIPES / "Dockerfile").read_text())
    found: dict[str, Any] = {"ENV": {}}
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENV":
            found["ENV"].update(pair.split("=", 1) for pair in shlex.split(rest))
        elif word == "HEALTHCHECK":
            options, _, command = rest.partition(" CMD ")
            found["HEALTHCHECK"] = (shlex.split(options), json.loads(command))
        elif word in ("CMD", "STOPSIGNAL"):
            found[word] = json.loads(rest) if word == "CMD" else rest.strip()
    return found


def test_the_dockerfile_runs_a_worker_its_healthcheck_passes(folder: Path, namespace: str) -> None:
    image = dockerfile()
    command, (options, check) = image["CMD"], image["HEALTHCHECK"]
    assert image["STOPSIGNAL"] == "SIGTERM"
    assert command[:3] == ["quasar", "worker", "tasks:app"]
    assert check == ["quasar", "probe", "livez"]
    assert "--timeout=5s" in options
    port = free_port()  # (the image's QUASAR_HEALTH_PORT, here a free one)
    assert image["ENV"]["QUASAR_HEALTH_PORT"] == "8080"
    env = environment(namespace, **{**image["ENV"], "QUASAR_HEALTH_PORT": str(port)})
    worker = Process.start(command, cwd=folder, env=env, log_path=folder / "worker.log")
    try:
        wait_for(lambda: run(check, folder, env).returncode == 0, 60, "the HEALTHCHECK to pass")
        worker.wait_status(f"http://127.0.0.1:{port}/readyz", 200)
        assert worker.stop() == 0
        failed = run(check, folder, env)  # nothing answers any more
        assert failed.returncode == 1 and f"127.0.0.1:{port}/livez" in failed.stderr
    finally:
        worker.kill()


def duration_s(text: str) -> float:
    """A compose duration (``45s``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(float(n) * units[u] for n, u in parts)


def test_the_compose_file_runs_the_image_commands(folder: Path, namespace: str) -> None:
    compose = yaml.safe_load((RECIPES / "compose.yaml").read_text())
    image = dockerfile()
    worker, dashboard = compose["services"]["worker"], compose["services"]["dashboard"]
    assert worker["command"] == image["CMD"]
    assert worker["healthcheck"]["test"] == ["CMD", *image["HEALTHCHECK"][1]]
    assert duration_s(worker["stop_grace_period"]) >= grace_of(worker["command"]) + STOP_MARGIN_S
    assert worker["env_file"] == dashboard["env_file"] == "quasar.env"
    assert (RECIPES / "quasar.env").is_file()
    # the dashboard: its healthcheck asks the port it listens on; both answer here
    command, check = dashboard["command"], dashboard["healthcheck"]["test"]
    assert check[0] == "CMD" and option(check, "--port") == option(command, "--port")
    assert dashboard["ports"] == [f"127.0.0.1:8000:{option(command, '--port')}"]
    port = free_port()
    env = environment(namespace)
    served = Process.start(
        with_port(command, port), cwd=folder, env=env, log_path=folder / "dashboard.log"
    )
    try:
        probe = with_port(check[1:], port)
        wait_for(lambda: run(probe, folder, env).returncode == 0, 60, "the healthcheck to pass")
    finally:
        served.stop()
        served.kill()


# --- Kubernetes -----------------------------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of the manifests, by kind and name."""
    found = {}
    for path in sorted((RECIPES / "k8s").glob("*.yaml")):
        for made in yaml.safe_load_all(path.read_text()):
            found[made["kind"], made["metadata"]["name"]] = made
    return found


def probes_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        kind: container[kind]
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
        if kind in container
    }


def port_named(container: dict[str, Any], name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


def test_the_worker_manifest_probes_what_the_worker_serves(folder: Path, namespace: str) -> None:
    found = manifests()
    assert set(found) == {
        ("Secret", "quasar"),
        ("Deployment", "quasar-worker"),
        ("Deployment", "quasar-dashboard"),
        ("Service", "quasar-dashboard"),
    }
    secret = found["Secret", "quasar"]["stringData"]
    assert secret["QUASAR_REDIS_URL"].startswith("redis://")
    spec = found["Deployment", "quasar-worker"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    command = container["command"]
    assert command[:3] == ["quasar", "worker", "tasks:app"]
    assert spec["terminationGracePeriodSeconds"] >= grace_of(command) + STOP_MARGIN_S
    assert container["envFrom"] == [{"secretRef": {"name": "quasar"}}]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["QUASAR_HEALTH_PORT"]) == port_named(container, "health")
    probes = probes_of(container)
    paths = {kind: probe["httpGet"]["path"] for kind, probe in probes.items()}
    assert paths == {
        "startupProbe": "/livez",
        "livenessProbe": "/livez",
        "readinessProbe": "/readyz",
    }
    assert all(probe["httpGet"]["port"] == "health" for probe in probes.values())
    # the container's command, run here: each probe answers 200
    port = free_port()
    here = environment(namespace, **{**env, "QUASAR_HEALTH_PORT": str(port)})
    worker = Process.start(command, cwd=folder, env=here, log_path=folder / "worker.log")
    try:
        for path in sorted(set(paths.values())):
            worker.wait_status(f"http://127.0.0.1:{port}{path}", 200)
        assert worker.stop() == 0
    finally:
        worker.kill()


def test_the_dashboard_manifest_probes_what_the_dashboard_serves(
    folder: Path, namespace: str
) -> None:
    found = manifests()
    spec = found["Deployment", "quasar-dashboard"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    command = container["command"]
    assert command[:2] == ["quasar", "dashboard"]
    assert int(option(command, "--port")) == port_named(container, "http")
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert ready["httpGet"] == {"path": "/healthz", "port": "http"}
    assert live["tcpSocket"] == {"port": "http"}
    service = found["Service", "quasar-dashboard"]["spec"]
    assert (
        service["selector"]
        == found["Deployment", "quasar-dashboard"]["spec"]["selector"]["matchLabels"]
    )
    assert [p["targetPort"] for p in service["ports"]] == ["http"]
    env = {e["name"]: e["value"] for e in container["env"]}
    port = free_port()
    here = environment(namespace, **{**env, "QUASAR_NAMESPACE": namespace})
    served = Process.start(
        with_port(command, port), cwd=folder, env=here, log_path=folder / "dashboard.log"
    )
    try:
        health = served.wait_status(f"http://127.0.0.1:{port}/healthz", 200)
        assert health == {"ready": True, "problems": []}
        assert answer(f"http://127.0.0.1:{port}/") is not None
    finally:
        served.stop()
        served.kill()
