"""The stand-in reads history as Slack does: conversations.history newest first, .replies a
thread root first, both paged with cursors within `oldest` / `latest`; an internal app's `limit`
is honoured, and an app commercially distributed outside the Marketplace gets at most 15
messages a call and one call a minute per method (a 429 with Retry-After), as Slack limits such
apps since May 29, 2025."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from slack_standin import SlackStandin
from tests.support.people import BOB
from tests.support.standin_bot import standin_for

READ_ROOM = "C0APPROVALS"


async def _quiet(request: web.Request) -> web.Response:
    return web.Response(text="")


@pytest.fixture
async def standin_client() -> AsyncIterator[tuple[SlackStandin, AsyncWebClient]]:
    async with standin_for(_quiet) as (standin, client):
        yield standin, client


def long_thread(standin: SlackStandin, replies: int) -> tuple[str, list[str]]:
    """A thread with `replies` replies from a person: its root's ts, and the replies' ts in order."""
    root = standin.write(BOB, READ_ROOM, "Who approved the refund?")
    return root.ts, [standin.write(BOB, READ_ROOM, f"reply {n}", root.ts).ts for n in range(replies)]


async def read_all(client: AsyncWebClient, method: str, **args: Any) -> tuple[list[str], int]:
    """Every message a method pages through (their ts, in its order), and how many calls it took."""
    seen: list[str] = []
    calls, cursor = 0, None
    while True:
        reply = await client.api_call(method, params={**args, **({"cursor": cursor} if cursor else {})})
        calls += 1
        seen += [m["ts"] for m in reply["messages"]]
        cursor = (reply.get("response_metadata") or {}).get("next_cursor")
        if not cursor:
            return seen, calls


async def test_an_internal_apps_history_pages_through_a_thread_once_in_order(standin_client):
    standin, client = standin_client
    root, replies = long_thread(standin, 24)

    seen, calls = await read_all(client, "conversations.replies", channel=READ_ROOM, ts=root, limit=10)

    assert seen == [root, *replies] and calls == 3  # root first, each once, 10 a page
    after = await client.conversations_replies(channel=READ_ROOM, ts=root, oldest=replies[19], limit=10)
    assert [m["ts"] for m in after["messages"]] == replies[20:]  # only what came after `oldest`


async def test_a_channels_history_is_newest_first_and_leaves_thread_replies_out(standin_client):
    standin, client = standin_client
    tops = [standin.write(BOB, READ_ROOM, f"top {n}").ts for n in range(7)]
    standin.write(BOB, READ_ROOM, "a reply", tops[0])

    seen, calls = await read_all(client, "conversations.history", channel=READ_ROOM, limit=3)

    assert seen == tops[::-1] and calls == 3


async def test_a_distributed_app_gets_15_messages_a_call_and_one_call_a_minute_per_method(standin_client):
    standin, client = standin_client
    root, replies = long_thread(standin, 30)
    standin.distributed_app()

    first = await client.conversations_replies(channel=READ_ROOM, ts=root, limit=200)
    with pytest.raises(SlackApiError) as again:
        await client.conversations_replies(
            channel=READ_ROOM, ts=root, cursor=first["response_metadata"]["next_cursor"]
        )
    history = await client.conversations_history(channel=READ_ROOM)  # another method: a limit of its own

    assert [m["ts"] for m in first["messages"]] == [root, *replies[:14]] and first["has_more"]
    assert again.value.response.status_code == 429
    assert 1 <= int(again.value.response.headers["Retry-After"]) <= 60
    assert history["ok"] and len(history["messages"]) == 1  # (the root: the replies are not history)
    with pytest.raises(SlackApiError) as history_again:
        await client.conversations_history(channel=READ_ROOM)
    assert history_again.value.response.status_code == 429


async def test_a_distributed_apps_limit_applies_even_where_other_rate_limits_are_off():
    standin = SlackStandin("secret", rate_limits=False, distributed=True)
    client = AsyncWebClient(token=standin.token, base_url=await standin.start())
    try:
        root, _ = long_thread(standin, 20)
        reply = await client.conversations_replies(channel=READ_ROOM, ts=root)  # no `limit`: Slack's default
        assert len(reply["messages"]) == 15
        with pytest.raises(SlackApiError) as again:
            await client.conversations_replies(channel=READ_ROOM, ts=root)
        assert again.value.response.status_code == 429
    finally:
        await standin.stop()
