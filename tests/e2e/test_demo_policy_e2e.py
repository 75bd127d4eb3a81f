"""The demo as shipped, under its own policy (`signoff_demo/signoff.toml`): every refund pauses
and the policy says which need a person; a write offers trust. Stand-in Slack, the real bot and
runner, Redis."""

from __future__ import annotations

import pytest

from tests.support.harness import buttons, card_text, eventually, start_scene
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


# An agent's own argument types never steer a call past its strictest rule --------------------


@pytest.fixture
async def spelled(redis_url):
    policy = ROOT / "signoff_demo" / "signoff.toml"
    async with start_scene(redis_url, "spelled", policy=policy) as running:
        yield running


async def test_a_refund_whose_amount_is_sent_as_text_is_judged_as_the_number_the_tool_receives(spelled):
    # The tool's schema takes "50000" as 50000: the policy judges 50000, so "Large refunds"
    # applies (#finance, Alice and Dana), not "Refunds up to 1,000" nor [defaults].
    thread_id = await spelled.ask('Refund order 7 for "50000"', graph="spelled", requester=RILEY)
    card = await spelled.card(thread_id)
    assert card.channel == "C0FINANCE"
    assert "Rule: Large refunds" in card_text(card)
    assert "🔑 Approve needs a passkey" in card_text(card)  # the rule's step_up, before any click
    assert (await spelled.standin.click(ALICE, card, "approve:0")).acked
    said = await eventually(lambda: spelled.standin.ephemerals_for(ALICE), what="Alice told")
    assert "needs your passkey, and you have none yet: type `/signoff passkey`" in said[-1]
    approval = await spelled.store.approvals.get(card.metadata["event_payload"]["approval_id"])
    assert approval.status.value == "pending" and not approval.votes  # a click counts for nothing
    assert not await spelled.messages(thread_id, "answer")


@pytest.mark.parametrize("amount", ["[50000]", '"lots"', "12.5"])
async def test_a_refund_its_own_tool_would_refuse_is_rejected_before_any_card_and_said_in_the_thread(
    spelled, amount
):
    thread_id = await spelled.ask(f"Refund order 8 for {amount}", graph="spelled", requester=RILEY)
    answer = await spelled.answer(thread_id)
    assert "the arguments do not fit issue_refund's own schema (amount:" in answer
    assert await spelled.says(thread_id, "🤖❌ Rejected by policy: issue_refund's argument schema")
    assert not [m for m in spelled.standin.messages if m.kind == "approval"]


async def test_a_negative_refund_is_not_approved_as_a_small_one(spelled):
    thread_id = await spelled.ask("Refund order 9 for -50000", graph="spelled", requester=RILEY)
    answer = await spelled.answer(thread_id)
    assert "A refund's amount must be a positive whole number." in answer
    assert await spelled.says(thread_id, "🤖❌ Rejected by policy: Other refunds")
