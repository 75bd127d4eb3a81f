"""Thread locks: one command (or one purge) works on a thread at a time, under a lease that
lapses if its holder dies. `Store`'s part that takes, renews, checks and releases them (one
script each); `Store` is the door, this is one of its rooms.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from core.keys import Keys


class Taken(IntEnum):
    """What `Locks.take_lock` did (false only for BUSY)."""

    BUSY = 0
    TAKEN = 1
    DONE = 2


class Locks:
    """The thread locks of `Store` (its scripts are registered there)."""

    redis: Any
    keys: Keys
    _take_lock: Any
    _release_lock: Any
    _renew_locks: Any
    _fence: Any

    async def take_lock(
        self, thread_id: str, token: str, lease_ms: int, unless_done: str | None = None
    ) -> Taken:
        """The thread's lock for `token`, for `lease_ms`: TAKEN, or BUSY while someone else holds
        it; with `unless_done` (a command id), DONE and nothing taken once that command is done
        (read with the lock: whoever held it before finished it)."""
        keys = [self.keys.thread_lock(thread_id)]
        if unless_done is not None:
            keys.append(self.keys.command_done(thread_id, unless_done))
        return Taken(int(await self._take_lock(keys=keys, args=[token, lease_ms])))

    async def release_lock(self, key: str, token: str) -> None:
        """Let go of `key` if `token` still holds it (a thread lock, or a Slack-thread binding
        whose value is `token`)."""
        await self._release_lock(keys=[key], args=[token])

    async def renew_locks(self, locks: Sequence[tuple[str, str]], lease_ms: int) -> list[int]:
        """Extend (lock key, token) pairs of one partition; the positions (0-based) of those lost."""
        gone = await self._renew_locks(
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
