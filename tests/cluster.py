"""A throwaway 3-master Redis Cluster on loopback, started and stopped by the test session.

``start_cluster(replicas=1)`` starts 6 nodes instead: 3 primaries each with a replica, and waits
until every replica's link is up with its offset caught up with its primary's.
``LocalCluster.failover(port)`` moves a primary to its replica with ``CLUSTER FAILOVER``;
``LocalCluster.kill_primary(port)`` kills a primary with SIGKILL and waits until its replica is
promoted and the cluster is ok again (``cluster-node-timeout`` sets how long that takes).
``Migration`` moves one slot to another primary, step by step.

``start_cluster()`` runs three ``--cluster-enabled yes`` servers (``QUASAR_TEST_SERVER_BIN``:
``redis-server`` by default, or Valkey's) on free ports (each port and its cluster bus port, port +
10000, checked free), joins them through redis-py (the primaries each a share of the slots with
``CLUSTER ADDSLOTS``, every node an epoch of its own, ``CLUSTER MEET``, then ``CLUSTER
REPLICATE`` for each replica: no ``redis-cli`` needed, so a server without a cli of its own works)
and waits until every node reports ``cluster_state:ok`` and agrees on all 16384 slots.
``LocalCluster.confine(namespace)`` makes an ACL user that may touch only that namespace's keys.
``LocalCluster.stop()`` ends the processes by pid (terminate, then kill) and deletes the temp dir.
Without the server binary the caller skips (fails under QUASAR_REQUIRE_REDIS=1): see
``cluster_or_skip``.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from .helpers import SERVER_BIN

HOST = "127.0.0.1"
MASTERS = 3
BUS_OFFSET = 10_000
# (both a node's port and its bus port below 32768, where Linux starts giving outgoing
# connections their ports: a client's connection never takes one before its node binds it)
PORT_RANGE = (10_000, 22_768)
START_TIMEOUT_S = 30.0
SLOTS = 16_384


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
    replicas: int = 0
    node_timeout_ms: int = 5000
    killed: set[int] = field(default_factory=set)  # ports of the nodes killed on purpose

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

    def live_ports(self) -> list[int]:
        """The ports of the nodes whose process runs."""
        return [
            p for p, proc in zip(self.ports, self.processes, strict=True) if proc.poll() is None
        ]

    def roles(self) -> dict[int, int | None]:
        """Each live node's primary: None for a primary, its primary's port for a replica."""
        return {port: _primary_of(self, port) for port in self.live_ports()}

    def primaries(self) -> list[int]:
        return sorted(p for p, primary in self.roles().items() if primary is None)

    def replica_of(self, primary: int) -> int:
        """The port of ``primary``'s replica."""
        return next(p for p, of in self.roles().items() if of == primary)

    def failover(self, primary: int) -> int:
        """``CLUSTER FAILOVER`` on ``primary``'s replica; wait until it is the primary, every
        node agrees and the old primary replicates it in sync. Returns the new primary's port."""
        replica = self.replica_of(primary)
        with self.node_client(replica) as node:
            node.execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + START_TIMEOUT_S
        _wait(self, lambda: self.roles().get(replica, 0) is None, "the failover", deadline)
        self.wait_settled(deadline)
        return replica

    def freeze(self, port: int) -> None:
        """SIGSTOP a node: it holds its state, answers nothing and receives nothing."""
        self.processes[self.ports.index(port)].send_signal(signal.SIGSTOP)

    def thaw(self, port: int) -> None:
        """SIGCONT a node frozen by ``freeze``."""
        self.processes[self.ports.index(port)].send_signal(signal.SIGCONT)

    def kill_primary(self, primary: int, replica: int | None = None) -> int:
        """SIGKILL ``primary``; wait until its replica is promoted and every live node says
        the cluster is ok. Returns the new primary's port. A frozen ``replica`` (``freeze``:
        ask ``replica_of`` before) is thawed right after the kill."""
        frozen = replica is not None
        replica = replica if replica is not None else self.replica_of(primary)
        proc = self.processes[self.ports.index(primary)]
        self.killed.add(primary)
        proc.kill()
        proc.wait(timeout=10)
        if frozen:
            self.thaw(replica)
        deadline = time.monotonic() + START_TIMEOUT_S + self.node_timeout_ms / 1000
        _wait(self, lambda: self.roles().get(replica, 0) is None, "the promotion", deadline)
        self.wait_settled(deadline)
        return replica

    def restart(self, port: int) -> None:
        """Start a killed node again (it keeps its cluster config, not its data: it rejoins as
        a replica of the primary that took its place) and wait until the cluster settles."""
        server = shutil.which(SERVER_BIN) or SERVER_BIN
        index = self.ports.index(port)
        self.processes[index] = _spawn(server, port, self.workdir, self.node_timeout_ms)
        self.killed.discard(port)
        self.wait_settled()

    def wait_settled(self, deadline: float | None = None) -> None:
        """Until every live node says the cluster is ok over every slot, agrees on each slot's
        primary, and every live replica is in sync with its primary."""
        deadline = deadline or time.monotonic() + START_TIMEOUT_S
        for port in self.live_ports():
            _wait(self, partial(_healthy, self, port), f"cluster ok on {port}", deadline)
        _wait(self, partial(_agree, self), "every node to agree on the slots", deadline)
        for port, primary in self.roles().items():
            if primary is not None:
                _wait(self, partial(_in_sync, self, port), f"replica {port} in sync", deadline)

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


def _spawn(server: str, port: int, workdir: Path, node_timeout_ms: int) -> subprocess.Popen[bytes]:
    log = workdir / f"redis-{port}.log"
    args = [
        server,
        "--port", str(port),
        "--bind", HOST,
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(workdir / f"nodes-{port}.conf"),
        "--cluster-node-timeout", str(node_timeout_ms),
        "--dir", str(workdir),
        "--logfile", str(log),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
    ]  # fmt: skip
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def _wait(cluster: LocalCluster, check: Callable[[], bool], what: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        dead = [
            p.args
            for port, p in zip(cluster.ports, cluster.processes, strict=False)
            if p.poll() is not None and port not in cluster.killed
        ]
        if dead:
            raise ClusterStartError(f"redis-server exited early: {dead} (see {cluster.workdir})")
        with contextlib.suppress(redis.RedisError, OSError, StopIteration):
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
    return ok and fields.get("cluster_known_nodes") == str(len(cluster.ports))


def _nodes(cluster: LocalCluster, port: int) -> list[list[str]]:
    """``CLUSTER NODES`` of one node, a row of words per node, dead ones left out."""
    with cluster.node_client(port) as client:
        text = client.execute_command("CLUSTER", "NODES")
    text = text.decode() if isinstance(text, bytes) else str(text)
    rows = [line.split() for line in text.splitlines() if line.strip()]
    return [row for row in rows if "fail" not in row[2].split(",")]


def _port(address: str) -> int:
    return int(address.split("@", maxsplit=1)[0].rsplit(":", 1)[1])


def _primary_of(cluster: LocalCluster, port: int) -> int | None:
    """As ``port`` sees itself: None when a primary, else its primary's port."""
    rows = _nodes(cluster, port)
    me = next(row for row in rows if "myself" in row[2].split(","))
    if "master" in me[2].split(","):
        return None
    return next(_port(row[1]) for row in rows if row[0] == me[3])


def _slot_owners(cluster: LocalCluster, port: int) -> list[tuple[str, int]]:
    """Each primary's slot ranges as ``port`` sees them."""
    owners = []
    for row in _nodes(cluster, port):
        if "master" in row[2].split(","):
            owners += [(r, _port(row[1])) for r in row[8:] if not r.startswith("[")]
    return sorted(owners)


def _agree(cluster: LocalCluster) -> bool:
    views = [_slot_owners(cluster, port) for port in cluster.live_ports()]
    return all(view == views[0] for view in views)


def _in_sync(cluster: LocalCluster, replica: int) -> bool:
    """The replica's link is up and its offset has reached its primary's (read first)."""
    primary = _primary_of(cluster, replica)
    if primary is None or primary not in cluster.live_ports():
        return False
    with cluster.node_client(primary) as client:
        target = int(client.info("replication")["master_repl_offset"])
    with cluster.node_client(replica) as client:
        info = client.info("replication")
    return info.get("master_link_status") == "up" and int(info["slave_repl_offset"]) >= target


def _create(cluster: LocalCluster, deadline: float) -> None:
    """What ``redis-cli --cluster create`` does: the first ``MASTERS`` nodes primaries, each an
    equal share of the slots; every node a config epoch of its own (so no two claim a slot with
    the same epoch), met by the first; then each other node the replica of a primary in turn."""
    primaries, share = cluster.ports[:MASTERS], -(-SLOTS // MASTERS)
    try:
        for i, port in enumerate(cluster.ports):
            with cluster.node_client(port) as node:
                if port in primaries:
                    slots = range(i * share, min((i + 1) * share, SLOTS))
                    node.execute_command("CLUSTER", "ADDSLOTS", *slots)
                node.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        with cluster.node_client(primaries[0]) as first:
            for port in cluster.ports[1:]:
                first.execute_command("CLUSTER", "MEET", HOST, port)
        for i, port in enumerate(cluster.ports[MASTERS:]):
            with cluster.node_client(primaries[i % MASTERS]) as primary:
                node_id = primary.execute_command("CLUSTER", "MYID")
            with cluster.node_client(port) as replica:
                # (until the meeting reached it, the replica does not know the primary yet)
                replicate = partial(replica.execute_command, "CLUSTER", "REPLICATE", node_id)
                _wait(cluster, replicate, f"{port} to replicate {primaries[i % MASTERS]}", deadline)
    except redis.RedisError as exc:
        raise ClusterStartError(f"joining the nodes failed: {exc}") from exc


def _start_once(server: str, replicas: int, node_timeout_ms: int) -> LocalCluster:
    ports = free_ports(MASTERS * (1 + replicas))
    workdir = Path(tempfile.mkdtemp(prefix="quasar-cluster-"))
    cluster = LocalCluster(ports, workdir, replicas=replicas, node_timeout_ms=node_timeout_ms)
    try:
        for port in cluster.ports:
            cluster.processes.append(_spawn(server, port, cluster.workdir, node_timeout_ms))
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in cluster.ports:
            _wait(cluster, partial(_answers, cluster, port), f"a PING on {port}", deadline)
        _create(cluster, deadline)
        cluster.wait_settled(deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_cluster(
    server: str = "redis-server",
    *,
    replicas: int = 0,
    node_timeout_ms: int = 5000,
) -> LocalCluster:
    """Start and join a 3-master cluster (each primary with ``replicas`` replicas); on failure
    stop what was started and try new ports."""
    failures: list[str] = []
    for _ in range(3):  # a port found free may be taken before redis-server binds it
        try:
            return _start_once(server, replicas, node_timeout_ms)
        except ClusterStartError as exc:
            failures.append(str(exc))
    raise ClusterStartError("; ".join(failures))


def cluster_or_skip(
    require: bool, *, replicas: int = 0, node_timeout_ms: int = 5000
) -> LocalCluster:
    """A started cluster; without the binaries skip, or fail when ``require`` (CI)."""
    server = shutil.which(SERVER_BIN)
    if server is None:
        reason = f"{SERVER_BIN} (QUASAR_TEST_SERVER_BIN) must be there to start a local cluster"
        if require:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but {reason}")
        pytest.skip(reason)
    try:
        return start_cluster(server, replicas=replicas, node_timeout_ms=node_timeout_ms)
    except ClusterStartError as exc:
        if require:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but the local Redis Cluster did not start: {exc}")
        pytest.skip(f"could not start a local Redis Cluster: {exc}")


def node_ids(cluster: LocalCluster) -> dict[int, str]:
    ids = {}
    for port in cluster.ports:
        with cluster.node_client(port) as node:
            ids[port] = node.execute_command("CLUSTER", "MYID").decode()
    return ids


class Migration:
    """The steps of moving one slot from ``source`` to ``target`` (ports)."""

    def __init__(self, cluster: LocalCluster, slot: int, source: int, target: int) -> None:
        self.cluster, self.slot, self.source, self.target = cluster, slot, source, target
        self.ids = node_ids(cluster)

    def _on(self, port: int, *args: Any) -> Any:
        with self.cluster.node_client(port) as node:
            return node.execute_command(*args)

    def begin(self) -> None:
        self._on(self.target, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.ids[self.source])
        self._on(self.source, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.ids[self.target])

    def keys(self) -> list[bytes]:
        return list(self._on(self.source, "CLUSTER", "GETKEYSINSLOT", self.slot, 1000))

    def move(self, keys: list[bytes]) -> None:
        self._on(self.source, "MIGRATE", HOST, self.target, "", 0, 5000, "KEYS", *keys)

    def finish(self) -> None:
        others = [p for p in self.cluster.primaries() if p not in (self.target, self.source)]
        for port in (self.target, self.source, *others):  # (replicas learn it from these)
            self._on(port, "CLUSTER", "SETSLOT", self.slot, "NODE", self.ids[self.target])
