"""`signoff migrate`: the keys of the layout before partitions moved into partition 0 of the
partitioned one, on the same server, with every bot and runner stopped."""

from __future__ import annotations

from typing import TextIO

from core.store import Store


async def migrate(store: Store, out: TextIO, quiet_s: float = 10.0) -> int:
    """Move the keys of the layout before partitions (`prefix:approval:…`, `prefix:commands`…)
    into partition 0 (`prefix:{tag}:approval:…`), on the same server, with every bot and runner
    stopped. Each key is renamed (streams keep their consumer groups and pending entries, so
    a pending approval's card works after it); dead letters are written again with the stream
    they came from renamed. A mark set first keeps every process from starting until the end,
    and a migration cut off is finished by running it again."""
    prefix = store.keys.prefix
    if store.keys.count != 1 or store.migration.on_a_cluster:
        out.write(
            "signoff migrate moves the old keys into one partition on the same server: run it with "
            "SIGNOFF_PARTITIONS=1 against the server that holds them (to move to a cluster afterwards, "
            "see docs/redis.md).\n"
        )
        return 2
    layout = await store.migration.record()
    if layout is not None and not layout.get("migrating"):
        out.write(f"Nothing to migrate: {prefix!r} is already laid out in partitions.\n")
        return 0
    busy = await store.migration.busy_old_consumers(quiet_s)
    if busy:
        out.write(f"Stop every bot and runner first; still active: {', '.join(busy)}.\n")
        return 1
    await store.migration.mark_started()
    target = store.keys.partitions[0]
    streams, moved = [], 0
    async for key, is_stream in store.migration.old_keys():
        if is_stream:
            streams.append(key)  # last: what a process looks for to tell the old layout
            continue
        if not await _moved(store, key, f"{target.base}:{key[len(prefix) + 1 :]}", out):
            return 1
        moved += 1
    for key in streams:
        if not await _moved(store, key, f"{target.base}:{key[len(prefix) + 1 :]}", out):
            return 1
        moved += 1
    await store.migration.mark_done()
    out.write(f"Moved {moved} keys of {prefix!r} into the partitioned layout (1 partition).\n")
    return 0


async def _moved(store: Store, key: str, new: str, out: TextIO) -> bool:
    if await store.migration.move(key, new):
        return True
    out.write(f"Both {key} and {new} exist: not moved; look at them before starting Signoff.\n")
    return False
