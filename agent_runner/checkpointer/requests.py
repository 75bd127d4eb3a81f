"""What the checkpointer's bodies ask of Redis (pipelined commands, a search, a scan), and the
errors they tell apart."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redisvl.query import FilterQuery

T = TypeVar("T")
Ref = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id


# --- Requests the bodies yield, and their replies -----------------------------------------

Queue = Callable[[Any], object]  # puts one command on a pipeline


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


def hgetall(key: Any) -> Queue:
    return lambda pipe: pipe.hgetall(key)


def hmget(key: Any, *fields: str) -> Queue:
    return lambda pipe: pipe.hmget(key, *fields)


def hdel(key: Any, fields: Sequence[bytes]) -> Queue:
    return lambda pipe: pipe.hdel(key, *fields)


def with_scripts(request: Sequence[Queue]) -> list[Queue]:
    """The same request with its scripts sent in full (EVAL), for a server that lacks them."""
    return [getattr(queue, "fallback", queue) for queue in request]


def command(*args: Any) -> Queue:
    return lambda pipe: pipe.execute_command(*args)


def index_size(name: str) -> Queue:
    """How many documents a search index holds."""
    return lambda pipe: pipe.ft(name).info()


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
