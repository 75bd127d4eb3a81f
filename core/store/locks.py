"""Thread locks: one command (or one purge) works on a thread at a time, under a lease that
lapses if its holder dies; taken, renewed, checked (the fence before a tool or a save) and
released, one script each. The Store's `locks` room.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from core.keys import Keys

# Take a thread's lock, or find it ours already (a restart under the same consumer name): 1;
# 0 while another holds it; 2, taking nothing, when the command's done marker (KEYS[2]) exists.
TAKE_LOCK = """
local lock, done = KEYS[1], KEYS[2]  -- done: the command's done marker (optional)
local token, lease_ms = ARGV[1], ARGV[2]

if done and redis.call('EXISTS', done) == 1 then return 2 end
local holder = redis.call('GET', lock)
if holder == token then redis.call('PEXPIRE', lock, lease_ms) return 1 end
if holder then return 0 end
redis.call('SET', lock, token, 'PX', lease_ms)
return 1
"""


# Extend the thread locks still held; return the (1-based) indexes of the ones lost.
RENEW_LOCKS = """
-- KEYS: the locks
local lease_ms = ARGV[1]
-- ARGV[2..]: one token per lock

local lost = {}
for n = 1, #KEYS do
  if redis.call('GET', KEYS[n]) == ARGV[n + 1] then redis.call('PEXPIRE', KEYS[n], lease_ms)
  else lost[#lost + 1] = n end
end
return lost
"""


# Before a tool starts: is the thread's lock still `token`'s and the command's entry still
# `consumer`'s? If so both are extended (a fencing check: a runner frozen past its lease, whose
# work another runner took over, must not start the tool too). Lock and stream share a slot.
FENCE = """
local lock, stream = KEYS[1], KEYS[2]
local token, lease_ms, group, consumer, entry_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', lock) ~= token then return 0 end
local pending = redis.call('XPENDING', stream, group, entry_id, entry_id, 1)
if not pending[1] or pending[1][2] ~= consumer then return 0 end
redis.call('PEXPIRE', lock, lease_ms)
redis.call('XCLAIM', stream, group, consumer, 0, entry_id, 'JUSTID')
return 1
"""


# Delete a key if it still holds `token`: a lock, or a binding that no one has rebound.
RELEASE_LOCK = """
local lock = KEYS[1]
local token = ARGV[1]
if redis.call('GET', lock) == token then return redis.call('DEL', lock) end
return 0
"""


class Taken(IntEnum):
    """What `Locks.take` did (false only for BUSY)."""

    BUSY = 0
    TAKEN = 1
    DONE = 2


class Locks:
    """Thread locks: taken, renewed, checked, released."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys
        self._take = redis.register_script(TAKE_LOCK)
        self._release = redis.register_script(RELEASE_LOCK)
        self._renew = redis.register_script(RENEW_LOCKS)
        self._fence = redis.register_script(FENCE)

    async def take(self, thread_id: str, token: str, lease_ms: int, unless_done: str | None = None) -> Taken:
        """The thread's lock for `token`, for `lease_ms`: TAKEN, or BUSY while someone else holds
        it; with `unless_done` (a command id), DONE and nothing taken once that command is done
        (read with the lock: whoever held it before finished it)."""
        keys = [self.keys.thread_lock(thread_id)]
        if unless_done is not None:
            keys.append(self.keys.command_done(thread_id, unless_done))
        return Taken(int(await self._take(keys=keys, args=[token, lease_ms])))

    async def release(self, key: str, token: str) -> None:
        """Let go of `key` if `token` still holds it (a thread lock, or a Slack-thread binding
        whose value is `token`)."""
        await self._release(keys=[key], args=[token])

    async def renew(self, locks: Sequence[tuple[str, str]], lease_ms: int) -> list[int]:
        """Extend (lock key, token) pairs of one partition; the positions (0-based) of those lost."""
        gone = await self._renew(
            keys=[lock for lock, _ in locks], args=[lease_ms, *(token for _, token in locks)]
        )
        return [int(n) - 1 for n in gone]

    async def fence(
        self, thread_id: str, token: str, lease_ms: int, stream: str, group: str, consumer: str, entry_id: str
    ) -> bool:
        """Whether `token` still holds the thread's lock and `consumer` the entry's lease (both
        extended for `lease_ms` if so): the check before a tool starts or a checkpoint is saved."""
        return bool(
            await self._fence(
                keys=[self.keys.thread_lock(thread_id), stream],
                args=[token, lease_ms, group, consumer, entry_id],
            )
        )
