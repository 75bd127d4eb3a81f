"""A post's claim (bot.slack.posts) as a streamed answer uses it: renewed by its own attempt
only, and what became of the post recorded only while the claim holds; and when the first attempt
that may have posted it claimed it, kept through takeovers (a lost post is looked for from then on)."""

from __future__ import annotations

import asyncio
import time

from bot.slack.pacing import Limiter
from bot.slack.posts import PostClaim, Posts, claimed_since
from bot.slack.state import SlackState


async def test_only_the_attempt_holding_a_claim_renews_it_or_records_the_post(store):
    posts = Posts(store.redis, store.keys, None, Limiter(SlackState(store.redis, store.keys)), store.cards)  # type: ignore[arg-type]
    taken, first = await posts.claim("t1", "answer:1", "attempt-a", 30_000)
    assert taken is PostClaim.NEW
    renewed, first = await posts.claim("t1", "answer:1", "attempt-a", 50)
    assert renewed is PostClaim.RENEWED  # its own claim, extended (here: shortened, to lapse)
    await asyncio.sleep(0.1)

    retry, second = await posts.claim("t1", "answer:1", "attempt-b", 30_000)
    assert retry is PostClaim.RETRY  # lapsed: another attempt takes over, and looks first
    again, _ = await posts.claim("t1", "answer:1", "attempt-a", 30_000)
    assert again is PostClaim.BUSY  # the first attempt's renewal fails: it stops
    assert await posts.save_claimed("t1", "answer:1", first, "1.000001") == second  # nothing written
    assert await posts.save_claimed("t1", "answer:1", second, "1.000002") is None
    assert await posts.posted("t1", "answer:1") == "1.000002"
    assert await posts.save_claimed("t1", "answer:1", second, "1.000003") == "1.000002"


async def test_a_claim_taken_over_keeps_when_the_first_attempt_that_may_have_posted_claimed_it(store):
    posts = Posts(store.redis, store.keys, None, Limiter(SlackState(store.redis, store.keys)), store.cards)  # type: ignore[arg-type]
    _, first = await posts.claim("t1", "card:1", "attempt-a", 30_000)
    since = claimed_since(first)
    assert since is not None and abs(since - time.time()) < 60
    await posts.lapse("t1", "card:1", first)  # its post failed: Slack may have taken it

    retry, second = await posts.claim("t1", "card:1", "attempt-b", 30_000)
    renewed, third = await posts.claim("t1", "card:1", "attempt-b", 30_000)
    assert (retry, renewed) == (PostClaim.RETRY, PostClaim.RENEWED)
    assert claimed_since(second) == claimed_since(third) == since  # the look reads from attempt a's claim on

    await store.redis.hset(store.keys.posts("t1"), "card:2", "claim:attempt-x:0")  # a claim of before
    older, taken = await posts.claim("t1", "card:2", "attempt-c", 30_000)
    assert older is PostClaim.RETRY and claimed_since(taken) is None  # unknown: read from the start
