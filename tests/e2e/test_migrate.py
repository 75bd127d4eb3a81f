"""Upgrading a deployment from before partitioned keys: refused until migrated, nothing lost.

The data of the old layout is the new layout's, less the partition tag (every key
`prefix:X` is now `prefix:{tag}:X`, keys of no run are unchanged), so the test
makes it from a real pending approval by taking the tags off.
"""

from __future__ import annotations

import pytest

from core.store.migration import UNMOVED
from tests.support.harness import APPROVE_BUTTON, Harness, eventually, signoff, start_scene
from tests.support.records import two_action_approval


async def to_old_layout(scene: Harness) -> int:
    """Rename every key of the prefix to its name before partitions; returns how many."""
    redis, prefix = scene.store.redis, scene.prefix
    base = scene.store.keys.partitions[0].base
    renamed = 0
    async for key in redis.scan_iter(match=f"{prefix}:*"):
        if key.startswith(f"{base}:"):
            await redis.rename(key, f"{prefix}:{key.removeprefix(base + ':')}")
            renamed += 1
    await redis.delete(scene.store.keys.layout)
    return renamed


async def test_old_data_is_refused_until_migrated_then_its_pending_card_resumes_once(
    redis_url, tmp_path, monkeypatch
):
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    async with start_scene(redis_url, "ledger") as scene:
        thread_id = await scene.ask("send it", graph="ledger")
        card = await scene.card(thread_id)
        await scene.stop_parts()
        assert await to_old_layout(scene) > 5

        refused = await signoff(scene, "pending")
        too_soon = await signoff(scene, "migrate")  # the consumers read a moment ago
        migrated = await signoff(scene, "migrate", "--quiet", "0")
        again = await signoff(scene, "migrate")

        assert refused.returncode == 2 and "run `signoff migrate` once" in refused.stderr
        assert too_soon.returncode == 1 and "Stop every bot and runner first" in too_soon.stdout
        assert migrated.returncode == 0 and "into the partitioned layout" in migrated.stdout, migrated
        assert "Nothing to migrate" in again.stdout
        left = [k async for k in scene.store.redis.scan_iter(match=f"{scene.prefix}:*") if "{" not in k]
        assert all(k.removeprefix(f"{scene.prefix}:").startswith(UNMOVED) for k in left), left

        await scene.start_bot()
        await scene.start_runner("ledger")
        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)
        assert "Sent." in await scene.answer(thread_id)
        assert ledger.read_text().splitlines() == ["a@acme.com"]


async def test_a_process_with_another_partition_count_refuses_to_start(redis_url):
    async with Harness(redis_url) as scene:
        await scene.store.layout.check()  # the data is laid out in one partition
        refused = await signoff(scene, "pending", SIGNOFF_PARTITIONS="4")
        runner = scene.spawn(
            "runner", SIGNOFF_PARTITIONS="4", SIGNOFF_GRAPH="tests.support.graphs:build_ledger_agent"
        )
        bot = scene.spawn("bot", SIGNOFF_PARTITIONS="4")
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

    async with Harness(redis_url) as scene:
        approval = await two_action_approval(scene.store)
        await scene.store.runs.save(Run(thread_id="t1", graph="demo", channel="C1"))
        await to_old_layout(scene)
        real = scene.store.redis.renamenx
        calls = 0

        async def dies_on_the_third(key, new):  # the process is cut off mid-migration
            nonlocal calls
            calls += 1
            if calls == 3:
                raise ConnectionError("migration cut off")
            return await real(key, new)

        scene.store.redis.renamenx = dies_on_the_third
        with pytest.raises(ConnectionError):
            await migrate(scene.store, io.StringIO(), quiet_s=0)
        scene.store.redis.renamenx = real

        with pytest.raises(LayoutError, match="did not finish: run it again"):
            await scene.store.layout.check()
        out = io.StringIO()
        assert await migrate(scene.store, out, quiet_s=0) == 0, out.getvalue()
        await scene.store.layout.check()
        assert [a.approval_id for a in await scene.store.approvals.pending_in()] == [approval.approval_id]
