"""The bot's after-ack work at shutdown: bounded, and nothing starts once it is cut short."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from redis.asyncio.connection import Connection

from bot.service import DecisionService
from core.protocol import Approve


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


async def test_a_decision_whose_connection_was_torn_is_sent_once_more():
    """redis-py's cluster client under a burst can hand a command a connection another task
    closed (an AttributeError from inside redis-py): the click is sent again, not lost."""
    from core.records import DecisionResult

    sent: list[str] = []

    async def decide(*args, **kwargs):
        sent.append(args[0])
        if len(sent) == 1:  # redis-py's own error, raised where redis-py raises it
            await Connection()._send_packed_command([b"PING"])
        return SimpleNamespace(tool="deploy", result=DecisionResult.RECORDED)

    async def refused(*args, **kwargs):
        raise AttributeError("some other bug")

    chained: list[str] = []

    async def chain(partition):
        chained.append(partition)

    permissions = SimpleNamespace(gate=lambda user: None)
    audit, keys = SimpleNamespace(chain=chain), SimpleNamespace(of_approval=lambda approval_id: approval_id)
    service = DecisionService(
        SimpleNamespace(decisions=SimpleNamespace(decide=decide), audit=audit, keys=keys),
        SimpleNamespace(),
        permissions,
    )  # type: ignore[arg-type]
    verdict = await service.decide("a1", 0, Approve(), "U0ALICE")
    await service.drain()  # (the audit entry is chained after the ack: once, though sent twice)
    assert chained == ["a1"]
    broken = DecisionService(
        SimpleNamespace(decisions=SimpleNamespace(decide=refused)), SimpleNamespace(), permissions
    )  # type: ignore[arg-type]

    assert verdict.result is DecisionResult.RECORDED and sent == ["a1", "a1"]
    with pytest.raises(AttributeError, match="some other bug"):  # not an outage: not sent again
        await broken.decide("a1", 0, Approve(), "U0ALICE")
