"""Bookkeeping for runs on a LangGraph Agent Server (`core.agent_server`): which threads have a run
Signoff sent and has not seen end, and telling a run's end once (`TELL_ONCE`). The Store's
`remote` room."""

from __future__ import annotations

import time
from typing import Any

from core.keys import Keys
from core.messages import RunFailed, RunFinished, encode
from core.store.client import each_partition

# The end of an Agent Server run is told once, whoever sees it (the runner that waited for it,
# the webhook, the poll, on any replica): the mark and the event in one step.
TELL_ONCE = """
local told, events = KEYS[1], KEYS[2]
local ttl, event = ARGV[1], ARGV[2]
if not redis.call('SET', told, '1', 'NX', 'EX', ttl) then return 0 end
redis.call('XADD', events, '*', 'event', event)
return 1
"""


class AgentServerRuns:
    """Runs on an Agent Server: sent, seen to end, their end told once."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._tell_once = redis.register_script(TELL_ONCE)

    async def sent(self, thread_id: str) -> None:
        """A run Signoff sent to an Agent Server is going on in the thread."""
        await self.redis.zadd(self.keys.of(thread_id).remote_active, {thread_id: time.time()})

    async def seen(self, thread_id: str) -> None:
        """How the thread's last run ended has been seen."""
        await self.redis.zrem(self.keys.of(thread_id).remote_active, thread_id)

    async def unseen(self, sent_before: float) -> list[str]:
        """Threads with a run sent before `sent_before` whose end nobody has seen yet."""
        found = await each_partition(
            self.keys, lambda p: self.redis.zrangebyscore(p.remote_active, 0, sent_before)
        )
        return [thread_id for threads in found for thread_id in threads]

    async def tell_once(self, run_id: str, event: RunFinished | RunFailed, ttl_seconds: int) -> bool:
        """Queue how an Agent Server run ended, unless someone did (True when this call did)."""
        return bool(
            await self._tell_once(
                keys=[self.keys.remote_told(event.thread_id, run_id), self.keys.of(event.thread_id).events],
                args=[ttl_seconds, encode(event)["event"]],
            )
        )
