"""The shared rate limiter's line: turns in order (most urgent first), without polling Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bot.slack.pacing import ROUTINE, URGENT, Limiter


class FakeState:
    """Stands in for `SlackState.rate_wait`: one call every `1 / per_second` s, counted."""

    def __init__(self) -> None:
        self.asked = 0
        self.next_at = 0.0

    async def rate_wait(self, name: str, per_second: float, burst: int) -> float:
        self.asked += 1
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + 1 / per_second
            return 0.0
        return self.next_at - now


def test_a_line_takes_turns_in_order_asking_redis_about_twice_a_turn() -> None:
    """Thirty calls in one line: the urgent ones first, each kind in arrival order, and Redis
    asked at most twice a turn (once to learn the wait, once when it is over), however long
    the line: the callers behind the first sleep until they are first."""

    async def main() -> tuple[list[int], int]:
        state = FakeState()
        limiter = Limiter(state)  # type: ignore[arg-type]
        order: list[int] = []

        async def call(n: int, priority: int) -> None:
            await limiter.wait("post:C1", (200.0, 1), priority)
            order.append(n)

        first = asyncio.create_task(call(0, URGENT))  # takes the first turn at once
        await first
        calls: list[Any] = [asyncio.create_task(call(n, ROUTINE)) for n in range(1, 21)]
        await asyncio.sleep(0)
        calls += [asyncio.create_task(call(n, URGENT)) for n in range(21, 30)]
        await asyncio.gather(*calls)
        return order, state.asked

    order, asked = asyncio.run(main())
    urgent, routine = [n for n in order if n >= 21], [n for n in order if 1 <= n <= 20]
    assert order[0] == 0 and sorted(order) == list(range(30))
    assert urgent == sorted(urgent) and routine == sorted(routine)
    assert order.index(21) < order.index(2)  # an urgent arrival goes ahead of the routine line
    assert asked <= 2 * len(order) + 2
