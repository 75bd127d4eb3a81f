"""The Redis client Signoff's processes use, and helpers for stream entry ids."""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from core import connections
from core.keys import Keys, Partition

T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


LOCAL_REDIS = "redis://127.0.0.1:6379/0"  # when REDIS_URL is not set
DEFAULT_CLUSTER_PARTITIONS = 12  # spreads evenly over 1, 2, 3, 4, 6 or 12 masters


def redis_client(url: str) -> Any:
    """A client for Signoff's loops and listeners (a cluster client for a cluster).

    Bounded waits: a Redis that is away makes calls fail within seconds (loops
    then back off and reconnect) instead of hanging; 5 s is above the 1 s stream
    blocks. A burst waits for a free connection instead of failing with "Too
    many connections". A pooled connection idle for a few seconds is checked
    (PING) before use, so the first click after a Redis restart does not meet a
    connection the server closed; nothing is ever sent twice. Bytes that are not UTF-8 (written
    by something else: Signoff writes only text) are read with backslash escapes instead of
    failing the whole reply, so one such stream entry cannot stop a consumer or an operator's
    listing.
    """
    return connections.async_client(
        url,
        encoding_errors="backslashreplace",
        socket_timeout=5,
        socket_connect_timeout=2,
        max_connections=64,
        timeout=5,
        health_check_interval=2,
    )


def default_partitions(url: str) -> int:
    """One partition on a single server (or Sentinel's master); on a cluster, enough to spread."""
    return DEFAULT_CLUSTER_PARTITIONS if connections.parse(url).is_cluster else 1


async def each_partition(keys: Keys, call: Callable[[Partition], Awaitable[T]]) -> list[T]:
    """`call` on every partition at once (on a cluster, each goes to the node holding it)."""
    return list(await asyncio.gather(*(call(p) for p in keys.partitions)))


def merge_newest(batches: Iterable[list[tuple[str, dict[str, str]]]]) -> list[tuple[str, dict[str, str]]]:
    """Stream entries of several partitions, newest first (by entry id: time, then sequence)."""
    return list(heapq.merge(*batches, key=lambda item: entry_order(item[0]), reverse=True))


def merge_oldest(batches: Iterable[list[tuple[str, dict[str, str]]]]) -> list[tuple[str, dict[str, str]]]:
    return list(heapq.merge(*batches, key=lambda item: entry_order(item[0])))


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry's place: (milliseconds, sequence)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def dumps(value: Any) -> str:
    """JSON as the scripts store it: compact, anything else as its text."""
    return json.dumps(value, separators=(",", ":"), default=str)
