"""Approval cards end to end: stand-in Slack, the real bot over HTTP, a real runner, real agents."""

from __future__ import annotations

import pytest

from tests.harness import Loop, buttons, card_text, eventually

ALICE, BOB = "U0ALICE", "U0BOB"


@pytest.fixture
async def loop(redis_url):
    async with Loop(redis_url) as running:
        await running.start_bot()
        await running.start_runner("demo", "per_call", "question")
        yield running


async def test_approve_runs_the_tool_and_the_answer_lands_in_the_thread(loop):
    thread_id = await loop.ask('Email finance@acme.com "Q3 numbers are in"')
    card = await loop.card(thread_id)

    assert card.text == "Approval needed: send_email finance@acme.com"
    assert buttons(card) == ["approve:0", "reject:0"]
    interaction = await loop.standin.click(ALICE, card, "approve:0")

    assert interaction.acked
    answer = await loop.answer(thread_id)
    assert "send_email: Email to finance@acme.com sent: Q3 numbers are in" in answer
    updated = await loop.card_shows(card, "▶️ Resumed")
    assert f"✅ Approved by <@{ALICE}>" in card_text(updated)
    assert buttons(updated) == []
