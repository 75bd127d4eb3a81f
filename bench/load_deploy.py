"""bench/load.py's deployment: the Slack stand-in, two bots, two runners and the bare Bolt app on
one Redis (started here, or the one a URL names), their logs, CPU and Redis memory."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.click_ack import wait_ready
from bench.load_graph import LEDGER
from core import connections
from signoff_demo import redis_server
from slack_standin import SlackStandin

ROOT = Path(__file__).resolve().parent.parent
SECRET = "load-secret"
GRAPH = "bench.load_graph:build_load_agent"
EVERY_S = 5.0  # a progress line this often


@dataclass
class Deployment:
    """The stand-in, two bots, two runners and the bare app on one Redis; their logs in `workdir`."""

    url: str
    workdir: Path
    prefix: str
    standin: SlackStandin = field(default_factory=lambda: SlackStandin(SECRET))
    bot_ports: list[int] = field(default_factory=lambda: [redis_server.free_port() for _ in range(2)])
    runner_ports: list[int] = field(default_factory=lambda: [redis_server.free_port() for _ in range(2)])
    bare_port: int = field(default_factory=redis_server.free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    redis_pids: list[int] = field(default_factory=list)  # the servers this bench started

    @property
    def ledger(self) -> Path:
        return self.workdir / "executions.jsonl"

    def bot_url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.bot_ports[n % 2]}/slack/events"

    @property
    def bare_url(self) -> str:
        return f"http://127.0.0.1:{self.bare_port}/slack/events"

    def env(self, **extra: Any) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.url,
            "SIGNOFF_PREFIX": self.prefix,
            "SLACK_BOT_TOKEN": self.standin.token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.standin.base_url,
            "SIGNOFF_GRAPH": GRAPH,
            "SIGNOFF_GRAPHS_FILE": os.devnull,
            LEDGER: str(self.ledger),
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            **{k: str(v) for k, v in extra.items()},
        }

    def spawn(self, name: str, command: list[str], **extra: Any) -> None:
        with (self.workdir / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env(**extra), stdout=log, stderr=subprocess.STDOUT
            )

    async def start(self) -> None:
        await self.standin.start()
        signoff = [sys.executable, "-m", "signoff"]
        for n in range(2):
            self.spawn(f"bot-{n}", [*signoff, "bot"], SIGNOFF_CONSUMER=f"bot-{n}", PORT=self.bot_ports[n])
            self.spawn(
                f"runner-{n}",
                [*signoff, "runner"],
                SIGNOFF_CONSUMER=f"runner-{n}",
                SIGNOFF_RUNNER_PORT=self.runner_ports[n],
            )
        self.spawn("bare", [sys.executable, str(ROOT / "bench" / "bare_bolt.py")], PORT=self.bare_port)
        ready = asyncio.gather(
            *(wait_ready(port) for port in (*self.bot_ports, *self.runner_ports)),
            wait_ready(self.bare_port, "slack/events"),
        )
        while not ready.done():  # a process that dies while starting says so at once
            await asyncio.wait([ready], timeout=0.5)
            if self.exited() and not ready.done():
                ready.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ready
                name, code = next(iter(self.exited().items()))
                raise RuntimeError(f"{name} exited with code {code} while starting: {self.log_tail(name)}")
        await ready

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each process used so far, this one's included (Linux /proc)."""
        used = {name: _cpu_of(p.pid) for name, p in self.processes.items()}
        used.update({f"redis-{n}": _cpu_of(pid) for n, pid in enumerate(self.redis_pids)})
        used["bench (stand-in, clicks)"] = time.process_time()
        used["other processes on this host"] = _host_busy() - sum(used.values())
        return used

    def exited(self) -> dict[str, int]:
        """Processes that stopped on their own, and their exit codes."""
        return {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}

    async def stop(self) -> dict[str, float]:
        """SIGTERM to every process (SIGKILL after 30 s); how long each took to exit."""
        asked = time.monotonic()
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()

        async def gone(process: subprocess.Popen[bytes]) -> float:
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)
            return round(time.monotonic() - asked, 1)

        waited = await asyncio.gather(*(gone(p) for p in self.processes.values()))
        await self.standin.stop()
        return dict(zip(self.processes, waited, strict=True))

    def log_lines(self) -> dict[str, collections.Counter[str]]:
        """Per Signoff process: its log lines (warnings and worse) by level and event; a traceback
        counts once, by its last line; other text as it is."""
        found: dict[str, collections.Counter[str]] = {}
        for name in self.processes:
            if name != "bare":
                found[name] = +_log_events(self.workdir / f"{name}.log")
        return found

    def log_tail(self, name: str) -> str:
        """The last line a process wrote (a traceback's: the exception)."""
        lines = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), "no output")


def _log_events(path: Path) -> collections.Counter[str]:
    counted: collections.Counter[str] = collections.Counter()
    traceback: list[str] = []
    for line in [*(path.read_text(errors="replace").splitlines() if path.exists() else []), "{}"]:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.startswith("Traceback") or traceback:
                traceback.append(line.strip())
            elif line.strip():
                counted[f"text: {line.strip()[:120]}"] += 1
            continue
        if traceback:
            counted[f"traceback: {next((t for t in reversed(traceback) if t), '')[:160]}"] += 1
            traceback = []
        if isinstance(entry, dict) and entry:
            counted[f"{entry.get('level', '?')}: {entry.get('event', '?')}"] += 1
    return counted


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _host_busy() -> float:
    """CPU seconds every process on this host spent so far (/proc/stat: user, nice, system, irq,
    softirq; not idle, iowait or a hypervisor's steal)."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def used_memory(url: str) -> int:
    """INFO memory `used_memory`, summed over every server holding data (each master of a cluster)."""
    clients = connections.server_clients(url)
    try:
        return sum(int(client.info("memory")["used_memory"]) for client in clients)
    finally:
        for client in clients:
            client.close()


async def cleanup_keys(url: str, prefix: str, threads: list[str]) -> None:
    """On a Redis this bench did not start: its own keys (its prefix) and its threads' checkpoints."""
    from agent_runner.checkpointer import AsyncRedisCheckpointer

    async with AsyncRedisCheckpointer.from_url(url) as saver:
        for start in range(0, len(threads), 50):
            await asyncio.gather(*(saver.adelete_thread(t) for t in threads[start : start + 50]))
    for client in connections.server_clients(url):  # one key per DEL: a cluster node refuses cross-slot
        try:
            with client.pipeline(transaction=False) as pipe:
                for key in client.scan_iter(f"{prefix}:*", count=1000):
                    pipe.delete(key)
                pipe.execute()
        finally:
            client.close()


@contextlib.asynccontextmanager
async def every_few_seconds(label: str, status: Callable[[], str]) -> AsyncIterator[None]:
    """Print `label` and what `status()` says every EVERY_S seconds while the block runs."""
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await asyncio.sleep(EVERY_S)
            print(f"    {label}: {status()} ({time.monotonic() - started:.0f} s)", flush=True)

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def shown_url(url: str) -> str:
    from core.logs import redact

    return redact(url)


@contextlib.contextmanager
def redis_for(layout: str, url: str | None) -> Iterator[tuple[str, list[int]]]:
    """The URL to use and the pids of its servers: the URL given (checked, never started or
    stopped; no pids), else a local Redis of that layout, stopped (its data removed) on the way out."""
    if url:
        redis_server.check_server(url)
        yield url, []
        return
    server: redis_server.LocalRedis | redis_server.LocalCluster
    server = redis_server.start_cluster(3) if layout == "cluster" else redis_server.start()
    nodes = server.nodes if isinstance(server, redis_server.LocalCluster) else [server]
    try:
        yield server.url, [node.process.pid for node in nodes]
    finally:
        server.stop()
