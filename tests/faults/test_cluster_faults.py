"""A Redis Cluster failing under Signoff's processes: every loop waits it out, none dies.

With real processes (`signoff bot`, `signoff runner`) on a local three-master cluster:

* every master killed (-9) and started again (AOF on) with a card pending and two runners:
  every process is ready again, none exited, and the click then resumes the run once;
* a master killed in the middle of a burst of clicks on two bots (a replica per master), while
  the first approved tool runs on a thread whose checkpoints it holds (the tool ends during the
  failover): both bots stay alive and ready, every approval is decided (people click again what
  was lost) and every approved tool runs exactly once.

redis-py raises more than connection errors meanwhile ("Redis Cluster cannot be connected",
an AttributeError of a connection torn mid-failover): before this, runners exited and bots
kept running with dead loops.
"""

from __future__ import annotations

import asyncio
import copy
import time

import pytest

from signoff_demo import redis_server
from signoff_demo.redis_server import free_port
from tests.support.files import lines
from tests.support.harness import Harness, eventually, probe, resume_commands
from tests.support.redis_faults import LEDGER, caught_up_then_killed, master_of

pytestmark = pytest.mark.slow
BURST_TOOL_S = 2.0  # the burst's tools: the first ends during the failover


async def all_ready(ports: list[int]) -> bool:
    return all([await probe(port, "readyz") == 200 for port in ports])


async def test_every_master_restarted_with_a_card_pending_every_process_carries_on(tmp_path):
    cluster = redis_server.start_cluster(3, appendonly=True, data_dir=tmp_path / "cluster")
    ledger = tmp_path / "ledger.txt"
    try:
        async with Harness(cluster.url) as scene:
            ports = [scene.port, free_port(), free_port()]
            processes = [scene.spawn("bot")] + [
                scene.spawn(
                    "runner",
                    SIGNOFF_GRAPH=LEDGER,
                    SIGNOFF_TEST_LEDGER=ledger,
                    SIGNOFF_CONSUMER=f"runner-{port}",
                    SIGNOFF_RUNNER_PORT=port,
                )
                for port in ports[1:]
            ]
            await eventually(lambda: all_ready(ports), timeout=60, what="every process ready")
            thread_id = await scene.ask("send it", graph="ledger")
            card = await scene.card(thread_id, timeout=60)

            await asyncio.to_thread(cluster.restart)  # kill -9 of every master, then each again

            await eventually(lambda: all_ready(ports), timeout=90, what="every process ready again")
            assert [p.poll() for p in processes] == [None, None, None]  # none exited
            assert (await scene.standin.click("U0ALICE", card, "approve:0")).acked
            assert "Sent." in await scene.answer(thread_id, timeout=60)
            assert lines(ledger) == ["a@acme.com"]
            assert await resume_commands(scene) == 1
            assert [await probe(port, "healthz") for port in ports] == [200, 200, 200]
    finally:
        cluster.stop()


async def test_a_master_killed_mid_burst_leaves_both_bots_alive_and_every_tool_run_once(tmp_path):
    cluster = redis_server.start_cluster(3, replicas=1)
    ledger, started = tmp_path / "ledger.txt", tmp_path / "started.txt"
    try:
        async with Harness(cluster.url) as scene:
            bots = [scene.port, free_port()]
            processes = [scene.spawn("bot", PORT=port, SIGNOFF_CONSUMER=f"bot-{port}") for port in bots] + [
                scene.spawn(
                    "runner",
                    SIGNOFF_GRAPH=LEDGER,
                    SIGNOFF_TEST_LEDGER=ledger,
                    SIGNOFF_TEST_STARTED=started,
                    SIGNOFF_TEST_TOOL_SECONDS=BURST_TOOL_S,
                )
            ]
            await eventually(lambda: all_ready(bots), timeout=60, what="both bots ready")
            threads = [
                await scene.ask(f"send it {n}", graph="ledger", channel=f"C0BURST{n}") for n in range(12)
            ]
            # (copies: a click is made on the card as the clicker's screen showed it)
            cards = [copy.deepcopy(await scene.card(t, timeout=90)) for t in threads]
            # The master holding the first run's checkpoints dies while its tool runs: the tool
            # ends during the failover (its result's writes meet no master), and the other clicks
            # go on meanwhile, on both bots.
            victim = master_of(cluster, f"checkpoints:{{{threads[0]}}}:r")

            async def click(n: int, card) -> None:
                await asyncio.sleep(n * 0.15)
                port = bots[n % 2]
                await scene.standin.click(
                    "U0ALICE", card, "approve:0", bot_url=f"http://127.0.0.1:{port}/slack/events"
                )

            await click(0, cards[0])
            await eventually(lambda: lines(started), timeout=30, what="the first approved tool at work")
            burst = asyncio.gather(*(click(n, c) for n, c in enumerate(cards) if n))
            await asyncio.sleep(BURST_TOOL_S / 2)
            await asyncio.to_thread(caught_up_then_killed, victim, 2_000)  # mid-burst, mid-tool
            await burst

            await eventually(lambda: all_ready(bots), timeout=90, what="both bots ready after the failover")
            for n, (thread_id, card) in enumerate(zip(threads, cards, strict=True)):
                await _decided(scene, thread_id, card, bots[n % 2])  # a click lost with the master: again
            for thread_id in threads:
                await scene.answer(thread_id, "Sent.", timeout=90)
            assert sorted(lines(ledger)) == ["a@acme.com"] * 12  # each approved tool once
            assert len(lines(started)) == 12  # and started once: none ran again after the failover
            assert await resume_commands(scene) == 12
            assert [p.poll() for p in processes] == [None, None, None]
            assert [await probe(port, "healthz") for port in bots] == [200, 200]
    finally:
        cluster.stop()


async def _decided(scene: Harness, thread_id: str, card, port: int) -> None:
    """Click again until the run's approval is no longer pending (as a person whose click was
    lost in the failover would), at most once a second."""
    approval_id = card.metadata["event_payload"]["approval_id"]
    deadline = time.monotonic() + 60
    while True:
        approval = await eventually(
            lambda: scene.store.approvals.get(approval_id), timeout=30, what="the approval"
        )
        if approval.status.value != "pending":
            return
        assert time.monotonic() < deadline, f"{thread_id} still pending"
        await scene.standin.click(
            "U0ALICE", card, "approve:0", bot_url=f"http://127.0.0.1:{port}/slack/events"
        )
        await asyncio.sleep(1)
