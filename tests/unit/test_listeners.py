"""The bot's after-ack work at shutdown: bounded, and nothing starts once it is cut short."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.service import DecisionService


async def test_drain_waits_for_after_ack_work_then_cuts_it_short_and_starts_nothing_more():
    service = DecisionService(SimpleNamespace(), SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]
    finished, started_late = [], []

    async def quick() -> None:
        await asyncio.sleep(0.01)
        finished.append("quick")

    async def stuck() -> None:
        try:
            await asyncio.sleep(60)  # an ephemeral queued behind Slack's rate limit, say
        except asyncio.CancelledError:
            finished.append("stuck, cut short")
            raise

    async def late() -> None:
        started_late.append("late")

    service.later(quick(), "quick")
    service.later(stuck(), "stuck")
    await service.drain(timeout=0.3)

    assert finished == ["quick", "stuck, cut short"]  # it did not hold shutdown for its minute
    service.later(late(), "late")
    await asyncio.sleep(0.05)
    assert started_late == []
