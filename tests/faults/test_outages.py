"""A Redis outage as an approved tool ends never runs the tool a second time.

A tool's result is recorded by the checkpointer's writes after the tool returns. When Redis is
away at that moment (a restart, a failover, a network cut), the runner that ran the tool keeps
those writes and sends them again once Redis answers, as long as it still holds the thread's
lease; it never handles the command again from the checkpoint before the tool. Each test here
drives the outage to land on the tool's end: the tool starts, Redis goes away while it runs,
the tool returns during the outage, and Redis comes back seconds later. Two runners share the
commands, so a second execution by either of them would show in the ledger.

What is counted: how many times the tool started (`SIGNOFF_TEST_STARTED`, one line a start)
and ran to its end (the ledger), and that the run's answer came, once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from langgraph.checkpoint.base import empty_checkpoint

from agent_runner.checkpointer import WRITE_FENCE, AsyncRedisCheckpointer
from core.outages import LeaseLost
from signoff_demo import redis_server
from tests.support.files import lines
from tests.support.harness import APPROVE_BUTTON, Harness, eventually, runners_idle
from tests.support.proxy import HoldingProxy
from tests.support.redis_faults import LEDGER, caught_up_then_killed, master_of

pytestmark = pytest.mark.slow
TOOL_S = 4.0  # the approved tool's length
# Redis goes away this long after the tool started: after the fencing check before the tool
# (which extends the thread's lock) reached the AOF, which is written every second.
AWAY_AFTER_START = 1.5


async def _approved_tool_meets_an_outage(
    scene: Harness, tmp_path: Path, outage: Callable[[str], Awaitable[None]]
) -> tuple[list[str], list[str], str]:
    """Two runner processes; the ledger agent's tool approved, then `outage(thread_id)` once it
    runs. Returns the tool's starts and ends, and the run's thread, once both runners are idle."""
    ledger, started = tmp_path / "ledger.txt", tmp_path / "started.txt"
    await scene.start_bot()
    for n in (1, 2):
        scene.spawn(
            "runner",
            SIGNOFF_GRAPH=LEDGER,
            SIGNOFF_CONSUMER=f"runner-{n}",
            SIGNOFF_TEST_LEDGER=ledger,
            SIGNOFF_TEST_STARTED=started,
            SIGNOFF_TEST_TOOL_S=TOOL_S,
        )
    thread_id = await scene.ask("send it", graph="ledger")
    card = await scene.card(thread_id, timeout=60)
    assert (await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)).acked
    await eventually(lambda: lines(started), timeout=60, what="the approved tool at work")
    await asyncio.sleep(AWAY_AFTER_START)
    await outage(thread_id)
    assert "Sent." in await scene.answer(thread_id, timeout=120)
    # Every command acknowledged and the thread's lock free: a second execution, by the same
    # runner or by the other one taking the command over, would have started by now.
    await eventually(lambda: runners_idle(scene, thread_id), timeout=120, what="both runners done")
    return lines(started), lines(ledger), thread_id


@pytest.mark.parametrize("after_the_tool_s", [3, 6, 20])
async def test_a_redis_restart_as_the_approved_tool_ends_runs_it_once(tmp_path, after_the_tool_s):
    server = redis_server.start(data_dir=tmp_path / "redis", appendonly=True)
    port = server.port

    async def restarted_from_its_aof(_thread_id: str) -> None:
        nonlocal server
        server.process.kill()  # kill -9: what is not in the AOF is lost
        server.process.wait(10)
        await asyncio.sleep(TOOL_S - AWAY_AFTER_START + after_the_tool_s)  # the tool ends meanwhile
        server = await asyncio.to_thread(
            redis_server.start, port, tmp_path / "redis", True
        )  # (same port, same AOF)

    try:
        async with Harness(server.url) as scene:
            starts, ends, _ = await _approved_tool_meets_an_outage(scene, tmp_path, restarted_from_its_aof)
    finally:
        server.stop()
    assert len(starts) == 1, f"the tool started {len(starts)} times: {starts}"
    assert ends == ["a@acme.com"]


async def test_a_cluster_master_failing_over_as_the_approved_tool_ends_runs_it_once(tmp_path):
    # A node timeout of 5 s: the replica is promoted 6-7 s after the kill.
    cluster = redis_server.start_cluster(3, replicas=1, node_timeout_ms=5_000)
    try:
        async with Harness(cluster.url) as scene:

            async def master_of_the_thread_killed(thread_id: str) -> None:
                master = master_of(cluster, f"checkpoints:{{{thread_id}}}:r")
                await asyncio.to_thread(caught_up_then_killed, master)

            starts, ends, _ = await _approved_tool_meets_an_outage(
                scene, tmp_path, master_of_the_thread_killed
            )
    finally:
        cluster.stop()
    assert len(starts) == 1, f"the tool started {len(starts)} times: {starts}"
    assert ends == ["a@acme.com"]


async def test_a_sentinel_failover_as_the_approved_tool_ends_runs_it_once(tmp_path):
    group = redis_server.start_sentinel(replicas=1, sentinels=3, down_after_ms=5_000)
    try:
        async with Harness(group.url) as scene:

            async def master_killed(_thread_id: str) -> None:
                await asyncio.to_thread(caught_up_then_killed, group.master)

            starts, ends, _ = await _approved_tool_meets_an_outage(scene, tmp_path, master_killed)
    finally:
        group.stop()
    assert len(starts) == 1, f"the tool started {len(starts)} times: {starts}"
    assert ends == ["a@acme.com"]


async def test_a_save_held_up_by_a_network_cut_past_the_lease_never_lands_after_another_runner_took_over(
    redis_url,
):
    """A cut that drops packets: the save does not fail, it waits. It is given up after the
    saver's socket timeout and sent again, asking the fence first (the lease lapsed: LeaseLost);
    the first request, delivered when the cut heals, is refused by Redis itself, for runner B
    claimed the thread meanwhile."""
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    proxy = HoldingProxy(host, int(port))
    through = await proxy.start()
    direct = aioredis.Redis.from_url(redis_url)
    thread = f"cut-{uuid.uuid4().hex}"
    lock = f"test-lock:{thread}"

    async def fence(strict: bool) -> str:  # as RunnerWorker.fence: strict asks Redis
        if strict and await direct.get(lock) != b"runner-A":
            raise LeaseLost("taken over")
        return "runner-A"

    try:
        async with (
            AsyncRedisCheckpointer.from_url(f"redis://127.0.0.1:{through}", socket_timeout=1) as a_saver,
            AsyncRedisCheckpointer.from_url(redis_url) as b_saver,
        ):
            first = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            saved = await a_saver.aput(first, empty_checkpoint(), {"source": "input", "step": -1}, {})
            await direct.set(lock, "runner-A", px=1_500)  # runner A holds the thread
            await a_saver.claim(thread, "runner-A")

            proxy.hold()  # the cut begins as the tool's result is saved
            config = {"configurable": {**saved["configurable"], WRITE_FENCE: fence}}
            save = asyncio.create_task(a_saver.aput_writes(config, [("messages", "refund sent")], "task-1"))
            await asyncio.sleep(2.0)
            await direct.set(lock, "runner-B", px=30_000)  # the lease lapsed: runner B took the thread
            await b_saver.claim(thread, "runner-B")

            with pytest.raises(LeaseLost):  # given up after the timeout, and refused by the fence
                await asyncio.wait_for(save, 30)
            proxy.heal()  # the first request reaches Redis now
            await asyncio.sleep(1.0)
            found = await b_saver.aget_tuple(saved)
            assert found is not None and found.pending_writes == []  # runner A's late writes never landed
    finally:
        await proxy.close()
        await direct.aclose()
