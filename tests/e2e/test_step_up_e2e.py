"""Step-up approval with a passkey, end to end: stand-in Slack, the real bot (its passkey pages on
its HTTP port), a real runner, Redis, and real WebAuthn crypto (a software passkey signing with
ECDSA P-256; the browser's own virtual authenticator is in tests/browser). A click alone never
runs a `step_up` call; an assertion bound to anything but what the card showed, replayed, from
another person, with a lowered sign count or after the deadline records nothing; a quorum of two
counts two people's passkeys."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from core.protocol import Approve, Edit, EditedAction
from core.records import DecisionResult
from tests.support.files import lines, write_policy
from tests.support.harness import CHANNEL, eventually, signoff, start_scene
from tests.support.passkey import enrolled, link_for, page_options, post_json, stepped_up
from tests.support.people import ALICE, BOB, RILEY

STEP_UP_POLICY = (
    "[defaults]\napprovers = ['U0ALICE', 'U0BOB']\n"
    "[[rules]]\nname = 'Mail'\ntools = ['send_email']\nstep_up = 'passkey'\ntimeout = '1h'\n"
    "[[rules]]\nname = 'Refunds'\ntools = ['issue_refund']\nstep_up = 'passkey'\nquorum = 2\n"
    "[[rules]]\nname = 'Writes'\ntools = ['write_file']\nstep_up = 'passkey'\nquorum = 2\n"
)


@pytest.fixture(params=["http", "socket"])
async def scene(request, redis_url, tmp_path, monkeypatch):
    """Slack reaches the bot over HTTP or Socket Mode; the passkey pages are on its port either way."""
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))  # what the tool really did
    policy = write_policy(tmp_path, STEP_UP_POLICY)
    async with start_scene(redis_url, "ledger", "demo", policy=policy, mode=request.param) as running:
        yield running


async def test_a_click_alone_never_runs_the_call_and_says_how_to_enrol(scene, tmp_path):
    thread_id = await scene.ask("send", graph="ledger", requester=RILEY)
    card = await scene.card(thread_id)
    assert any("🔑 Approve needs a passkey" in json.dumps(b, ensure_ascii=False) for b in card.blocks)
    assert (await scene.standin.click(ALICE, card, "approve:0")).acked
    said = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="the ephemeral")
    assert "needs your passkey, and you have none yet: type `/signoff passkey`" in said[-1]
    # a forged request, straight to the decide script as any listener would send it: refused
    approval = await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])
    verdict = await scene.store.decisions.decide(approval.approval_id, 0, Approve(), ALICE)
    assert verdict.result is DecisionResult.STEP_UP
    await asyncio.sleep(0.5)
    assert (await scene.store.approvals.get(approval.approval_id)).decided == {}
    assert lines(tmp_path / "ledger.txt") == []


async def test_enrol_then_approve_with_a_passkey_runs_once_and_the_audit_verifies(scene, tmp_path):
    passkey = await enrolled(scene, ALICE)
    thread_id = await scene.ask("send", graph="ledger", requester=RILEY)
    card = await scene.card(thread_id)
    url = await link_for(scene, ALICE, card)
    _, options = await page_options(url)
    assertion = passkey.get(options)
    assert (await post_json(url, {"credential": assertion}))[1]["ok"]
    await scene.answer(thread_id)
    assert lines(tmp_path / "ledger.txt") == ["a@acme.com"]
    status, again = await post_json(url, {"credential": assertion})  # replayed: the link is used up
    assert not again["ok"] and "expired or was used already" in again["said"]
    assert (await page_options(url))[0] == 410
    async with aiohttp.ClientSession() as session, session.get(f"{scene.public_url}/metrics") as reply:
        counted = await reply.text()
    assert 'signoff_step_ups_total{result="recorded"}' in counted
    assert 'signoff_step_ups_total{result="gone"}' in counted
    entry = next(e for e in await scene.store.audit.entries() if e["outcome"] == "decided")
    assert (entry["step_up"], entry["credential"], entry["user"]) == ("passkey", passkey.id, ALICE)
    assert entry["challenge"]
    checked = await signoff(scene, "audit", "verify")
    assert checked.returncode == 0, checked.stderr
    assert lines(tmp_path / "ledger.txt") == ["a@acme.com"]


async def test_an_assertion_for_another_call_or_person_or_count_records_nothing(scene, tmp_path):
    alice, bob = await enrolled(scene, ALICE), await enrolled(scene, BOB)
    first = await scene.card(await scene.ask("send", graph="ledger", requester=RILEY))
    second = await scene.card(await scene.ask("send", graph="ledger", requester=RILEY))
    one, other = await link_for(scene, ALICE, first), await link_for(scene, ALICE, second)
    _, options = await page_options(one)
    answer = (await post_json(other, {"credential": alice.get(options)}))[1]  # signed for the other
    assert not answer["ok"] and "does not prove this approval" in answer["said"]
    assert not (await stepped_up(await link_for(scene, ALICE, second), bob))["ok"]  # Bob's passkey
    for card in (first, second):
        assert (await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])).decided == {}
    assert lines(tmp_path / "ledger.txt") == []
    assert (await stepped_up(await link_for(scene, ALICE, first), alice))["ok"]  # her count is 2 now
    lowered = await stepped_up(await link_for(scene, ALICE, second), alice, counter=1)  # a clone's
    assert not lowered["ok"] and "counter went backwards" in lowered["said"]
    second_id = second.metadata["event_payload"]["approval_id"]
    assert (await scene.store.approvals.get(second_id)).decided == {}
    assert (await stepped_up(await link_for(scene, ALICE, second), alice))["ok"]  # (then it works)
    await eventually(lambda: len(lines(tmp_path / "ledger.txt")) == 2, what="both sent, once each")


async def test_an_edit_since_the_link_and_a_deadline_passed_record_nothing(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    policy = write_policy(tmp_path, STEP_UP_POLICY.replace("timeout = '1h'", "timeout = '2s'"))
    async with start_scene(redis_url, "ledger", "demo", policy=policy) as scene:
        alice = await enrolled(scene, ALICE)
        card = await scene.card(await scene.ask("send", graph="ledger", requester=RILEY))
        url = await link_for(scene, ALICE, card)
        _, options = await page_options(url)  # opened in time; her passkey answers too late
        await asyncio.sleep(2.5)
        late = (await post_json(url, {"credential": alice.get(options)}))[1]
        assert not late["ok"] and "Nothing was recorded" in late["said"], late
        refund = await scene.card(
            await scene.ask('Write "Launch on Monday." to /plans/launch.md', requester=RILEY)
        )
        url = await link_for(scene, ALICE, refund)
        _, options = await page_options(url)
        approval_id = refund.metadata["event_payload"]["approval_id"]
        approval = await scene.store.approvals.get(approval_id)
        edit = Edit(
            edited_action=EditedAction(
                name="write_file", args={"file_path": "/plans/launch.md", "content": "Tuesday."}
            )
        )
        proof = {"method": "passkey", "credential": "Bob's", "challenge": "his own"}  # (Bob's step-up)
        proposed = await scene.store.decisions.decide(approval_id, 0, edit, BOB, seen=0, proof=proof)
        assert proposed.result is DecisionResult.VOTED and approval is not None
        moved = (await post_json(url, {"credential": alice.get(options)}))[1]
        assert not moved["ok"] and "edited" in moved["said"], moved
    assert lines(tmp_path / "ledger.txt") == []


async def test_two_approvers_stepping_up_on_a_quorum_of_two_count_as_two(scene):
    alice, bob = await enrolled(scene, ALICE), await enrolled(scene, BOB)
    thread_id = await scene.ask("Refund order 1235 for 5000", requester=RILEY)
    card = await scene.card(thread_id)
    first = await stepped_up(await link_for(scene, ALICE, card), alice)
    assert first["ok"] and "1 of 2" in first["said"], first
    assert (await stepped_up(await link_for(scene, BOB, card), bob))["ok"]
    assert "Refunded 5000 on order 1235" in await scene.answer(thread_id)
    entries = [e for e in await scene.store.audit.entries() if e.get("step_up") == "passkey"]
    assert sorted(e["user"] for e in entries if e["outcome"] == "vote") == [ALICE, BOB]
    assert CHANNEL


async def test_two_answers_to_one_link_at_once_record_one_approval(scene, tmp_path):
    alice = await enrolled(scene, ALICE)
    thread_id = await scene.ask("send", graph="ledger", requester=RILEY)
    url = await link_for(scene, ALICE, await scene.card(thread_id))
    _, options = await page_options(url)
    first, second = alice.get(options), alice.get(options)  # (her device answered twice)
    answers = await asyncio.gather(
        post_json(url, {"credential": first}), post_json(url, {"credential": second})
    )
    assert sorted(answer["ok"] for _, answer in answers) == [False, True]
    await scene.answer(thread_id)
    assert lines(tmp_path / "ledger.txt") == ["a@acme.com"]
    assert [e["outcome"] for e in await scene.store.audit.entries()] == ["decided"]
