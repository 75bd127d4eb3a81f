"""`signoff migrate`: the keys of the layout before partitions moved into partition 0 of the
partitioned one, on the same server, with every bot and runner stopped; `signoff migrate --rekey`:
the checkpoints written again under the current checkpoint key (docs/security.md)."""

from __future__ import annotations

from typing import TextIO

from agent_runner.checkpointer import AsyncRedisCheckpointer, CheckpointKeys
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


async def rekey(store: Store, url: str, keys: CheckpointKeys | None, out: TextIO) -> int:
    """`signoff migrate --rekey`: every stored checkpoint, channel value and pending write of this
    deployment's runs (those `store` keeps a record of) written again under SIGNOFF_CHECKPOINT_KEY
    (from SIGNOFF_CHECKPOINT_OLD_KEYS, or from the clear), or in the clear when only old keys are
    set. Safe while bots and runners run, once every runner has the current key: a value a runner
    saves meanwhile is left as it saved it. Another deployment's threads on the same Redis (another
    SIGNOFF_PREFIX: checkpoints are not under it) are left alone."""
    if keys is None:
        out.write(
            "signoff migrate --rekey encrypts the checkpoints under SIGNOFF_CHECKPOINT_KEY: set it (and the "
            "key they are under now, if any, in SIGNOFF_CHECKPOINT_OLD_KEYS).\n"
        )
        return 2
    threads = await store.runs.thread_ids()
    async with AsyncRedisCheckpointer.from_url(url, keys=keys) as saver:
        done = await saver.arekey(threads)
    under = "under SIGNOFF_CHECKPOINT_KEY" if keys.encrypts else "in the clear (no SIGNOFF_CHECKPOINT_KEY)"
    out.write(f"Wrote {done.values} stored values of {done.threads} threads again {under}")
    if done.changed_meanwhile:
        out.write(f"; {done.changed_meanwhile} were saved again meanwhile, by a runner with this key")
    out.write(".\n")
    if done.others:
        out.write(
            f"{done.others} other threads in this Redis's checkpoints have no run under "
            f"SIGNOFF_PREFIX={store.keys.prefix!r}: left as they are.\n"
        )
    if done.legacy:
        out.write(
            f"{len(done.legacy)} threads of the stock saver's layout (RedisJSON documents, from before "
            "Signoff's own) stay in the clear: Signoff only reads them; the retention deletes them.\n"
        )
    if done.unreadable:
        shown = ", ".join(done.unreadable[:10]) + (" …" if len(done.unreadable) > 10 else "")
        out.write(
            f"{len(done.unreadable)} threads hold values that no key given opens, left as they were: "
            f"{shown}. Add the key they were written under to SIGNOFF_CHECKPOINT_OLD_KEYS and run this again.\n"
        )
        return 1
    if keys.encrypts:
        out.write(
            "Once every runner has run with this key since, SIGNOFF_CHECKPOINT_OLD_KEYS may go "
            "(run this again first: it should write 0 values).\n"
        )
    return 0
