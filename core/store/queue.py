"""The streams Signoff queues its messages on, one of each per partition (see `core.keys`): a
command (start, resume, continue) on `commands`, for the runners; an event (a pause needs a card,
a run finished or failed, a set was refused) on `events`, for the bots; each message in its
thread's partition, so one thread's keep their order. Also a command's done marker, and reads
that merge a stream's partitions in order (the consumer groups' own calls are `core.streams`').
The Store's `queue` room.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from redis.exceptions import ResponseError

from core.keys import BOTS_GROUP, RUNNERS_GROUP, Keys, Partition
from core.messages import encode
from core.store.client import each_partition, entry_order, merge_newest, merge_oldest


class StreamFigures(NamedTuple):
    """What the queues hold, summed over the partitions (the metrics' gauges)."""

    pending: int  # approvals waiting
    dead_letters: int
    lag: dict[tuple[str, str], float]  # (stream, group) -> entries not yet delivered (NaN: unknown)
    unacked: dict[tuple[str, str], float]  # (stream, group) -> delivered, not acknowledged


class Queue:
    """Messages queued on the streams, and the streams read back."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys

    async def send(self, message: Any) -> str:
        """Queue a command (on `commands`) or an event (on `events`) of its thread's partition."""
        fields = encode(message)
        partition = self.keys.of(message.thread_id)
        return await self.redis.xadd(partition.commands if "command" in fields else partition.events, fields)

    async def mark_done(self, thread_id: str, command_id: str, ttl_seconds: int = 7 * 86_400) -> None:
        await self.redis.set(self.keys.command_done(thread_id, command_id), "1", ex=ttl_seconds)

    async def is_done(self, thread_id: str, command_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.command_done(thread_id, command_id)))

    async def entries(
        self, stream: Callable[[Partition], str], newest: int | None = None, since: str = "-"
    ) -> list[tuple[str, dict[str, str]]]:
        """One stream's entries from every partition, merged: oldest first from `since`, or the
        `newest` of each partition, newest first."""
        if newest is not None:
            return merge_newest(
                await each_partition(self.keys, lambda p: self.redis.xrevrange(stream(p), count=newest))
            )
        return merge_oldest(
            await each_partition(self.keys, lambda p: self.redis.xrange(stream(p), min=since))
        )

    async def length(self, stream: Callable[[Partition], str]) -> int:
        """Entries in one stream, over every partition."""
        return sum(await each_partition(self.keys, lambda p: self.redis.xlen(stream(p))))

    async def paged(
        self, stream: Callable[[Partition], str], page: int = 500
    ) -> AsyncIterator[tuple[str, dict[str, str]]]:
        """One stream's entries from every partition, oldest first, read a page at a time."""
        async for _, entry_id, fields in self.paged_by_partition(stream, page):
            yield entry_id, fields

    async def paged_by_partition(
        self, stream: Callable[[Partition], str], page: int = 500, until: dict[int, str] | None = None
    ) -> AsyncIterator[tuple[int, str, dict[str, str]]]:
        """`paged`, each entry with its partition's index; `until`: a partition's last entry id
        to read (a partition not in it: to its end)."""
        starts = {p.index: "-" for p in self.keys.partitions}
        buffers: dict[int, list[tuple[str, dict[str, str]]]] = {}
        until = until or {}
        while starts or any(buffers.values()):
            for index in [i for i in starts if not buffers.get(i)]:
                found = await self.redis.xrange(
                    stream(self.keys.partitions[index]),
                    min=starts[index],
                    max=until.get(index, "+"),
                    count=page,
                )
                buffers[index] = list(found)
                if len(found) < page:
                    del starts[index]  # nothing after this page
                else:
                    ms, seq = entry_order(found[-1][0])
                    starts[index] = f"{ms}-{seq + 1}"
            ready = [i for i, b in buffers.items() if b]
            if not ready:
                return
            index = min(ready, key=lambda i: entry_order(buffers[i][0][0]))
            entry_id, fields = buffers[index].pop(0)
            yield index, entry_id, fields

    async def figures(self) -> StreamFigures:
        """Pending approvals, dead letters, and each consumer group's lag and unacknowledged
        entries, summed over the partitions."""
        pending = dead = 0
        lag: dict[tuple[str, str], float] = {}
        unacked: dict[tuple[str, str], float] = {}
        for partition in self.keys.partitions:
            pending += await self.redis.zcard(partition.pending_all)
            dead += await self.redis.xlen(partition.dead_letters)
            for stream, group in ((partition.commands, RUNNERS_GROUP), (partition.events, BOTS_GROUP)):
                try:
                    groups = await self.redis.xinfo_groups(stream)
                except ResponseError:  # no stream yet (a master away raises: the scrape says Redis is down)
                    continue
                for info in groups:
                    if info["name"] == group:
                        label = (stream.rpartition(":")[2], group)
                        behind = info.get("lag")  # None: Redis cannot tell (after deletions); not zero
                        lag[label] = lag.get(label, 0) + (float("nan") if behind is None else behind)
                        unacked[label] = unacked.get(label, 0) + (info.get("pending") or 0)
        return StreamFigures(pending, dead, lag, unacked)
