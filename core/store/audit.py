"""Reading streams across partitions, merged in order, and the audit of decisions (`Store`'s part
that reads; writing is the scripts', which chain it: `core.audit_chain`). `Store` is the door;
this is one of its rooms."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from redis.exceptions import ResponseError

from core.audit_chain import CHECKPOINT
from core.keys import BOTS_GROUP, RUNNERS_GROUP, Keys, Partition
from core.store.client import entry_order, merge_newest, merge_oldest

T = TypeVar("T")


class StreamFigures(NamedTuple):
    """What the queues hold, summed over the partitions (the metrics' gauges)."""

    pending: int  # approvals waiting
    dead_letters: int
    lag: dict[tuple[str, str], float]  # (stream, group) -> entries not yet delivered (NaN: unknown)
    unacked: dict[tuple[str, str], float]  # (stream, group) -> delivered, not acknowledged


class Audit:
    """The stream reads and the audit of `Store`."""

    redis: Any
    keys: Keys

    if TYPE_CHECKING:  # Store's own, which this is a part of

        async def each_partition(self, call: Callable[[Partition], Awaitable[T]]) -> list[T]: ...

    async def entries(
        self, stream: Callable[[Partition], str], newest: int | None = None, since: str = "-"
    ) -> list[tuple[str, dict[str, str]]]:
        """One stream's entries from every partition, merged: oldest first from `since`, or the
        `newest` of each partition, newest first."""
        if newest is not None:
            return merge_newest(
                await self.each_partition(lambda p: self.redis.xrevrange(stream(p), count=newest))
            )
        return merge_oldest(await self.each_partition(lambda p: self.redis.xrange(stream(p), min=since)))

    async def stream_length(self, stream: Callable[[Partition], str]) -> int:
        """Entries in one stream, over every partition."""
        return sum(await self.each_partition(lambda p: self.redis.xlen(stream(p))))

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

    async def audit_tail(self, partition: Partition) -> tuple[str | None, str | None]:
        """A partition's audit chain head and its newest entry's id, read together (None, None:
        no chain, no entries)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(partition.audit_head)
            pipe.xrevrange(partition.audit, count=1)
            head, newest = await pipe.execute()
        return head, (newest[0][0] if newest else None)

    async def decisions_by(self, user: str, limit: int = 10, scan: int = 500) -> list[dict[str, Any]]:
        """A person's latest decisions, newest first, from the audit streams."""
        found = []
        for _, fields in await self.entries(lambda p: p.audit, newest=scan):
            if fields.get("user") == user:
                found.append(
                    {**fields, "decision": json.loads(fields["decision"]), "at": float(fields["at"])}
                )
                if len(found) >= limit:
                    break
        return found

    async def audit_entries(self) -> list[dict[str, Any]]:
        """Every decision: who, when, the action, the decision and the original arguments (the
        chain's checkpoints, which are none, left out)."""
        entries = []
        for _, fields in await self.entries(lambda p: p.audit):
            if fields.get("outcome") == CHECKPOINT:
                continue
            entry: dict[str, Any] = dict(fields)
            entry.update(
                index=int(entry["index"]),
                at=float(entry["at"]),
                decision=json.loads(entry["decision"]),
                original_args=json.loads(entry["original_args"]),
            )
            entries.append(entry)
        return entries

    async def stream_figures(self) -> StreamFigures:
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
