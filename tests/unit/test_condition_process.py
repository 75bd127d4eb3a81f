"""The bot's policy conditions, evaluated in a child process within a time budget: a condition
an agent's arguments make slow never holds the bot's event loop, and fails closed."""

from __future__ import annotations

import asyncio

from core.condition_process import OUT_OF_BUDGET, ConditionProcess
from core.conditions import Call

SLOW = "args.tags.all(t, t >= 0)"  # about 70 µs a value in cel-python: 4,900 values, ~0.35 s a call


async def test_verdicts_come_from_the_child_as_the_conditions_give_them():
    conditions = ConditionProcess()
    try:
        found = await conditions.verdicts(
            [
                (["args.amount > 1000", None], Call("issue_refund", {"amount": 5000})),
                (["args.amount > 1000", None], Call("issue_refund", {"amount": 5})),
                (["args.amount > 1000", None], Call("issue_refund", {"amount": "5000"})),
            ]
        )
    finally:
        await conditions.close()

    assert found == [[True], [False, True], ["`>` cannot take text and a whole number", True]]


async def test_a_slow_evaluation_leaves_the_event_loop_free_and_out_of_budget_fails_closed():
    conditions = ConditionProcess(budget_s=0.3)
    slow = [([SLOW], Call("t", {"tags": list(range(4_900))}))] * 5
    finished: list[str] = []

    async def judged() -> list:
        found = await conditions.verdicts(slow)
        finished.append("conditions")
        return found

    async def meanwhile() -> None:  # what a click's ack does: work on the loop, while it waits
        for _ in range(3):
            await asyncio.sleep(0.01)
        finished.append("the loop's other work")

    try:
        found, _ = await asyncio.gather(judged(), meanwhile())
        assert found == [[OUT_OF_BUDGET]] * 5
        assert finished == ["the loop's other work", "conditions"]
        # the child was cut off: the next request gets a new one
        assert await conditions.verdicts([(["args.n > 1"], Call("t", {"n": 2}))]) == [[True]]
    finally:
        await conditions.close()
