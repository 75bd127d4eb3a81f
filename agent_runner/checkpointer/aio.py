"""The async saver, `AsyncRedisCheckpointer`: runs the bodies `base` shares with its own asyncio
client, and awaits the runner's write fence (`WRITE_FENCE`) before it saves. (The sync one,
`RedisCheckpointer`, is in `sync`.)

Under a fence (Signoff's runner), a save is never given up while Redis is away: a task's writes
record what a tool did, and a run that lost them would run the tool again from the checkpoint
before it. Such a save is sent again, backing off, until Redis answers (a put rewrites the same
keys, so sending it twice is safe); after a failure the fence asks Redis whether the runner still
holds the thread's lease, so a save goes through only while it does, and stops with `LeaseLost`
once another runner took the thread. LangGraph waits for its saves before a run ends or raises,
so the runner never handles the command again before the tool's result is stored. Without a
fence a save fails as before, after the client's own few retries (`requests.resending`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
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

from agent_runner.checkpointer.base import WRITE_FENCE, Rekeyed, SlotBody, resolve_keep_last
from agent_runner.checkpointer.batches import Together
from agent_runner.checkpointer.documents import ListQuery
from agent_runner.checkpointer.encryption import CheckpointKeys
from agent_runner.checkpointer.requests import ParentNotSaved, Request, Scan, Search, Step, T, resending
from core import connections
from core.logs import get_logger
from core.outages import Backoff, is_outage

log = get_logger("checkpointer")
SAVE_TIMEOUT_S = 10.0  # a request Redis has not answered in this long is given up and sent again


class AsyncRedisCheckpointer(SlotBody, AsyncRedisSaver):
    """An asyncio saver on one Redis server, a Sentinel-managed one or a cluster."""

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls,
        url: str,
        *,
        ttl: dict[str, Any] | None = None,
        keys: CheckpointKeys | None = None,
        **options: Any,
    ) -> AsyncIterator[AsyncRedisCheckpointer]:
        """A set-up saver on the Redis a Signoff `REDIS_URL` names (`redis://`,
        `redis+cluster://`, `redis+sentinel://`), encrypting with `keys` when given
        (`CheckpointKeys.from_settings`); `options` go to the client. Closes it on exit."""
        # A request held up (a network cut that drops packets) fails within SAVE_TIMEOUT_S and is
        # sent again, asking the fence first, rather than waiting for ever and landing late.
        client = connections.async_client(
            url,
            decode_responses=False,
            **{"socket_timeout": SAVE_TIMEOUT_S, **resending(AsyncRetry), **options},
        )
        try:
            saver = cls(redis_client=client, ttl=ttl, keys=keys)
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
        return await self._saved(
            config, lambda token: self._put(config, checkpoint, metadata, new_versions, token)
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if writes:
            await self._saved(
                config, lambda token: self._put_writes(config, writes, task_id, task_path, token)
            )

    async def _saved(self, config: RunnableConfig, body: Callable[[str], Step[T]]) -> T:
        """`body`'s save, behind the run's fence (when it has one): a runner whose lease lapsed
        never writes the thread's next step or adds a task's writes to it. The fence gives the
        runner's lock token, which the save names: Redis refuses it once another runner claimed
        the thread (`claim`), however late it arrives. Under a fence, a save that meets Redis
        away waits for it and is sent again (see the module)."""
        fence: Callable[[bool], Awaitable[str]] | None = config.get("configurable", {}).get(WRITE_FENCE)
        if fence is None:
            return await self._run(body(""))
        wait = Backoff(first=0.05, cap=2.0)
        strict = False  # (the first time: a lease confirmed a moment ago cannot have lapsed)
        while True:
            try:
                token = await fence(strict) or ""  # (a fence of no runner: no token)
                saved = await self._run(body(token))
            except ParentNotSaved:  # (its parent was given up: never saved after it)
                raise
            except Exception as exc:
                if not is_outage(exc):
                    raise
                if wait.tries == 0:
                    log.warning("checkpoint_save_waits_for_redis", error=repr(exc))
                strict = True  # Redis is asked again whether the lease still holds
                await asyncio.sleep(wait.next())
                continue
            if wait.tries:
                log.info("checkpoint_saved_after_outage", tries=wait.tries + 1)
            return saved

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

    async def claim(self, thread_id: str, token: str) -> None:
        """The runner holding the lock token `token` took the thread: from now on a save naming
        another token (a runner that lost the thread, whose request reaches Redis late) is
        refused (`slots.FENCE_LUA`)."""
        await self._run(self._claim(thread_id, token))

    async def arekey(self, threads: Collection[str] | None = None) -> Rekeyed:
        """Every stored checkpoint, value and write of `threads` (default: all) written again under
        the current key (in the clear with old keys alone): `signoff migrate --rekey`; see
        `SlotBody._rekey`."""
        return await self._run(self._rekey(threads))

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
