"""The clickable page clicks what a person's screen shows, as Slack's clients do: a card that
changed since it was drawn still sends its old button's action, and the bot decides what that
means (refuses it). Nothing in the stand-in crashes on a stale screen."""

from __future__ import annotations

import json
import urllib.parse

import aiohttp
from aiohttp import web

from tests.support.standin_bot import standin_for

BUTTON = {
    "type": "button",
    "action_id": "approve:0",
    "value": "a1:0",
    "text": {"type": "plain_text", "text": "Approve"},
}


async def test_a_click_on_a_card_changed_since_it_was_drawn_still_reaches_the_bot():
    received: list[dict] = []

    async def bot(request: web.Request) -> web.Response:
        form = urllib.parse.parse_qs((await request.read()).decode())
        received.append(json.loads(form["payload"][0]))
        return web.Response(text="")

    async with standin_for(bot, page=True) as (standin, _):
        page = standin.base_url.removesuffix("api/")
        drawn = [{"type": "actions", "block_id": "decide:0:r0", "elements": [BUTTON]}]
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {standin.token}"}
            posted = await (
                await session.post(
                    f"{standin.base_url}chat.postMessage",
                    json={"channel": "C0X", "text": "card", "blocks": drawn},
                    headers=headers,
                )
            ).json()
            await session.post(  # the card changes: its buttons are gone (it expired)
                f"{standin.base_url}chat.update",
                json={
                    "channel": "C0X",
                    "ts": posted["ts"],
                    "text": "expired",
                    "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Expired"}}],
                },
                headers=headers,
            )
            click = {"user": "U0ALICE", "channel": "C0X", "ts": posted["ts"], "action_id": "approve:0"}
            stale = await (
                await session.post(f"{page.rstrip('/')}/ui/click", json={**click, "blocks": drawn})
            ).json()
            fresh = await (await session.post(f"{page.rstrip('/')}/ui/click", json=click)).json()

    assert stale == {"ok": True}
    assert [(p["actions"][0]["action_id"], p["actions"][0]["block_id"]) for p in received] == [
        ("approve:0", "decide:0:r0")
    ]
    assert fresh == {"ok": False, "error": "no_such_element"}  # a screen with no such button sends nothing


async def test_a_slash_commands_ack_text_shows_as_slack_shows_it_to_the_one_who_typed_it():
    async def bot(request: web.Request) -> web.Response:
        form = urllib.parse.parse_qs((await request.read()).decode())
        text = form.get("text", [""])[0]
        if text == "":
            return web.Response(text="*Signoff* runs agents that ask before risky actions.")
        if text == "go":
            return web.json_response({"text": "Started *demo*: approvals will be in its thread."})
        return web.Response(text="")  # an empty ack: nothing shows

    async with standin_for(bot, page=True) as (standin, _):
        page = standin.base_url.removesuffix("api/").rstrip("/")
        async with aiohttp.ClientSession() as session:
            for typed in ("/signoff", "/signoff go", "/signoff pending"):
                said = {"user": "U0ALICE", "channel": "C0X", "text": typed}
                assert (await (await session.post(f"{page}/ui/say", json=said)).json())["ok"]
            state = await (
                await session.get(f"{page}/ui/state", params={"user": "U0ALICE", "channel": "C0X"})
            ).json()
            others = await (
                await session.get(f"{page}/ui/state", params={"user": "U0BOB", "channel": "C0X"})
            ).json()

    assert [e["text"] for e in state["ephemerals"]] == [
        "*Signoff* runs agents that ask before risky actions.",
        "Started *demo*: approvals will be in its thread.",
    ]
    assert others["ephemerals"] == []  # only the one who typed it sees it
