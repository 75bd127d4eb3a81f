"""Liveness and readiness, for orchestrators.

`/healthz` is liveness: the process answers and none of its loops has died (a loop
that ended while the process was not stopping: restart the process, it does nothing
useful any more). `/readyz` is readiness: Redis
answers a PING within a second and every loop of the process (stream
consumers, the card refresher, the group directory…) went round recently and
is not waiting out an outage. A loop whose connection was killed, or that is
backing off while Redis is away, makes the process not ready until it is
back, so a load balancer or Kubernetes can act on it instead of trusting a
process that silently stopped working.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from core.config import StartupError


class Pingable(Protocol):
    """What readiness asks: the Store (or a Redis client) answering a PING."""

    async def ping(self) -> Any: ...


@dataclass
class _Loop:
    beat: float
    problem: str | None = None


class Health:
    """What each loop of this process last reported."""

    def __init__(self, stale_after_s: float = 15.0):
        self.stale_after_s = stale_after_s
        self._loops: dict[str, _Loop] = {}
        self._checks: dict[str, Callable[[], Awaitable[str | None]]] = {}
        self.dead: dict[str, str] = {}  # loops that ended while the process was not stopping

    def supervise(self, name: str, task: asyncio.Task[Any], stop: asyncio.Event) -> asyncio.Task[Any]:
        """Watch a loop's task: if it ends before `stop` is set, the process is not alive."""

        def ended(finished: asyncio.Task[Any]) -> None:
            if stop.is_set():
                return
            if finished.cancelled():
                self.dead[name] = "cancelled"
            elif finished.exception() is not None:
                self.dead[name] = f"died: {type(finished.exception()).__name__}"
            else:
                self.dead[name] = "ended"

        task.add_done_callback(ended)
        return task

    def check(self, name: str, probe: Callable[[], Awaitable[str | None]]) -> None:
        """Something else this process depends on (a child process): `probe` returns a problem or None."""
        self._checks[name] = probe

    def up(self, name: str) -> None:
        self._loops[name] = _Loop(time.monotonic())

    def down(self, name: str, problem: str) -> None:
        self._loops[name] = _Loop(self._loops[name].beat if name in self._loops else 0.0, problem)

    def problems(self) -> dict[str, str]:
        now = time.monotonic()
        found = {}
        for name, loop in self._loops.items():
            if loop.problem:
                found[name] = loop.problem
            elif now - loop.beat > self.stale_after_s:
                found[name] = f"no progress for {now - loop.beat:.0f}s"
        return found

    async def readiness(self, client: Pingable, expected: tuple[str, ...] = ()) -> dict[str, Any]:
        problems = {**self.problems(), **self.dead}
        for name, probe in self._checks.items():
            try:
                problem = await asyncio.wait_for(probe(), 1.0)
            except Exception as exc:  # a probe that cannot answer is a problem
                problem = f"no answer: {type(exc).__name__}"
            if problem:
                problems[name] = problem
        for name in expected:
            if name not in self._loops and name not in self._checks:
                problems.setdefault(name, "not started")
        try:
            await asyncio.wait_for(client.ping(), 1.0)
            redis_ok = True
        except Exception as exc:  # any failure to answer means not ready
            redis_ok = False
            problems["redis"] = f"unreachable: {type(exc).__name__}"
        return {"ok": redis_ok and not problems, "redis": redis_ok, "problems": problems}


def add_routes(
    app: web.Application, health: Health, client: Pingable, expected: tuple[str, ...] = ()
) -> None:
    """GET /healthz (liveness: 503 once a loop died) and GET /readyz (503 with the reasons when
    not ready)."""

    async def healthz(request: web.Request) -> web.Response:
        if health.dead:
            return web.json_response({"ok": False, "dead": health.dead}, status=503)
        return web.json_response({"ok": True})

    async def readyz(request: web.Request) -> web.Response:
        report = await health.readiness(client, expected)
        return web.json_response(report, status=200 if report["ok"] else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def free_port() -> int:
    """A local TCP port nothing listens on now (for a child's health endpoint, a local server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def listen(runner: web.AppRunner, port: int, setting: str, host: str = "0.0.0.0") -> None:
    """Serve on `port`; a port another process holds is said plainly, with the setting to change."""
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"{setting}={port} is in use by another process; set {setting} to a free port"
            ) from None
        raise
