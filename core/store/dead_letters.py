"""Dead letters: entries no consumer could handle, parked per partition for an operator
(`signoff deadletters`): listed, found, replayed, dropped. Parking one is the consumers'
`dead_letter`, in `core.streams`. The Store's `dead_letters` room.
"""

from __future__ import annotations

from typing import Any

from core.keys import Keys, Partition


class DeadLetters:
    """Dead letters: listed, found, replayed, dropped."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys

    async def listed(self, partition: Partition) -> list[tuple[str, dict[str, str]]]:
        """Every dead letter of `partition`, oldest first: (entry id, fields)."""
        return list(await self.redis.xrange(partition.dead_letters))

    async def find(self, partition: Partition, entry_id: str) -> dict[str, str] | None:
        """The dead letter `entry_id` of `partition`, if there is one."""
        hits = await self.redis.xrange(partition.dead_letters, min=entry_id, max=entry_id)
        return dict(hits[0][1]) if hits else None

    async def replay(self, partition: Partition, entry_id: str, stream: str, message: dict[str, str]) -> str:
        """Put `message` back on `stream` (of the same partition) as a new entry and drop the
        dead letter, in one transaction; the new entry's id."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(stream, message)
            pipe.xdel(partition.dead_letters, entry_id)
            new_id, _ = await pipe.execute()
        return str(new_id)

    async def drop(self, partition: Partition, entry_id: str) -> bool:
        """Delete the dead letter; False when it was not there (any more)."""
        return bool(await self.redis.xdel(partition.dead_letters, entry_id))
