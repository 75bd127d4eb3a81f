"""Every way to approve a `step_up` call by click ends on the passkey page, never in a decision:
Approve all (one link for the batch), an overflow menu's Approve sent by hand; Edit is refused (an
edit would run the call), Approve & trust under `step_up_trust` (the grant made with the passkey);
the Home tab's Passkeys; the admin's `signoff passkeys list|remove`, `signoff doctor`, a bot
without a public URL."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.app import run_bot
from core.config import StartupError
from tests.support.files import lines, write_policy
from tests.support.harness import ASK_BATCH, Harness, eventually, signoff, start_scene
from tests.support.passkey import (
    SoftPasskey,
    confirmation,
    enrol_link,
    enrolled,
    link_for,
    link_in,
    page_options,
    post_json,
    stepped_up,
)
from tests.support.people import ALICE, RILEY

PATHS_POLICY = (
    "[defaults]\napprovers = ['U0ALICE', 'U0BOB']\n"
    "[[rules]]\nname = 'Mail'\ntools = ['send_email']\nstep_up = 'passkey'\n"
    "[[rules]]\nname = 'Writes'\ntools = ['write_file']\ntrust = '1h'\nstep_up_trust = 'passkey'\n"
)
ASK_WRITE = 'Write "Launch on Monday." to /plans/launch.md'


@pytest.fixture
async def scene(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    async with start_scene(
        redis_url, "demo", "ledger", policy=write_policy(tmp_path, PATHS_POLICY)
    ) as running:
        yield running


async def test_approve_all_on_a_batch_with_a_step_up_call_sends_one_link_for_the_batch(scene):
    alice = await enrolled(scene, ALICE)
    thread_id = await scene.ask(ASK_BATCH, requester=RILEY)
    card = await scene.card(thread_id)
    url = await link_for(scene, ALICE, card, "approve_all")
    assert scene.standin.open_views(ALICE) == []  # no dialog: the link instead
    approval_id = card.metadata["event_payload"]["approval_id"]
    assert (await scene.store.approvals.get(approval_id)).decided == {}
    assert (await stepped_up(url, alice))["ok"]
    await scene.answer(thread_id)
    decided = (await scene.store.approvals.get(approval_id)).decided
    assert [d.decision["type"] for d in decided.values()] == ["approve", "approve"]
    assert all(d.step_up and d.step_up["method"] == "passkey" for d in decided.values())


async def test_an_overflow_approve_sent_by_hand_gets_the_link_and_an_edit_is_refused(scene, tmp_path):
    thread_id = await scene.ask("send", graph="ledger", requester=RILEY)
    card = await scene.card(thread_id)
    forged = scene.standin.block_action_payload(ALICE, card, "approve:0")
    value = forged["actions"][0]["value"]
    forged["actions"][0] = {
        **forged["actions"][0],
        "action_id": "choose:0",
        "type": "overflow",
        "selected_option": {"value": f"approve:{value}", "text": {"type": "plain_text", "text": "Approve"}},
    }
    assert (await scene.standin.send(forged)).acked
    said = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="the answer")
    assert "needs your passkey" in said[-1]
    assert (await scene.standin.click(ALICE, card, "edit:0")).acked  # an edit would run it too
    await eventually(lambda: len(scene.standin.ephemerals_for(ALICE)) == 2, what="the refusal")
    assert scene.standin.ephemerals_for(ALICE)[-1] == (
        "An edit would run `send_email`, which needs a passkey to approve: Approve or Reject it. Nothing changed."
    )
    assert scene.standin.open_views(ALICE) == []
    await asyncio.sleep(0.5)
    assert (await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])).decided == {}
    assert lines(tmp_path / "ledger.txt") == []


async def test_approve_and_trust_under_step_up_trust_grants_only_with_the_passkey(scene):
    alice = await enrolled(scene, ALICE)
    first = await scene.ask(ASK_WRITE, requester=RILEY)
    card = await scene.card(first)
    assert "🔑 Approve & trust needs a passkey" in str(card.blocks)
    url = await link_for(scene, ALICE, card, "trust:0")
    assert (await stepped_up(url, alice))["ok"]
    await scene.answer(first)
    assert await eventually(lambda: scene.says(first, "trusted `write_file`"), what="the grant said")
    again = await scene.ask(ASK_WRITE, requester=RILEY)  # the same write: under the grant, unasked
    await scene.answer(again)
    assert [e["outcome"] for e in await scene.store.audit.entries() if e["tool"] == "write_file"] == [
        "decided",
        "granted",
        "trusted",
    ]


async def test_signoff_passkeys_lists_and_removes_and_doctor_says_where_the_pages_are(scene):
    alice = await enrolled(scene, ALICE, label="phone")
    listed = await signoff(scene, "passkeys", "list", ALICE)
    assert listed.returncode == 0 and alice.id in listed.stdout and "phone" in listed.stdout
    removed = await signoff(scene, "passkeys", "remove", ALICE, alice.id)
    assert removed.returncode == 0, removed.stderr
    assert await scene.store.passkeys.of(ALICE) == []
    assert "has no passkey" in (await signoff(scene, "passkeys", "list", ALICE)).stdout
    doctor = await signoff(scene, "doctor")
    assert f"{scene.public_url}/step-up/" in doctor.stdout + doctor.stderr


async def test_a_bot_without_a_public_url_refuses_a_policy_with_step_up(redis_url, tmp_path):
    async with Harness(redis_url) as harness:
        settings = harness.settings(SIGNOFF_POLICY=write_policy(tmp_path, PATHS_POLICY))
        settings = settings.model_copy(update={"public_url": None})
        with pytest.raises(StartupError, match="SIGNOFF_PUBLIC_URL: the policy asks approvers for a passkey"):
            await run_bot(settings, asyncio.Event())


async def test_the_home_tab_offers_passkeys_when_a_rule_steps_up(scene):
    await scene.standin.open_home(ALICE)
    home = await eventually(lambda: scene.standin.home.get(ALICE), what="Alice's home tab")
    assert "Some approvals here need a passkey" in str(home)
    payload = scene.standin.view_action_payload(ALICE, {**home, "id": f"VH{ALICE}"}, "passkey_link")
    assert (await scene.standin.send(payload)).acked
    modal = await eventually(lambda: scene.standin.on_screen(ALICE), what="the passkeys modal")
    status, options = await page_options(link_in(json.dumps(modal["blocks"])))
    assert (
        status == 200
        and options["user"]["name"] == ALICE
        and options["authenticatorSelection"]
        == {
            "residentKey": "preferred",
            "userVerification": "required",
            "requireResidentKey": False,
        }
    )


async def test_a_step_up_on_a_redis_cluster(cluster_url, tmp_path, monkeypatch):
    """Passkeys and links are keys used alone (any slot); the decide script's proof stays in the
    approval's slot: the same flow on a cluster."""
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    async with start_scene(cluster_url, "ledger", policy=write_policy(tmp_path, PATHS_POLICY)) as scene:
        alice = await enrolled(scene, ALICE)
        thread_id = await scene.ask("send", graph="ledger", requester=RILEY)
        url = await link_for(scene, ALICE, await scene.card(thread_id))
        assert (await stepped_up(url, alice))["ok"]
        await scene.answer(thread_id)
        assert lines(tmp_path / "ledger.txt") == ["a@acme.com"]
        checked = await signoff(scene, "audit", "verify")
        assert checked.returncode == 0, checked.stderr


async def test_once_someone_has_a_passkey_only_one_of_them_adds_or_removes_one_and_they_are_told(scene):
    """A red team's finding: with only Alice's Slack session, someone enrolled a passkey of their
    own beside hers and approved with it. Now a change needs one of hers, and she hears of each."""
    alice = await enrolled(scene, ALICE)
    url = await enrol_link(scene, ALICE)  # a stolen session's link: the page asks for her passkey
    _, options = await page_options(url)
    intruder = SoftPasskey(scene.public_url, "localhost")
    status, unconfirmed = await post_json(url, {"credential": intruder.create(options), "label": "mine"})
    confirmed_by_another = {"confirmation": intruder.get((await page_options(url, "confirm"))[1])}
    _, forged = await post_json(url, {"credential": intruder.create(options), **confirmed_by_another})
    _, removal = await post_json(f"{url}/remove", {"credential_id": alice.id})

    assert status == 403 and unconfirmed["said"].startswith("Confirm with one of your passkeys first")
    assert not forged["ok"] and not removal["ok"]
    assert [p.credential_id for p in await scene.store.passkeys.of(ALICE)] == [alice.id]

    phone = await enrolled(scene, ALICE, label="phone", confirm_with=alice)  # hers: taken
    url = await enrol_link(scene, ALICE)
    first, second = await confirmation(url, phone), await confirmation(url, phone)
    _, removed = await post_json(f"{url}/remove", {"credential_id": alice.id, **first})
    _, again = await post_json(f"{url}/remove", {"credential_id": phone.id, **second})

    assert removed["ok"] and not again["ok"]  # one change per link
    assert [p.credential_id for p in await scene.store.passkeys.of(ALICE)] == [phone.id]

    def told() -> list[str] | None:
        said = [m.text for m in scene.standin.messages if m.channel.startswith("D") and "🔑" in m.text]
        return said if len(said) == 3 else None

    said = await eventually(told, what="her direct messages")
    assert [line.split(":")[0].split(".")[0] for line in said] == [
        "🔑 A passkey was added to your Signoff approvals",
        "🔑 A passkey was added to your Signoff approvals",
        "🔑 A passkey was removed from your Signoff approvals",
    ]
