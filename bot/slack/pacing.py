"""Slack's pace: the rate limits the bot keeps (shared by every replica through Redis, most
urgent first: answers, cards and refusals before the status line), the in-process throttle for
ephemerals, and the wait a 429 asks for."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import time

from slack_sdk.errors import SlackApiError

from bot.slack.state import SlackState

# Most urgent first: what people wait for, then what only decorates.
URGENT, ROUTINE = 0, 2

# (calls a second, burst) as Slack allows them: chat.postMessage about one a second per
# channel; chat.update tier 3 (50+ a minute) and chat.postEphemeral tier 4 (100+ a minute)
# per workspace.
POST_RATE = (1.0, 3)
UPDATE_RATE = (0.8, 10)
EPHEMERAL_RATE = (1.5, 20)


class _Turn:
    """One call's place in a limit's line: woken only when something changes for it (it
    became first, or a more urgent call went ahead of it), never by others' comings and goings."""

    __slots__ = ("key", "wake")

    def __init__(self, priority: int, order: int):
        self.key = (priority, order)
        self.wake = asyncio.Event()


class Limiter:
    """Slack's rate limits, shared by every replica through Redis; most urgent first within one.

    Per limit, only the first caller in line asks Redis for a turn, then sleeps until the turn
    Redis named (woken early only if a more urgent call goes ahead of it); the others sleep
    until they are first (no polling, and no wake-up for each arrival or departure: a line of
    fifty callers waiting for a channel's turn costs one wake-up a turn, not fifty).
    """

    def __init__(self, state: SlackState):
        self.state = state
        self._lines: dict[str, list[_Turn]] = {}
        self._order = itertools.count()

    async def wait(self, name: str, rate: tuple[float, int], priority: int = URGENT) -> None:
        line = self._lines.setdefault(name, [])
        me = _Turn(priority, next(self._order))
        bisect.insort(line, me, key=lambda turn: turn.key)
        if line[0] is me and len(line) > 1:
            line[1].wake.set()  # the one first in line is no longer
        try:
            while True:
                while line[0] is not me:
                    me.wake.clear()
                    await me.wake.wait()
                delay = await self.state.rate_wait(name, *rate)
                if delay <= 0:
                    return
                me.wake.clear()  # wait for the turn, unless a more urgent call comes first
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(me.wake.wait(), delay)
        finally:
            first = line[0] is me
            line.remove(me)
            if first and line:
                line[0].wake.set()


def retry_after(error: SlackApiError) -> float | None:
    """Seconds Slack asked to wait (HTTP 429), else None."""
    if error.response.status_code != 429:
        return None
    return float(error.response.headers.get("Retry-After", error.response.headers.get("retry-after", 1)))


class Throttle:
    """A token bucket per key in this process: `burst` calls at once, then `rate` a second.

    For ephemerals: they tell one person what happened, so they must not wait on
    Redis (which may be the very thing that is slow).
    """

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait(self, key: str) -> None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            now = time.monotonic()
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                await asyncio.sleep((1 - tokens) / self.rate)
                now, tokens = time.monotonic(), 1.0
            self._buckets[key] = (tokens - 1, now)
