"""Trust grants end to end: stand-in Slack, the real bot, a real runner, Redis (one server and the
cluster). Approve & trust lets the same call through with no card, said in the run's thread;
other arguments are asked; a grant is used up, expires, and is revoked from `/signoff trust` or
`signoff trust revoke`."""

from __future__ import annotations

import json

import pytest

from tests.support.files import write_policy
from tests.support.harness import CHANNEL, buttons, eventually, signoff, start_scene
from tests.support.http import post
from tests.support.people import ALICE, BOB, RILEY

TRUST_POLICY = (
    "[defaults]\napprovers = ['U0ALICE', 'U0BOB']\n"
    "[[rules]]\nname = 'Refunds'\ntools = ['issue_refund']\ntrust = '1h'\ntrust_args = ['order_id']\n"
    "trust_uses = 2\n"
    "[[rules]]\nname = 'Mail'\ntools = ['send_email']\ntrust = '5s'\n"
)
REFUND_1235 = "Refund order 1235 for {amount}"


@pytest.fixture(params=["node", "cluster"])
async def scene(request, tmp_path):
    policy = write_policy(tmp_path, TRUST_POLICY)
    async with start_scene(request.getfixturevalue(f"{request.param}_url"), "demo", policy=policy) as running:
        yield running


async def cards_of(scene, thread_id: str) -> int:
    return sum(
        1
        for m in scene.standin.messages
        if m.kind == "approval" and (m.metadata or {}).get("event_payload", {}).get("thread_id") == thread_id
    )


async def trusted_once(scene, text: str, user: str = ALICE) -> str:
    """Ask, then Approve & trust on the card; the run's id once its answer is in."""
    thread_id = await scene.ask(text, requester=RILEY)
    card = await scene.card(thread_id)
    await scene.confirm(user, card, "trust:0")
    await scene.answer(thread_id)
    return thread_id


async def test_approve_and_trust_lets_the_same_call_through_unasked_until_used_up(scene):
    first = await scene.ask(REFUND_1235.format(amount=5000), requester=RILEY)
    card = await scene.card(first)
    assert buttons(card) == ["approve:0", "trust:0", "reject:0"]
    await scene.confirm(ALICE, card, "trust:0")
    assert "Refunded 5000 on order 1235" in await scene.answer(first)
    assert await scene.says(first, "🤝 <@U0ALICE> trusted `issue_refund`: the same call (same order_id)")

    again = await scene.ask(REFUND_1235.format(amount=3000), requester=RILEY)  # same order: trust_args
    assert "Refunded 3000 on order 1235" in await scene.answer(again)
    assert await cards_of(scene, again) == 0
    said = [t for t in await scene.thread_texts(again) if t.startswith("🤝")]
    assert len(said) == 1 and said[0].startswith(
        "🤝 Approved under <@U0ALICE>'s trust (Refunds), until <!date^"
    )

    other = await scene.ask("Refund order 77 for 5000", requester=RILEY)  # other arguments: a card
    assert buttons(await scene.card(other))[:2] == ["approve:0", "trust:0"]

    third = await scene.ask(REFUND_1235.format(amount=2000), requester=RILEY)
    assert "Refunded 2000 on order 1235" in await scene.answer(third)
    fourth = await scene.ask(REFUND_1235.format(amount=2000), requester=RILEY)  # trust_uses = 2: used up
    await scene.card(fourth)
    outcomes = [
        (e["tool"], e["outcome"]) for e in await scene.store.audit.entries() if e["outcome"] != "decided"
    ]
    assert outcomes == [("issue_refund", "granted"), ("issue_refund", "trusted"), ("issue_refund", "trusted")]


async def test_a_grant_expires(scene):
    await trusted_once(scene, 'Email finance@acme.com "numbers"')
    again = await scene.ask('Email finance@acme.com "numbers"', requester=RILEY)
    await scene.answer(again)
    assert await cards_of(scene, again) == 0

    await eventually(lambda: _none_live(scene), timeout=10, what="the grant's end")  # trust = "5s"
    late = await scene.ask('Email finance@acme.com "numbers"', requester=RILEY)
    await scene.card(late)


async def _none_live(scene) -> bool:
    return await scene.store.grants.live() == []


async def test_a_grant_revoked_from_slack_asks_again_for_the_next_call(scene):
    await trusted_once(scene, REFUND_1235.format(amount=5000))

    await scene.standin.slash(RILEY, "C0OPS", "trust")  # not an approver, not the granter: no Revoke
    listed = await eventually(
        lambda: [e for e in scene.standin.ephemerals if e["user"] == RILEY], what="list"
    )
    assert "Live trust grants (1)" in listed[0]["text"]
    assert "trust_revoke" not in str(listed[0]["blocks"])
    await scene.standin.slash(BOB, "C0OPS", "trust")
    shown = await eventually(
        lambda: [e for e in scene.standin.ephemerals if e["user"] == BOB], what="Bob's list"
    )
    await scene.standin.click_ephemeral(BOB, shown[0], "trust_revoke")
    await eventually(
        lambda: any("Revoked" in e["text"] for e in scene.standin.ephemerals if e["user"] == BOB),
        what="revoked",
    )

    after = await scene.ask(REFUND_1235.format(amount=5000), requester=RILEY)
    await scene.card(after)
    assert [e["user"] for e in await scene.store.audit.entries() if e["outcome"] == "revoked"] == [BOB]


async def test_signoff_trust_lists_and_revokes_from_the_shell(scene):
    await trusted_once(scene, REFUND_1235.format(amount=5000))
    (grant,) = await scene.store.grants.live()

    listed = await signoff(scene, "trust", "list")
    revoked = await signoff(scene, "trust", "revoke", grant.id)
    again = await signoff(scene, "trust", "revoke", grant.id)

    assert listed.returncode == 0 and grant.id in listed.stdout and "issue_refund" in listed.stdout
    assert revoked.returncode == 0 and "Revoked" in revoked.stdout
    assert again.returncode == 1 and "nothing changed" in again.stdout
    after = await scene.ask(REFUND_1235.format(amount=5000), requester=RILEY)
    await scene.card(after)


async def test_a_grant_made_in_one_channel_lets_nothing_through_in_another(scene):
    await trusted_once(scene, REFUND_1235.format(amount=5000))

    elsewhere = await scene.ask(REFUND_1235.format(amount=3000), requester=RILEY, channel="C0GENERAL")
    card = await scene.card(elsewhere)  # asked: the grant holds in the channel it was made in
    assert buttons(card)[:2] == ["approve:0", "trust:0"]
    here = await scene.ask(REFUND_1235.format(amount=3000), requester=RILEY)
    assert "Refunded 3000 on order 1235" in await scene.answer(here)
    assert await cards_of(scene, here) == 0


async def test_a_rule_that_trusts_anywhere_lets_the_same_call_through_in_every_channel(redis_url, tmp_path):
    policy = write_policy(tmp_path, TRUST_POLICY.replace("trust_uses = 2\n", "trust_scope = 'anywhere'\n"))
    async with start_scene(redis_url, "demo", policy=policy) as scene:
        first = await trusted_once(scene, REFUND_1235.format(amount=5000))
        assert await scene.says(first, "runs without asking")
        assert any(" in any channel runs without asking" in t for t in await scene.thread_texts(first))
        elsewhere = await scene.ask(REFUND_1235.format(amount=3000), requester=RILEY, channel="C0GENERAL")
        assert "Refunded 3000 on order 1235" in await scene.answer(elsewhere)
        assert await cards_of(scene, elsewhere) == 0


@pytest.mark.parametrize("grants", [False, True])
async def test_a_run_the_api_starts_uses_its_requester_s_grants_only_when_the_token_says_so(
    redis_url, tmp_path, grants
):
    policy = write_policy(tmp_path, TRUST_POLICY)
    env = {"SIGNOFF_API_TOKEN": "s3cret", "SIGNOFF_API_REQUESTER": RILEY, "SIGNOFF_API_GRANTS": str(grants)}
    async with start_scene(redis_url, "demo", policy=policy, env=env) as scene:
        await trusted_once(scene, REFUND_1235.format(amount=5000))  # Riley's, trusted by Alice
        status, answer = await post(
            f"http://127.0.0.1:{scene.port}/runs",
            json.dumps({"task": REFUND_1235.format(amount=3000), "channel": CHANNEL}),
            {"Authorization": "Bearer s3cret", "Content-Type": "application/json"},
        )
        assert status == 202, answer
        thread_id = json.loads(answer)["thread_id"]
        if grants:
            assert "Refunded 3000 on order 1235" in await scene.answer(thread_id)
            assert await cards_of(scene, thread_id) == 0
        else:
            card = await scene.card(thread_id)
            assert buttons(card)[:2] == ["approve:0", "reject:0"]  # no grant used, and none offered


async def test_a_revoke_sent_by_someone_who_may_not_revoke_changes_nothing(scene):
    """The requester sees the grant's id in `/signoff trust`, with no Revoke button: a revoke
    sent without the button (the click Slack would send for it) is refused on the server."""
    await trusted_once(scene, REFUND_1235.format(amount=5000))
    await scene.standin.slash(RILEY, "C0OPS", "trust")
    shown = await eventually(
        lambda: next((e for e in scene.standin.ephemerals if e["user"] == RILEY), None), what="Riley's list"
    )
    (grant,) = await scene.store.grants.live()
    assert f"`{grant.id}`" in str(shown["blocks"]) and "trust_revoke" not in str(shown["blocks"])

    revoke = {"type": "button", "action_id": "trust_revoke", "value": grant.id}
    revoke["text"] = {"type": "plain_text", "text": "Revoke"}
    forged = {**shown, "blocks": [{"type": "actions", "elements": [revoke]}]}  # the button she lacks
    assert (await scene.standin.click_ephemeral(RILEY, forged, "trust_revoke")).acked

    told = await eventually(lambda: scene.standin.ephemerals_for(RILEY)[1:], what="Riley told")
    assert told == ["Only who granted this trust, or the rule's approvers, may revoke it; nothing changed."]
    assert [g.id for g in await scene.store.grants.live()] == [grant.id]
    assert [e for e in await scene.store.audit.entries() if e["outcome"] == "revoked"] == []
    again = await scene.ask(REFUND_1235.format(amount=5000), requester=RILEY)
    assert "Refunded 5000 on order 1235" in await scene.answer(again)
    assert await cards_of(scene, again) == 0  # still trusted: no card


async def test_a_trust_click_too_late_to_decide_the_call_grants_nothing(scene):
    """Bob opens Approve & trust's dialog; Alice approves the call before he confirms. His
    approval decided nothing, so it grants nothing: the same call asks again."""
    first = await scene.ask(REFUND_1235.format(amount=5000), requester=RILEY)
    card = await scene.card(first)
    dialog = await scene.open_modal(BOB, card, "trust:0")
    await scene.standin.click(ALICE, card, "approve:0")
    assert "Refunded 5000 on order 1235" in await scene.answer(first)

    assert (await scene.standin.submit(BOB, dialog, {})).acked

    told = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="Bob told")
    assert told[0].startswith("Already decided: approved by <@U0ALICE>"), told
    assert await scene.store.grants.live() == []
    assert [e["outcome"] for e in await scene.store.audit.entries()] == ["decided"]  # Alice's alone
    again = await scene.ask(REFUND_1235.format(amount=5000), requester=RILEY)
    assert buttons(await scene.card(again))[:2] == ["approve:0", "trust:0"]  # asked again
