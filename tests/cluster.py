"""A throwaway 3-master Redis Cluster on loopback, started and stopped by the test session.

``start_cluster()`` runs three ``redis-server --cluster-enabled yes`` processes on free ports (each
port and its cluster bus port, port + 10000, checked free), joins them with ``redis-cli --cluster
create`` and waits until every node reports ``cluster_state:ok`` and agrees on all 16384 slots.
``LocalCluster.confine(namespace)`` makes an ACL user that may touch only that namespace's keys.
``LocalCluster.stop()`` ends the processes by pid (terminate, then kill) and deletes the temp dir.
Without ``redis-server`` / ``redis-cli`` on PATH the caller skips (fails under
QUASAR_REQUIRE_REDIS=1): see ``cluster_or_skip``.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import redis

HOST = "127.0.0.1"
MASTERS = 3
BUS_OFFSET = 10_000
PORT_RANGE = (20_000, 45_000)
START_TIMEOUT_S = 30.0


class ClusterStartError(RuntimeError):
    """The cluster could not be started (ports, binaries, or it never became healthy)."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct ports P, each with P and P + 10000 (its cluster bus) free right now."""
    rng = rng or random.Random()
    chosen: list[int] = []
    for _ in range(2000):
        port = rng.randrange(*PORT_RANGE)
        taken = {p for c in chosen for p in (c, c + BUS_OFFSET)}
        if port in taken or port + BUS_OFFSET in taken:
            continue
        if _port_free(port) and _port_free(port + BUS_OFFSET):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise ClusterStartError(f"found no {count} free port pairs in {PORT_RANGE}")


@dataclass
class LocalCluster:
    """The running cluster: its ports, its processes and its directory."""

    ports: list[int]
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def startup_port(self) -> int:
        return self.ports[0]

    def node_client(self, port: int) -> redis.Redis:
        """A plain (non-cluster) client of one node; the caller closes it."""
        return redis.Redis(host=HOST, port=port, socket_timeout=5)

    def confine(self, namespace: str, prefix: str = "quasar") -> tuple[str, str]:
        """An ACL user, on every node, that may touch only the keys ``<prefix>:{<namespace>}:*``.

        A script run by this user that reads or writes any other key fails (ACL checks every
        command a script sends), and every key it may touch hashes to the namespace's one slot.
        Returns the user name and password.
        """
        user, password = f"ns-{namespace}", os.urandom(12).hex()
        pattern = f"~{prefix}:{{{namespace}}}:*"
        for port in self.ports:
            with self.node_client(port) as node:
                node.execute_command(
                    "ACL", "SETUSER", user, "reset", "on", f">{password}", pattern, "+@all"
                )
        return user, password

    def stop(self) -> None:
        """Terminate every server by pid (kill after a grace period); delete the directory."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.processes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _spawn(server: str, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    log = workdir / f"redis-{port}.log"
    args = [
        server,
        "--port", str(port),
        "--bind", HOST,
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(workdir / f"nodes-{port}.conf"),
        "--cluster-node-timeout", "5000",
        "--dir", str(workdir),
        "--logfile", str(log),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
    ]  # fmt: skip
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def _wait(cluster: LocalCluster, check: Callable[[], bool], what: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        dead = [p.args for p in cluster.processes if p.poll() is not None]
        if dead:
            raise ClusterStartError(f"redis-server exited early: {dead} (see {cluster.workdir})")
        with contextlib.suppress(redis.RedisError, OSError):
            if check():
                return
        time.sleep(0.05)
    raise ClusterStartError(f"timed out waiting for {what}")


def _answers(cluster: LocalCluster, port: int) -> bool:
    with cluster.node_client(port) as client:
        return bool(client.ping())


def _healthy(cluster: LocalCluster, port: int) -> bool:
    with cluster.node_client(port) as client:
        info = client.cluster("INFO")
    if isinstance(info, bytes):  # redis-py parses CLUSTER INFO into a dict; older ones do not
        info = dict(line.split(":", 1) for line in info.decode().split() if ":" in line)
    fields = {str(k): str(v) for k, v in dict(info).items()}
    ok = fields.get("cluster_state") == "ok" and fields.get("cluster_slots_ok") == "16384"
    return ok and fields.get("cluster_known_nodes") == str(MASTERS)


def _create(cli: str, cluster: LocalCluster) -> None:
    nodes = [f"{HOST}:{p}" for p in cluster.ports]
    cmd = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"]
    done = subprocess.run(cmd, capture_output=True, timeout=START_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise ClusterStartError(
            f"redis-cli --cluster create failed ({done.returncode}): "
            f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}"
        )


def _start_once(server: str, cli: str) -> LocalCluster:
    cluster = LocalCluster(free_ports(MASTERS), Path(tempfile.mkdtemp(prefix="quasar-cluster-")))
    try:
        for port in cluster.ports:
            cluster.processes.append(_spawn(server, port, cluster.workdir))
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in cluster.ports:
            _wait(cluster, partial(_answers, cluster, port), f"a PING on {port}", deadline)
        _create(cli, cluster)
        for port in cluster.ports:
            _wait(cluster, partial(_healthy, cluster, port), f"cluster ok on {port}", deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_cluster(server: str = "redis-server", cli: str = "redis-cli") -> LocalCluster:
    """Start and join a 3-master cluster; on failure stop what was started and try new ports."""
    failures: list[str] = []
    for _ in range(3):  # a port found free may be taken before redis-server binds it
        try:
            return _start_once(server, cli)
        except ClusterStartError as exc:
            failures.append(str(exc))
    raise ClusterStartError("; ".join(failures))


def cluster_or_skip(require: bool) -> LocalCluster:
    """A started cluster; without the binaries skip, or fail when ``require`` (CI)."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        reason = "redis-server and redis-cli must be on PATH to start a local Redis Cluster"
        if require:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but {reason}")
        pytest.skip(reason)
    try:
        return start_cluster(server, cli)
    except ClusterStartError as exc:
        if require:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but the local Redis Cluster did not start: {exc}")
        pytest.skip(f"could not start a local Redis Cluster: {exc}")
