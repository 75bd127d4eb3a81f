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

Looking reads Slack's history, which Slack limits by the app's kind (docs/slack-platform.md,
"Reading history"): Tier 3 for an internal or a Marketplace app, one call a minute and 15
messages a call for one commercially distributed outside the Marketplace (`HistoryLimits`). So
a claim keeps when the first attempt that may have posted made it (`claim:<owner>:<until>:<since>`,
carried over by each attempt that takes a lapsed claim over), and the look reads only what
came after, a page at a time, stopping at the message. It waits its turn at the limit every
replica shares, and Slack's Retry-After, in the post's own task (never the ack's, never another
card's), renewing its claim; out of patience it says nothing rather than "not there", and the
post is tried again later: not finding a message Slack has means posting it twice.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.pacing import POST_RATE, URGENT, Limiter, retry_after
from core.keys import Keys
from core.logs import get_logger
from core.outages import TryLater
from core.store.cards import Cards
from core.store.lua import NOW

log = get_logger("slack")

# May this attempt make the post `post_id` now, or does it exist?
# Returns {"posted", ts} | {"busy", claim} | {"new"} | {"retry"} (an earlier claim lapsed: the
# message may exist in Slack already, look before posting again) | {"renewed"}, with the claim.
CLAIM_POST = (
    NOW
    + """
local posts = KEYS[1]
local post_id, owner, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- a claim is `claim:<owner>:<until>:<since>` (ms by Redis's clock): since, when the first attempt
-- that may have posted the message claimed it (kept by each attempt that takes its claim over)

local current = redis.call('HGET', posts, post_id)
if current and string.sub(current, 1, 6) ~= 'claim:' then return {'posted', current} end
local since = now_ms
if current then
  local holder, deadline, started = string.match(current, '^claim:(.*):(%d+):(%d+)$')
  if not holder then  -- a claim made before claims kept their start: read from the thread's start
    holder, deadline = string.match(current, '^claim:(.*):(%d+)$')
    started = '0'
  end
  if holder ~= owner and tonumber(deadline) > now_ms then return {'busy', current} end
  since = tonumber(started)
end
local claim = 'claim:' .. owner .. ':' .. string.format('%d', now_ms + lease_ms) .. ':' .. string.format('%d', since)
redis.call('HSET', posts, post_id, claim)
if current and string.match(current, '^claim:(.*):%d+:%d+$') == owner then return {'renewed', claim} end
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


@dataclass(frozen=True)
class HistoryLimits:
    """How a lost post is looked for in Slack's history (conversations.replies, .history), within
    what Slack allows the app (docs/slack-platform.md, "Reading history")."""

    page: int  # messages asked for in one call (Slack's `limit`)
    pages: int  # calls one look makes at most
    rate: tuple[float, int]  # calls a second and burst, per method, shared by every replica
    patience_s: float  # how long one look may wait, in all, for its turns and Slack's Retry-After
    skew_s: float = 60.0  # how far Slack's clock (a message's ts) may be behind Redis's (a claim's)


# An internal app (what a team creates from deploy/slack-manifest.yml) and a Marketplace app:
# Tier 3, 50+ calls a minute.
INTERNAL = HistoryLimits(page=50, pages=6, rate=(0.8, 5), patience_s=60)
# An app commercially distributed outside the Marketplace: one call a minute, 15 messages a call.
DISTRIBUTED = HistoryLimits(page=15, pages=4, rate=(1 / 60, 1), patience_s=300)


def history_limits(distribution: Literal["internal", "marketplace", "distributed"]) -> HistoryLimits:
    """The history limits of an app distributed so (`SLACK_APP_DISTRIBUTION`)."""
    return DISTRIBUTED if distribution == "distributed" else INTERNAL


class ClaimLost(RuntimeError):
    """Another attempt holds the post now: this one stops where it is."""


class HistoryUnavailable(TryLater):
    """Slack's history could not be read in time (its limit spent, Retry-After longer than the
    patience left): whether the message exists is unknown, so it is not posted now."""


class Posts:
    """A run's posts: made once, recorded, found again, the late copies deleted.

    `reader` reads Slack's history: a client that does not wait out 429s itself (`find` does,
    within its limits); `history`: those limits."""

    def __init__(
        self,
        redis: Any,
        keys: Keys,
        client: AsyncWebClient,
        limits: Limiter,
        cards: Cards,
        lease_ms: int = 30_000,
        reader: AsyncWebClient | None = None,
        history: HistoryLimits = INTERNAL,
    ):
        self.redis, self.keys, self.client, self.limits, self.cards = redis, keys, client, limits, cards
        self.lease_ms = lease_ms
        self.reader = reader or client
        self.history = history
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
                try:
                    found, value = await self.look(channel, thread_ts, thread_id, post_id, attempt, value)
                except ClaimLost:  # another attempt holds it now: it looks, or posted
                    continue
                if found:
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

    async def look(
        self, channel: str, thread_ts: str | None, thread_id: str, post_id: str, attempt: str, claim: str
    ) -> tuple[str | None, str]:
        """An earlier attempt's claim lapsed: its post, if it reached Slack, and the claim now held
        (`ClaimLost`: another attempt holds it; anything else lapses the claim, and the next
        attempt looks again)."""
        held = Held(self, thread_id, post_id, attempt, claim)
        try:
            found = await self.find(channel, thread_ts, thread_id, post_id, claimed_since(claim), held)
        except ClaimLost:
            raise
        except BaseException:  # not known to be missing
            await asyncio.shield(self.lapse(thread_id, post_id, held.claim))
            raise
        if found:
            log.warning("post_found_after_lapsed_claim", post_id=post_id, thread_id=thread_id)
        return found, held.claim

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

    async def find(
        self,
        channel: str,
        thread_ts: str | None,
        thread_id: str,
        post_id: str,
        since: float | None = None,
        hold: Callable[[], Awaitable[None]] | None = None,
    ) -> str | None:
        """The ts of the run's message `post_id` in Slack (by its metadata), or None when it is not
        there; the other copies it sees are deleted.

        It reads only what it needs, within the app's `HistoryLimits`: the run's thread
        (conversations.replies, oldest first: the API has no other order) when the message is a
        reply, else the channel (conversations.history, newest first); only what came after
        `since` (the claim's, `claimed_since`); a page at a time, stopping at the message, and
        at most `pages` of them (past those, it says None: a copy then posted is a duplicate,
        which beats a card never posted, and is logged). Each call waits its turn at the limit
        every replica shares, and Slack's Retry-After; then `hold` keeps the caller's claim
        (ClaimLost: another attempt holds it). HistoryUnavailable when its patience runs out
        first."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        args: dict[str, Any] = {"channel": channel, "limit": self.history.page, "include_all_metadata": True}
        if thread_ts:
            args["ts"] = thread_ts
        if since:
            args["oldest"] = f"{since - self.history.skew_s:.6f}"
        until = time.monotonic() + self.history.patience_s
        found: list[str] = []
        for _ in range(self.history.pages):
            reply = await self._read(method, args, until, hold)
            message: dict[str, Any]
            for message in reply.get("messages", []):
                said: dict[str, Any] = (message.get("metadata") or {}).get("event_payload") or {}
                if said.get("post_id") == post_id and said.get("thread_id") == thread_id:
                    found.append(message["ts"])
            args["cursor"] = (reply.get("response_metadata") or {}).get("next_cursor")
            if found or not args["cursor"]:
                break
        else:
            log.warning(
                "post_search_cut_short", post_id=post_id, thread_id=thread_id, pages=self.history.pages
            )
        found.sort(key=float)
        for extra in found[1:]:
            log.warning("duplicate_post_deleted", post_id=post_id, ts=extra, kept=found[0])
            await self.delete(channel, extra)
        return found[0] if found else None

    async def _read(
        self, method: str, args: dict[str, Any], until: float, hold: Callable[[], Awaitable[None]] | None
    ) -> Any:
        """One call of a history method, at its turn (shared by every replica), Slack's
        Retry-After waited out; HistoryUnavailable past `until` (time.monotonic())."""
        call = self.reader.conversations_replies if "ts" in args else self.reader.conversations_history
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise HistoryUnavailable(f"{method}: Slack's history limit is spent for now")
            try:
                await asyncio.wait_for(self.limits.wait(f"history:{method}", self.history.rate, URGENT), left)
            except TimeoutError:
                raise HistoryUnavailable(f"{method}: no turn at Slack's history limit in time") from None
            if hold is not None:  # the claim kept (it may have lapsed while this waited)
                await hold()
            try:
                return await call(**{k: v for k, v in args.items() if v is not None})
            except SlackApiError as exc:
                wait = retry_after(exc)
                if wait is None:
                    raise
                log.info("history_rate_limited", method=method, retry_after=wait)
                if time.monotonic() + wait >= until:
                    raise HistoryUnavailable(f"{method}: Slack asked to wait {wait:.0f} s") from exc
                await asyncio.sleep(wait)

    # the record ------------------------------------------------------------------

    async def claim(self, thread_id: str, post_id: str, owner: str, lease_ms: int) -> tuple[PostClaim, str]:
        """May `owner` (one attempt) make the post `post_id` now?

        Returns (state, the ts when POSTED, else the claim made or met).
        """
        reply = await self._claim(keys=[self.keys.posts(thread_id)], args=[post_id, owner, lease_ms])
        return PostClaim(reply[0]), reply[1]

    async def lapse(self, thread_id: str, post_id: str, claim: str) -> None:
        """Give up a claim after a failed post; the next attempt looks in Slack before posting."""
        head, _, since = claim.rsplit(":", 2)  # (its deadline gone, its start kept)
        await self._lapse(keys=[self.keys.posts(thread_id)], args=[post_id, claim, f"{head}:0:{since}"])

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


class Held:
    """One attempt's claim on a post, kept while it looks in Slack (`Posts.find`'s `hold`)."""

    def __init__(self, posts: Posts, thread_id: str, post_id: str, attempt: str, claim: str):
        self.posts, self.thread_id, self.post_id, self.attempt = posts, thread_id, post_id, attempt
        self.claim = claim

    async def __call__(self) -> None:
        """Extend the claim; ClaimLost when another attempt holds the post now (or it is posted).
        (A claim that lapsed meanwhile and nobody took is this attempt's again, still looking.)"""
        state, claim = await self.posts.claim(self.thread_id, self.post_id, self.attempt, self.posts.lease_ms)
        if state not in (PostClaim.RENEWED, PostClaim.RETRY):
            raise ClaimLost(self.post_id)
        self.claim = claim


def claimed_since(claim: str) -> float | None:
    """When (epoch seconds, Redis's clock) the first attempt that may have posted a message
    claimed it, from a claim `Posts.claim` returned; None if unknown (read from the start)."""
    since = claim.rsplit(":", 1)[-1] if claim.count(":") >= 3 else ""
    return int(since) / 1000 if since.isdigit() and int(since) > 0 else None


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
