"""A background loop with nothing due rests until its next item is due, never longer than its
most, and a mark this process makes ends the rest at once (no polling every 0.1 s meanwhile)."""

from __future__ import annotations

import asyncio
import time

from core.health import Health
from core.loops import Loop, until_due
from core.store.lua import sooner


class Idle(Loop):
    name = "idle"

    def __init__(self) -> None:
        self.health = Health()
        self.turns = 0

    async def turn(self) -> float:
        self.turns += 1
        return 60.0  # (nothing due for a minute)


def test_a_loop_rests_until_its_next_item_is_due_and_no_longer_than_its_most():
    now_ms = int(time.time() * 1000)
    assert until_due(None, 0.5) == 0.5  # an empty list: its most
    assert until_due(now_ms + 60_000, 0.5) == 0.5  # (another process may mark sooner)
    assert 0.0 < until_due(now_ms + 100, 0.5) <= 0.1
    assert until_due(now_ms - 5_000, 0.5) == 0.0  # overdue: at once
    assert sooner(None, "") is None and sooner(None, "1500") == 1500 and sooner(900, "1500") == 900


async def test_a_mark_made_in_this_process_ends_the_rest_at_once():
    loop, stop = Idle(), asyncio.Event()
    serving = asyncio.create_task(loop.serve(stop))
    while loop.turns < 1:
        await asyncio.sleep(0)
    loop.nudge()  # e.g. `Cards.touch` in this process
    await asyncio.wait_for(_turns(loop, 2), timeout=10)  # not after the minute's rest
    stop.set()
    await asyncio.wait_for(serving, timeout=10)
    assert loop.turns == 2


async def _turns(loop: Idle, count: int) -> None:
    while loop.turns < count:
        await asyncio.sleep(0.01)
