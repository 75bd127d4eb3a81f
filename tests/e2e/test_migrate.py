"""Upgrading a deployment from before partitioned keys: refused until migrated, nothing lost.

The data of the old layout is the new layout's, less the partition tag (every key
`prefix:X` is now `prefix:{tag}:X`, keys of no run are unchanged), so the test
makes it from a real pending approval by taking the tags off.
"""

from __future__ import annotations

import asyncio

import pytest

from core.store.migration import UNMOVED
from tests.harness import Loop, eventually
from tests.test_operate import signoff

APPROVE = "approve:0"


async def to_old_layout(loop: Loop) -> int:
    """Rename every key of the prefix to its name before partitions; returns how many."""
    redis, prefix = loop.store.redis, loop.prefix
    base = loop.store.keys.partitions[0].base
    renamed = 0
    async for key in redis.scan_iter(match=f"{prefix}:*"):
        if key.startswith(f"{base}:"):
            await redis.rename(key, f"{prefix}:{key.removeprefix(base + ':')}")
            renamed += 1
    await redis.delete(loop.store.keys.layout)
    return renamed


async def stop_parts(loop: Loop) -> None:
    loop.stop.set()
    await asyncio.gather(*loop.tasks)
    loop.tasks.clear()
    loop.stop = asyncio.Event()


async def test_old_data_is_refused_until_migrated_then_its_pending_card_resumes_once(
    redis_url, tmp_path, monkeypatch
):
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    async with Loop(redis_url) as loop:
        await loop.start_bot()
        await loop.start_runner("ledger")
        thread_id = await loop.ask("send it", graph="ledger")
        card = await loop.card(thread_id)
        await stop_parts(loop)
        assert await to_old_layout(loop) > 5

        refused = await signoff(loop, "pending")
        too_soon = await signoff(loop, "migrate")  # the consumers read a moment ago
        migrated = await signoff(loop, "migrate", "--quiet", "0")
        again = await signoff(loop, "migrate")

        assert refused.returncode == 2 and "run `signoff migrate` once" in refused.stderr
        assert too_soon.returncode == 1 and "Stop every bot and runner first" in too_soon.stdout
        assert migrated.returncode == 0 and "into the partitioned layout" in migrated.stdout, migrated
        assert "Nothing to migrate" in again.stdout
        left = [k async for k in loop.store.redis.scan_iter(match=f"{loop.prefix}:*") if "{" not in k]
        assert all(k.removeprefix(f"{loop.prefix}:").startswith(UNMOVED) for k in left), left

        await loop.start_bot()
        await loop.start_runner("ledger")
        await loop.standin.click("U0ALICE", card, APPROVE)
        assert "Sent." in await loop.answer(thread_id)
        assert ledger.read_text().splitlines() == ["a@acme.com"]


async def test_a_process_with_another_partition_count_refuses_to_start(redis_url):
    async with Loop(redis_url) as loop:
        await loop.store.check_layout()  # the data is laid out in one partition
        refused = await signoff(loop, "pending", SIGNOFF_PARTITIONS="4")
        runner = loop.spawn("runner", SIGNOFF_PARTITIONS="4", SIGNOFF_GRAPH="tests.graphs:build_ledger_agent")
        bot = loop.spawn("bot", SIGNOFF_PARTITIONS="4")
        codes = await eventually(
            lambda: None not in (runner.poll(), bot.poll()) and [runner.returncode, bot.returncode],
            what="runner and bot exit",
        )

    assert refused.returncode == 2
    assert "holds Signoff data in 1 partitions" in refused.stderr and "SIGNOFF_PARTITIONS=1" in refused.stderr
    assert codes == [2, 2]


async def test_a_migration_cut_off_halfway_keeps_every_process_out_until_run_again(redis_url):
    import io

    from core.records import Run
    from core.store import LayoutError
    from signoff.commands.migrate import migrate
    from tests.test_store import two_action_approval

    async with Loop(redis_url) as loop:
        approval = await two_action_approval(loop.store)
        await loop.store.save_run(Run(thread_id="t1", graph="demo", channel="C1"))
        await to_old_layout(loop)
        real = loop.store.redis.renamenx
        calls = 0

        async def dies_on_the_third(key, new):  # the process is cut off mid-migration
            nonlocal calls
            calls += 1
            if calls == 3:
                raise ConnectionError("migration cut off")
            return await real(key, new)

        loop.store.redis.renamenx = dies_on_the_third
        with pytest.raises(ConnectionError):
            await migrate(loop.store, io.StringIO(), quiet_s=0)
        loop.store.redis.renamenx = real

        with pytest.raises(LayoutError, match="did not finish: run it again"):
            await loop.store.check_layout()
        out = io.StringIO()
        assert await migrate(loop.store, out, quiet_s=0) == 0, out.getvalue()
        await loop.store.check_layout()
        assert [a.approval_id for a in await loop.store.pending_in()] == [approval.approval_id]
