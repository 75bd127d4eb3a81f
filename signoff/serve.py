"""`signoff serve`: the bot and a runner on one machine, each in a process of its own.

The bot runs in the main process; the runner is a child (`signoff runner`)
started, watched and restarted here. An agent's work (graph steps, tools,
model calls) then never shares the event loop, or the GIL, that acks Slack's
clicks. The bot's `/readyz` includes the runner's own readiness, asked over
loopback, so one probe covers both.
"""

from __future__ import annotations

import asyncio
import os
import sys

import aiohttp

from core.config import Settings
from core.health import Health, free_port
from core.logs import get_logger
from core.outages import Backoff, pause
from core.policy_file import seconds

log = get_logger("serve")

RUNNER_CHECK = "runner process"


async def supervise_runner(settings: Settings, stop: asyncio.Event, health: Health) -> None:
    """Keep one `signoff runner` child running until `stop`; then stop it gracefully."""
    port = settings.runner_port or free_port()
    health.check(RUNNER_CHECK, lambda: _runner_ready(port))
    env = {**os.environ, "SIGNOFF_RUNNER_PORT": str(port)}
    backoff = Backoff(first=0.5, cap=30.0)
    while not stop.is_set():
        child = await asyncio.create_subprocess_exec(sys.executable, "-m", "signoff", "runner", env=env)
        log.info("runner_started", pid=child.pid, port=port)
        waiting = asyncio.create_task(child.wait())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            # the runner finishes the tools it started within its grace, then exits by itself
            await _stop(child, (seconds(settings.stop_grace) or 0) + 5)
            stopping.cancel()
            return
        stopping.cancel()
        log.error("runner_exited", code=child.returncode)
        await pause(stop, backoff.next())


async def _stop(child: asyncio.subprocess.Process, grace_s: float) -> None:
    if child.returncode is not None:
        return
    child.terminate()  # the runner hands back what it has not started and finishes the rest
    try:
        await asyncio.wait_for(child.wait(), grace_s)
    except TimeoutError:
        child.kill()
        await child.wait()


async def _runner_ready(port: int) -> str | None:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=0.9)) as reply,
        ):
            if reply.status == 200:
                return None
            problems = (await reply.json()).get("problems", {})
            return "; ".join(f"{k}: {v}" for k, v in problems.items()) or f"HTTP {reply.status}"
    except (aiohttp.ClientError, TimeoutError):
        return "not answering (starting, or down)"
