"""The async saver, `AsyncRedisCheckpointer`: runs the bodies `base` shares with its own asyncio
client, and awaits the runner's write fence (`WRITE_FENCE`) before it saves. (The sync one,
`RedisCheckpointer`, is in `sync`.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.redis import AsyncRedisSaver
from redis.asyncio.retry import Retry as AsyncRetry

from agent_runner.checkpointer.base import WRITE_FENCE, SlotBody, resolve_keep_last
from agent_runner.checkpointer.batches import Together
from agent_runner.checkpointer.documents import ListQuery
from agent_runner.checkpointer.requests import Request, Scan, Search, Step, T, resending
from core import connections


class AsyncRedisCheckpointer(SlotBody, AsyncRedisSaver):
    """An asyncio saver on one Redis server, a Sentinel-managed one or a cluster."""

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, ttl: dict[str, Any] | None = None, **options: Any
    ) -> AsyncIterator[AsyncRedisCheckpointer]:
        """A set-up saver on the Redis a Signoff `REDIS_URL` names (`redis://`,
        `redis+cluster://`, `redis+sentinel://`); `options` go to the client. Closes it on exit."""
        client = connections.async_client(url, decode_responses=False, **{**resending(AsyncRetry), **options})
        try:
            saver = cls(redis_client=client, ttl=ttl)
            saver._owns_its_client = True  # so that __aexit__ closes it
            await saver.__aenter__()  # asetup()
        except BaseException:
            await client.aclose()
            raise
        try:
            yield saver
        finally:
            await saver.__aexit__(None, None, None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._together = Together(self._redis)  # (shared by the clones `with_allowlist` makes)

    async def asetup(self) -> None:
        """No index to make: only see whether Redis holds threads of the layout before."""
        self.loop = asyncio.get_running_loop()
        await self._redis.initialize()
        await self._detect_cluster_mode()
        self.legacy = await self._run(self._legacy_present())

    async def _run(self, step: Step[T]) -> T:
        reply: Any = None
        while True:
            try:
                request = step.send(reply)
            except StopIteration as done:
                return done.value
            reply = await self._execute(request)

    async def _execute(self, request: Request) -> Any:
        if isinstance(request, Search):
            index = self.checkpoints_index if request.index == "checkpoints" else self.checkpoint_writes_index
            return (await index.search(request.query)).docs
        if isinstance(request, Scan):
            return [key async for key in self._redis.scan_iter(match=request.pattern, count=1000)]
        if not request:
            return []
        return await self._together.send(request)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self._get(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        query = ListQuery.of(config, filter, before, limit)
        emitted = 0
        for page in query.pages(await self._run(self._listed_refs(query))):
            for found in await self._run(self._listed_page(query, page)):
                yield found
                emitted += 1
                if query.limit is not None and emitted >= query.limit:
                    return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        stream_mode: str = "values",
    ) -> RunnableConfig:
        fence = config.get("configurable", {}).get(WRITE_FENCE)
        if fence is not None:  # a runner whose lease lapsed never writes the thread's next step
            await fence()
        return await self._run(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        fence = config.get("configurable", {}).get(WRITE_FENCE)
        if fence is not None:  # (a runner that lost the thread never adds a task's writes to it)
            await fence()
        if writes:
            await self._run(self._put_writes(config, writes, task_id, task_path))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        # The stock sync wrapper drops `task_path`, which the write order depends on.
        if self.loop is None:
            raise RuntimeError("call `await saver.asetup()` (or use `async with saver:`) first")
        try:
            on_the_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_the_loop = False
        if on_the_loop:  # blocking here would wait for the loop it blocks
            raise asyncio.InvalidStateError("on the event loop, use `await saver.aput_writes(...)`")
        asyncio.run_coroutine_threadsafe(
            self.aput_writes(config, writes, task_id, task_path), self.loop
        ).result()

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self._drop(thread_id))

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        max_results: int = 10000,
    ) -> None:
        """As `RedisCheckpointer.prune`."""
        kept = resolve_keep_last(keep_last, strategy, max_results)
        for thread_id in thread_ids:
            await self._run(self._prune_slots(thread_id, kept))
            if self.legacy:
                await self._run(self._prune(thread_id, kept, max_results))
