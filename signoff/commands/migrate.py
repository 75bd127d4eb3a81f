"""`signoff migrate`: the keys of the layout before partitions moved into partition 0 of the
partitioned one, on the same server, with every bot and runner stopped."""

from __future__ import annotations

import json
from typing import TextIO

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ResponseError

from core.keys import BOTS_GROUP, LAYOUT_VERSION, RUNNERS_GROUP
from core.store import Store

# Keys of no run: the same name in both layouts.
UNMOVED = ("slackthread:", "dedupe:", "rate:", "groups", "layout")


async def migrate(store: Store, out: TextIO, quiet_s: float = 10.0) -> int:
    """Move the keys of the layout before partitions (`prefix:approval:…`, `prefix:commands`…)
    into partition 0 (`prefix:{tag}:approval:…`), on the same server, with every bot and runner
    stopped. Each key is renamed (streams keep their consumer groups and pending entries, so
    a pending approval's card works after it); dead letters are written again with the stream
    they came from renamed. A mark set first keeps every process from starting until the end,
    and a migration cut off is finished by running it again."""
    prefix = store.keys.prefix
    if store.keys.count != 1 or isinstance(store.redis, AsyncRedisCluster):
        out.write(
            "signoff migrate moves the old keys into one partition on the same server: run it with "
            "SIGNOFF_PARTITIONS=1 against the server that holds them (to move to a cluster afterwards, "
            "see docs/redis.md).\n"
        )
        return 2
    raw = await store.redis.get(store.keys.layout)
    if raw is not None and not json.loads(raw).get("migrating"):
        out.write(f"Nothing to migrate: {prefix!r} is already laid out in partitions.\n")
        return 0
    busy = await _busy_consumers(store, prefix, quiet_s)
    if busy:
        out.write(f"Stop every bot and runner first; still active: {', '.join(busy)}.\n")
        return 1
    await store.redis.set(store.keys.layout, json.dumps({"version": 1, "migrating": True}))
    target = store.keys.partitions[0]
    streams, moved = [], 0
    async for key in store.redis.scan_iter(match=f"{prefix}:*", count=500):
        rest = key[len(prefix) + 1 :]
        if rest.startswith("{") or rest.startswith(UNMOVED):
            continue
        if await store.redis.type(key) == "stream":
            streams.append(key)  # last: what a process looks for to tell the old layout
            continue
        if not await _moved(store, key, f"{target.base}:{rest}", out):
            return 1
        moved += 1
    for key in streams:
        if not await _moved(store, key, f"{target.base}:{key[len(prefix) + 1 :]}", out):
            return 1
        moved += 1
    await store.redis.set(store.keys.layout, json.dumps({"version": LAYOUT_VERSION, "partitions": 1}))
    out.write(f"Moved {moved} keys of {prefix!r} into the partitioned layout (1 partition).\n")
    return 0


async def _moved(store: Store, key: str, new: str, out: TextIO) -> bool:
    prefix = store.keys.prefix
    if key.endswith(":deadletters"):  # their entries name the stream they came from: renamed too
        for entry_id, fields in await store.redis.xrange(key):
            stream = fields.get("stream", "")
            if stream.startswith(f"{prefix}:") and not stream[len(prefix) + 1 :].startswith("{"):
                stream = f"{store.keys.partitions[0].base}:{stream[len(prefix) + 1 :]}"
            async with store.redis.pipeline(transaction=True) as pipe:  # moved once, even if cut off
                pipe.xadd(new, {**fields, "stream": stream})
                pipe.xdel(key, entry_id)
                await pipe.execute()
        await store.redis.delete(key)
        return True
    if await store.redis.renamenx(key, new):
        return True
    out.write(f"Both {key} and {new} exist: not moved; look at them before starting Signoff.\n")
    return False


async def _busy_consumers(store: Store, prefix: str, quiet_s: float) -> list[str]:
    """Consumers of the old streams seen within `quiet_s` (a bot or runner still running)."""
    busy = []
    for stream, group in ((f"{prefix}:commands", RUNNERS_GROUP), (f"{prefix}:events", BOTS_GROUP)):
        try:
            consumers = await store.redis.xinfo_consumers(stream, group)
        except ResponseError as exc:
            if "no such key" in str(exc).lower() or "NOGROUP" in str(exc):
                continue  # no such stream or group: nobody reads it
            raise
        # `idle`: since its last read of any kind (a waiting consumer reads every second)
        busy += [c["name"] for c in consumers if int(c.get("idle", 0)) < quiet_s * 1000]
    return busy
