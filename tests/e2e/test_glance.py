"""Cards people read at a glance: the header says the state, batches decide in one tap,
destructive confirmations restate the action, and the status line tells the outcome."""

from __future__ import annotations

import pytest

from tests.support.harness import ASK_BATCH, CHANNEL, buttons, card_text, eventually, header, start_scene
from tests.support.people import ALICE, BOB, RILEY


@pytest.fixture
async def scene(redis_url, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text(
        "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE']\n"
        "summary = 'Refund {amount} on order {order_id}'\n"
    )
    async with start_scene(redis_url, "demo", policy=policy) as running:
        yield running


def element(message, action_id: str) -> dict:
    return next(
        e
        for b in message.blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == action_id
    )


async def test_the_header_says_who_decided(scene):
    thread_id = await scene.ask("Refund order 1235 for 5000", requester=RILEY)
    card = await scene.card(thread_id)
    assert header(card) == "Refund 5,000 on order 1235"  # what it does, not the tool's name
    assert "Refund 5,000 on order 1235" in card_text(card)

    await scene.standin.click(ALICE, card, "approve:0")

    await eventually(lambda: header(scene.fresh(card)) == "Approved by Alice", what="the header")


async def test_a_destructive_approval_is_confirmed_in_its_words_once_the_clicker_may(redis_url, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text(
        "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE']\n"
        "summary = 'Refund {amount} on order {order_id}'\n"
    )
    env = {"SIGNOFF_DESTRUCTIVE_TOOLS": "issue_refund,delete,send_email"}
    async with start_scene(redis_url, "demo", policy=policy, env=env) as scene:
        thread_id = await scene.ask("Refund order 1235 for 5000", requester=RILEY)
        card = await scene.card(thread_id)
        assert "confirm" not in element(card, "approve:0")  # Slack's dialog would show to anyone

        for who in (BOB, RILEY):  # neither may approve: told so, and no dialog opens
            await scene.standin.click(who, card, "approve:0")
            await eventually(lambda w=who: scene.standin.ephemerals_for(w), what=f"{who} refused")
            assert scene.standin.open_views(who) == []
        assert (await scene.store.approvals.of_thread(thread_id))[0].decided == {}

        dialog = await scene.open_modal(ALICE, card, "approve:0")
        assert dialog["title"]["text"] == "Run this action?"
        assert "Refund 5,000 on order 1235? It cannot be undone once it runs." in str(dialog["blocks"])
        assert (await scene.store.approvals.of_thread(thread_id))[0].decided == {}  # not before the dialog
        assert (await scene.standin.submit(ALICE, dialog, {})).acked
        assert "Refunded 5000 on order 1235" in await scene.answer(thread_id)
        await eventually(lambda: header(scene.fresh(card)) == "Approved by Alice", what="the header")

        batch = await scene.ask(ASK_BATCH, requester=RILEY)
        dialog = await scene.open_modal(ALICE, await scene.card(batch), "approve_all")
        assert "Each of the 2 undecided actions runs, including delete, send_email." in str(dialog["blocks"])


async def test_approve_all_records_each_action_and_resumes_once(scene):
    thread_id = await scene.ask(ASK_BATCH, requester=RILEY)
    card = await scene.card(thread_id)
    assert buttons(card)[:2] == ["approve_all", "reject_all"]

    await scene.confirm(ALICE, card, "approve_all")

    answer = await scene.answer(thread_id)
    assert "delete" in answer and "Email to team@acme.com sent" in answer
    approval = (await scene.store.approvals.of_thread(thread_id))[0]
    assert sorted(approval.decided) == [0, 1]
    assert {d.decision["type"] for d in approval.decided.values()} == {"approve"}
    assert header(await scene.card_shows(card, "carries on")) == "Reviewed: 2 approved"


async def test_reject_all_sends_one_reason_to_each_and_the_status_line_says_so(scene):
    thread_id = await scene.ask(ASK_BATCH, requester=RILEY)
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, "reject_all")
    assert modal["title"]["text"] == "Reject all 2"

    sent = await scene.standin.submit(ALICE, modal, {"reason": "Keep the old report for the audit"})

    assert sent.acked
    await scene.answer(thread_id)
    approval = (await scene.store.approvals.of_thread(thread_id))[0]
    assert [approval.decided[i].decision for i in (0, 1)] == [
        {"type": "reject", "message": "Keep the old report for the audit"}
    ] * 2
    run = await scene.store.runs.get(thread_id)
    root = scene.standin.message(CHANNEL, run.thread_ts)  # Signoff's root says the run's status
    assert [m.kind for m in scene.standin.thread(CHANNEL, run.thread_ts)].count("status") == 0
    await eventually(
        lambda: scene.fresh(root).text.endswith("\n🏁 Finished — 2 rejected"), what="a truthful status"
    )


async def test_a_dialog_confirms_what_the_card_showed_an_edit_proposed_meanwhile_is_not_approved(
    redis_url, tmp_path
):
    policy = tmp_path / "signoff.toml"
    policy.write_text("[[rules]]\ntools = ['delete']\napprovers = ['U0ALICE', 'U0BOB']\nquorum = 2\n")
    env = {"SIGNOFF_DESTRUCTIVE_TOOLS": "delete"}
    async with start_scene(redis_url, "demo", policy=policy, env=env) as scene:
        thread_id = await scene.ask("Delete /reports/old.pdf", requester=RILEY)
        card = await scene.card(thread_id)
        dialog = await scene.open_modal(ALICE, card, "approve:0")  # Alice reads, about to confirm
        edit = await scene.open_modal(BOB, card, "edit:0")
        await scene.standin.submit(BOB, edit, {"file_path": "/reports/everything"})  # proposed, 1 of 2
        await scene.card_shows(card, "proposed new arguments")

        await scene.standin.submit(ALICE, dialog, {})

        said = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="Alice told")
        assert "edited since your card was drawn" in said[0]
        approval = (await scene.store.approvals.of_thread(thread_id))[0]
        assert approval.decided == {} and [v.user for v in approval.votes[0]] == [BOB]
