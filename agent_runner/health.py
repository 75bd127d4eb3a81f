"""Liveness and readiness, for orchestrators.

`/healthz` is liveness: the process answers. `/readyz` is readiness: Redis
answers a PING within a second and every loop of the process (stream
consumers, the card refresher, the group directory…) went round recently and
is not waiting out an outage. A loop whose connection was killed, or that is
backing off while Redis is away, makes the process not ready until it is
back, so a load balancer or Kubernetes can act on it instead of trusting a
process that silently stopped working.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from aiohttp import web


@dataclass
class _Loop:
    beat: float
    problem: str | None = None


class Health:
    """What each loop of this process last reported."""

    def __init__(self, stale_after_s: float = 15.0):
        self.stale_after_s = stale_after_s
        self._loops: dict[str, _Loop] = {}

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

    async def readiness(self, client: aioredis.Redis, expected: tuple[str, ...] = ()) -> dict[str, Any]:
        problems = self.problems()
        for name in expected:
            if name not in self._loops:
                problems.setdefault(name, "not started")
        try:
            await asyncio.wait_for(client.ping(), 1.0)
            redis_ok = True
        except Exception as exc:  # any failure to answer means not ready
            redis_ok = False
            problems["redis"] = f"unreachable: {type(exc).__name__}"
        return {"ok": redis_ok and not problems, "redis": redis_ok, "problems": problems}


def add_routes(app: web.Application, health: Health, client: aioredis.Redis,
               expected: tuple[str, ...] = ()) -> None:
    """GET /healthz (liveness) and GET /readyz (503 with the reasons when not ready)."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(request: web.Request) -> web.Response:
        report = await health.readiness(client, expected)
        return web.json_response(report, status=200 if report["ok"] else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
