"""The bot's own state in Redis besides its posts (`bot.slack.posts`: each made once):

* The run's status line (its ts) and the Slack thread each run is bound to; the graph a
  Slack thread, or a DM's next run, chose ("Use <graph>"); whether the app is installed with
  Slack's earlier assistant view (an assistant_thread_started came).
* The refresh lanes the runner and the listeners mark (cards first, then
  status lines; one pair per partition), taken here with a lease.
* Rate limiters shared by every replica, group members, and the dedupe keys
  of Slack's retried deliveries.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from core.keys import Keys, Partition
from core.store import now_ms
from core.store.lua import DONE_DUE, TAKE_DUE, sooner

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


NEXT = "next"  # (a DM's choice for its next thread, kept where a thread's root ts would be)
ASSISTANT_VIEW = "slack-app:assistant-view"


class SlackState:
    def __init__(self, client: Any, keys: Keys):
        self.redis: Any = client  # replies are str (decode_responses=True), which redis-py's types cannot say
        self.keys = keys
        self._take_due = client.register_script(TAKE_DUE)
        self.next_due_ms: int | None = None  # when the lanes' next mark comes due, as `take_due` last saw
        self._done_due = client.register_script(DONE_DUE)
        self._rate = client.register_script(RATE)

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

    async def choose_graph(self, channel: str, root_ts: str, graph: str, ttl_s: int = 7 * 86_400) -> None:
        """The runs this Slack thread starts use `graph` (an agent thread's "Use <graph>")."""
        await self.redis.set(self.keys.slack_thread_graph(channel, root_ts), graph, ex=ttl_s)

    async def chosen_graph(self, channel: str, root_ts: str) -> str | None:
        return await self.redis.get(self.keys.slack_thread_graph(channel, root_ts))

    async def choose_next_graph(self, dm: str, graph: str, ttl_s: int = 3_600) -> None:
        """The next run started in the DM `dm`, in whichever thread, uses `graph` (within the hour):
        in Slack's agent view each message in the Messages tab starts its own thread."""
        await self.redis.set(self.keys.slack_thread_graph(dm, NEXT), graph, ex=ttl_s)

    async def take_next_graph(self, dm: str) -> str | None:
        """The graph `choose_next_graph` chose for the DM, once (a run starting there takes it)."""
        return await self.redis.getdel(self.keys.slack_thread_graph(dm, NEXT))

    async def saw_assistant_view(self, ttl_s: int = 86_400) -> None:
        """An assistant_thread_started came: the app is installed with Slack's earlier assistant
        view, whose threads get their prompts as they start (for a day after the last one)."""
        await self.redis.set(self.keys.dedupe(ASSISTANT_VIEW), "1", ex=ttl_s)

    async def assistant_view(self) -> bool:
        return bool(await self.redis.exists(self.keys.dedupe(ASSISTANT_VIEW)))

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
                taken += list(zip(reply[:-1:2], reply[1:-1:2], strict=True))
                nexts.append(reply[-1])
                if len(taken) >= share:
                    break
            return taken

        nexts: list[str] = []
        found = await asyncio.gather(*(take(p) for p in self.keys.partitions))
        self.next_due_ms = None
        for said in nexts:
            self.next_due_ms = sooner(self.next_due_ms, said)
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
