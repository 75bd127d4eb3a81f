"""The stand-in serves the response_url of every click and slash command as Slack does: a replace
keeps the message where it is (ts, thread, metadata), a delete removes it, an answer without either
is an ephemeral message for the person who clicked, and each URL works 5 times within 30 minutes.
The bot's side is slack_sdk's own webhook client, so what it sees is what the bot would see."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from slack_standin import RESPONSE_URL_TTL_S, Message, SlackStandin
from tests.support.people import ALICE, BOB
from tests.support.standin_bot import standin_for

ROOM = "C0APPROVALS"
DECIDED = [{"type": "section", "text": {"type": "mrkdwn", "text": "Approved by Alice"}}]
SIGNOFF_METADATA = {"event_type": "signoff_approval", "event_payload": {"approval": "a1"}}


def card_blocks(text: str = "Refund 1,200 to ACME?") -> list[dict[str, Any]]:
    button = {
        "type": "button",
        "action_id": "approve:0",
        "value": "a1:0",
        "style": "primary",
        "text": {"type": "plain_text", "text": "Approve"},
    }
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {"type": "actions", "block_id": "decide:0:r0", "elements": [button]},
    ]


class ResponderBot:
    """A bot that answers each interaction through its response_url (when given an answer),
    then acks; it keeps what Slack sent and what the response_url said back."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.heard: list[tuple[int, str]] = []

    async def events(self, request: web.Request) -> web.Response:
        form = urllib.parse.parse_qs(await request.text())
        payload = json.loads(form["payload"][0]) if "payload" in form else {k: v[0] for k, v in form.items()}
        self.payloads.append(payload)
        if self.answers:
            said = await AsyncWebhookClient(payload["response_url"]).send_dict(self.answers.pop(0))
            self.heard.append((said.status_code, said.body))
        return web.Response(text="")


@pytest.fixture
async def responding() -> AsyncIterator[tuple[SlackStandin, AsyncWebClient, ResponderBot]]:
    bot = ResponderBot()
    async with standin_for(bot.events) as (standin, client):
        yield standin, client, bot


async def card_in_thread(standin: SlackStandin, client: AsyncWebClient) -> Message:
    """An approval card posted by the bot in a thread, with its metadata."""
    root = await client.chat_postMessage(channel=ROOM, text="Riley asks for a refund")
    posted = await client.chat_postMessage(
        channel=ROOM,
        text="Refund 1,200 to ACME?",
        blocks=card_blocks(),
        thread_ts=root["ts"],
        metadata=SIGNOFF_METADATA,
    )
    message = standin.message(ROOM, posted["ts"])
    assert message is not None
    return message


def answer_to(standin: SlackStandin, message: Message, user: str = ALICE) -> AsyncWebhookClient:
    """The bot's client for the response_url of `user`'s click on `message`."""
    payload = standin.block_action_payload(user, message, "approve:0")
    return AsyncWebhookClient(payload["response_url"])


async def test_a_replace_changes_the_card_in_place_and_keeps_its_thread_and_metadata(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    ts, thread_ts = card.ts, card.thread_ts

    said = await answer_to(standin, card).send(replace_original=True, text="Approved", blocks=DECIDED)

    assert (said.status_code, said.body) == (200, "ok")
    replies = await client.conversations_replies(channel=ROOM, ts=thread_ts, include_all_metadata=True)
    shown = next(m for m in replies["messages"] if m["ts"] == ts)
    assert (shown["text"], shown["blocks"], shown["thread_ts"]) == ("Approved", DECIDED, thread_ts)
    assert shown["metadata"] == SIGNOFF_METADATA
    assert standin.cards() == []  # the buttons are gone: nobody can click Approve again
    assert [c.status for c in standin.calls if c.method == "response_url"] == [200]
    assert [source for _, source in card.changes] == ["response_url"]


async def test_a_replace_is_the_whole_message_so_text_alone_drops_the_buttons(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)

    said = await answer_to(standin, card).send(replace_original=True, text="Approved by Alice")

    assert (said.status_code, said.body) == (200, "ok")
    assert (card.text, card.blocks) == ("Approved by Alice", [])
    assert standin.cards() == []


async def test_a_delete_removes_the_card_and_a_later_replace_finds_nothing(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    webhook = answer_to(standin, card)

    deleted = await webhook.send(delete_original=True)
    replaced = await webhook.send(replace_original=True, text="Approved")

    assert (deleted.status_code, deleted.body) == (200, "ok")
    assert standin.message(ROOM, card.ts) is None and standin.deleted == [card]
    assert (replaced.status_code, replaced.body) == (404, "message_not_found")
    assert card.text == "Refund 1,200 to ACME?"


async def test_an_answer_with_neither_flag_is_only_for_the_person_who_clicked(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    before = len(standin.messages)

    said = await answer_to(standin, card, ALICE).send(text="You approved step 1 of 2")

    assert (said.status_code, said.body) == (200, "ok")
    assert standin.ephemerals_for(ALICE) == ["You approved step 1 of 2"]
    assert standin.ephemerals_for(BOB) == []
    assert standin.ephemerals[0]["thread_ts"] == card.thread_ts  # shown in the thread she clicked in
    assert len(standin.messages) == before and card.text == "Refund 1,200 to ACME?"


async def test_in_channel_answers_go_to_the_thread_named_else_the_channel(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    webhook = answer_to(standin, card)

    # slack_sdk's send() has no thread_ts: a bot names the thread through send_dict
    await webhook.send_dict(
        {"text": "Alice approved", "response_type": "in_channel", "thread_ts": card.thread_ts}
    )
    await webhook.send(text="Refund approved", response_type="in_channel")

    in_thread, top_level = standin.messages[-2:]
    assert (in_thread.text, in_thread.thread_ts) == ("Alice approved", card.thread_ts)
    assert (top_level.text, top_level.thread_ts) == ("Refund approved", None)
    assert standin.ephemerals == []


async def test_a_response_url_works_five_times_then_says_used_url(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    webhook = answer_to(standin, card)

    said = [await webhook.send(replace_original=True, text=f"Update {n}") for n in range(1, 7)]

    assert [(s.status_code, s.body) for s in said] == [(200, "ok")] * 5 + [(404, "used_url")]
    assert card.text == "Update 5" and card.updates == 5
    assert [c.status for c in standin.calls if c.method == "response_url"] == [200] * 5 + [404]


async def test_a_response_url_expires_thirty_minutes_after_the_click(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    webhook = answer_to(standin, card)
    (issued,) = standin.response_urls.values()

    issued.issued -= RESPONSE_URL_TTL_S - 10  # 29 min 50 s after the click: still good
    in_time = await webhook.send(replace_original=True, text="Approved")
    issued.issued -= 11  # 30 min 1 s
    late = await webhook.send(replace_original=True, text="Approved again")

    assert RESPONSE_URL_TTL_S == 30 * 60
    assert (in_time.status_code, in_time.body) == (200, "ok")
    assert (late.status_code, late.body) == (404, "expired_url")
    assert card.text == "Approved"


async def test_a_lowered_ttl_expires_urls_sooner(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    standin.response_url_ttl = 0.0

    late = await answer_to(standin, card).send(replace_original=True, text="Approved")

    assert (late.status_code, late.body) == (404, "expired_url")
    assert card.text == "Refund 1,200 to ACME?" and card.changes == []


async def test_bad_answers_are_refused_and_do_not_use_the_url_up(responding):
    standin, client, _ = responding
    card = await card_in_thread(standin, client)
    webhook = answer_to(standin, card)
    too_long = [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]

    bad_blocks = await webhook.send(replace_original=True, text="Approved", blocks=too_long)
    empty = await webhook.send(replace_original=True)
    async with aiohttp.ClientSession() as session:
        async with session.post(webhook.url, data="text=hi") as response:
            not_json = (response.status, await response.text())
        async with session.post(webhook.url.rsplit("/", 1)[0] + "/0000", json={"text": "hi"}) as response:
            unknown = (response.status, await response.text())

    assert (bad_blocks.status_code, bad_blocks.body) == (400, "invalid_blocks")
    assert (empty.status_code, empty.body) == (400, "missing_text_or_fallback_or_attachments")
    assert not_json == (400, "invalid_payload")
    assert unknown == (404, "no_service")
    assert card.blocks == card_blocks() and card.changes == []
    assert [u.uses for u in standin.response_urls.values()] == [0]


async def test_changes_say_what_changed_the_card_and_when_after_the_click(responding):
    standin, client, bot = responding
    card = await card_in_thread(standin, client)
    await client.chat_update(channel=ROOM, ts=card.ts, text="Refund 1,200 (edited)", blocks=card_blocks())
    bot.answers.append({"replace_original": True, "text": "Approved", "blocks": DECIDED})

    click = await standin.click(ALICE, card, "approve:0")

    assert click.acked and bot.heard == [(200, "ok")]
    assert [source for _, source in card.changes] == ["chat.update", "response_url"]
    assert card.changes[0][0] < click.sent_at < card.changes[1][0]
    assert click.response_url == bot.payloads[0]["response_url"]
    assert card.updates == 2


async def test_an_ephemeral_card_is_replaced_through_the_response_url_of_its_click(responding):
    standin, client, bot = responding
    await client.chat_postEphemeral(channel=ROOM, user=ALICE, text="Approve?", blocks=card_blocks())
    bot.answers.append({"replace_original": True, "text": "Done"})

    await standin.click_ephemeral(ALICE, standin.ephemerals[0], "approve:0")

    assert bot.heard == [(200, "ok")]
    assert standin.ephemerals_for(ALICE) == ["Done"] and standin.ephemerals[0]["blocks"] == []


async def test_a_slash_command_answer_is_what_its_url_later_replaces(responding):
    standin, _, bot = responding
    bot.answers.append({"response_type": "in_channel", "text": "Working on it"})

    command = await standin.slash(ALICE, ROOM, "trust list")
    webhook = AsyncWebhookClient(str(command.response_url))
    replaced = await webhook.send(replace_original=True, text="3 grants", response_type="in_channel")

    assert bot.heard == [(200, "ok")] and "channel_id" in bot.payloads[0]
    assert (replaced.status_code, replaced.body) == (200, "ok")
    assert [m.text for m in standin.messages] == ["3 grants"]
    assert [source for _, source in standin.messages[0].changes] == ["response_url"]


async def test_a_click_inside_a_modal_has_no_response_url(responding):
    standin, client, _ = responding
    view = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Review"},
        "blocks": card_blocks(),
    }
    opened = await client.views_open(trigger_id=standin._issue_trigger(ALICE), view=view)

    payload = standin.view_action_payload(ALICE, standin.views[opened["view"]["id"]], "approve:0")

    assert "response_url" not in payload and standin.response_urls == {}
