"""What the Redis behind the Store is (`signoff doctor` asks): one server, Sentinel's master or
a cluster's masters, and each master's memory, modules and settings. The Store's `server` room.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster


class Server:
    """What the server is, and each master's facts."""

    def __init__(self, redis: Any):
        self.redis = redis

    async def _each_master(self, ask: Callable[..., Awaitable[Any]]) -> list[Any]:
        """`ask(**where)` of every server holding data: each master of a cluster, else the one."""
        if isinstance(self.redis, AsyncRedisCluster):
            return [await ask(target_nodes=node) for node in self.redis.get_primaries()]
        return [await ask()]

    def kind(self, masters: int) -> str:
        """Where the data is, in words: one server, Sentinel's master, or a cluster's masters."""
        if isinstance(self.redis, AsyncRedisCluster):
            return f"a Redis Cluster of {masters} masters"
        if "Sentinel" in type(self.redis.connection_pool).__name__:
            return "the master Sentinel names"
        return "one server"

    async def memory_info(self) -> list[dict[str, Any]]:
        """INFO memory of each master."""
        return await self._each_master(lambda **where: self.redis.info("memory", **where))

    async def module_lists(self) -> list[list[dict[str, Any]]]:
        """MODULE LIST of each master."""
        return await self._each_master(lambda **where: self.redis.execute_command("MODULE LIST", **where))

    async def persistence_settings(self) -> list[tuple[str | None, str | None]]:
        """(`appendonly`, `maxmemory-policy`) of each master, by CONFIG GET (which a managed
        Redis may refuse: the error is raised)."""

        async def read(**where: Any) -> tuple[str | None, str | None]:
            aof = (await self.redis.config_get("appendonly", **where)).get("appendonly")
            policy = (await self.redis.config_get("maxmemory-policy", **where)).get("maxmemory-policy")
            return aof, policy

        return await self._each_master(read)
