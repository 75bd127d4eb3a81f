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
from urllib.parse import unquote

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import (
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import Sentinel

Kind = Literal["server", "cluster", "sentinel"]
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")


CLUSTER_NODE = "REDIS_URL names one node of a Redis Cluster: name the cluster, redis+cluster://host:port,…"


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
    """The Redis a URL names, or a `RedisUrlError` saying why it names none (never quoting
    the URL: a password in it may be what makes it unreadable)."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise RedisUrlError(
            f"REDIS_URL must start with redis://, rediss://, unix://, redis+cluster:// or "
            f"redis+sentinel:// (got {scheme + '://' if scheme else 'no scheme'})"
        )
    if scheme in ("redis", "rediss", "unix"):
        return Target("server", url)
    # By hand, not urlsplit: "host:1,host:2" is no netloc, and a password may hold / ? or #.
    # The credentials end at the last "@" (hosts, service and db hold none).
    userinfo, _, rest = url.partition("://")[2].rpartition("@")
    username, _, password = userinfo.partition(":")
    hostlist, _, path_text = rest.partition("/")
    if "?" in rest or "#" in rest:
        raise RedisUrlError(
            "REDIS_URL options (?…) are read only in redis:// URLs; a cluster or Sentinel URL takes "
            "none (percent-encode ? and # in a password)"
        )
    hosts = tuple(_host(item, scheme) for item in hostlist.split(",") if item)
    if not hosts:
        raise RedisUrlError("REDIS_URL names no host")
    path = [p for p in path_text.split("/") if p]
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
        raise RedisUrlError("a Sentinel URL names its service: redis+sentinel://host:26379/mymaster")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise RedisUrlError("a Sentinel URL is redis+sentinel://hosts/service[/db]")
    return Target("sentinel", service=path[0], db=int(path[1]) if len(path) == 2 else 0, **common)  # type: ignore[arg-type]


def hidden(url: str) -> str:
    """A Redis URL to show: everything before its last "@" after the scheme is `***` (a
    password may hold / ? or #, where a general redaction stops)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if sep and "@" in rest else url


def _host(item: str, scheme: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port`."""
    default = str(26379 if scheme.endswith("+sentinel") else 6379)
    if item.startswith("["):
        host, _, after = item[1:].partition("]")
        port = after.removeprefix(":") if after.startswith(":") else (default if not after else "")
    else:
        host, _, port = item.partition(":") if ":" in item else (item, "", default)
    if not host or not port.isdigit() or ":" in port:
        shown = item if "@" not in item else "(a host)"
        raise RedisUrlError(f"REDIS_URL has a host that is not host:port: {shown!r}")
    return host, int(port)


class _Reconnecting:
    """A pooled connection whose health check (a PING before a command, once the connection has
    been idle for `health_check_interval`) connects again when the server had closed it: a
    Redis restarted or failed over. The command then goes on a live connection; only the PING
    is ever repeated. (redis-py disconnects on a failed check, then fails the command, unless
    its client retries every command, which Signoff's writes do not want.)"""

    async def check_health(self) -> None:
        try:
            await super().check_health()  # type: ignore[misc]
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await self.connect()  # type: ignore[attr-defined]  # raises if the server is really away


def _reconnecting(connection_class: type) -> type:
    return type(f"Reconnecting{connection_class.__name__}", (_Reconnecting, connection_class), {})


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """Sentinel's pool (it asks the Sentinels where the master is) with a bound that makes a
    burst wait for a free connection, as on a single server."""


CLUSTER_POOL = 1000  # connections a node, at most, for one asyncio cluster client


def async_client(url: str, decode_responses: bool = True, **options: Any) -> Any:
    """An asyncio client of the Redis `url` names (a `RedisCluster` for a cluster). `options`
    are connection options (timeouts, health checks). On a single server and behind Sentinel,
    `max_connections` bounds a pool that makes a burst wait (up to `timeout`) instead of
    failing. redis-py's cluster client can only fail a command once a node's pool is full
    (`MaxConnectionsError`), so its pools are made large (`CLUSTER_POOL` a node, against
    redis-py's 100, which a bot's after-ack work outgrew at 300 clicks a second): a burst opens
    the connections it needs. Under a burst a command may also meet a connection another task
    tore down (an AttributeError from inside redis-py), which `core.streams.is_outage` counts
    as Redis away, so the caller sends it again."""
    target = parse(url)
    max_connections = options.pop("max_connections", None)
    wait = options.pop("timeout", None)
    if target.kind == "server":
        if max_connections is None:
            return aioredis.Redis.from_url(url, decode_responses=decode_responses, **options)
        pool = aioredis.BlockingConnectionPool.from_url(
            url, decode_responses=decode_responses, max_connections=max_connections, timeout=wait, **options
        )
        pool.connection_class = _reconnecting(pool.connection_class)  # (plain, TLS or a socket file)
        return aioredis.Redis(connection_pool=pool)
    if target.kind == "cluster":
        return AsyncRedisCluster(
            startup_nodes=[AsyncClusterNode(host, port) for host, port in target.hosts],
            max_connections=CLUSTER_POOL,  # (a bound it cannot wait at: see above)
            decode_responses=decode_responses,
            ssl=target.ssl,
            **target.credentials(),
            **options,
        )
    sentinel = AsyncSentinel(
        list(target.hosts),
        sentinel_kwargs={**target.credentials(), **_sentinel_options(options)},
        **({"ssl": True} if target.ssl else {}),
    )
    bound = {"max_connections": max_connections, "timeout": wait} if max_connections else {}
    return sentinel.master_for(
        target.service,
        connection_pool_class=_BlockingSentinelPool if bound else SentinelConnectionPool,
        connection_class=_reconnecting(
            SentinelManagedSSLConnection if target.ssl else SentinelManagedConnection
        ),
        decode_responses=decode_responses,
        db=target.db,
        **target.credentials(),
        **bound,
        **options,
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


# What Signoff needs of a Redis, checked before a command uses it (`signoff run`, the operator
# commands, the local launcher): the modules langgraph-checkpoint-redis needs, on every master.
REQUIRED_MODULES = ("ReJSON", "search")


class RedisSetupError(RuntimeError):
    """This Redis cannot be used (unreachable, a cluster node named as a server, a module
    missing), or the local one cannot be started; the message says what to do."""


def missing_modules(client: redis.Redis) -> list[str]:
    """Which of the modules langgraph-checkpoint-redis needs the server lacks."""
    loaded = {
        (entry[b"name"] if b"name" in entry else entry["name"])
        for entry in client.execute_command("MODULE", "LIST")
    }
    names = {n.decode() if isinstance(n, bytes) else n for n in loaded}
    return [m for m in REQUIRED_MODULES if m not in names]


def check_server(url: str) -> None:
    """Fail plainly unless the Redis at `url` answers and has both modules (every master of a
    cluster; the master the Sentinels name)."""
    shown = hidden(url)
    try:
        kind = parse(url).kind
        servers = server_clients(url)
    except (redis.RedisError, RedisClusterException, RedisUrlError) as exc:
        raise RedisSetupError(f"cannot reach Redis at {shown}: {exc}") from exc
    try:
        for client in servers:
            try:
                client.ping()
                if kind == "server" and client.info("cluster").get("cluster_enabled") == 1:
                    raise RedisSetupError(f"{shown}: {CLUSTER_NODE}")
                missing = missing_modules(client)
            except redis.RedisError as exc:
                raise RedisSetupError(f"cannot reach Redis at {shown}: {exc}") from exc
            if missing:
                raise RedisSetupError(
                    f"Redis at {shown} lacks the module(s) {', '.join(missing)}: "
                    "use Redis 8 (modules built in) or Redis Stack"
                )
    finally:
        for client in servers:
            client.close()
