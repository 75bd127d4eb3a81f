"""Compound approvals (`require`) through the real bot, runner and Redis: every entry met by
distinct people, shown per entry on the card, and one reject deciding at once."""

from __future__ import annotations

import pytest

from tests.support.files import lines, write_policy
from tests.support.harness import card_text, consumed, eventually, start_scene
from tests.support.people import ALICE, BOB, CAROL, RILEY
from tests.support.records import audit_outcomes

FINANCE_AND_SECURITY = """
[[rules]]
tools = ["send_email"]
requester_may_approve = false
require = [{ name = "Finance", approvers = ["S0FIN"], count = 1 },
           { name = "Security", approvers = ["S0SEC"], count = 1 }]
"""
# Bob is in both groups; Riley, who asks, is in finance
GROUP_MEMBERS = {"S0FIN": [ALICE, BOB, RILEY], "S0SEC": [BOB, CAROL]}


@pytest.fixture
async def compound(redis_url, tmp_path, monkeypatch):
    """send_email needs one of finance and one of security; the ledger agent writes each send."""
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    policy = write_policy(tmp_path, FINANCE_AND_SECURITY)
    async with start_scene(redis_url, "ledger", policy=policy, groups=GROUP_MEMBERS) as scene:
        thread_id = await scene.ask("send the mail", graph="ledger", requester=RILEY)
        yield scene, thread_id, await scene.card(thread_id), ledger


async def test_one_person_fills_one_entry_the_requester_never_counts_and_it_runs_when_each_is_met(compound):
    scene, thread_id, card, ledger = compound
    assert "Finance 0 of 1: <!subteam^S0FIN> · Security 0 of 1: <!subteam^S0SEC>" in card_text(card)

    await scene.standin.click(RILEY, card, "approve:0")
    await scene.standin.click(BOB, card, "approve:0")  # in both groups: counts toward one
    counted = await scene.card_shows(card, "Finance 1 of 1 ✓ · Security 0 of 1: <!subteam^S0SEC>")
    await scene.standin.click(BOB, counted, "approve:0")
    await eventually(lambda: len(scene.standin.ephemerals) == 3, what="Bob told twice, Riley refused")
    assert "You started this run" in scene.standin.ephemerals_for(RILEY)[0]
    told = scene.standin.ephemerals_for(BOB)
    assert told[0].endswith("Finance 1 of 1 ✓ · Security 0 of 1: <!subteam^S0SEC>")
    assert "counts already" in told[1]
    await eventually(lambda: consumed(scene.store), what="the runner done with every command")
    assert lines(ledger) == [] and await scene.store.runs.state(thread_id) == "waiting"

    await scene.standin.click(ALICE, counted, "approve:0")  # finance only: Bob counts for security

    await scene.answer(thread_id, "Sent.")
    assert lines(ledger) == ["a@acme.com"]
    assert "Approved by" in card_text(await scene.card_shows(card, "Approved by"))
    assert await audit_outcomes(scene.store) == [("vote", BOB), ("vote", ALICE), ("quorum", ALICE)]


async def test_under_require_one_reject_decides_at_once(compound):
    scene, thread_id, card, ledger = compound
    await scene.standin.click(ALICE, card, "approve:0")
    await scene.card_shows(card, "Finance 1 of 1 ✓")

    view = await scene.open_modal(CAROL, scene.fresh(card), "reject:0")
    await scene.standin.submit(CAROL, view, {"reason": "Not this quarter"})

    await scene.answer(thread_id)
    assert lines(ledger) == []
    await scene.card_shows(card, "Rejected by")
    await eventually(lambda: scene.says(thread_id, "> Carol said: Not this quarter"), what="the reason")
