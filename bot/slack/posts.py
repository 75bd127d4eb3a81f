"""A run's messages in Slack, each made at most once: the post-once protocol in one room.

Every message a run posts has a post id (its root, each card, each answer, each notice) and a
record in the run's post hash (`core.keys`' `posts`): the message's ts once posted, or the claim
of the attempt making it. An attempt waits its turn at the channel's rate, then claims the post
(`CLAIM_POST`); posts it; saves its ts (`SAVE_POST`: a copy saved first wins, and the late one is
deleted). An attempt that failed lets its claim lapse at once (`LAPSE_POST`), and the next one,
unsure whether Slack took the message, looks for it in the Slack thread by its message metadata
before posting again (`find`). Streams claim their post here too and record what became of it
while their claim holds (`SAVE_CLAIMED`). The same record keeps where a DM went (`where:<post>`),
the notices that asked people to act (`notice:<approval>:<post>`), and the DM session's status.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from enum import StrEnum
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.pacing import POST_RATE, URGENT, Limiter
from core.keys import Keys
from core.logs import get_logger
from core.store.cards import Cards
from core.store.lua import NOW

log = get_logger("slack")

# May this attempt make the post `post_id` now, or does it exist?
# Returns {"posted", ts} | {"busy", claim} | {"new"} | {"retry"} (an earlier claim lapsed: the
# message may exist in Slack already, look before posting again).
CLAIM_POST = (
    NOW
    + """
local posts = KEYS[1]
local post_id, owner, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- a claim is `claim:<owner>:<until, ms by Redis's clock>`; it is returned with the answer

local current = redis.call('HGET', posts, post_id)
if current and string.sub(current, 1, 6) ~= 'claim:' then return {'posted', current} end
if current then
  local holder, deadline = string.match(current, '^claim:(.*):(%d+)$')
  if holder ~= owner and tonumber(deadline) > now_ms then return {'busy', current} end
end
local claim = 'claim:' .. owner .. ':' .. string.format('%d', now_ms + lease_ms)
redis.call('HSET', posts, post_id, claim)
if current and string.match(current, '^claim:(.*):%d+$') == owner then return {'renewed', claim} end
if current then return {'retry', claim} end
return {'new', claim}
"""
)


# A poster that failed lets its claim lapse at once: Slack may have taken the message, so the
# next attempt looks before posting.
LAPSE_POST = """
local posts = KEYS[1]
local post_id, claim, lapsed = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', posts, post_id) == claim then redis.call('HSET', posts, post_id, lapsed) end
return 1
"""


# Record the ts of a post; returns {"saved"} or {"duplicate", ts of the copy saved first}.
SAVE_POST = """
local posts = KEYS[1]
local post_id, ts = ARGV[1], ARGV[2]

local current = redis.call('HGET', posts, post_id)
if current and string.sub(current, 1, 6) ~= 'claim:' and current ~= ts then return {'duplicate', current} end
redis.call('HSET', posts, post_id, ts)
return {'saved'}
"""


# Record what became of a post only while `claim` still holds it: returns {"saved"}, or
# {"lost", what holds it now} (another attempt's claim, a ts, a mark).
SAVE_CLAIMED = """
local posts = KEYS[1]
local post_id, claim, value = ARGV[1], ARGV[2], ARGV[3]

local current = redis.call('HGET', posts, post_id)
if current ~= claim then return {'lost', current or ''} end
redis.call('HSET', posts, post_id, value)
return {'saved'}
"""


class PostClaim(StrEnum):
    POSTED = "posted"  # the message exists (its ts is known)
    BUSY = "busy"  # another poster is making it now
    NEW = "new"  # nobody tried: post it
    RETRY = "retry"  # an earlier attempt lapsed: look in Slack before posting
    RENEWED = "renewed"  # this attempt's own claim, extended


class Posts:
    """A run's posts: made once, recorded, found again, the late copies deleted."""

    def __init__(
        self,
        redis: Any,
        keys: Keys,
        client: AsyncWebClient,
        limits: Limiter,
        cards: Cards,
        lease_ms: int = 30_000,
    ):
        self.redis, self.keys, self.client, self.limits, self.cards = redis, keys, client, limits, cards
        self.lease_ms = lease_ms
        self.owner = uuid.uuid4().hex[:12]  # this process, in post claims
        self._claim = redis.register_script(CLAIM_POST)
        self._save = redis.register_script(SAVE_POST)
        self._lapse = redis.register_script(LAPSE_POST)
        self._save_claimed = redis.register_script(SAVE_CLAIMED)

    # the protocol ----------------------------------------------------------------

    async def post(
        self,
        channel: str,
        text: str,
        thread_ts: str | None = None,
        blocks: list[Any] | None = None,
        kind: str | None = None,
        priority: int | None = URGENT,
        broadcast: bool = False,
        **payload: Any,
    ) -> Any:
        """Post a message; `kind` tags it with Slack message metadata (signoff_<kind>). Slack's
        answer: its `ts`, and the `channel` it went to (a person's id opens a DM).

        It waits its turn at the channel's rate limit (`priority`), unless the caller already did (None).
        """
        if priority is not None:
            await self.limits.wait(f"post:{channel}", POST_RATE, priority)
        metadata = {"event_type": f"signoff_{kind}", "event_payload": payload} if kind else None
        reply = await self.client.chat_postMessage(
            channel=channel,
            text=text,
            blocks=blocks,
            thread_ts=thread_ts,
            reply_broadcast=broadcast if thread_ts else None,
            unfurl_links=False,
            unfurl_media=False,
            metadata=metadata,
        )
        return reply

    async def once(
        self,
        thread_id: str,
        post_id: str,
        channel: str,
        text: str,
        thread_ts: str | None = None,
        blocks: list[Any] | None = None,
        kind: str = "note",
        priority: int = URGENT,
        broadcast: bool = False,
        **payload: Any,
    ) -> str:
        """Post the message `post_id` of a run unless it exists; returns its ts."""
        attempt = f"{self.owner}-{uuid.uuid4().hex[:8]}"
        while True:
            posted = await self.posted(thread_id, post_id)
            if posted:
                return posted
            # Wait for the channel's turn before claiming: the claim then covers the post itself,
            # not a queue behind other posts (a claim that lapses while queued invites a copy).
            await self.limits.wait(f"post:{channel}", POST_RATE, priority)
            state, value = await self.claim(thread_id, post_id, attempt, self.lease_ms)
            if state is PostClaim.POSTED:
                return value
            if state is PostClaim.BUSY:  # another poster is at it: wait for its ts, or its claim to lapse
                await asyncio.sleep(0.2)
                continue
            if state is PostClaim.RETRY:  # an earlier attempt may have reached Slack
                found = await self.find(channel, thread_ts, thread_id, post_id)
                if found:
                    log.warning("post_found_after_lapsed_claim", post_id=post_id, thread_id=thread_id)
                    return await self.keep(thread_id, post_id, channel, found)
            try:
                reply = await self.post(
                    channel,
                    text,
                    thread_ts,
                    blocks,
                    kind,
                    None,
                    broadcast,
                    post_id=post_id,
                    thread_id=thread_id,
                    **payload,
                )
            except BaseException:
                await asyncio.shield(self.lapse(thread_id, post_id, value))
                raise
            if reply.get("channel") and reply["channel"] != channel:  # a DM: where to edit it later
                await self.save(thread_id, f"where:{post_id}", str(reply["channel"]))
            if channel.startswith(("D", "U", "W")) and thread_ts:  # Slack dropped the thread's status
                await self.forget_session(thread_id)
                await self.cards.touch_status(thread_id)
            return await self.keep(thread_id, post_id, channel, str(reply["ts"]))

    async def keep(self, thread_id: str, post_id: str, channel: str, ts: str) -> str:
        """Record the post's ts; a copy saved first wins, and this one is deleted."""
        first = await self.save(thread_id, post_id, ts)
        if first is None:
            return ts
        log.warning("duplicate_post_deleted", post_id=post_id, thread_id=thread_id, ts=ts, kept=first)
        await self.delete(channel, ts)
        return first

    async def delete(self, channel: str, ts: str) -> None:
        try:
            await self.client.chat_delete(channel=channel, ts=ts)
        except SlackApiError as exc:
            if exc.response.get("error") != "message_not_found":
                raise

    async def find(self, channel: str, thread_ts: str | None, thread_id: str, post_id: str) -> str | None:
        """The ts of the run's message `post_id` in Slack (by its metadata); extra copies are deleted."""
        found: list[str] = []
        cursor = None
        while True:
            if thread_ts:
                reply = await self.client.conversations_replies(
                    channel=channel, ts=thread_ts, limit=200, include_all_metadata=True, cursor=cursor
                )
            else:
                reply = await self.client.conversations_history(
                    channel=channel,
                    limit=200,
                    include_all_metadata=True,
                    cursor=cursor,
                    oldest=str(time.time() - 86_400),
                )
            message: dict[str, Any]
            for message in reply.get("messages", []):
                said: dict[str, Any] = (message.get("metadata") or {}).get("event_payload") or {}
                if said.get("post_id") == post_id and said.get("thread_id") == thread_id:
                    found.append(message["ts"])
            cursor = (reply.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        found.sort(key=float)
        for extra in found[1:]:
            log.warning("duplicate_post_deleted", post_id=post_id, ts=extra, kept=found[0])
            await self.delete(channel, extra)
        return found[0] if found else None

    # the record ------------------------------------------------------------------

    async def claim(self, thread_id: str, post_id: str, owner: str, lease_ms: int) -> tuple[PostClaim, str]:
        """May `owner` (one attempt) make the post `post_id` now?

        Returns (state, the ts when POSTED, else the claim made or met).
        """
        reply = await self._claim(keys=[self.keys.posts(thread_id)], args=[post_id, owner, lease_ms])
        return PostClaim(reply[0]), reply[1]

    async def lapse(self, thread_id: str, post_id: str, claim: str) -> None:
        """Give up a claim after a failed post; the next attempt looks in Slack before posting."""
        lapsed = claim.rsplit(":", 1)[0] + ":0"
        await self._lapse(keys=[self.keys.posts(thread_id)], args=[post_id, claim, lapsed])

    async def save(self, thread_id: str, post_id: str, ts: str) -> str | None:
        """Record a post's ts; returns the ts of an earlier copy if someone saved one first."""
        reply = await self._save(keys=[self.keys.posts(thread_id)], args=[post_id, ts])
        return reply[1] if reply[0] == "duplicate" else None

    async def posted(self, thread_id: str, post_id: str) -> str | None:
        value = await self.redis.hget(self.keys.posts(thread_id), post_id)
        return posted_in({post_id: value}, post_id) if value else None

    async def save_claimed(self, thread_id: str, post_id: str, claim: str, value: str) -> str | None:
        """Record `value` for the post while `claim` still holds it (None); if it does not, what
        holds it now (another attempt's claim, a ts, a mark), and nothing is written."""
        reply = await self._save_claimed(keys=[self.keys.posts(thread_id)], args=[post_id, claim, value])
        return None if reply[0] == "saved" else str(reply[1])

    async def under(self, thread_id: str, prefix: str) -> dict[str, str]:
        """The run's recorded posts whose id starts with `prefix`: post id -> ts."""
        posts = await self.record(thread_id)
        return {k: ts for k in posts if k.startswith(prefix) and (ts := posted_in(posts, k))}

    async def record(self, thread_id: str) -> dict[str, str]:
        """All the run's post record holds, in one read: post id -> its ts (or a claim on it:
        `posted_in`), `notice:<approval>:<post id>` -> what a notice keeps (`notices_in`),
        `where:<post id>` -> the channel Slack opened for a DM."""
        fields: dict[str, str] = await self.redis.hgetall(self.keys.posts(thread_id))
        return fields

    # the DM session's status, kept with the run's posts --------------------------------

    async def session(self, thread_id: str) -> tuple[str, float]:
        """The status the run's DM agent thread was last given, and when (every replica's)."""
        value = await self.redis.hget(self.keys.posts(thread_id), "session")
        at, _, status = (value or "0|").partition("|")
        return status, float(at)

    async def set_session(self, thread_id: str, status: str) -> None:
        await self.redis.hset(self.keys.posts(thread_id), "session", f"{time.time():.3f}|{status}")

    async def forget_session(self, thread_id: str) -> None:
        """Slack dropped the run's DM status (the app posted in its thread): set it again."""
        await self.redis.hdel(self.keys.posts(thread_id), "session")


def posted_in(posts: dict[str, str], post_id: str) -> str | None:
    """The ts of the post `post_id` in a run's post record (`Posts.record`); None while it is
    only claimed or not made."""
    value = posts.get(post_id)
    return value if value and not value.startswith("claim:") else None


def notices_in(posts: dict[str, str], approval_id: str) -> dict[str, dict[str, str]]:
    """The notices that asked people to act on an approval, from a run's post record: post id ->
    where and what they keep."""
    prefix = f"notice:{approval_id}:"
    return {f.removeprefix(prefix): json.loads(v) for f, v in posts.items() if f.startswith(prefix)}
