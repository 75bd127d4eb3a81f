"""Whether this Redis holds Signoff's keys as this process reads them (the layout recorded by the
first process to look; a migration due or cut off halfway; another partition count), and the
consumer groups the streams need. The Store's `layout` room."""

from __future__ import annotations

import json
import re
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from core import connections
from core.config import StartupError
from core.keys import BOTS_GROUP, LAYOUT_VERSION, RUNNERS_GROUP, Keys, Partition
from core.store.client import dumps, each_partition

# Keys only the layout before partitions had: one of them there means a migration is due.
LEGACY_MARKS = ("commands", "events", "audit", "pending", "deadletters")


# A prefix as SIGNOFF_PREFIX allows one (core.config), before the ':layout' that records its layout.
LAYOUT_KEY = re.compile(r"([A-Za-z0-9_.-]{1,64}):layout")


class LayoutError(StartupError):
    """This Redis holds Signoff data laid out otherwise than this process would read it."""


class Layout:
    """The layout check, and the consumer groups it makes."""

    def __init__(self, redis: Any, keys: Keys):
        self.redis, self.keys = redis, keys

    async def check(self, record: bool = True) -> None:
        """Refuse to run on keys laid out otherwise: another partition count (this process would
        not see the others' work), the layout before partitions (a migration is due first), or a
        migration cut off halfway. The first process to look records the layout (`record`; an
        operator's read-only command leaves that to the bot or runner)."""
        wanted = {"version": LAYOUT_VERSION, "partitions": self.keys.count}
        if not isinstance(self.redis, AsyncRedisCluster) and await self._is_cluster_node():
            raise LayoutError(connections.CLUSTER_NODE)
        raw = await self.redis.get(self.keys.layout)
        if raw is None:
            legacy = [f"{self.keys.prefix}:{name}" for name in LEGACY_MARKS]
            if any([await self.redis.exists(key) for key in legacy]):
                raise LayoutError(
                    f"Redis holds Signoff data from before partitioned keys (prefix {self.keys.prefix!r}): "
                    "stop every bot and runner and run `signoff migrate` once (see docs/redis.md)"
                )
            if not record:
                return
            await self.redis.set(self.keys.layout, dumps(wanted), nx=True)
            raw = await self.redis.get(self.keys.layout)
        found = json.loads(raw)
        if found.get("migrating"):
            raise LayoutError(
                f"a `signoff migrate` of prefix {self.keys.prefix!r} did not finish: run it again "
                "(every bot and runner stopped)"
            )
        if found != wanted:
            raise LayoutError(
                f"Redis holds Signoff data in {found.get('partitions')} partitions (prefix "
                f"{self.keys.prefix!r}) but this process uses {self.keys.count}: set "
                f"SIGNOFF_PARTITIONS={found.get('partitions')} on every bot and runner"
            )

    async def elsewhere(self) -> list[str]:
        """When this prefix holds no Signoff data: the other prefixes on this Redis that do, sorted
        (an operator's command under the wrong SIGNOFF_PREFIX would otherwise answer "nothing"
        and exit 0). Every process that ran records its prefix's layout key, so one SCAN for
        `*:layout` finds them without reading anything else."""
        if await self.redis.exists(self.keys.layout):
            return []
        found = set()
        async for key in self.redis.scan_iter(match="*:layout", count=1000):
            named = LAYOUT_KEY.fullmatch(key if isinstance(key, str) else key.decode(errors="replace"))
            if named and named.group(1) != self.keys.prefix:
                found.add(named.group(1))
        return sorted(found)

    async def _is_cluster_node(self) -> bool:
        """Whether a one-server client talks to a node of a Redis Cluster (a redis:// URL at one:
        only the keys that node serves would answer, the rest MOVED)."""
        try:
            return int((await self.redis.info("cluster")).get("cluster_enabled", 0)) == 1
        except aioredis.ResponseError:  # INFO refused (a managed Redis): the commands will say
            return False

    async def checked(self) -> bool:
        await self.check()
        return True

    async def ensure_groups(self) -> None:
        await self.check()

        async def create(partition: Partition) -> None:
            for stream, group in ((partition.commands, RUNNERS_GROUP), (partition.events, BOTS_GROUP)):
                try:
                    await self.redis.xgroup_create(stream, group, id="0", mkstream=True)
                except aioredis.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

        await each_partition(self.keys, create)
