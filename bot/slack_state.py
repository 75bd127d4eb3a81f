"""The bot's own state in Redis: what it posted to Slack, where, and what it still owes.

* Posts: for each run, post id -> the message's ts once posted, or the poster's
  claim while it posts (see `SlackIO.post_once`).
* The run's status line (its ts) and the Slack thread each run is bound to.
* The refresh lanes the runner and the listeners mark (cards first, then
  status lines; one pair per partition), taken here with a lease.
* Rate limiters shared by every replica, group members, and the dedupe keys
  of Slack's retried deliveries.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from enum import StrEnum
from typing import Any

from core.keys import Keys, Partition
from core.store import now_ms
from core.store.lua import DONE_DUE, NOW, TAKE_DUE

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


# GCRA rate limiter on Redis time, shared by every replica. Returns 0 when a call may go
# now, else how many ms to wait.
RATE = """
local limiter = KEYS[1]
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', limiter) or '0')
if tat < now then tat = now end
local wait = tat - interval * (burst - 1) - now
if wait > 0 then return wait end
redis.call('SET', limiter, tat + interval, 'PX', math.ceil(tat + interval - now + interval * burst) + 1000)
return 0
"""


class PostClaim(StrEnum):
    POSTED = "posted"  # the message exists (its ts is known)
    BUSY = "busy"  # another poster is making it now
    NEW = "new"  # nobody tried: post it
    RETRY = "retry"  # an earlier attempt lapsed: look in Slack before posting
    RENEWED = "renewed"  # this attempt's own claim, extended


class SlackState:
    def __init__(self, client: Any, keys: Keys):
        self.redis: Any = client  # replies are str (decode_responses=True), which redis-py's types cannot say
        self.keys = keys
        self._claim_post = client.register_script(CLAIM_POST)
        self._save_post = client.register_script(SAVE_POST)
        self._lapse_post = client.register_script(LAPSE_POST)
        self._save_claimed = client.register_script(SAVE_CLAIMED)
        self._take_due = client.register_script(TAKE_DUE)
        self._done_due = client.register_script(DONE_DUE)
        self._rate = client.register_script(RATE)

    # posts ----------------------------------------------------------------------

    async def claim_post(
        self, thread_id: str, post_id: str, owner: str, lease_ms: int
    ) -> tuple[PostClaim, str]:
        """May `owner` (one attempt) make the post `post_id` now?

        Returns (state, the ts when POSTED, else the claim made or met).
        """
        reply = await self._claim_post(keys=[self.keys.posts(thread_id)], args=[post_id, owner, lease_ms])
        return PostClaim(reply[0]), reply[1]

    async def lapse_post(self, thread_id: str, post_id: str, claim: str) -> None:
        """Give up a claim after a failed post; the next attempt looks in Slack before posting."""
        lapsed = claim.rsplit(":", 1)[0] + ":0"
        await self._lapse_post(keys=[self.keys.posts(thread_id)], args=[post_id, claim, lapsed])

    async def save_post(self, thread_id: str, post_id: str, ts: str) -> str | None:
        """Record a post's ts; returns the ts of an earlier copy if someone saved one first."""
        reply = await self._save_post(keys=[self.keys.posts(thread_id)], args=[post_id, ts])
        return reply[1] if reply[0] == "duplicate" else None

    async def posted(self, thread_id: str, post_id: str) -> str | None:
        value = await self.redis.hget(self.keys.posts(thread_id), post_id)
        return posted_in({post_id: value}, post_id) if value else None

    async def save_claimed(self, thread_id: str, post_id: str, claim: str, value: str) -> str | None:
        """Record `value` for the post while `claim` still holds it (None); if it does not, what
        holds it now (another attempt's claim, a ts, a mark), and nothing is written."""
        reply = await self._save_claimed(keys=[self.keys.posts(thread_id)], args=[post_id, claim, value])
        return None if reply[0] == "saved" else str(reply[1])

    async def forget_session(self, thread_id: str) -> None:
        """Slack dropped the run's DM status (the app posted in its thread): set it again."""
        await self.redis.hdel(self.keys.posts(thread_id), "session")

    async def posts_under(self, thread_id: str, prefix: str) -> dict[str, str]:
        """The run's recorded posts whose id starts with `prefix`: post id -> ts."""
        posts = await self.posts(thread_id)
        return {k: ts for k in posts if k.startswith(prefix) and (ts := posted_in(posts, k))}

    async def posts(self, thread_id: str) -> dict[str, str]:
        """All the run's post record holds, in one read: post id -> its ts (or a claim on it:
        `posted_in`), `notice:<approval>:<post id>` -> what a notice keeps (`notices_in`),
        `where:<post id>` -> the channel Slack opened for a DM."""
        fields: dict[str, str] = await self.redis.hgetall(self.keys.posts(thread_id))
        return fields

    # a run's Slack thread -----------------------------------------------------------

    async def status_line(self, thread_id: str) -> str | None:
        return await self.redis.hget(self.keys.run_state(thread_id), "status_ts")

    async def set_status_line(self, thread_id: str, ts: str) -> None:
        await self.redis.hset(self.keys.run_state(thread_id), "status_ts", ts)

    async def bind_thread(self, channel: str, root_ts: str, thread_id: str) -> None:
        """Messages in this Slack thread continue that LangGraph thread."""
        await self.redis.set(self.keys.slack_thread(channel, root_ts), thread_id)

    async def thread_for(self, channel: str, root_ts: str) -> str | None:
        return await self.redis.get(self.keys.slack_thread(channel, root_ts))

    async def session(self, thread_id: str) -> tuple[str, float]:
        """The status the run's DM agent thread was last given, and when (every replica's)."""
        value = await self.redis.hget(self.keys.posts(thread_id), "session")
        at, _, status = (value or "0|").partition("|")
        return status, float(at)

    async def set_session(self, thread_id: str, status: str) -> None:
        await self.redis.hset(self.keys.posts(thread_id), "session", f"{time.time():.3f}|{status}")

    async def choose_graph(self, channel: str, root_ts: str, graph: str, ttl_s: int = 7 * 86_400) -> None:
        """The runs this Slack thread starts use `graph` (an agent thread's "Use <graph>")."""
        await self.redis.set(self.keys.slack_thread_graph(channel, root_ts), graph, ex=ttl_s)

    async def chosen_graph(self, channel: str, root_ts: str) -> str | None:
        return await self.redis.get(self.keys.slack_thread_graph(channel, root_ts))

    # cosmetic refreshes -----------------------------------------------------------

    async def take_due(
        self, lease_ms: int, count: int = 10, lanes: tuple[str, ...] = ("card", "status")
    ) -> list[tuple[str, str]]:
        """(item, token) pairs due now in `lanes`, cards first, held for `lease_ms`: each
        partition gives up to its share of `count`, rounded up (so with more partitions than
        `count`, one each), all at once, so none is taken and left unused."""
        share = max(1, -(-count // self.keys.count))

        async def take(partition: Partition) -> list[tuple[str, str]]:
            taken: list[tuple[str, str]] = []
            for lane in lanes:
                reply = await self._take_due(
                    keys=[partition.refresh_due(lane), partition.refresh_claims],
                    args=[now_ms(), lease_ms, share - len(taken)],
                )
                taken += list(zip(reply[::2], reply[1::2], strict=True))
                if len(taken) >= share:
                    break
            return taken

        found = await asyncio.gather(*(take(p) for p in self.keys.partitions))
        cards = [pair for taken in found for pair in taken if pair[0].startswith("card:")]
        return cards + [pair for taken in found for pair in taken if not pair[0].startswith("card:")]

    async def done_due(self, item: str, token: str, retry_at_ms: int | None = None) -> None:
        lane = item.partition(":")[0]
        partition = self.keys.of_item(item)
        await self._done_due(
            keys=[partition.refresh_due(lane), partition.refresh_claims],
            args=[item, token, "" if retry_at_ms is None else retry_at_ms],
        )

    # shared limits, groups, dedupe --------------------------------------------------

    async def rate_wait(self, name: str, per_second: float, burst: int) -> float:
        """0 if a call limited to `per_second` (shared by all replicas) may go now, else seconds to wait."""
        waited = await self._rate(keys=[self.keys.rate(name)], args=[max(1, round(1000 / per_second)), burst])
        return int(waited) / 1000

    async def groups(self, groups: list[str]) -> dict[str, tuple[list[str], float, bool]]:
        """What any replica last read of each group, by group id: (members, when, gone from Slack)."""
        stored = await self.redis.hmget(self.keys.groups, groups) if groups else []
        found = {}
        for group, raw in zip(groups, stored, strict=True):
            if raw:
                record = json.loads(raw)
                found[group] = (record["members"], float(record.get("at", 0)), bool(record.get("gone")))
        return found

    async def save_group(self, group: str, members: list[str], at: float, gone: bool = False) -> None:
        record = {"members": members, "at": at, **({"gone": True} if gone else {})}
        await self.redis.hset(self.keys.groups, group, json.dumps(record))

    async def my_turn_to_refresh_groups(self, every_s: float) -> bool:
        """True for one replica per `every_s`: it asks Slack, the others read Redis."""
        return bool(await self.redis.set(self.keys.groups_refresh, "1", nx=True, ex=max(1, int(every_s))))

    async def once(self, name: str, ttl_seconds: int = 86_400) -> bool:
        """True the first time `name` is seen (dedupe of Slack's retried deliveries). The mark is
        this call's own token, so a SET that redis-py sent again (a cluster client resends a
        command whose connection was lost) is still known for this call's own."""
        token = uuid.uuid4().hex
        return await self.claim(name, token, ttl_seconds) == token

    async def claim(self, name: str, value: str, ttl_seconds: int = 86_400) -> str:
        """`value` if this is the first claim of `name`, else the first claim's value."""
        key = self.keys.dedupe(name)
        for _ in range(3):
            if await self.redis.set(key, value, nx=True, ex=ttl_seconds):
                return value
            first = await self.redis.get(key)
            if first is not None:
                return str(first)
        raise RuntimeError(f"claim {name!r} kept expiring")

    async def forget(self, name: str) -> None:
        await self.redis.delete(self.keys.dedupe(name))


def posted_in(posts: dict[str, str], post_id: str) -> str | None:
    """The ts of the post `post_id` in a run's post record (`SlackState.posts`); None while it
    is only claimed or not made."""
    value = posts.get(post_id)
    return value if value and not value.startswith("claim:") else None


def notices_in(posts: dict[str, str], approval_id: str) -> dict[str, dict[str, str]]:
    """The notices that asked people to act on an approval, from a run's post record: post id ->
    where and what they keep."""
    prefix = f"notice:{approval_id}:"
    return {f.removeprefix(prefix): json.loads(v) for f, v in posts.items() if f.startswith(prefix)}
