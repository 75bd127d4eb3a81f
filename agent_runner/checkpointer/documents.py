"""The checkpointer's pure parts: registry members, checkpoint documents and their writes,
list queries, and what a prune keeps. No I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    PendingWrite,
    get_checkpoint_id,
    writes_sort_key,
)
from langgraph.checkpoint.redis.base import BaseRedisSaver
from langgraph.checkpoint.redis.key_registry import (
    CheckpointKeyRegistry,
)
from langgraph.checkpoint.redis.util import (
    safely_decode,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.constants import TASKS

from agent_runner.checkpointer.requests import (
    Ref,
)

PAGE = 50  # checkpoint documents read per pipeline when listing


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

    def keeps_metadata(self, metadata: dict[str, Any]) -> bool:
        if self.run_id and metadata.get("run_id") != self.run_id:
            return False
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
