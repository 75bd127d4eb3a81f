"""The stand-in's modals behave as Slack's: what a click inside one sends, views.update's hash,
views.push's stack of three, a trigger used once within 3 s, and what Slack hides (a second
views.open from inside a modal answers ok and shows nothing)."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from signoff_demo.redis_server import free_port
from slack_standin import SlackStandin
from tests.support.people import ALICE
from tests.support.standin_bot import standin_for


def modal(title: str, *, button: str | None = None, metadata: str = "a1:0") -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": title}}]
    if button:
        blocks.append(
            {
                "type": "actions",
                "block_id": "decide:0:r0",
                "elements": [
                    {
                        "type": "button",
                        "action_id": button,
                        "value": "a1:0",
                        "text": {"type": "plain_text", "text": "Go"},
                    }
                ],
            }
        )
    return {
        "type": "modal",
        "callback_id": "review",
        "title": {"type": "plain_text", "text": title},
        "private_metadata": metadata,
        "blocks": blocks,
    }


class Bot:
    """A bot that records what Slack sent it and answers each click from a script."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []

    async def events(self, request: web.Request) -> web.Response:
        form = urllib.parse.parse_qs((await request.read()).decode())
        self.received.append(json.loads(form["payload"][0]))
        answer = self.answers.pop(0) if self.answers else None
        return web.json_response(answer) if answer else web.Response(text="")


@pytest.fixture
async def slack() -> AsyncIterator[tuple[SlackStandin, AsyncWebClient, Bot]]:
    bot = Bot()
    async with standin_for(bot.events) as (standin, client):
        yield standin, client, bot


async def opened(standin: SlackStandin, client: AsyncWebClient, view: dict[str, Any]) -> dict[str, Any]:
    """A modal opened from a click on a message (a trigger from outside any modal)."""
    reply = await client.views_open(trigger_id=standin._issue_trigger(ALICE), view=view)
    return standin.views[reply["view"]["id"]]


async def test_a_click_inside_a_modal_carries_the_view_and_no_channel(slack):
    standin, client, bot = slack
    root = await opened(standin, client, modal("Review", button="approve:0", metadata="a1:20"))

    interaction = await standin.click_in_view(ALICE, root, "approve:0")

    assert interaction.status == 200
    (payload,) = bot.received
    assert payload["container"] == {"type": "view", "view_id": root["id"]}
    assert "channel" not in payload and "message" not in payload and "response_url" not in payload
    view = payload["view"]
    assert (view["id"], view["hash"], view["private_metadata"]) == (root["id"], root["hash"], "a1:20")
    assert view["root_view_id"] == root["id"] and view["previous_view_id"] is None
    assert view["state"] == {"values": {}}
    assert payload["actions"][0]["block_id"] == "decide:0:r0"


async def test_views_update_with_a_stale_hash_is_a_hash_conflict_and_changes_nothing(slack):
    standin, client, _ = slack
    root = await opened(standin, client, modal("Page 1"))
    seen = root["hash"]

    first = await client.views_update(view_id=root["id"], hash=seen, view=modal("Page 2"))
    with pytest.raises(SlackApiError) as stale:
        await client.views_update(view_id=root["id"], hash=seen, view=modal("Page 3"))
    unconditional = await client.views_update(view_id=root["id"], view=modal("Page 4"))

    assert stale.value.response["error"] == "hash_conflict"
    assert first["view"]["hash"] != seen and unconditional["view"]["hash"] != first["view"]["hash"]
    assert standin.views[root["id"]]["title"]["text"] == "Page 4"
    with pytest.raises(SlackApiError) as missing:
        await client.views_update(view_id="V0NOSUCHVIEW", view=modal("x"))
    assert missing.value.response["error"] == "not_found"


async def test_views_push_stacks_three_views_at_most_from_inside_the_modal(slack):
    standin, client, bot = slack
    root = await opened(standin, client, modal("Review", button="edit:0"))

    with pytest.raises(SlackApiError) as outside:  # a trigger from a message click: no stack to push on
        await client.views_push(trigger_id=standin._issue_trigger(ALICE), view=modal("Edit"))
    await standin.click_in_view(ALICE, root, "edit:0")
    second = await client.views_push(
        trigger_id=bot.received[-1]["trigger_id"], view=modal("Edit", button="x")
    )
    pushed = standin.views[second["view"]["id"]]
    with pytest.raises(LookupError):  # the review is under the form now: not on screen
        await standin.click_in_view(ALICE, root, "edit:0")
    await standin.click_in_view(ALICE, pushed, "x")
    third = await client.views_push(trigger_id=bot.received[-1]["trigger_id"], view=modal("More", button="y"))
    top = standin.views[third["view"]["id"]]
    await standin.click_in_view(ALICE, top, "y")
    with pytest.raises(SlackApiError) as full:
        await client.views_push(trigger_id=bot.received[-1]["trigger_id"], view=modal("Too many"))

    assert outside.value.response["error"] == "invalid_trigger_id"
    assert full.value.response["error"] == "push_limit_reached"
    assert [v["id"] for v in standin.stack(root["id"])] == [root["id"], pushed["id"], top["id"]]
    assert (pushed["root_view_id"], pushed["previous_view_id"]) == (root["id"], root["id"])
    assert top["previous_view_id"] == pushed["id"]


async def test_a_trigger_works_once_and_for_three_seconds(slack):
    standin, client, bot = slack
    root = await opened(standin, client, modal("Review", button="edit:0"))
    await standin.click_in_view(ALICE, root, "edit:0")
    trigger = bot.received[-1]["trigger_id"]
    await client.views_push(trigger_id=trigger, view=modal("Edit"))
    stale = standin._issue_trigger(ALICE, root["id"])
    user, _, inside = standin._triggers[stale]
    standin._triggers[stale] = (user, time.monotonic() - 3.5, inside)  # issued 3.5 s ago

    errors = []
    for used in (trigger, stale):
        with pytest.raises(SlackApiError) as refused:
            await client.views_push(trigger_id=used, view=modal("Again"))
        errors.append(refused.value.response["error"])

    assert errors == ["invalid_trigger_id", "expired_trigger_id"]


async def test_views_open_from_inside_a_modal_answers_ok_and_shows_nothing(slack):
    standin, client, bot = slack
    root = await opened(standin, client, modal("Review", button="edit:0"))
    await standin.click_in_view(ALICE, root, "edit:0")

    reply = await client.views_open(trigger_id=bot.received[-1]["trigger_id"], view=modal("Edit"))

    assert reply["ok"]
    assert standin.on_screen(ALICE) == root  # what the person sees did not change
    assert not standin.views[reply["view"]["id"]]["open"]


async def test_a_pushed_view_submitted_or_closed_goes_back_to_the_view_under_it(slack):
    standin, client, bot = slack
    root = await opened(standin, client, modal("Review", button="edit:0"))
    form = {
        **modal("Edit"),
        "callback_id": "edit",
        "submit": {"type": "plain_text", "text": "Save"},
        "blocks": [
            {
                "type": "input",
                "block_id": "to",
                "label": {"type": "plain_text", "text": "to"},
                "element": {"type": "plain_text_input", "action_id": "value", "initial_value": "a@b.c"},
            }
        ],
    }
    for leave in ("submit", "close", "clear"):
        await standin.click_in_view(ALICE, root, "edit:0")
        pushed = await client.views_push(trigger_id=bot.received[-1]["trigger_id"], view=form)
        shown = standin.views[pushed["view"]["id"]]
        assert standin.on_screen(ALICE) == shown
        if leave == "close":
            standin.close_view(ALICE, shown)
        else:
            bot.answers.append({"response_action": "clear"} if leave == "clear" else {})
            await standin.submit(ALICE, shown, {"to": "x@y.z"})
            submitted = bot.received[-1]["view"]
            assert (submitted["root_view_id"], submitted["previous_view_id"]) == (root["id"], root["id"])
        if leave == "clear":
            assert standin.on_screen(ALICE) is None  # the whole modal closed
        else:
            assert standin.on_screen(ALICE) == root


async def test_the_page_clicks_inside_a_modal_and_its_back_button_returns_to_the_view_under():
    bot = Bot()
    app = web.Application()
    app.router.add_post("/slack/events", bot.events)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    standin = SlackStandin("secret", bot_url=f"http://127.0.0.1:{port}/slack/events")
    client = AsyncWebClient(token=standin.token, base_url=await standin.start(page=True))
    page = standin.base_url.removesuffix("api/")
    try:
        root = await opened(standin, client, modal("Review", button="edit:0"))
        async with aiohttp.ClientSession() as session:
            clicked = await session.post(
                f"{page}ui/click", json={"user": ALICE, "view_id": root["id"], "action_id": "edit:0"}
            )
            assert (await clicked.json())["ok"]
            pushed = await client.views_push(trigger_id=bot.received[-1]["trigger_id"], view=modal("Edit"))
            state = await (await session.get(f"{page}ui/state", params={"user": ALICE})).json()
            assert [v["id"] for v in state["views"]][-1] == pushed["view"]["id"]  # the top is shown
            await session.post(f"{page}ui/close", json={"user": ALICE, "view_id": pushed["view"]["id"]})
    finally:
        await standin.stop()
        await runner.cleanup()

    assert bot.received[-1]["container"] == {"type": "view", "view_id": root["id"]}
    assert standin.on_screen(ALICE) == root  # Back: the review again
