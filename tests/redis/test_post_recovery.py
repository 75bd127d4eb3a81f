"""A lost post found again within Slack's history limits (bot.slack.posts): an attempt that takes
a lapsed claim over reads the run's thread from when the first attempt claimed the post, a page
at a time, stopping at the message; it never makes more calls than the app's limit allows, waits
out Slack's Retry-After, and posts nothing when it could not look: not finding a message Slack
has would post it twice."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.clients import prompt_client
from bot.slack.pacing import Limiter
from bot.slack.posts import DISTRIBUTED, INTERNAL, HistoryLimits, HistoryUnavailable, PostClaim, Posts
from bot.slack.state import SlackState
from core.store import Store
from slack_standin import Message, SlackStandin
from tests.support.people import BOB

HISTORY_ROOM = "C0APPROVALS"
RUN_THREAD = "run-1"
CARD = "card:a1"


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandin]:
    slack = SlackStandin("secret")
    await slack.start()
    yield slack
    await slack.stop()


@pytest.fixture
async def readers() -> AsyncIterator[list[AsyncWebClient]]:
    made: list[AsyncWebClient] = []
    yield made
    for client in made:
        await client.close()  # type: ignore[attr-defined]


def posts_for(
    store: Store, standin: SlackStandin, readers: list[AsyncWebClient], history: HistoryLimits
) -> Posts:
    """Posts as the bot makes them: history read through the prompt client (no 429 waited out there)."""
    reader = prompt_client(standin.token, standin.base_url)
    readers.append(reader)
    client = AsyncWebClient(token=standin.token, base_url=standin.base_url)
    limits = Limiter(SlackState(store.redis, store.keys))
    return Posts(store.redis, store.keys, client, limits, store.cards, reader=reader, history=history)


def an_hour_of_talk(standin: SlackStandin, replies: int) -> str:
    """A run's thread whose root and `replies` replies were written an hour ago; the root's ts."""
    hour_ago = int(time.time()) - 3_600
    root = Message(HISTORY_ROOM, f"{hour_ago}.000001", "🤖 demo is working on this", [])
    standin.messages.append(root)
    for n in range(replies):
        standin.messages.append(
            Message(HISTORY_ROOM, f"{hour_ago + 1 + n}.000001", f"old {n}", [], root.ts, BOB)
        )
    return root.ts


async def lost_card(posts: Posts, root: str, before: int = 0, standin: SlackStandin | None = None) -> str:
    """An attempt claims the card, Slack takes it (after `before` replies from Bob), and the
    attempt fails before it learns the card's ts: its claim lapses. The card's ts."""
    state, claim = await posts.claim(RUN_THREAD, CARD, "attempt-a", 30_000)
    assert state is PostClaim.NEW
    for n in range(before):
        assert standin is not None
        standin.write(BOB, HISTORY_ROOM, f"meanwhile {n}", root)
    reply = await posts.post(
        HISTORY_ROOM,
        "Refund?",
        root,
        kind="approval",
        priority=None,
        post_id=CARD,
        thread_id=RUN_THREAD,
        approval_id="a1",
    )
    await posts.lapse(RUN_THREAD, CARD, claim)
    return str(reply["ts"])


def history_calls(standin: SlackStandin) -> list[tuple[int, int]]:
    """Each conversations.replies call: (the HTTP status Slack answered, the `limit` asked)."""
    return [(c.status, int(c.args["limit"])) for c in standin.calls if c.method == "conversations.replies"]


def cards(standin: SlackStandin) -> list[Message]:
    return [m for m in standin.messages if m.kind == "approval"]


async def test_a_lost_card_in_a_long_thread_is_found_with_one_call_within_a_distributed_apps_limit(
    store, standin, readers
):
    standin.distributed_app()
    root = an_hour_of_talk(standin, replies=40)  # nearly three pages before the card
    posts = posts_for(store, standin, readers, DISTRIBUTED)
    card = await lost_card(posts, root)
    for n in range(20):  # and more than a page after it
        standin.write(BOB, HISTORY_ROOM, f"after {n}", root)

    ts = await posts.once(RUN_THREAD, CARD, HISTORY_ROOM, "Refund?", root, kind="approval", approval_id="a1")

    assert ts == card and await posts.posted(RUN_THREAD, CARD) == card
    assert [m.ts for m in cards(standin)] == [card]  # not posted again
    assert history_calls(standin) == [(200, 15)]  # one call, 15 messages at most


async def test_a_look_the_limit_cannot_finish_in_time_posts_nothing_and_leaves_the_card_to_look_for(
    store, standin, readers
):
    standin.distributed_app()
    root = an_hour_of_talk(standin, replies=5)
    patient = HistoryLimits(page=15, pages=4, rate=DISTRIBUTED.rate, patience_s=2)  # under Slack's minute
    posts = posts_for(store, standin, readers, patient)
    await lost_card(posts, root, before=20, standin=standin)  # behind more than a page of its own time

    with pytest.raises(HistoryUnavailable):
        await posts.once(RUN_THREAD, CARD, HISTORY_ROOM, "Refund?", root, kind="approval", approval_id="a1")

    assert len(cards(standin)) == 1  # the lost one only: nothing posted blind
    assert history_calls(standin) == [(200, 15)]  # the second page waits for Slack's next minute
    state, _ = await posts.claim(RUN_THREAD, CARD, "attempt-c", 30_000)
    assert state is PostClaim.RETRY  # the next attempt looks again before posting


async def test_a_history_read_slack_rate_limits_waits_as_slack_asks_then_finds_the_card(
    store, standin, readers
):
    root = an_hour_of_talk(standin, replies=3)
    posts = posts_for(store, standin, readers, INTERNAL)
    card = await lost_card(posts, root)
    standin.fail_next("conversations.replies", 429, retry_after=1)

    ts = await posts.once(RUN_THREAD, CARD, HISTORY_ROOM, "Refund?", root, kind="approval", approval_id="a1")

    assert ts == card and [m.ts for m in cards(standin)] == [card]
    assert [status for status, _ in history_calls(standin)] == [429, 200]
