"""The layout before `slots` (`LegacyBody`), read and deleted, never written: the stock saver's
RedisJSON documents (indexed by RediSearch on one server), with the thread registry Signoff
added to them. Threads the stock saver or an earlier Signoff wrote stay readable through it.
Generators that yield the Redis requests they need, with no I/O of their own (see the
package's docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
)
from langgraph.checkpoint.redis.base import BaseRedisSaver
from langgraph.checkpoint.redis.util import (
    EMPTY_ID_SENTINEL,
    from_storage_safe_id,
    from_storage_safe_str,
    safely_decode,
    to_storage_safe_id,
)
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redisvl.query import FilterQuery
from redisvl.query.filter import FilterExpression, Tag

from agent_runner.checkpointer.documents import (
    ListQuery,
    PruneEntry,
    decode_writes,
    glob_escape,
    inner_checkpoint,
    is_checkpoint,
    member,
    metadata_of,
    parse_member,
    pending_sends,
    registry_keys,
    survivors,
)
from agent_runner.checkpointer.requests import (
    Ref,
    Scan,
    Search,
    Step,
    delete,
    expire,
    get,
    json_get,
    json_objkeys,
    latest_member,
    ttl,
    zrange,
    zrem,
)

# The thread registry is `<checkpoint prefix>_thread:<thread id>`, next to the library's `_latest`.
THREAD_REGISTRY_SUFFIX = "_thread"
SEARCH_PAGE = 1000  # search results per page when finding a thread the stock saver wrote
SENDS_IN_CHANNELS_VERSION = 4  # before this checkpoint format, sends were the parent's TASKS writes


# --- The bodies both savers share ---------------------------------------------------------


class LegacyBody(BaseRedisSaver[Any, Any]):
    """Reading and deleting the layout before, as request generators (no I/O here)."""

    @property
    def on_cluster(self) -> bool:
        return isinstance(self._redis, RedisCluster | AsyncRedisCluster)

    def _thread_key(self, thread_id: str) -> str:
        return f"{self._checkpoint_prefix}{THREAD_REGISTRY_SUFFIX}:{to_storage_safe_id(thread_id)}"

    def _checkpoint_key(self, ref: Ref) -> str:
        return self._make_redis_checkpoint_key(*ref)

    def _ttl_seconds(self) -> int | None:
        minutes = (self.ttl_config or {}).get("default_ttl")
        return int(minutes * 60) if minutes is not None else None

    # Which checkpoints a thread has.

    def _members(self, thread_id: str, search_cap: int | None = None) -> Step[list[Ref]]:
        raw = yield [zrange(self._thread_key(thread_id))]
        if raw[0]:
            return [parse_member(thread_id, item) for item in raw[0]]
        return (yield from self._discover(thread_id, "", None, search_cap))

    def _discover(
        self, thread_id: str, namespace: str, start: str | None, search_cap: int | None = None
    ) -> Step[list[Ref]]:
        """A thread's checkpoints without a registry (the stock saver's): searched on a single
        server; on a cluster, the parent chain from `start`, or from the root's latest pointer."""
        if not self.on_cluster:
            return (yield from self._search_members(thread_id, ("checkpoints", "writes"), search_cap))
        if start is None:
            namespace = ""
            pointer = yield [get(self._make_redis_checkpoint_latest_key(thread_id, ""))]
            if not pointer[0]:
                return []
            start = from_storage_safe_id(str(safely_decode(pointer[0])).rsplit(":", 1)[-1])
        return (yield from self._chain(thread_id, namespace, start))

    def _chain(self, thread_id: str, namespace: str, checkpoint_id: str) -> Step[list[Ref]]:
        found: dict[str, Ref] = {}
        while checkpoint_id and checkpoint_id not in found:
            ref = (thread_id, namespace, checkpoint_id)
            parent = yield [json_get(self._checkpoint_key(ref), "$.parent_checkpoint_id")]
            if not parent[0]:  # missing, or only writes
                break
            found[checkpoint_id] = ref
            checkpoint_id = from_storage_safe_id(str(parent[0][0] or ""))
        return list(found.values())

    def _search_members(
        self,
        thread_id: str | None,
        indexes: Sequence[Literal["checkpoints", "writes"]],
        cap: int | None = None,
    ) -> Step[list[Ref]]:
        where: FilterExpression | str = (
            Tag("thread_id") == to_storage_safe_id(thread_id) if thread_id is not None else "*"
        )
        found: set[Ref] = set()
        for index in indexes:
            offset = 0
            while cap is None or offset < cap:
                size = SEARCH_PAGE if cap is None else min(SEARCH_PAGE, cap - offset)
                query = FilterQuery(
                    filter_expression=where,
                    return_fields=["thread_id", "checkpoint_ns", "checkpoint_id"],
                    num_results=size,
                ).paging(offset, size)
                docs = yield Search(index, query)
                for doc in docs:
                    thread, namespace, checkpoint_id = (
                        getattr(doc, name, None) for name in ("thread_id", "checkpoint_ns", "checkpoint_id")
                    )
                    if thread is None or namespace is None or checkpoint_id is None:
                        continue  # a `{"has_writes": true}` stub: no checkpoint of a thread
                    found.add(
                        (
                            from_storage_safe_id(thread),
                            from_storage_safe_str(namespace),
                            from_storage_safe_id(checkpoint_id),
                        )
                    )
                if len(docs) < size:
                    break
                offset += size
        return sorted(found)

    def _all_members(self) -> Step[list[Ref]]:
        """Every thread's checkpoints: the search on a single server; each node's registries
        on a cluster (a scan: listing every thread is rare, a key written by every put is not)."""
        if not self.on_cluster:
            return (yield from self._search_members(None, ("checkpoints",)))
        prefix = f"{self._checkpoint_prefix}{THREAD_REGISTRY_SUFFIX}:"
        keys = yield Scan(glob_escape(prefix) + "*")
        threads = [from_storage_safe_id(str(safely_decode(key))[len(prefix) :]) for key in keys]
        lists = yield [zrange(key) for key in keys]
        return [
            parse_member(thread, item) for thread, items in zip(threads, lists, strict=True) for item in items
        ]

    # Reading checkpoints.

    def _write_docs(self, refs: Sequence[Ref]) -> Step[dict[Ref, list[Any]]]:
        """Each checkpoint's write documents, found by its write-key registry (never the flag)."""
        refs = list(dict.fromkeys(refs))
        key_lists = yield [zrange(key) for key in registry_keys(refs)]
        documents = yield [json_get(key) for keys in key_lists for key in keys]
        found: dict[Ref, list[Any]] = {}
        start = 0
        for ref, keys in zip(refs, key_lists, strict=True):
            found[ref] = documents[start : start + len(keys)]
            start += len(keys)
        return found

    def _complete(self, found: Sequence[tuple[Ref, dict[str, Any]]]) -> Step[list[CheckpointTuple]]:
        """Checkpoint documents -> tuples, with their pending writes (and pending sends for the
        old format), all read in two pipelines."""
        parents: dict[Ref, Ref] = {}
        for ref, doc in found:
            parent_id = from_storage_safe_id(str(doc.get("parent_checkpoint_id") or ""))
            if parent_id and inner_checkpoint(doc).get("v", 0) < SENDS_IN_CHANNELS_VERSION:
                parents[ref] = (ref[0], ref[1], parent_id)
        writes = yield from self._write_docs([ref for ref, _ in found] + list(parents.values()))
        return [
            self._tuple_of(
                ref,
                doc,
                decode_writes(self.serde, writes[ref]),
                pending_sends(writes[parents[ref]]) if ref in parents else [],
            )
            for ref, doc in found
        ]

    def _tuple_of(
        self, ref: Ref, doc: dict[str, Any], writes: list[PendingWrite], sends: list[tuple[str, str]]
    ) -> CheckpointTuple:
        thread_id, namespace, checkpoint_id = ref
        inner = inner_checkpoint(doc)
        values = self._deserialize_channel_values(inner.get("channel_values") or {})
        parent_id = from_storage_safe_id(str(doc.get("parent_checkpoint_id") or ""))
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": namespace,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=self._load_checkpoint(inner, values, sends),
            metadata=metadata_of(doc),  # type: ignore[arg-type]
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": namespace,
                        "checkpoint_id": parent_id,
                    }
                }
                if parent_id
                else None
            ),
            pending_writes=writes,
        )

    def _get_tuple(self, config: RunnableConfig) -> Step[CheckpointTuple | None]:
        configurable = config["configurable"]
        thread_id, namespace = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        refresh = bool((self.ttl_config or {}).get("refresh_on_read")) and self._ttl_seconds() is not None
        latest = not checkpoint_id or checkpoint_id == EMPTY_ID_SENTINEL
        if latest:
            ref, doc = yield from self._latest(thread_id, namespace)
        else:
            ref = (thread_id, namespace, str(checkpoint_id))
            doc = (yield [json_get(self._checkpoint_key(ref))])[0]
        if ref is None or not is_checkpoint(doc):
            return None
        [found] = yield from self._complete([(ref, doc)])
        if refresh:
            yield from self._refresh(ref, latest)
        return found

    def _latest(self, thread_id: str, namespace: str) -> Step[tuple[Ref | None, Any]]:
        """The newest stored checkpoint of a namespace by the registry (skipping members whose
        `put` has not landed); by the library's latest pointer for a namespace it does not know."""
        key = self._thread_key(thread_id)
        offset = 0
        while True:
            [newest] = yield [latest_member(key, namespace, offset)]
            if not newest:
                break
            ref = parse_member(thread_id, newest[0])
            [doc] = yield [json_get(self._checkpoint_key(ref))]
            if is_checkpoint(doc):
                return ref, doc
            offset += 1
        if offset:  # the registry knows the namespace, and none of its checkpoints is stored
            return None, None
        [pointer] = yield [get(self._make_redis_checkpoint_latest_key(thread_id, namespace))]
        if not pointer:
            return None, None
        [doc] = yield [json_get(safely_decode(pointer))]
        if not is_checkpoint(doc):
            return None, None
        return (thread_id, namespace, from_storage_safe_id(str(doc.get("checkpoint_id", "")))), doc

    def _refresh(self, ref: Ref, latest: bool) -> Step[None]:
        """TTL refresh on read, as the stock saver does it (keys without a TTL keep none)."""
        seconds = self._ttl_seconds()
        assert seconds is not None
        checkpoint_key = self._checkpoint_key(ref)
        [left] = yield [ttl(checkpoint_key)]
        if left <= 0:
            return
        [write_keys] = yield [zrange(registry_keys([ref])[0])]
        keys = [checkpoint_key, *registry_keys([ref]), *write_keys, self._thread_key(ref[0])]
        if latest:
            keys.append(self._make_redis_checkpoint_latest_key(ref[0], ref[1]))
        yield [expire(key, seconds) for key in keys]

    def _list_refs(self, query: ListQuery) -> Step[list[Ref]]:
        if query.thread_id is not None:
            refs = yield from self._members(query.thread_id)
        else:
            refs = yield from self._all_members()
        return query.select(refs)

    # Removing checkpoints.

    def _remove(
        self, refs: Sequence[Ref], also: Sequence[Any] = (), registries_too: Sequence[Any] = ()
    ) -> Step[None]:
        """Delete checkpoints (documents, write documents, write-key registries) and `also`;
        the registries go last, so that a failure half way leaves no key that none names."""
        registries = registry_keys(refs)
        key_lists = yield [zrange(key) for key in registries]
        named = [*map(self._checkpoint_key, refs), *(k for keys in key_lists for k in keys), *also]
        yield [delete(key) for key in named]
        yield [delete(key) for key in [*registries, *registries_too]]

    def _delete_thread(self, thread_id: str) -> Step[None]:
        refs = yield from self._members(thread_id)
        namespaces = {ns for _, ns, _ in refs} | {""}
        pointers = [self._make_redis_checkpoint_latest_key(thread_id, ns) for ns in namespaces]
        yield from self._remove(refs, also=pointers, registries_too=[self._thread_key(thread_id)])

    def _prune(self, thread_id: str, keep_last: int, search_cap: int) -> Step[None]:
        refs = yield from self._members(thread_id, search_cap)
        if not refs:
            return
        keys = [self._checkpoint_key(ref) for ref in refs]
        heads = yield [json_get(key, "$.parent_checkpoint_id", "$.metadata") for key in keys]
        entries: dict[Ref, PruneEntry] = {}
        for ref, head in zip(refs, heads, strict=True):
            parent = (head or {}).get("$.parent_checkpoint_id") or []
            if not parent:
                entries[ref] = PruneEntry(ref[2], stored=False)
                continue
            metadata = metadata_of({"metadata": ((head or {}).get("$.metadata") or ["{}"])[0]})
            counters = metadata.get("counters_since_delta_snapshot") or {}
            entries[ref] = PruneEntry(
                ref[2],
                stored=True,
                parent_id=from_storage_safe_id(str(parent[0] or "")),
                delta_channels=frozenset(counters),
            )
        if keep_last and any(e.delta_channels for e in entries.values()):
            stored = [ref for ref, e in entries.items() if e.stored]
            channel_keys = yield [
                json_objkeys(self._checkpoint_key(ref), "$.checkpoint.channel_values") for ref in stored
            ]
            for ref, found in zip(stored, channel_keys, strict=True):
                entries[ref].channels = frozenset(
                    str(safely_decode(k)) for k in (found[0] if found else None) or []
                )
        evicted: list[Ref] = []
        emptied: list[str] = []
        for namespace in {ref[1] for ref in refs}:
            here = [ref for ref in refs if ref[1] == namespace]
            kept = survivors([entries[ref] for ref in here], keep_last)
            evicted += [ref for ref in here if ref[2] not in kept]
            if not kept:
                emptied.append(namespace)
        if not evicted:
            return
        thread_key = self._thread_key(thread_id)
        pointers = [self._make_redis_checkpoint_latest_key(thread_id, ns) for ns in emptied]
        if len(evicted) == len(refs):
            yield from self._remove(evicted, also=pointers, registries_too=[thread_key])
            return
        yield from self._remove(evicted, also=pointers)
        yield [zrem(thread_key, [member(ns, cid) for _, ns, cid in evicted])]
