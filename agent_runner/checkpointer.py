"""The Redis checkpointer the runner uses: langgraph-checkpoint-redis, mended.

With langgraph-checkpoint-redis 0.5.2 the stock savers lose approvals (see
`docs/redis-checkpointer.md`):

1. `RedisSaver.get_tuple` loads a checkpoint's pending writes only when the
   checkpoint document says `has_writes: true`. Background checkpoint saves
   (`durability="async"`) can land `put_writes(C)` before `put(C)`, and `put`
   resets the flag. The writes are stored; only the flag lies. The hidden
   writes include `__interrupt__` and the messages a DeltaChannel (deepagents
   >= 0.6) rebuilds from ancestors, so an approved tool call never runs.
2. Both savers return a checkpoint's writes ordered by (idx, task id) instead
   of `writes_sort_key` (task_path, task_id, idx), so parallel tool results
   are replayed in another order than the live run produced.

The fix reads writes from the per-checkpoint write-key registry that
`put_writes` always maintains (never from the flag) and sorts them with
`writes_sort_key`. Nothing is written differently, so threads saved by the
stock saver are read as they are. Sync and async savers share the body below;
each only runs the two Redis pipelines its client needs.

`list` is mended too, for what langgraph-checkpoint-conformance found: the
stock query ignores `before` (it expects ULIDs; LangGraph ids are uuid6),
lists every namespace when asked for the root one (""), and refuses metadata
keys it does not index. Those queries are filtered here, after the stock
search; plain ones go straight through. `prune([])` is a no-op.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, PendingWrite, get_checkpoint_id, writes_sort_key
from langgraph.checkpoint.redis import AsyncRedisSaver, RedisSaver
from langgraph.checkpoint.redis.base import BaseRedisSaver
from langgraph.checkpoint.redis.key_registry import CheckpointKeyRegistry
from langgraph.checkpoint.serde.base import SerializerProtocol

CheckpointRef = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id


def registry_keys(checkpoints: Sequence[CheckpointRef]) -> list[str]:
    """The write-key registry (a sorted set) of each checkpoint."""
    return [CheckpointKeyRegistry.make_write_keys_zset_key(*ref) for ref in checkpoints]


def decode_writes(serde: SerializerProtocol, documents: Iterable[Any]) -> list[PendingWrite]:
    """Stored write documents -> pending writes in `writes_sort_key` order."""
    found = [doc for doc in documents if isinstance(doc, dict)]
    found.sort(
        key=lambda doc: writes_sort_key(str(doc.get("task_path", "")), str(doc["task_id"]), int(doc["idx"]))
    )
    return [
        (
            doc["task_id"],
            doc["channel"],
            serde.loads_typed((doc["type"], BaseRedisSaver._decode_blob_static(doc["blob"]))),
        )
        for doc in found
    ]


def group_writes(
    serde: SerializerProtocol,
    checkpoints: Sequence[CheckpointRef],
    key_lists: Sequence[Sequence[Any]],
    documents: Sequence[Any],
) -> dict[CheckpointRef, list[PendingWrite]]:
    """Split the flat list of fetched documents back per checkpoint."""
    result: dict[CheckpointRef, list[PendingWrite]] = {}
    start = 0
    for ref, keys in zip(checkpoints, key_lists, strict=True):
        result[ref] = decode_writes(serde, documents[start : start + len(keys)])
        start += len(keys)
    return result


# Metadata keys the stock search index can filter on by itself.
INDEXED_FILTER_KEYS = frozenset({"source", "step", "thread_id", "run_id"})


@dataclass(frozen=True)
class ListQuery:
    """The part of a `list` call the stock search cannot answer, applied after it."""

    namespace: str | None
    metadata: dict[str, Any]
    before_id: str | None
    indexed_filter: dict[str, Any] | None

    @classmethod
    def of(
        cls,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
    ) -> ListQuery:
        filters = filter or {}
        return cls(
            namespace=(config or {}).get("configurable", {}).get("checkpoint_ns"),
            metadata={k: v for k, v in filters.items() if k not in INDEXED_FILTER_KEYS},
            before_id=get_checkpoint_id(before) if before else None,
            indexed_filter={k: v for k, v in filters.items() if k in INDEXED_FILTER_KEYS} or None,
        )

    @property
    def stock_can_answer(self) -> bool:
        return self.namespace != "" and not self.metadata and self.before_id is None

    def keeps(self, found: CheckpointTuple) -> bool:
        configurable = found.config["configurable"]
        if self.namespace is not None and configurable.get("checkpoint_ns", "") != self.namespace:
            return False
        if self.before_id is not None and configurable["checkpoint_id"] >= self.before_id:
            return False
        return all(found.metadata.get(k) == v for k, v in self.metadata.items())


class RedisCheckpointer(RedisSaver):
    """`RedisSaver` whose pending writes survive resume, in LangGraph's order."""

    def _writes_of(self, checkpoints: Sequence[CheckpointRef]) -> dict[CheckpointRef, list[PendingWrite]]:
        if not checkpoints:
            return {}
        with self._redis.pipeline(transaction=False) as pipeline:
            for key in registry_keys(checkpoints):
                pipeline.zrange(key, 0, -1)
            key_lists = pipeline.execute()
        write_keys = [key for keys in key_lists for key in keys]
        documents: list[Any] = []
        if write_keys:
            with self._redis.pipeline(transaction=False) as pipeline:
                for key in write_keys:
                    pipeline.json().get(key)
                documents = pipeline.execute()
        return group_writes(self.serde, checkpoints, key_lists, documents)

    def _load_pending_writes_with_registry_check(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        checkpoint_has_writes: bool,
        registry_has_writes: bool,
    ) -> list[PendingWrite]:
        # The flag is ignored on purpose: it is the thing that lies.
        ref = (thread_id, checkpoint_ns, checkpoint_id)
        return self._writes_of([ref])[ref]

    def _load_pending_writes(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[PendingWrite]:
        ref = (thread_id, checkpoint_ns, checkpoint_id)
        return self._writes_of([ref])[ref]

    def _batch_load_pending_writes(
        self, batch_keys: list[CheckpointRef]
    ) -> dict[CheckpointRef, list[PendingWrite]]:
        return self._writes_of(batch_keys)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        query = ListQuery.of(config, filter, before)
        if query.stock_can_answer:
            yield from super().list(config, filter=filter, limit=limit)
            return
        kept = 0
        for found in super().list(config, filter=query.indexed_filter):
            if query.keeps(found):
                yield found
                kept += 1
                if limit is not None and kept >= limit:
                    return

    def prune(self, thread_ids: Sequence[str], **kwargs: Any) -> None:
        if thread_ids:
            super().prune(thread_ids, **kwargs)


class AsyncRedisCheckpointer(AsyncRedisSaver):
    """`AsyncRedisSaver` with the same mended write loading."""

    async def _writes_of(
        self, checkpoints: Sequence[CheckpointRef]
    ) -> dict[CheckpointRef, list[PendingWrite]]:
        if not checkpoints:
            return {}
        pipeline = self._redis.pipeline(transaction=False)
        for key in registry_keys(checkpoints):
            pipeline.zrange(key, 0, -1)
        key_lists = await pipeline.execute()
        write_keys = [key for keys in key_lists for key in keys]
        documents: list[Any] = []
        if write_keys:
            pipeline = self._redis.pipeline(transaction=False)
            for key in write_keys:
                pipeline.json().get(key)
            documents = await pipeline.execute()
        return group_writes(self.serde, checkpoints, key_lists, documents)

    async def _aload_pending_writes(
        self, thread_id: str, checkpoint_ns: str = "", checkpoint_id: str = ""
    ) -> list[PendingWrite]:
        ref = (thread_id, checkpoint_ns, checkpoint_id)
        return (await self._writes_of([ref]))[ref]

    async def _abatch_load_pending_writes(
        self, batch_keys: list[CheckpointRef]
    ) -> dict[CheckpointRef, list[PendingWrite]]:
        return await self._writes_of(batch_keys)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        query = ListQuery.of(config, filter, before)
        if query.stock_can_answer:
            async for found in super().alist(config, filter=filter, limit=limit):
                yield found
            return
        kept = 0
        async for found in super().alist(config, filter=query.indexed_filter):
            if query.keeps(found):
                yield found
                kept += 1
                if limit is not None and kept >= limit:
                    return

    async def aprune(self, thread_ids: Sequence[str], **kwargs: Any) -> None:
        if thread_ids:
            await super().aprune(thread_ids, **kwargs)
