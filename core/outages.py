"""Redis being away, as every loop and consumer tells it apart from a real failure: what counts as
an outage (`OUTAGE`, `is_outage`), a lease lost to another worker (`LeaseLost`), a dependency to
wait for (`TryLater`), and the one way they wait: exponential backoff with jitter (`Backoff`), a
sleep a stop cuts short (`pause`), and `until_redis`. The stream consumers (`core.streams`), the
checkpointer's saves and the background loops (`core.loops`) all use these.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

from redis.exceptions import (
    ClusterDownError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.logs import get_logger
from core.metrics import REDIS_OUTAGES

log = get_logger("streams")

# Redis being away (restarted, paused, failing over, connection killed) is not an
# entry's fault: wait and try again. BusyLoadingError and Sentinel's MasterNotFoundError
# are ConnectionErrors; a cluster failing over answers CLUSTERDOWN / TRYAGAIN or has a slot
# nobody serves for a moment; a connection to a master that was demoted answers READONLY.
OUTAGE = (
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
    ReadOnlyError,
)


class LeaseLost(Exception):
    """The entry (or its thread's lock) is no longer this consumer's: another took it over after
    the lease lapsed (this process was frozen, or cut off from Redis). Stop, acknowledge nothing."""


class TryLater(Exception):
    """A handler's way to say: a dependency is down, not this entry's fault; try again later."""


def is_outage(exc: BaseException) -> bool:
    """Redis being away, even when a library wrapped the error (redisvl does).

    Besides the errors in `OUTAGE`: a cluster client that cannot reach any node ("Redis Cluster
    cannot be connected", while every master restarts), and redis-py 8.1's asyncio connection
    torn by another task mid-failover (an AttributeError raised inside redis-py's own code:
    `'NoneType' object has no attribute 'writelines'`). Both pass once the cluster is back.
    """
    return any(
        isinstance(seen, OUTAGE) or _cluster_unreachable(seen) or _torn_connection(seen)
        for seen in _chain(exc)
    )


def is_lease_lost(exc: BaseException) -> bool:
    """`LeaseLost`, even re-raised by a tool or a node as another error."""
    return any(isinstance(seen, LeaseLost) for seen in _chain(exc))


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, innermost last."""
    found: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in found:
        found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


def _cluster_unreachable(exc: BaseException) -> bool:
    """The cluster client reaching no node (every master restarting). Its other errors (keys of
    two slots, a node not in cluster mode) are bugs or settings, not outages."""
    return isinstance(exc, RedisClusterException) and "Cluster cannot be connected" in str(exc)


def _torn_connection(exc: BaseException) -> bool:
    """redis-py's asyncio connection written to after another task closed it (a failover):
    `'NoneType' object has no attribute …` raised in its connection module."""
    if not isinstance(exc, AttributeError) or "'NoneType' object" not in str(exc):
        return False
    innermost = exc.__traceback__
    while innermost is not None and innermost.tb_next is not None:
        innermost = innermost.tb_next
    return (
        innermost is not None and innermost.tb_frame.f_globals.get("__name__") == "redis.asyncio.connection"
    )


def said_failed(name: str, exc: BaseException, away: bool, **context: Any) -> str:
    """Say why a background loop's round (or a stream's reader) failed, the same way for all:
    Redis away (`away`: a warning and the outage metric) or anything else (an error with its
    traceback). Returns the problem readiness reports until a round succeeds."""
    if away:
        log.warning("redis_unavailable", loop=name, error=repr(exc), **context)
        REDIS_OUTAGES.labels(name).inc()
        return f"Redis unavailable: {type(exc).__name__}"
    log.error("loop_failed", loop=name, error=repr(exc), exc_info=exc, **context)
    return f"failed: {type(exc).__name__}"


def is_missing_group(exc: BaseException) -> bool:
    """NOGROUP: the stream or its group vanished (a Redis restarted without persistence)."""
    return isinstance(exc, ResponseError) and "NOGROUP" in str(exc)


class Backoff:
    """Exponential backoff with jitter: 0.1 s doubling up to `cap` seconds."""

    def __init__(self, first: float = 0.1, cap: float = 5.0):
        self.first, self.cap, self.tries = first, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2**self.tries)
        self.tries += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.tries = 0


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep, but wake up at once when `stop` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def until_redis(what: str, stop: asyncio.Event, attempt: Any) -> Any:
    """`await attempt()` until Redis answers (backing off), or None once `stop` is set."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            return await attempt()
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning("waiting_for_redis", what=what, error=repr(exc))
            await pause(stop, backoff.next())
    return None
