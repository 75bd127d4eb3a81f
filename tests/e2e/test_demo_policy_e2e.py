"""The demo as shipped, under its own policy (`signoff_demo/signoff.toml`): every refund pauses
and the policy says which need a person; a write offers trust. Stand-in Slack, the real bot and
runner, Redis."""

from __future__ import annotations

import pytest

from tests.support.harness import buttons, start_scene
from tests.support.paths import ROOT
from tests.support.people import ALICE, RILEY

SHIPPED = "shipped_demo"


@pytest.fixture
async def scene(redis_url):
    policy = ROOT / "signoff_demo" / "signoff.toml"
    async with start_scene(redis_url, SHIPPED, policy=policy) as running:
        yield running


async def test_a_small_refund_is_approved_by_the_demo_policy_and_a_large_one_goes_to_finance(scene):
    small = await scene.ask("Refund order 5 for 500", graph=SHIPPED, requester=RILEY)
    assert "Refunded 500 on order 5" in await scene.answer(small)
    assert await scene.says(small, "🤖✅ Approved by policy: Refunds up to 1,000 · Refund 500 on order 5")

    large = await scene.ask("Refund order 6 for 5000", graph=SHIPPED, requester=RILEY)
    card = await scene.card(large)
    assert card.channel == "C0FINANCE"


async def test_a_write_approved_with_trust_lets_the_agent_write_that_file_again_unasked(scene):
    first = await scene.ask('Write "Launch on Monday" to /plans/launch.md', graph=SHIPPED, requester=RILEY)
    card = await scene.card(first)
    assert buttons(card)[:2] == ["approve:0", "trust:0"]
    await scene.confirm(ALICE, card, "trust:0")
    await scene.answer(first)

    again = await scene.ask('Write "Launch on Tuesday" to /plans/launch.md', graph=SHIPPED, requester=RILEY)
    await scene.answer(again)
    assert await scene.says(again, "🤝 Approved under <@U0ALICE>'s trust (Writes), until")
    assert [m for m in scene.standin.messages if m.kind == "approval"] == [card]
