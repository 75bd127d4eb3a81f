"""Calls the policy decides (`decide`), end to end: stand-in Slack, the real bot, a real runner, Redis.

No card for them, an audit entry naming the rule, one line in the run's thread; in a batch the card
asks only the others, and the one resume carries every decision in order.
"""

from __future__ import annotations

import json

import pytest

from tests.support.harness import buttons, card_text, eventually, start_scene
from tests.support.people import ALICE, RILEY

DECIDING_POLICY = (
    "[defaults]\napprovers = ['U0ALICE']\n"
    "[[rules]]\nname = 'Refunds'\ntools = ['issue_refund']\ndecide = 'approve'\n"
    "summary = 'Refund {amount} on order {order_id}'\n"
    "[[rules]]\ntools = ['delete']\ndecide = 'reject'\nmessage = 'Deletes need a ticket'\n"
)


@pytest.fixture
async def scene(redis_url, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text(DECIDING_POLICY)
    async with start_scene(redis_url, "demo", policy=policy) as running:
        yield running


async def test_a_refund_the_policy_approves_runs_with_no_card_audited_and_said_once(scene):
    thread_id = await scene.ask("Refund order 1235 for 5000", requester=RILEY)

    answer = await scene.answer(thread_id)

    assert "Refunded 5000 on order 1235" in answer
    said = [t for t in await scene.thread_texts(thread_id) if t.startswith("🤖✅")]
    assert said == ["🤖✅ Approved by policy: Refunds · Refund 5,000 on order 1235"]
    assert [m for m in scene.standin.messages if m.kind == "approval"] == []
    audit = await scene.store.audit.entries()
    assert [(e["tool"], e["user"], e["outcome"], e["rule"]) for e in audit] == [
        ("issue_refund", "signoff", "auto", "Refunds")
    ]


async def test_a_delete_the_policy_rejects_is_told_to_the_agent_with_its_message(scene):
    thread_id = await scene.ask("Delete /srv/data.csv", requester=RILEY)

    answer = await scene.answer(thread_id)

    assert "Deletes need a ticket" in answer
    assert await scene.says(thread_id, "🤖❌ Rejected by policy: the rule for delete")
    assert [m for m in scene.standin.messages if m.kind == "approval"] == []
    assert [e["outcome"] for e in await scene.store.audit.entries()] == ["auto"]


async def test_a_batch_asks_only_the_asked_call_and_resumes_once_complete_in_order(scene):
    thread_id = await scene.ask(
        'Email finance@acme.com "Q3" and refund order 1235 for 5000 and delete /srv/old.csv', requester=RILEY
    )
    card = await scene.card(thread_id)

    assert buttons(card) == ["approve:0", "reject:0"]  # the email only, at its own index
    shown = card_text(card)
    assert "send_email" in shown and "issue_refund" not in shown and "delete" not in shown
    assert "2 more decided by policy" in shown
    await scene.standin.click(ALICE, card, "approve:0")

    answer = await scene.answer(thread_id)
    assert "Email to finance@acme.com sent" in answer and "Refunded 5000 on order 1235" in answer
    assert "Deletes need a ticket" in answer
    resumes = [f for _, f in await scene.store.queue.entries(lambda p: p.commands) if "decisions" in f]
    assert [json.loads(f["decisions"]) for f in resumes] == [  # one resume, complete, in order
        [{"type": "approve"}, {"type": "approve"}, {"type": "reject", "message": "Deletes need a ticket"}]
    ]
    outcomes = await eventually(lambda: _outcomes(scene), what="the audit of the batch")
    assert outcomes == [(1, "auto"), (2, "auto"), (0, "decided")]


async def _outcomes(scene) -> list[tuple[int, str]] | None:
    entries = await scene.store.audit.entries()
    return [(e["index"], e["outcome"]) for e in entries] if len(entries) == 3 else None
