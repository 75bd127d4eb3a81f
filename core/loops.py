"""Background loops that never die quietly: one stanza for backoff, health and the outage metric.

Every process runs loops besides the work it is asked for: the bot's card refresher,
deadline sweeper, group directory and Agent Server watcher, the runner's retention
janitor. Each is a `Loop`: `turn()` does one round and says how long to rest. Whatever
a round raises is survived, as one server, a failover or a whole Redis Cluster restart
raise it (a refused connection, "Redis Cluster cannot be connected", the client's own
state torn mid-failover): Redis being away backs off and counts in
`signoff_redis_unavailable_total`; any other error is logged with its traceback and
backs off too. Meanwhile `/readyz` says why the loop is not working.

A loop that ends anyway (a bug that escapes this, a BaseException) is reported dead
(`Health.supervise`): `/healthz` then fails, so the orchestrator restarts the process
instead of keeping a live process that does nothing.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod

from core.health import Health
from core.logs import get_logger
from core.outages import Backoff, is_outage, pause, said_failed

log = get_logger("loops")


class Loop(ABC):
    """A background loop: `turn()` once a round, forever, surviving what a round raises."""

    name: str
    health: Health
    backoff_cap: float = 5.0

    @abstractmethod
    async def turn(self) -> float:
        """One round; returns how many seconds to rest before the next."""

    async def serve(self, stop: asyncio.Event) -> None:
        backoff = Backoff(cap=self.backoff_cap)
        while not stop.is_set():
            try:
                rest = await self.turn()
            except Exception as exc:
                self.failed(exc)
                await pause(stop, backoff.next())
                continue
            backoff.reset()
            await self.rest(stop, rest)

    async def rest(self, stop: asyncio.Event, seconds: float) -> None:
        """Pause, saying the loop is alive every few seconds (readiness counts a silent loop stuck);
        a `nudge` ends the pause at once."""
        deadline = time.monotonic() + seconds
        nudged = self._nudges()
        while True:
            self.health.up(self.name)
            left = deadline - time.monotonic()
            if left <= 0 or stop.is_set() or nudged.is_set():
                nudged.clear()
                return
            waits = [asyncio.ensure_future(e.wait()) for e in (stop, nudged)]
            await asyncio.wait(waits, timeout=min(left, 5.0), return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()

    def nudge(self) -> None:
        """Work for this loop was made in this process (a mark, a deadline): its rest ends now."""
        self._nudges().set()

    def _nudges(self) -> asyncio.Event:
        """Set by `nudge`, cleared by the rest it ends (made at first use: loops have no common
        __init__)."""
        if not hasattr(self, "_nudged"):
            self._nudged = asyncio.Event()
        return self._nudged

    def alive(self) -> None:
        """Said during a long round: the loop is working (readiness counts a silent loop stuck)."""
        self.health.up(self.name)

    def failed(self, exc: BaseException) -> None:
        """Say why a round failed: Redis away (a warning and the outage metric) or anything else
        (an error with its traceback); either way the loop is not ready until a round succeeds."""
        self.health.down(self.name, said_failed(self.name, exc, is_outage(exc)))


def until_due(next_due_ms: int | None, most: float) -> float:
    """How long a loop that found nothing due rests: until its list's next item comes due (by
    this host's clock), at most `most` (what another process marks meanwhile waits that long at
    worst; what this process marks nudges it at once)."""
    if next_due_ms is None:
        return most
    return min(most, max(0.0, next_due_ms / 1000 - time.time()))
