"""The ack budget: what is left of the time a listener may spend before it acks (Slack waits 3 s
for the whole round trip; the bot answers within `SIGNOFF_ACK_BUDGET_MS`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class Budget:
    """What is left of the time a listener may spend before it acks."""

    def __init__(self, seconds: float):
        self.deadline = asyncio.get_running_loop().time() + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    async def within(self, work: Awaitable[T]) -> asyncio.Task[T] | T:
        """The work's result if it ends in time; else its task, still running."""
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({task}, timeout=self.left())
        return task.result() if done else task
