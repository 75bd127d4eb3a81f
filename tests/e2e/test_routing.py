"""Cards reach the right people: routed by the policy, and the approvers notified as Slack would."""

from __future__ import annotations

import pytest

from tests.support.harness import CHANNEL, Harness, buttons, eventually, start_scene
from tests.support.people import ALICE, BOB, RILEY

FINANCE = "C0FINANCE"


@pytest.fixture
async def scene(redis_url, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text(
        "[defaults]\nrequester_may_approve = false\n"
        "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE', 'S0FINANCE']\n"
        f"channel = '{FINANCE}'\nsummary = 'Refund {{amount}} on order {{order_id}}'\n"
        "[[rules]]\ntools = ['send_email']\napprovers = ['S0COMMS']\nnotify = 'dm'\n"
    )
    groups = {"S0FINANCE": ["U0CAROL"], "S0COMMS": ["U0DANA", "U0ERIN"]}
    async with start_scene(redis_url, "demo", policy=policy, groups=groups) as running:
        yield running


async def test_a_refund_card_goes_to_finance_and_notifies_its_approvers_only(scene):
    thread_id = await scene.ask("Refund order 1235 for 5000", requester=RILEY)

    card = await scene.card(thread_id)
    assert (card.channel, card.thread_ts) == (FINANCE, None)  # a message of its own in #finance
    assert card.text == "<@U0ALICE> <!subteam^S0FINANCE> Riley's agent wants to refund 5,000 on order 1235"
    assert "Refund 5,000 on order 1235" in str(card.blocks)
    assert "Approvers: <@U0ALICE>, <!subteam^S0FINANCE>" in str(card.blocks)
    assert [m.ts for m in scene.standin.notifications_for(ALICE)] == [card.ts]
    assert [m.ts for m in scene.standin.notifications_for("U0CAROL")] == [card.ts]  # through the group
    assert scene.standin.notifications_for(BOB) == []

    # (the run's thread may not exist yet when the card is in #finance: its link opens it)
    async def the_link() -> list[str]:
        return [t for t in await scene.thread_texts(thread_id) if "Waiting for approval" in t]

    link = await eventually(the_link, what="the link in the run's thread")
    assert f"<#{FINANCE}>" in link[0] and f"/archives/{FINANCE}/p{card.ts.replace('.', '')}" in link[0]

    await scene.standin.click(ALICE, card, "approve:0")

    answer = await scene.answer(thread_id)
    assert "Refunded 5000 on order 1235" in answer
    told = "<@U0RILEY> ✅ Approved by Alice: refund 5,000 on order 1235"
    await eventually(lambda: scene.says(thread_id, told), what="the requester told, once")
    assert buttons(await scene.card_shows(card, "▶️ The agent carries on")) == []
    # every line that asked someone to act now says the outcome (what notification lists show)
    decided = scene.fresh(card)
    assert decided.text == "✅ Approved by Alice: refund 5,000 on order 1235 (asked by Riley)"

    async def changed() -> list[str]:
        texts = await scene.thread_texts(thread_id)
        return [t for t in texts if "Waiting for approval" not in t and "Open the card" in t]

    linked = await eventually(changed, what="the link changed")
    assert linked[0].startswith("✅ Approved by Alice: refund 5,000 on order 1235")
    assert [m.text for m in scene.standin.notifications_for(RILEY)] == [told]  # one item: the outcome
    assert [m.text for m in scene.standin.notifications_for(ALICE)] == [decided.text]  # the card, decided


async def test_in_a_thread_the_card_itself_is_sent_to_the_channel_and_notifies(redis_url, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text("[defaults]\napprovers = ['U0ALICE']\n")
    async with Harness(redis_url, env={"SIGNOFF_POLICY": str(policy)}) as scene:
        await scene.start_bot()
        await scene.start_runner("demo")
        thread_id = await scene.ask('Email finance@acme.com "numbers"', requester=RILEY)
        card = await scene.card(thread_id)

        assert card.thread_ts is not None and card.broadcast  # in the run's thread, and in the channel
        heard = await eventually(lambda: scene.standin.notifications_for(ALICE), what="Alice notified")
        assert [m.ts for m in heard] == [card.ts]  # the notification lands on the card, not under it
        assert heard[0].text == "Riley's agent wants to send email: to finance@acme.com, subject numbers"
        assert scene.standin.notifications_for(BOB) == []
        assert scene.standin.notifications_for(RILEY) == []  # her own card does not ping her


async def test_notify_dm_messages_each_approver_with_a_link(scene):
    thread_id = await scene.ask('Email finance@acme.com "numbers"', requester=RILEY)
    card = await scene.card(thread_id)

    for person in ("U0DANA", "U0ERIN"):
        dm = await eventually(lambda p=person: scene.standin.notifications_for(p), what=f"{person}'s DM")
        assert dm[0].channel == f"D{person}"
        assert "Riley's agent wants to send email: to finance@acme.com" in dm[0].text
        assert f"p{card.ts.replace('.', '')}|Open the card>" in dm[0].text
    assert scene.standin.notifications_for(ALICE) == []


def test_a_batch_naming_two_channels_stays_in_the_run_s_thread():
    from types import SimpleNamespace

    from bot.permissions import Permissions
    from bot.routing import Router
    from core.policy_file import PolicyFile
    from core.protocol import ActionReview, PendingRequest, RequestKind
    from core.records import Approval, Run, approval_for

    rules = PolicyFile.model_validate(
        {
            "rules": [
                {"tools": ["issue_refund"], "channel": "C0FINANCE"},
                {"tools": ["drop_table"], "channel": "C0DBA"},
            ]
        }
    )
    router = Router(SimpleNamespace(), Permissions(rules))  # type: ignore[arg-type]

    def batch(*names: str) -> Approval:
        actions = tuple(ActionReview(name=n, args={}, allowed_decisions=("approve",)) for n in names)
        request = PendingRequest(interrupt_id="i-1", kind=RequestKind.BATCHED, actions=actions)
        return approval_for(request, Run(thread_id="t-1", graph="demo", channel=CHANNEL), "demo")

    assert router.route(batch("issue_refund", "send_email")).channel == "C0FINANCE"
    assert router.route(batch("issue_refund", "drop_table")).channel is None


async def test_a_requester_who_may_not_decide_is_named_not_mentioned_nor_listed_as_an_approver(
    redis_url, tmp_path
):
    path = tmp_path / "signoff.toml"
    path.write_text('[defaults]\napprovers = ["U0ALICE", "U0RILEY"]\nrequester_may_approve = false\n')
    async with start_scene(redis_url, "demo", env={"SIGNOFF_POLICY": str(path)}) as scene:
        thread_id = await scene.ask('Email finance@acme.com "who decides"', requester=RILEY)
        card = await scene.card(thread_id)

        await scene.standin.click(BOB, card, "approve:0")

        shown = str(card.blocks)
        assert "Approvers: <@U0ALICE>" in shown and "Asked by *Riley*" in shown
        assert "<@U0RILEY>" not in shown  # named, never mentioned: her own card does not ping her
        refused = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="Bob refused")
        assert refused[0].endswith("Approvers: <@U0ALICE>.")


async def test_slash_pending_in_the_channel_a_card_was_routed_to_lists_it(scene):
    """`/signoff pending` in #finance lists the refund card that lives there, though its run
    started in another channel; in the run's channel it is listed too."""
    thread_id = await scene.ask("Refund order 1236 for 5000", requester=RILEY)
    card = await scene.card(thread_id)
    assert card.channel == FINANCE

    for shown, channel in enumerate((FINANCE, CHANNEL), start=1):
        await scene.standin.slash(BOB, channel, "pending")
        listed = await eventually(
            lambda n=shown: scene.standin.ephemerals_for(BOB)[n - 1 :] or None, what="the list"
        )
        listing = listed[0]
        assert listing.startswith("*Waiting for a decision here (1):*"), (channel, listing)
        assert f"/p{card.ts.replace('.', '')}|" in listing
