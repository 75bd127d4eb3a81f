"""Slack updates nobody clicked, coalesced and throttled: card refreshes and status lines.

The runner and the listeners only mark what changed (`card:<approval id>`,
`status:<thread id>` in the `refresh` set); the latest state is read when the
update is made, so ten marks in a row cost one chat.update. Updates go out at
chat.update's workspace rate (a limiter shared by every replica); a 429 puts
the mark back for when Slack's Retry-After says, instead of holding a worker
while answers and cards wait. A replica that dies holding a mark loses it for
one lease, after which another replica takes it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.slack.io import SlackIO
from bot.slack.pacing import retry_after
from core.health import Health
from core.logs import get_logger
from core.loops import Loop, until_due
from core.outages import is_outage

log = get_logger("refresher")

IDLE_MOST_S = 0.5  # with nothing due, a lane rests until its next mark, this long at most (another
# process's marks, such as the runner's status notes, wait this much at worst; this one's, none)
GONE = ("message_not_found", "cant_update_message", "channel_not_found", "is_archived")


class Refresher(Loop):
    """One loop per lane (`bot.app` runs a card refresher and a status refresher): a status line
    waiting for its channel's turn never holds a card change back."""

    name = "card refresher"

    def __init__(
        self,
        slack: SlackIO,
        health: Health | None = None,
        lease_ms: int = 30_000,
        batch: int = 10,
        lanes: tuple[str, ...] = ("card", "status"),
    ):
        self.slack = slack
        self.health = health or Health()
        self.lease_ms = lease_ms
        self.batch = batch
        self.lanes = lanes
        self.name = f"{lanes[0]} refresher" if len(lanes) == 1 else "card refresher"
        self._failures: dict[str, int] = {}
        self._stop = asyncio.Event()  # (serve's)

    async def serve(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self.slack.store.cards.marked.append(self.nudge)  # (this process's marks: at once)
        await super().serve(stop)

    async def turn(self) -> float:
        due = await self.slack.state.take_due(self.lease_ms, self.batch, self.lanes)
        self.alive()  # (a round of ten updates at Slack's pace takes longer than readiness waits)
        # side by side: each waits its own turn at Slack's pace (cards before status lines), so a
        # status line waiting for its channel never holds a card back
        updates: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(*(self.update(item, token) for item, token in due))
        )
        stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait([updates, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not updates.done():  # a stop does not wait out Slack's pace: what is cut short is only
            updates.cancel()  # cosmetic, and comes due again when its lease lapses
            await asyncio.gather(updates, return_exceptions=True)
        else:
            updates.result()
        return 0 if due else until_due(self.slack.state.next_due_ms, IDLE_MOST_S)

    async def update(self, item: str, token: str) -> None:
        kind, _, ident = item.partition(":")
        retry_at: int | None = None
        try:
            if kind == "card":
                await self.slack.refresh_card(ident)
            elif kind == "status":
                again = await self.slack.status(ident)  # (a waiting DM's status: set again then)
                retry_at = int(again * 1000) if again is not None else None
            self._failures.pop(item, None)
        except SlackApiError as exc:
            wait = retry_after(exc)
            if wait is not None:  # Slack's own pace: come back when it says
                retry_at = int((time.time() + wait) * 1000)
            elif exc.response.get("error") not in GONE:
                retry_at = self._again(item, str(exc.response.get("error")))
        except Exception as exc:  # a cosmetic update never stops the lane (Redis away stops the round)
            if is_outage(exc):
                raise
            retry_at = self._again(item, repr(exc))
        await self.slack.state.done_due(item, token, retry_at)

    def _again(self, item: str, error: str, most: int = 10) -> int | None:
        """When to try a failed update again; None (dropped) after `most` failures in a row."""
        failures = self._failures[item] = self._failures.get(item, 0) + 1
        if failures >= most:
            del self._failures[item]
            log.error("refresh_dropped", item=item, error=error)
            return None
        log.warning("refresh_failed", item=item, error=error, failures=failures)
        return int((time.time() + 5) * 1000)
