"""The bodies both savers share (`SlotBody`): generators that yield the Redis requests they
need, with no I/O of their own, on the layout `slots` describes (one script per call), and on
the layout before it (`legacy`) when Redis still holds threads written that way. Also what
both savers read: the runner's `WRITE_FENCE` and `resolve_keep_last`."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.constants import TASKS

from agent_runner.checkpointer import slots
from agent_runner.checkpointer.documents import (
    ListQuery,
    PruneEntry,
    member,
    parse_member,
    sorted_write_docs,
    survivors,
)
from agent_runner.checkpointer.encryption import (
    CheckpointKeyError,
    CheckpointKeys,
    msgpack_dumps,
    reseal,
    unopened,
)
from agent_runner.checkpointer.legacy import SENDS_IN_CHANNELS_VERSION, LegacyBody
from agent_runner.checkpointer.requests import (
    ParentNotSaved,
    Queue,
    Ref,
    Scan,
    Step,
    command,
    delete,
    exists,
    hdel,
    hgetall,
    hmget,
    index_size,
    zrange,
    zrem,
)
from core.outages import LeaseLost

# A run's config may carry, under this key, a coroutine function the async saver awaits before
# it saves a checkpoint: Signoff's runner passes its fencing check (`fence(strict)`: with
# `strict`, Redis is always asked), so a runner that lost the thread's lease (frozen while
# another runner took the thread over) raises instead of saving a step after the new owner's.
# (`__` keeps it out of the checkpoint's metadata.)
WRITE_FENCE = "__signoff_fence"

SCRIPTS = {
    name: (hashlib.sha1(text.encode()).hexdigest(), text)
    for name, text in {
        "put": slots.PUT,
        "writes": slots.WRITES,
        "get": slots.GET,
        "delete": slots.DELETE,
        "reseal": slots.RESEAL,
    }.items()
}
EMPTY = b"empty\x00"  # a channel in `new_versions` without a value (as `InMemorySaver` stores it)


def refs_of(configurable: dict[str, Any]) -> tuple[str, str]:
    return configurable["thread_id"], configurable.get("checkpoint_ns", "")


class SlotBody(LegacyBody):
    """Every operation, as request generators (no I/O here)."""

    # Whether Redis may hold threads of the layout before (decided by the saver's setup).
    legacy = True
    # The keys checkpoints are encrypted and read with (`encryption`); None: stored in the clear.
    keys: CheckpointKeys | None = None
    _sealed: EncryptedSerializer | None = None

    def __init__(self, *args: Any, keys: CheckpointKeys | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keys = keys

    def get_next_version(self, current: Any, channel: Any = None) -> str:
        """A channel's next version: its number, zero-padded so that versions compare as text,
        and a random part, so that two branches of a thread (a fork) never name the same value.
        As the stock saver's and `InMemorySaver`'s, shorter (17 characters rather than 49: each
        checkpoint holds every channel's version, and each node's): a version the stock format
        wrote (32 digits, below 10^10) still sorts before any of these."""
        number = int(str(current).split(".")[0]) if current is not None else 0
        return f"{number + 1:010}.{random.getrandbits(24):06x}"

    def _script(
        self, name: str, keys: Sequence[Any], args: Sequence[Any], lingers: bool = False
    ) -> slots.Script:
        sha, text = SCRIPTS[name]
        return slots.Script(sha, text, keys, args, lingers)

    def _dumps(self, value: Any) -> bytes:
        """`serde.dumps_typed` as msgpack (`encryption.msgpack_dumps`), encrypted when the saver
        has a current key."""
        if self.keys is not None and self.keys.encrypts:
            return slots.typed(self._serializer().dumps_typed(value))
        return slots.typed(msgpack_dumps(self.serde, value))

    def _loads(self, typed: tuple[str, bytes]) -> Any:
        if self.keys is not None:
            return self._serializer().loads_typed(typed)
        if "+" in typed[0]:  # encrypted, and this saver has no key: say so rather than fail obscurely
            raise unopened(typed[0])
        return self.serde.loads_typed(typed)

    def _serializer(self) -> EncryptedSerializer:
        """LangGraph's `EncryptedSerializer` around `serde` (made again for a clone that
        `with_allowlist` gave another `serde`)."""
        assert self.keys is not None
        sealed = self._sealed
        if sealed is None or getattr(sealed.serde, "serde", None) is not self.serde:
            sealed = self._sealed = self.keys.serializer(self.serde)
        return sealed

    def _legacy_present(self) -> Step[bool]:
        """Whether Redis may hold threads of the layout before: on one server, the stock index
        holds documents (that layout indexed every one there); on a cluster, a node holds one
        of its latest pointers (a scan: once, at setup)."""
        if self.on_cluster:
            return bool((yield Scan(f"{self._checkpoint_prefix}_latest:*")))
        if int(self._redis.connection_pool.connection_kwargs.get("db") or 0) != 0:
            return False  # RediSearch indexes database 0 alone: the stock saver ran on no other
        [names] = yield [command("FT._LIST")]
        stock = self.checkpoints_index.name
        if stock.encode() not in {n if isinstance(n, bytes) else str(n).encode() for n in names}:
            return False
        [info] = yield [index_size(stock)]
        return int(info.get("num_docs") or info.get(b"num_docs") or 0) > 0

    # Saving.

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        token: str = "",
    ) -> Step[RunnableConfig]:
        """Save a checkpoint; `token`: the lock token of the runner saving it (refused with
        `LeaseLost` when another runner took the thread since: `slots.FENCE_LUA`)."""
        configurable = config["configurable"]
        thread_id, namespace = refs_of(configurable)
        checkpoint_id = checkpoint["id"]
        parent = configurable.get("checkpoint_id") or ""
        if parent == checkpoint_id:
            parent = ""
        values: dict[str, Any] = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        stored, fields = self._stored_checkpoint(checkpoint)
        items = [
            slots.base(thread_id).encode(),
            namespace.encode(),
            checkpoint_id.encode(),
            parent.encode(),
            b"1" if parent else b"0",  # check that the parent is stored
            str(self._ttl_seconds() or 0).encode(),
            stored,
            self._dumps(get_checkpoint_metadata(config, metadata)),
            fields,
            slots.LIST_SEP.join(k.encode() for k in values),
        ]
        fixed = len(items)
        items += self._value_pairs(new_versions, values)
        key = slots.registry(thread_id)
        [saved] = yield [self._script("put", [key], [slots.pack(items), token])]
        refused_if_fenced(saved, thread_id)
        if not saved:
            # The parent is not stored here: it may be a checkpoint of the layout before.
            found = (
                (yield [exists(self._checkpoint_key((thread_id, namespace, parent)))]) if self.legacy else [0]
            )
            if not found[0]:
                raise ParentNotSaved(
                    f"checkpoint {checkpoint_id} of thread {thread_id} follows {parent}, whose save failed"
                )
            # It is, in the layout before: this checkpoint is the thread's first here, so it
            # stores every channel's value (the versions it did not change are there, not here).
            items[4] = b"0"
            items[fixed:] = self._value_pairs(versions, values)
            [saved] = yield [self._script("put", [key], [slots.pack(items), token])]
            refused_if_fenced(saved, thread_id)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": namespace,
                "checkpoint_id": checkpoint_id,
            }
        }

    def _stored_checkpoint(self, checkpoint: Checkpoint) -> tuple[bytes, bytes]:
        """The checkpoint as stored (without its channel values, and without its channel
        versions when its `n` fields give them back: `slots.versions_as_text`), and those
        fields."""
        stored = checkpoint.copy()
        del stored["channel_values"]  # type: ignore[misc]
        versions = checkpoint["channel_versions"]
        fields = slots.LIST_SEP.join(slots.value_field(k, v) for k, v in versions.items())
        if slots.versions_as_text(versions, fields):  # `n` holds them: stored once, not twice
            del stored["channel_versions"]  # type: ignore[misc]
        return self._dumps(stored), fields

    def _value_pairs(self, versions: ChannelVersions, values: dict[str, Any]) -> list[bytes]:
        """The values hash's field, value pairs for `versions` (a channel without a value:
        `EMPTY`, as `InMemorySaver` stores it)."""
        pairs: list[bytes] = []
        for channel, version in versions.items():
            pairs += [
                slots.value_field(channel, version),
                self._dumps(values[channel]) if channel in values else EMPTY,
            ]
        return pairs

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        token: str = "",
    ) -> Step[None]:
        """Save a task's writes; `token` as for `_put`."""
        configurable = config["configurable"]
        thread_id, namespace = refs_of(configurable)
        checkpoint_id = configurable["checkpoint_id"]
        items = [
            slots.base(thread_id).encode(),
            namespace.encode(),
            checkpoint_id.encode(),
            str(self._ttl_seconds() or 0).encode(),
            *slots.write_triples(writes, task_id, task_path, self._dumps),
        ]
        # (a pause's or a failure's writes are a run's last: no checkpoint follows to go with them)
        last = any(channel in (INTERRUPT, ERROR) for channel, _ in writes)
        [saved] = yield [
            self._script("writes", [slots.registry(thread_id)], [slots.pack(items), token], lingers=not last)
        ]
        if saved == slots.FENCED:
            raise LeaseLost(f"thread {thread_id}: another runner took it, so these writes are not saved")

    def _claim(self, thread_id: str, token: str) -> Step[None]:
        """From now on only saves naming `token` land in the thread (a runner that took its lock)."""
        ttl = self._ttl_seconds() or 0
        yield [command("SET", slots.fence_key(thread_id), token, *(("EX", ttl) if ttl else ()))]

    # Reading.

    def _get(self, config: RunnableConfig) -> Step[CheckpointTuple | None]:
        thread_id, namespace = refs_of(config["configurable"])
        checkpoint_id = get_checkpoint_id(config) or ""
        refresh = bool((self.ttl_config or {}).get("refresh_on_read"))
        args = [slots.base(thread_id), namespace, checkpoint_id, (self._ttl_seconds() or 0) if refresh else 0]
        [reply] = yield [self._script("get", [slots.registry(thread_id)], args)]
        if reply is not None:
            return (yield from self._tuple(thread_id, namespace, reply))
        if not self.legacy:
            return None
        return (yield from self._get_legacy(config))

    def _get_legacy(self, config: RunnableConfig) -> Step[CheckpointTuple | None]:
        """A checkpoint of the layout before, with the writes saved to it since (by this layout:
        a thread paused by an earlier Signoff, resumed by this one), all in `writes_sort_key`
        order; a special channel's write saved since replaces the one saved before."""
        found = yield from self._get_tuple(config)
        if found is None:
            return None
        thread_id, namespace = refs_of(found.config["configurable"])
        ref = (thread_id, namespace, found.config["configurable"]["checkpoint_id"])
        [flat] = yield [hgetall(slots.writes_key(*ref))]
        if not flat:
            return found
        merged: dict[tuple[str, int], tuple[str, str, Any]] = {}
        for doc in sorted_write_docs((yield from self._write_docs([ref]))[ref]):
            value = self.serde.loads_typed((doc["type"], self._decode_blob_static(doc["blob"])))
            merged[(doc["task_id"], int(doc["idx"]))] = (str(doc.get("task_path", "")), doc["channel"], value)
        for task_path, task_id, idx, channel, value in slots.keyed_writes(flat, self._loads):
            if idx < 0 or (task_id, idx) not in merged:
                merged[(task_id, idx)] = (task_path, channel, value)
        ordered = sorted(merged.items(), key=lambda item: writes_sort_key(item[1][0], *item[0]))
        return found._replace(
            pending_writes=[(task_id, channel, value) for (task_id, _), (_, channel, value) in ordered]
        )

    def _tuple(self, thread_id: str, namespace: str, reply: bytes) -> Step[CheckpointTuple]:
        raw_id, raw_checkpoint, raw_metadata, raw_parent, fields, *rest = slots.frames(reply)
        assert raw_id and raw_checkpoint and raw_metadata and raw_parent is not None and fields is not None
        count = fields.count(slots.LIST_SEP) + 1 if fields else 0
        values, writes = rest[:count], rest[count:]
        checkpoint_id, parent = raw_id.decode(), raw_parent.decode()
        checkpoint = self._loads(slots.untyped(raw_checkpoint))
        if "channel_versions" not in checkpoint:  # stored in `n` alone (`slots.versions_as_text`)
            checkpoint["channel_versions"] = slots.decode_versions(fields)
        checkpoint["channel_values"] = slots.decode_values(fields, values, self._loads)
        if parent and checkpoint.get("v", 0) < SENDS_IN_CHANNELS_VERSION:
            [flat] = yield [hgetall(slots.writes_key(thread_id, namespace, parent))]
            sent = slots.decode_writes(flat or [], self._loads)
            checkpoint["pending_sends"] = [value for _, channel, value in sent if channel == TASKS]
        at = {"thread_id": thread_id, "checkpoint_ns": namespace}
        return CheckpointTuple(
            config={"configurable": {**at, "checkpoint_id": checkpoint_id}},
            checkpoint=checkpoint,
            metadata=self._loads(slots.untyped(raw_metadata)),
            parent_config={"configurable": {**at, "checkpoint_id": parent}} if parent else None,
            pending_writes=slots.decode_writes([w or b"" for w in writes], self._loads),
        )

    # Listing.

    def _listed_refs(self, query: ListQuery) -> Step[list[Ref]]:
        if query.thread_id is not None:
            [raw] = yield [zrange(slots.registry(query.thread_id))]
            refs = [parse_member(query.thread_id, item) for item in raw]
        else:
            keys = yield Scan(slots.REGISTRY_PATTERN)
            threads = [thread for thread in map(slots.thread_of, keys) if thread is not None]
            lists = yield [zrange(slots.registry(thread)) for thread in threads]
            refs = [parse_member(t, item) for t, items in zip(threads, lists, strict=True) for item in items]
        if self.legacy:
            refs += yield from self._list_refs(query)
        return query.select(refs)

    def _listed_page(self, query: ListQuery, page: Sequence[Ref]) -> Step[list[CheckpointTuple]]:
        replies = yield [
            self._script("get", [slots.registry(t)], [slots.base(t), ns, cid, 0]) for t, ns, cid in page
        ]
        found: dict[Ref, CheckpointTuple] = {}
        for ref, reply in zip(page, replies, strict=True):
            if reply is not None:
                found[ref] = yield from self._tuple(ref[0], ref[1], reply)
        missing = [ref for ref in page if ref not in found]
        if missing and self.legacy:
            for ref in missing:
                configurable = {"thread_id": ref[0], "checkpoint_ns": ref[1], "checkpoint_id": ref[2]}
                old = yield from self._get_legacy({"configurable": configurable})
                if old is not None:
                    found[ref] = old
        return [
            found[ref] for ref in page if ref in found and query.keeps_metadata(dict(found[ref].metadata))
        ]

    # Removing.

    def _drop(self, thread_id: str) -> Step[None]:
        yield [self._script("delete", [slots.registry(thread_id)], [slots.base(thread_id)])]
        if self.legacy:
            yield from self._delete_thread(thread_id)

    def _prune_slots(self, thread_id: str, keep_last: int) -> Step[None]:
        """Keep the `keep_last` newest checkpoints of each namespace and what their DeltaChannels
        replay (`documents.survivors`); drop the others, their writes and the values that no
        kept checkpoint reads."""
        key = slots.registry(thread_id)
        [raw] = yield [zrange(key)]
        refs = [parse_member(thread_id, item) for item in raw]
        if not refs:
            return
        heads = yield [hmget(slots.checkpoint_key(*ref), "p", "m", "f", "n") for ref in refs]
        entries: dict[Ref, PruneEntry] = {}
        reads: dict[Ref, set[bytes]] = {}
        for ref, (parent, metadata, full, fields) in zip(refs, heads, strict=True):
            if metadata is None:
                entries[ref] = PruneEntry(ref[2], stored=False)
                continue
            counters = self._loads(slots.untyped(metadata)).get("counters_since_delta_snapshot") or {}
            entries[ref] = PruneEntry(
                ref[2],
                stored=True,
                parent_id=parent.decode(),
                delta_channels=frozenset(counters),
                channels=frozenset(c.decode() for c in full.split(slots.LIST_SEP) if c),
            )
            reads[ref] = set(fields.split(slots.LIST_SEP)) if fields else set()
        requests: list[Queue] = []
        evicted: list[Ref] = []
        for namespace in {ref[1] for ref in refs}:
            here = [ref for ref in refs if ref[1] == namespace]
            kept = survivors([entries[ref] for ref in here], keep_last)
            gone = [ref for ref in here if ref[2] not in kept]
            if not gone:
                continue
            evicted += gone
            still_read = set().union(*(reads.get(ref, set()) for ref in here if ref[2] in kept))
            unread = set().union(*(reads.get(ref, set()) for ref in gone)) - still_read
            if not kept:
                requests.append(delete(slots.values_key(thread_id, namespace)))
            elif unread:
                requests.append(hdel(slots.values_key(thread_id, namespace), sorted(unread)))
            for ref in gone:
                requests += [delete(slots.checkpoint_key(*ref)), delete(slots.writes_key(*ref))]
        if evicted:
            requests.append(zrem(key, [member(ns, cid) for _, ns, cid in evicted]))
            yield requests

    # Encrypting again (`signoff migrate --rekey`).

    def _rekey(self, threads: Collection[str] | None = None) -> Step[Rekeyed]:
        """Every stored value of the `threads` given (default: every thread) written again as
        the saver's keys store values now: under the current key (from a former key, or from
        the clear), or in the clear when only old keys are left. Safe while runners save (each
        value is replaced only if it still holds what was read), as long as every one of them
        has the current key."""
        if self.keys is None:
            raise CheckpointKeyError(
                "no SIGNOFF_CHECKPOINT_KEY nor SIGNOFF_CHECKPOINT_OLD_KEYS to rekey with"
            )
        done = Rekeyed()
        stored = {t for t in map(slots.thread_of, (yield Scan(slots.REGISTRY_PATTERN))) if t is not None}
        for thread_id in sorted(stored if threads is None else stored & set(threads)):
            try:
                values, changed = yield from self._reseal(thread_id)
            except CheckpointKeyError:
                done.unreadable.append(thread_id)
                continue
            done.threads += 1
            done.values += values
            done.changed_meanwhile += changed
        done.others = 0 if threads is None else len(stored - set(threads))
        if self.legacy:
            legacy = {ref[0] for ref in (yield from self._all_members())}
            done.legacy = sorted(legacy if threads is None else legacy & set(threads))
        return done

    def _reseal(self, thread_id: str) -> Step[tuple[int, int]]:
        """A thread's values written again (`_rekey`): how many were, and how many had changed
        since they were read (a save meanwhile, which wrote them under the current key)."""
        [raw] = yield [zrange(slots.registry(thread_id))]
        refs = [parse_member(thread_id, item) for item in raw]
        hashes = [(slots.values_key(thread_id, ns), "values") for ns in sorted({ns for _, ns, _ in refs})]
        hashes += [(slots.checkpoint_key(*ref), "checkpoint") for ref in refs]
        hashes += [(slots.writes_key(*ref), "writes") for ref in refs]
        stored = yield [hgetall(key) for key, _ in hashes]
        requests: list[Queue] = []
        asked = 0
        for (key, kind), found in zip(hashes, stored, strict=True):
            triples = [item for triple in self._resealed(kind, found or {}) for item in triple]
            if triples:
                asked += len(triples) // 3
                requests.append(self._script("reseal", [key], [slots.pack(triples)]))
        if not requests:
            return 0, 0
        done = sum(int(n) for n in (yield requests))
        return done, asked - done

    def _resealed(self, kind: str, found: dict[bytes, bytes]) -> Iterator[tuple[bytes, bytes, bytes]]:
        """(field, value, new value) for each value of a hash that `reseal` changes."""
        assert self.keys is not None
        for name, value in found.items():
            if kind == "checkpoint" and name not in (b"c", b"m"):  # the parent's id, fields, channels
                continue
            if kind == "writes":  # task path, channel, then the value
                path, channel, typed = value.split(slots.SEP, 2)
                new = reseal(self.keys, typed)
                if new is not None:
                    yield name, value, slots.SEP.join((path, channel, new))
                continue
            new = reseal(self.keys, value)
            if new is not None:
                yield name, value, new


@dataclass
class Rekeyed:
    """What `rekey` did: values written again under the current key (in the clear without
    one), values left because a save changed them meanwhile (written under the current key by
    then), threads with a value no key opens (left as they were), threads of the layout
    before (never encrypted: see docs/security.md), and threads left alone (not asked for)."""

    threads: int = 0
    values: int = 0
    changed_meanwhile: int = 0
    unreadable: list[str] = field(default_factory=list)
    legacy: list[str] = field(default_factory=list)
    others: int = 0


def refused_if_fenced(saved: Any, thread_id: str) -> None:
    """A checkpoint's save that Redis refused (`slots.FENCED`): another runner took the thread."""
    if saved == slots.FENCED:
        raise LeaseLost(f"thread {thread_id}: another runner took it, so this checkpoint is not saved")


def resolve_keep_last(keep_last: int | None, strategy: str, max_results: int) -> int:
    if keep_last is None:
        keep_last = 0 if strategy == "delete" else 1
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    if max_results < 1:
        raise ValueError(f"max_results must be >= 1, got {max_results}")
    return keep_last
