"""Which Redis, from one URL, and every client Signoff makes of it (as arq's `connections`).

`REDIS_URL` takes three forms; nothing else in Signoff knows which one it got:

* `redis://[user:password@]host:port/db` (or `rediss://`, `unix://`): one server.
* `redis+cluster://[user:password@]host:port[,host:port…]` (or `rediss+cluster://`):
  a Redis Cluster. Any of its nodes will do; the others are found from them, and
  redis-py follows slots that move (MOVED / ASK) and a replica promoted in a failover.
* `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`: the master
  that the Sentinels at those addresses know as `service` (the form redisvl takes).
  The credentials are the master's and the Sentinels'. After a failover the next
  connection asks the Sentinels again, so every process follows the new master.

Signoff's own keys are laid out for a cluster whatever the URL (see `keys`), so the
same code runs on all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from agent_runner.logs import redact

Kind = Literal["server", "cluster", "sentinel"]
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")


class RedisUrlError(ValueError):
    """`REDIS_URL` names no Redis Signoff can connect to; the message says which form it takes."""


@dataclass(frozen=True)
class Target:
    """What a `REDIS_URL` names."""

    kind: Kind
    url: str  # as given (a one-server URL is handed to redis-py as it is)
    hosts: tuple[tuple[str, int], ...] = ()  # cluster nodes, or Sentinels
    service: str = ""  # the Sentinel service (the master's name)
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: bool = False

    @property
    def is_cluster(self) -> bool:
        return self.kind == "cluster"

    def credentials(self) -> dict[str, Any]:
        found = {"username": self.username, "password": self.password}
        return {k: v for k, v in found.items() if v is not None}


def parse(url: str) -> Target:
    """The Redis a URL names, or a `RedisUrlError` saying why it names none."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise RedisUrlError(
            f"REDIS_URL must start with redis://, rediss://, unix://, redis+cluster:// or "
            f"redis+sentinel:// (got {scheme + '://' if scheme else 'no scheme'})"
        )
    if scheme in ("redis", "rediss", "unix"):
        return Target("server", url)
    parts = urlsplit(url)
    # urlsplit cannot read "host:1,host:2" as a netloc with a port: split the hosts by hand.
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    hosts = tuple(_host(item, scheme, url) for item in hostlist.split(",") if item)
    if not hosts:
        raise RedisUrlError(f"REDIS_URL names no host: {redact(url)}")
    path = [p for p in parts.path.split("/") if p]
    common = {
        "url": url,
        "hosts": hosts,
        "username": unquote(username) or None,
        "password": unquote(password) or None,
        "ssl": scheme.startswith("rediss"),
    }
    if scheme.endswith("+cluster"):
        if path and path != ["0"]:
            raise RedisUrlError("a Redis Cluster has only database 0: drop the /db from REDIS_URL")
        return Target("cluster", **common)  # type: ignore[arg-type]
    if not path:
        raise RedisUrlError(
            f"a Sentinel URL names its service: redis+sentinel://host:26379/mymaster ({redact(url)})"
        )
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise RedisUrlError(f"a Sentinel URL is redis+sentinel://hosts/service[/db] ({redact(url)})")
    return Target("sentinel", service=path[0], db=int(path[1]) if len(path) == 2 else 0, **common)  # type: ignore[arg-type]


def _host(item: str, scheme: str, url: str) -> tuple[str, int]:
    default = 26379 if scheme.endswith("+sentinel") else 6379
    host, _, port = item.rpartition(":") if ":" in item else (item, "", str(default))
    if not host or not port.isdigit():
        raise RedisUrlError(f"REDIS_URL has a host that is not host:port: {item!r} in {redact(url)}")
    return host.strip("[]"), int(port)


def async_client(url: str, decode_responses: bool = True, **options: Any) -> Any:
    """An asyncio client of the Redis `url` names (a `RedisCluster` for a cluster). `options`
    are connection options (timeouts, health checks); a single server's `max_connections`
    bounds a pool that makes a burst wait instead of failing."""
    target = parse(url)
    if target.kind == "server":
        max_connections = options.pop("max_connections", None)
        wait = options.pop("timeout", None)
        if max_connections is None:
            return aioredis.Redis.from_url(url, decode_responses=decode_responses, **options)
        pool = aioredis.BlockingConnectionPool.from_url(
            url, decode_responses=decode_responses, max_connections=max_connections, timeout=wait, **options
        )
        return aioredis.Redis(connection_pool=pool)
    options.pop("timeout", None)
    if target.kind == "cluster":
        return AsyncRedisCluster(
            startup_nodes=[AsyncClusterNode(host, port) for host, port in target.hosts],
            decode_responses=decode_responses,
            ssl=target.ssl,
            **target.credentials(),
            **options,
        )
    options.pop("max_connections", None)
    sentinel = AsyncSentinel(
        list(target.hosts),
        sentinel_kwargs={**target.credentials(), **_sentinel_options(options)},
        **({"ssl": True} if target.ssl else {}),
    )
    return sentinel.master_for(
        target.service, decode_responses=decode_responses, db=target.db, **target.credentials(), **options
    )


def sync_client(url: str, decode_responses: bool = True, **options: Any) -> Any:
    """The blocking twin of `async_client` (operator commands, checks, benchmarks)."""
    target = parse(url)
    if target.kind == "server":
        return redis.Redis.from_url(url, decode_responses=decode_responses, **options)
    if target.kind == "cluster":
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.hosts],
            decode_responses=decode_responses,
            ssl=target.ssl,
            **target.credentials(),
            **options,
        )
    sentinel = Sentinel(
        list(target.hosts),
        sentinel_kwargs={**target.credentials(), **_sentinel_options(options)},
        **({"ssl": True} if target.ssl else {}),
    )
    return sentinel.master_for(
        target.service, decode_responses=decode_responses, db=target.db, **target.credentials(), **options
    )


def _sentinel_options(options: dict[str, Any]) -> dict[str, Any]:
    """A Sentinel that does not answer is skipped quickly for the next one."""
    return {k: options[k] for k in ("socket_timeout", "socket_connect_timeout") if k in options}


def server_clients(url: str) -> list[redis.Redis]:
    """One plain client per server holding data (each cluster master; the Sentinels' master),
    for checks that ask each server about itself (MODULE LIST, INFO memory)."""
    target = parse(url)
    if target.kind == "server":
        return [redis.Redis.from_url(url)]
    if target.kind == "sentinel":
        return [sync_client(url, decode_responses=False)]
    cluster = sync_client(url, decode_responses=False)
    try:
        return [
            redis.Redis(host=node.host, port=node.port, ssl=target.ssl, **target.credentials())
            for node in cluster.get_primaries()
        ]
    finally:
        cluster.close()
