"""The Redis checkpointer the runner uses: langgraph-checkpoint-redis, mended, on one Redis
server, a Sentinel-managed one or a Redis Cluster (`from_url` takes any `REDIS_URL`).

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

So writes are read from the per-checkpoint write-key registry that `put_writes`
maintains (never from the flag), sorted with `writes_sort_key`.

On a cluster the stock savers fail further: everything built on FT.SEARCH (`list`,
`delete_thread`, `prune`, the writes and sends fallbacks) fails or lies, because a
RediSearch index lives on one shard and sees only that shard's keys, while a thread's
keys (the library's names have no hash tags) are spread over every shard; even
`asetup` fails (Redis routes FT.CREATE by the index name's slot, redisvl sends it to
a random node). So nothing here searches on a cluster, and no index is made there.
Instead each thread gets one more key, a registry of its checkpoints: a sorted set
`checkpoint_thread:<thread id>` whose members are `<namespace>\0<checkpoint id>`, all
at score 0 so that they sort by namespace, then id. It is written before the
document or the writes it names (and outlives them on delete), so no key of a
thread escapes it, on any node. Read by direct key reads in pipelines, which
redis-py's cluster client splits per node, it answers:

* the latest checkpoint of a namespace: its newest member whose document is stored
  (the library's `checkpoint_latest` pointer is written after the document, by a
  second command, so a crash leaves it one step behind),
* `list`: namespaces (the root one "" alone), `before`, any metadata key, `limit`,
* `delete_thread`: every key of the thread, including the writes (and the
  `{"has_writes": true}` stub) of a checkpoint whose `put` never came,
* `prune`: besides the newest checkpoints of each namespace, it keeps the
  ancestors their DeltaChannels replay, back to the last snapshot (the stock
  "keep the latest" empties deepagents' messages), and writes whose `put` is on
  its way,
* the pending sends of a checkpoint of the old format (< 4), from its parent's
  writes; the DeltaChannel history walks `get_tuple` over the parents.

Single server and cluster run the same code, so the conformance suite on one node
tests what runs on a cluster, but for what a search does on one server and something
else does on a cluster: finding a thread the stock saver wrote, listing every thread,
and the indexes themselves. The key names are the library's, so threads the stock
saver wrote stay readable: one without a registry is found by the stock search on a
single server, and by following parent links from its root `checkpoint_latest`
pointer on a cluster (the root namespace only: nothing else finds the others there).
Our first write to such a thread puts what was found into a new registry. Listing
every thread (`list(None)`) uses the search on a single server and scans each node
for registries on a cluster (rare; a key every `put` would write is not).

Sync and async savers share every body below: generators that yield the Redis
requests they need; each saver only runs them with its own client.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    writes_sort_key,
)
from langgraph.checkpoint.redis import AsyncRedisSaver, RedisSaver
from langgraph.checkpoint.redis.base import BaseRedisSaver
from langgraph.checkpoint.redis.key_registry import (
    AsyncCheckpointKeyRegistry,
    CheckpointKeyRegistry,
    SyncCheckpointKeyRegistry,
)
from langgraph.checkpoint.redis.util import (
    EMPTY_ID_SENTINEL,
    from_storage_safe_id,
    from_storage_safe_str,
    safely_decode,
    to_storage_safe_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.constants import TASKS
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.retry import Retry
from redisvl.exceptions import RedisSearchError
from redisvl.query import FilterQuery
from redisvl.query.filter import FilterExpression, Tag

from agent_runner import connections

T = TypeVar("T")
Ref = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id

# The thread registry is `<checkpoint prefix>_thread:<thread id>`, next to the library's `_latest`.
THREAD_REGISTRY_SUFFIX = "_thread"
PAGE = 50  # checkpoint documents read per pipeline when listing
SEARCH_PAGE = 1000  # search results per page when finding a thread the stock saver wrote
SENDS_IN_CHANNELS_VERSION = 4  # before this checkpoint format, sends were the parent's TASKS writes


# --- Requests the bodies yield, and their replies -----------------------------------------

Queue = Callable[[Any], object]  # puts one command on a pipeline


# A run's config may carry, under this key, a coroutine function the async saver awaits before
# it saves a checkpoint: Signoff's runner passes its fencing check, so a runner that lost the
# thread's lease (frozen while another runner took the thread over) raises instead of saving a
# step after the new owner's. (`__` keeps it out of the checkpoint's metadata.)
WRITE_FENCE = "__signoff_fence"


@dataclass(frozen=True)
class Search:
    """A search of one index (single server only): replies with its documents."""

    index: Literal["checkpoints", "writes"]
    query: FilterQuery


@dataclass(frozen=True)
class Scan:
    """Every key matching `pattern`, on every node: replies with the keys."""

    pattern: str


Request = list[Queue] | Search | Scan
Step = Generator[Request, Any, T]  # a body: yields requests, is sent their replies


def json_get(key: Any, *paths: str) -> Queue:
    return lambda pipe: pipe.json().get(key, *paths)


def json_objkeys(key: Any, path: str) -> Queue:
    return lambda pipe: pipe.json().objkeys(key, path)


def zrange(key: Any) -> Queue:
    return lambda pipe: pipe.zrange(key, 0, -1)


def latest_member(key: Any, namespace: str, offset: int) -> Queue:
    """The `offset`-th newest member of `namespace` (members of a namespace share its prefix)."""
    prefix = namespace.encode()
    return lambda pipe: pipe.zrange(
        key, b"(" + prefix + b"\x01", b"[" + prefix + b"\x00", desc=True, bylex=True, offset=offset, num=1
    )


# Add a checkpoint to its thread's registry and say whether the registry existed: in one step,
# since LangGraph saves a step's writes and checkpoint concurrently, and only the first of our
# writes to a thread the stock saver wrote may take its checkpoints in. (The library's keys are
# laid out by the library, so this script lives with them rather than in `scripts.py`.)
REGISTER = """
local registry = KEYS[1]
local entry, seconds = ARGV[1], tonumber(ARGV[2])
local existed = redis.call('EXISTS', registry)
redis.call('ZADD', registry, 0, entry)
if seconds > 0 then redis.call('EXPIRE', registry, seconds) end
return existed
"""


def register(key: Any, entry: bytes, seconds: int | None) -> Queue:
    # EVAL by name: redis-py's sync cluster pipeline has no `eval`, and routes this by its key.
    return lambda pipe: pipe.execute_command("EVAL", REGISTER, 1, key, entry, seconds or 0)


def zadd(key: Any, members: Iterable[bytes]) -> Queue:
    mapping = dict.fromkeys(members, 0)
    return lambda pipe: pipe.zadd(key, mapping)


def zrem(key: Any, members: Sequence[bytes]) -> Queue:
    return lambda pipe: pipe.zrem(key, *members)


def exists(key: Any) -> Queue:
    return lambda pipe: pipe.exists(key)


def get(key: Any) -> Queue:
    return lambda pipe: pipe.get(key)


def ttl(key: Any) -> Queue:
    return lambda pipe: pipe.ttl(key)


def expire(key: Any, seconds: int) -> Queue:
    return lambda pipe: pipe.expire(key, seconds)


def delete(key: Any) -> Queue:
    return lambda pipe: pipe.delete(key)


# Replicas starting together on a fresh Redis: each finds an index missing and creates it, and
# all but one get "Index already exists" (then a second look finds it). Two indexes: three tries.
INDEX_TRIES = 3


def created_meanwhile(exc: Exception) -> bool:
    return "already exists" in str(exc)


class ParentNotSaved(RedisConnectionError):
    """A checkpoint whose parent's save failed is not saved either: the run stops there, and
    (a Redis error, as far as the runner is concerned) is tried again from the last checkpoint
    that was saved."""


def resending(kind: Any) -> dict[str, Any]:
    """Client options that send a command again on a new connection when its connection was
    lost (a Redis restarted, a failover): everything a saver sends may be sent twice (a put
    rewrites the same keys, registration adds the same member, reads read). Without it a save
    that meets a connection the server closed fails, and LangGraph still makes the next step's
    save: the thread is left with a checkpoint missing from its chain, and reads as finished."""
    return {"retry": kind(ExponentialBackoff(cap=0.5, base=0.05), 3)}


# --- Pure parts ---------------------------------------------------------------------------


def member(namespace: str, checkpoint_id: str) -> bytes:
    """A thread registry member: the namespace, NUL, the checkpoint id."""
    return f"{namespace}\x00{checkpoint_id}".encode()


def parse_member(thread_id: str, raw: Any) -> Ref:
    namespace, _, checkpoint_id = str(safely_decode(raw)).partition("\x00")
    return thread_id, namespace, checkpoint_id


def newest_first(refs: Iterable[Ref]) -> list[Ref]:
    """Checkpoint ids are uuid6: their text sorts as their time does."""
    return sorted(set(refs), key=lambda ref: (ref[2], ref[1], ref[0]), reverse=True)


def registry_keys(checkpoints: Sequence[Ref]) -> list[str]:
    """The write-key registry (a sorted set) of each checkpoint."""
    return [CheckpointKeyRegistry.make_write_keys_zset_key(*ref) for ref in checkpoints]


def sorted_write_docs(documents: Iterable[Any]) -> list[dict[str, Any]]:
    found = [doc for doc in documents if isinstance(doc, dict)]
    found.sort(
        key=lambda doc: writes_sort_key(str(doc.get("task_path", "")), str(doc["task_id"]), int(doc["idx"]))
    )
    return found


def decode_writes(serde: SerializerProtocol, documents: Iterable[Any]) -> list[PendingWrite]:
    """Stored write documents -> pending writes in `writes_sort_key` order."""
    return [
        (
            doc["task_id"],
            doc["channel"],
            serde.loads_typed((doc["type"], BaseRedisSaver._decode_blob_static(doc["blob"]))),
        )
        for doc in sorted_write_docs(documents)
    ]


def pending_sends(documents: Iterable[Any]) -> list[tuple[str, str]]:
    """A parent's `TASKS` writes as (type, blob): what a checkpoint of format < 4 is sent."""
    return [(doc["type"], doc["blob"]) for doc in sorted_write_docs(documents) if doc.get("channel") == TASKS]


def is_checkpoint(doc: Any) -> bool:
    """A checkpoint document, not a missing key nor the `{"has_writes": true}` stub that the
    stock `put_writes` (JSON.MERGE) leaves when it lands before its `put`."""
    return isinstance(doc, dict) and "checkpoint" in doc


def inner_checkpoint(doc: dict[str, Any]) -> dict[str, Any]:
    inner = doc.get("checkpoint") or {}
    return json.loads(inner) if isinstance(inner, str) else inner


def metadata_of(doc: dict[str, Any]) -> dict[str, Any]:
    raw = doc.get("metadata") or "{}"
    found = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return {
        key.replace("\u0000", ""): value.replace("\u0000", "") if isinstance(value, str) else value
        for key, value in found.items()
    }


def put_target(config: RunnableConfig, checkpoint: Checkpoint) -> tuple[Ref, str | None]:
    """The checkpoint `put` stores, and its parent, decided as the stock `put` decides them."""
    configurable = config["configurable"]
    from_config = configurable.get("checkpoint_id")
    checkpoint_id = from_config or configurable.get("thread_ts") or checkpoint.get("id", "")
    parent = None
    if checkpoint.get("id") and from_config and checkpoint["id"] != from_config:
        parent, checkpoint_id = from_config, checkpoint["id"]
    return (configurable["thread_id"], configurable["checkpoint_ns"], checkpoint_id), parent


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


@dataclass(frozen=True)
class ListQuery:
    """What a `list` call asks for: which checkpoints by key, then which by document."""

    thread_id: str | None
    namespace: str | None  # None: every namespace; "" is the root one alone
    checkpoint_id: str | None
    before_id: str | None
    run_id: str | None
    metadata: dict[str, Any]
    limit: int | None
    contradictory: bool = False

    @classmethod
    def of(
        cls,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> ListQuery:
        configurable = (config or {}).get("configurable", {})
        wanted = dict(filter or {})
        thread_id = configurable.get("thread_id")
        # The stock saver reads a `thread_id` filter as the thread (it is not in LangGraph's metadata).
        filtered_thread = wanted.pop("thread_id", None)
        contradictory = bool(thread_id and filtered_thread and thread_id != filtered_thread)
        return cls(
            thread_id=thread_id or filtered_thread,
            namespace=configurable.get("checkpoint_ns"),
            checkpoint_id=get_checkpoint_id(config) if config else None,
            before_id=get_checkpoint_id(before) if before else None,
            run_id=configurable.get("run_id"),
            metadata=wanted,
            limit=limit or None,
            contradictory=contradictory,
        )

    def select(self, refs: Iterable[Ref]) -> list[Ref]:
        if self.contradictory:
            return []
        return [
            ref
            for ref in newest_first(refs)
            if (self.namespace is None or ref[1] == self.namespace)
            and (not self.checkpoint_id or ref[2] == self.checkpoint_id)
            and (self.before_id is None or ref[2] < self.before_id)
        ]

    def keeps(self, doc: dict[str, Any]) -> bool:
        if self.run_id and doc.get("run_id") != to_storage_safe_id(self.run_id):
            return False
        if not self.metadata:
            return True
        metadata = metadata_of(doc)
        return all(metadata.get(key) == value for key, value in self.metadata.items())

    def pages(self, refs: Sequence[Ref]) -> Iterator[Sequence[Ref]]:
        size = PAGE if self.metadata or self.run_id or not self.limit else min(PAGE, self.limit)
        for start in range(0, len(refs), size):
            yield refs[start : start + size]


@dataclass
class PruneEntry:
    """What `prune` knows of one member of a namespace."""

    checkpoint_id: str
    stored: bool  # a checkpoint document exists (not only writes)
    parent_id: str = ""
    delta_channels: frozenset[str] = frozenset()  # channels rebuilt from ancestors (their counters)
    channels: frozenset[str] = field(default_factory=frozenset)  # channels stored in full here


def survivors(entries: Sequence[PruneEntry], keep_last: int) -> set[str]:
    """The checkpoint ids of one namespace that `prune` keeps: the `keep_last` newest stored
    ones, each with the ancestors its DeltaChannels replay (up to the one holding a snapshot),
    and writes newer than every stored checkpoint (their `put` may be on its way)."""
    stored = sorted((e for e in entries if e.stored), key=lambda e: e.checkpoint_id, reverse=True)
    kept = {e.checkpoint_id for e in stored[:keep_last]}
    by_id = {e.checkpoint_id: e for e in stored}
    for entry in stored[:keep_last]:
        needed = entry.delta_channels - entry.channels
        walked = {entry.checkpoint_id}
        parent = entry.parent_id
        while needed and parent in by_id and parent not in walked:
            ancestor = by_id[parent]
            kept.add(parent)
            walked.add(parent)
            needed -= ancestor.channels
            parent = ancestor.parent_id
    if keep_last:
        newest = stored[0].checkpoint_id if stored else ""
        kept |= {e.checkpoint_id for e in entries if not e.stored and e.checkpoint_id > newest}
    return kept


# --- The bodies both savers share ---------------------------------------------------------


class RegistryBody(BaseRedisSaver[Any, Any]):
    """The operations on the thread registry, as request generators (no I/O here)."""

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

    # Registration: before the document or writes it names, so that every key is found.

    def _register(self, ref: Ref, adopt_from: str | None, parent: str | None = None) -> Step[None]:
        thread_id, namespace, checkpoint_id = ref
        key = self._thread_key(thread_id)
        requests = [register(key, member(namespace, checkpoint_id), self._ttl_seconds())]
        if parent:
            requests.append(exists(self._checkpoint_key((thread_id, namespace, parent))))
        [existed, *parent_stored] = yield requests
        if parent_stored and not parent_stored[0]:
            raise ParentNotSaved(
                f"checkpoint {checkpoint_id} of thread {thread_id} follows {parent}, whose save failed"
            )
        if not existed and adopt_from:
            # This call made the registry: the thread may have been written by the stock saver.
            found = yield from self._discover(thread_id, namespace, adopt_from)
            if found:
                yield [zadd(key, [member(ns, cid) for _, ns, cid in found])]

    def _register_put(self, config: RunnableConfig, checkpoint: Checkpoint) -> Step[None]:
        """Registration, and the check that the parent is stored: LangGraph saves a step's
        checkpoint even when the save of the step before failed (`durability="async"` chains
        the saves, each after the last whatever became of it); stored, it would leave a chain
        with a hole, whose rebuilt messages (a DeltaChannel) miss what the lost step held."""
        ref, parent = put_target(config, checkpoint)
        return self._register(ref, adopt_from=parent, parent=parent)

    def _register_writes(self, config: RunnableConfig) -> Step[None]:
        configurable = config["configurable"]
        ref = (
            configurable["thread_id"],
            configurable.get("checkpoint_ns", ""),
            configurable["checkpoint_id"],
        )
        return self._register(ref, adopt_from=ref[2])

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

    def _list_page(self, query: ListQuery, page: Sequence[Ref]) -> Step[list[CheckpointTuple]]:
        docs = yield [json_get(self._checkpoint_key(ref)) for ref in page]
        found = [
            (ref, doc) for ref, doc in zip(page, docs, strict=True) if is_checkpoint(doc) and query.keeps(doc)
        ]
        return (yield from self._complete(found))

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


def resolve_keep_last(keep_last: int | None, strategy: str, max_results: int) -> int:
    if keep_last is None:
        keep_last = 0 if strategy == "delete" else 1
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    if max_results < 1:
        raise ValueError(f"max_results must be >= 1, got {max_results}")
    return keep_last


# --- The savers: each runs the bodies with its own client ---------------------------------


class RedisCheckpointer(RegistryBody, RedisSaver):
    """`RedisSaver` whose pending writes survive resume, in LangGraph's order, on one server
    or a cluster."""

    @classmethod
    @contextmanager
    def from_url(
        cls, url: str, *, ttl: dict[str, Any] | None = None, **options: Any
    ) -> Iterator[RedisCheckpointer]:
        """A set-up saver on the Redis a Signoff `REDIS_URL` names (`redis://`,
        `redis+cluster://`, `redis+sentinel://`); `options` go to the client. Closes it on exit."""
        client = connections.sync_client(url, decode_responses=False, **{**resending(Retry), **options})
        try:
            saver = cls(redis_client=client, ttl=ttl)
            saver.setup()
            yield saver
        finally:
            client.close()

    def setup(self) -> None:
        if not self.on_cluster:
            for attempt in range(INDEX_TRIES):
                try:
                    super().setup()
                    return
                except (RedisSearchError, ResponseError) as exc:
                    if not created_meanwhile(exc) or attempt == INDEX_TRIES - 1:
                        raise
            return
        # No index on a cluster (see the module docstring): nothing here searches.
        self._detect_cluster_mode()
        self._key_registry = SyncCheckpointKeyRegistry(self._redis)

    def _run(self, step: Step[T]) -> T:
        reply: Any = None
        while True:
            try:
                request = step.send(reply)
            except StopIteration as done:
                return done.value
            reply = self._execute(request)

    def _execute(self, request: Request) -> Any:
        if isinstance(request, Search):
            index = self.checkpoints_index if request.index == "checkpoints" else self.checkpoint_writes_index
            return index.search(request.query).docs
        if isinstance(request, Scan):
            return list(self._redis.scan_iter(match=request.pattern, count=1000))
        if not request:
            return []
        with self._redis.pipeline(transaction=False) as pipeline:
            for queue in request:
                queue(pipeline)
            return pipeline.execute()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        query = ListQuery.of(config, filter, before, limit)
        emitted = 0
        for page in query.pages(self._run(self._list_refs(query))):
            for found in self._run(self._list_page(query, page)):
                yield found
                emitted += 1
                if query.limit is not None and emitted >= query.limit:
                    return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._run(self._register_put(config, checkpoint))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if writes:
            self._run(self._register_writes(config))
        super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._delete_thread(thread_id))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        max_results: int = 10000,
    ) -> None:
        """Keep the newest `keep_last` checkpoints of each namespace (1 for "keep_latest", 0 for
        "delete") and what their DeltaChannels need; `max_results` caps the search that finds a
        thread the stock saver wrote."""
        kept = resolve_keep_last(keep_last, strategy, max_results)
        for thread_id in thread_ids:
            self._run(self._prune(thread_id, kept, max_results))


class AsyncRedisCheckpointer(RegistryBody, AsyncRedisSaver):
    """`AsyncRedisSaver` with the same mended reads, on one server or a cluster."""

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

    async def asetup(self) -> None:
        if not self.on_cluster:
            for attempt in range(INDEX_TRIES):
                try:
                    await super().asetup()
                    return
                except (RedisSearchError, ResponseError) as exc:
                    if not created_meanwhile(exc) or attempt == INDEX_TRIES - 1:
                        raise
            return
        # No index on a cluster (see the module docstring): nothing here searches.
        self.loop = asyncio.get_running_loop()
        await self._redis.initialize()
        await self._detect_cluster_mode()
        self._key_registry = AsyncCheckpointKeyRegistry(self._redis)

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
        pipeline = self._redis.pipeline(transaction=False)
        for queue in request:
            queue(pipeline)
        return await pipeline.execute()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self._get_tuple(config))

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
        for page in query.pages(await self._run(self._list_refs(query))):
            for found in await self._run(self._list_page(query, page)):
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
        await self._run(self._register_put(config, checkpoint))
        return await super().aput(config, checkpoint, metadata, new_versions, stream_mode)

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
            await self._run(self._register_writes(config))
        await super().aput_writes(config, writes, task_id, task_path)

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
        await self._run(self._delete_thread(thread_id))

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
            await self._run(self._prune(thread_id, kept, max_results))
