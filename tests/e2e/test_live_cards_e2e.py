"""What approvers see keeps up: stand-in Slack (its rate limits on), the real bot and runner, Redis.

A clicked card (or a form opened from it) changes through the click's response_url, not in
chat.update's queue; a run that pauses once and finishes costs four channel posts (root, card,
approvers' notice, answer); in a channel whose post budget earlier runs spent, a card is held
back, and its deadlines count from when it is visible: an escalation due before it is announced
once, after it, and an expired card loses its buttons before the thread hears of the expiry."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.files import write_policy
from tests.support.harness import ASK_EMAIL, buttons, card_text, eventually, start_scene
from tests.support.people import ALICE, LEAD, RILEY

FILLERS = 6  # runs started first in the same channel: a root and a card each, at ~1 post a second


def policy(tmp_path, rule: str) -> dict[str, str]:
    text = '[defaults]\napprovers = ["U0ALICE"]\n[[rules]]\ntools = ["send_email"]\n' + rule
    return {"SIGNOFF_POLICY": write_policy(tmp_path, text)}


async def spend_the_channel(scene) -> list[str]:
    """Runs whose posts take the channel's budget first (each pauses on a delete)."""
    return [await scene.ask(f"Delete /srv/old-{n}.csv", requester=RILEY) for n in range(FILLERS)]


def posts_of(scene, thread_id: str) -> list[str]:
    """The posts Slack accepted for one run, by kind: chat.postMessage, and chat.stopStream for
    a streamed answer (one message, with its metadata from the stop)."""
    kinds = []
    for call in scene.standin.calls:
        metadata = call.args.get("metadata") or {}
        payload = metadata.get("event_payload", {}) if isinstance(metadata, dict) else {}
        posted = call.method in ("chat.postMessage", "chat.stopStream") and call.reply.get("ok")
        if posted and payload.get("thread_id") == thread_id:
            kinds.append(str(metadata.get("event_type", "")).removeprefix("signoff_"))
    return kinds


@pytest.mark.parametrize("notify", ["mention", "none"])
async def test_a_clicked_card_changes_through_its_response_url_and_a_run_costs_four_posts(
    redis_url, tmp_path, notify
):
    async with start_scene(redis_url, "demo", env=policy(tmp_path, f'notify = "{notify}"\n')) as scene:
        thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
        card = await scene.card(thread_id)

        clicked = await scene.standin.click(ALICE, card, "approve:0")

        assert clicked.acked
        await scene.answer(thread_id)
        changed = await scene.card_shows(card, "▶️ The agent carries on")
        assert buttons(changed) == [] and "Approved by" in card_text(changed)
        assert {source for _, source in changed.changes} == {"response_url"}  # none waited for chat.update
        assert [
            c for c in scene.standin.calls if c.method == "chat.update" and c.args.get("ts") == card.ts
        ] == []
        # the root (which carries the status), the card (sent to the channel too when it pings:
        # the notification lands on it), the outcome told to the requester, the answer
        assert posts_of(scene, thread_id) == ["run", "approval", "outcome", "answer"]
        assert card.broadcast == (notify == "mention")
        assert [m.ts for m in scene.standin.notifications_for(ALICE)] == (
            [card.ts] if notify == "mention" else []
        )
        # once decided, the card's text (what her notification shows) says so
        assert scene.fresh(card).text.startswith("✅ Approved by Alice: send email")


async def test_a_form_opened_from_the_card_changes_it_through_the_same_response_url(redis_url, tmp_path):
    async with start_scene(redis_url, "demo", env=policy(tmp_path, "")) as scene:
        thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
        card = await scene.card(thread_id)
        modal = await scene.open_modal(ALICE, card, "reject:0")

        assert (await scene.standin.submit(ALICE, modal, {"reason": "Not this quarter"})).acked

        changed = await scene.card_shows(card, "Rejected by")
        assert buttons(changed) == [] and {source for _, source in changed.changes} == {"response_url"}


async def test_an_escalation_due_before_its_held_back_card_is_announced_once_after_it(redis_url, tmp_path):
    rule = 'escalate_after = "2s"\nescalate_to = ["U0LEAD"]\n'
    async with start_scene(redis_url, "demo", env=policy(tmp_path, rule)) as scene:
        await spend_the_channel(scene)
        thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
        card = await scene.card(thread_id, timeout=40)
        approval = (await scene.store.approvals.of_thread(thread_id))[0]
        assert approval.shown_at - approval.created_at > 2  # held back past the escalation's due time

        heard = await eventually(
            lambda: [m for m in scene.standin.notifications_for(LEAD) if "⏫" in m.text],
            timeout=30,
            what="escalation",
        )

        assert float(heard[0].ts) > float(card.ts)  # after the card: the lead can open it
        assert "Escalated after 2s" in heard[0].text  # counted from when the card was visible
        await scene.standin.click(LEAD, card, "approve:0")  # the escalation lets the lead decide
        await scene.answer(thread_id, timeout=40)
        escalations = [
            m
            for m in scene.standin.messages
            if str((m.metadata or {}).get("event_payload", {}).get("post_id", "")).startswith("escalate:")
        ]
        assert len(escalations) == 1  # announced once (and changed to the outcome once decided)


async def test_an_expired_card_loses_its_buttons_before_the_thread_hears(redis_url, tmp_path):
    async with start_scene(redis_url, "demo", env=policy(tmp_path, 'timeout = "2s"\n')) as scene:
        await spend_the_channel(scene)
        thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
        card = await scene.card(thread_id, timeout=40)
        seen: list[str] = []

        async def watch() -> bool:
            if not buttons(scene.fresh(card)) and "card" not in seen:
                seen.append("card")
            if (
                await scene.says(thread_id, "<@U0RILEY> ⌛ Expired: no decision in time")
                and "thread" not in seen
            ):
                seen.append("thread")
            return len(seen) == 2

        await eventually(watch, timeout=40, what="the card and the thread to say it expired")

        assert seen == ["card", "thread"]  # the card first: nobody taps a button that no longer counts
        assert "Expired" in card_text(scene.fresh(card))


async def test_when_slack_refuses_the_response_url_the_card_changes_through_chat_update(redis_url, tmp_path):
    async with start_scene(redis_url, "demo", env=policy(tmp_path, "")) as scene:
        scene.standin.response_url_ttl = 0  # every response_url has expired by the time it is used
        thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
        card = await scene.card(thread_id)

        await scene.standin.click(ALICE, card, "approve:0")

        changed = await scene.card_shows(card, "Approved by")
        assert buttons(changed) == [] and {source for _, source in changed.changes} == {"chat.update"}
        refused = [c for c in scene.standin.calls if c.method == "response_url"]
        assert refused and {c.status for c in refused} == {404}


async def test_a_click_whose_response_url_is_not_slack_s_gets_nothing_there_and_the_card_changes_all_the_same(
    redis_url, tmp_path
):
    """A signed click whose response_url points elsewhere (a listener of the test's, beside the
    stand-in on another port): the bot sends nothing there, neither the card nor its arguments;
    the card changes through chat.update."""
    heard: list[str] = []

    async def listener(request: web.Request) -> web.Response:
        heard.append(f"{request.method} {request.path} {await request.text()}")
        return web.Response(text="ok")

    elsewhere = web.Application()
    elsewhere.router.add_route("*", "/{path:.*}", listener)
    async with TestServer(elsewhere, host="127.0.0.1") as server:
        async with start_scene(redis_url, "demo", env=policy(tmp_path, "")) as scene:
            thread_id = await scene.ask(ASK_EMAIL, requester=RILEY)
            card = await scene.card(thread_id)
            click = scene.standin.block_action_payload(ALICE, card, "approve:0")
            click["response_url"] = str(server.make_url("/actions/T0STANDIN/1/abcdef"))

            assert (await scene.standin.send(click)).acked  # signed, as Slack signs what it sends

            await scene.answer(thread_id)
            changed = await scene.card_shows(card, "▶️ The agent carries on")
            assert buttons(changed) == [] and "Approved by" in card_text(changed)
            assert {source for _, source in changed.changes} == {"chat.update"}
        assert heard == []
