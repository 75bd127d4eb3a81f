"""Moving the keys of the layout before partitions into partition 0 of the partitioned one
(`signoff migrate`, with every process stopped). The Store's `migration` room.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ResponseError

from core.keys import BOTS_GROUP, LAYOUT_VERSION, RUNNERS_GROUP, Keys

# Keys of no run: the same name in both layouts.
UNMOVED = ("slackthread:", "dedupe:", "rate:", "groups", "layout")


class Migration:
    """The move of the keys of the layout before partitions."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys

    @property
    def on_a_cluster(self) -> bool:
        return isinstance(self.redis, AsyncRedisCluster)

    async def record(self) -> dict[str, Any] | None:
        """The layout Redis holds (`Layout.check` writes it), or None before any."""
        raw = await self.redis.get(self.keys.layout)
        return None if raw is None else dict(json.loads(raw))

    async def mark_started(self) -> None:
        """Keep every process from starting until the migration ends (`Layout.check` refuses)."""
        await self.redis.set(self.keys.layout, json.dumps({"version": 1, "migrating": True}))

    async def mark_done(self) -> None:
        await self.redis.set(self.keys.layout, json.dumps({"version": LAYOUT_VERSION, "partitions": 1}))

    async def old_keys(self) -> AsyncIterator[tuple[str, bool]]:
        """The keys of the layout before partitions: (key, whether it is a stream)."""
        prefix = self.keys.prefix
        async for key in self.redis.scan_iter(match=f"{prefix}:*", count=500):
            rest = key[len(prefix) + 1 :]
            if rest.startswith("{") or rest.startswith(UNMOVED):
                continue
            yield key, await self.redis.type(key) == "stream"

    async def move(self, key: str, new: str) -> bool:
        """Rename `key` to `new` (streams keep their groups and pending entries); dead letters
        are written again, each once even if cut off, with the stream they came from renamed.
        False when `new` exists already (nothing moved)."""
        prefix = self.keys.prefix
        if key.endswith(":deadletters"):  # their entries name the stream they came from: renamed too
            for entry_id, fields in await self.redis.xrange(key):
                stream = fields.get("stream", "")
                if stream.startswith(f"{prefix}:") and not stream[len(prefix) + 1 :].startswith("{"):
                    stream = f"{self.keys.partitions[0].base}:{stream[len(prefix) + 1 :]}"
                async with self.redis.pipeline(transaction=True) as pipe:  # moved once, even if cut off
                    pipe.xadd(new, {**fields, "stream": stream})
                    pipe.xdel(key, entry_id)
                    await pipe.execute()
            await self.redis.delete(key)
            return True
        return bool(await self.redis.renamenx(key, new))

    async def busy_old_consumers(self, quiet_s: float) -> list[str]:
        """Consumers of the old streams seen within `quiet_s` (a bot or runner still running)."""
        prefix, busy = self.keys.prefix, []
        for stream, group in ((f"{prefix}:commands", RUNNERS_GROUP), (f"{prefix}:events", BOTS_GROUP)):
            try:
                consumers = await self.redis.xinfo_consumers(stream, group)
            except ResponseError as exc:
                if "no such key" in str(exc).lower() or "NOGROUP" in str(exc):
                    continue  # no such stream or group: nobody reads it
                raise
            # `idle`: since its last read of any kind (a waiting consumer reads every second)
            busy += [c["name"] for c in consumers if int(c.get("idle", 0)) < quiet_s * 1000]
        return busy
