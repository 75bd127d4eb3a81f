"""A Redis master dies with approvals pending: a replica takes over, nothing is lost, one resume.

Two ways a deployment fails over, each with real processes (a `signoff bot` and a
`signoff runner`) and a real `kill -9` of the master:

* Sentinel (`redis+sentinel://`): three Sentinels promote the master's replica;
  every process finds the new master by asking them again.
* Redis Cluster with a replica per master (`redis+cluster://`): the cluster
  promotes the replica of the master holding the run's partition.

What is counted: the pending approval is still there after the failover (its
card still works), the click after the failover is acked and resumes the run
once, the tool runs once, one answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from signoff_demo import redis_server
from tests.support.harness import APPROVE_BUTTON, Harness, eventually, probe, resume_commands
from tests.support.redis_faults import LEDGER, caught_up_then_killed, master_of

pytestmark = pytest.mark.slow


@dataclass
class Failover:
    url: str
    kill_master_of: object  # (key) -> None: kill -9 the master holding `key`, once its replicas caught up


def _killed_caught_up(server: redis_server.LocalRedis) -> None:
    assert caught_up_then_killed(server) >= 1  # what the replica has is what we had


@pytest.fixture(params=["sentinel", "cluster"])
def failover(request) -> Iterator[Failover]:
    if request.param == "sentinel":
        group = redis_server.start_sentinel(replicas=1, sentinels=3)
        try:
            yield Failover(group.url, lambda key: _killed_caught_up(group.master))
        finally:
            group.stop()
        return
    cluster = redis_server.start_cluster(3, replicas=1)

    def kill_master_of(key: str) -> None:
        _killed_caught_up(master_of(cluster, key))

    try:
        yield Failover(cluster.url, kill_master_of)
    finally:
        cluster.stop()


async def test_pending_approvals_survive_a_failover_and_the_next_click_resumes_once(
    failover: Failover, tmp_path: Path
):
    ledger = tmp_path / "ledger.txt"
    async with Harness(failover.url) as scene:
        scene.spawn("bot")
        scene.spawn("runner", SIGNOFF_GRAPH=LEDGER, SIGNOFF_TEST_LEDGER=ledger)
        await scene.wait_healthy(scene.port)
        thread_id = await scene.ask("send it", graph="ledger")
        card = await scene.card(thread_id, timeout=60)
        approval_id = card.metadata["event_payload"]["approval_id"]

        failover.kill_master_of(scene.store.keys.approval(approval_id))
        started = time.monotonic()

        # The replica has the approval, and it is still waiting.
        pending = await eventually(
            lambda: scene.store.approvals.get(approval_id),
            timeout=60,
            what="the approval after the failover",
        )
        assert pending.status.value == "pending"

        async def ready() -> bool:
            return await probe(scene.port, "readyz") == 200

        await eventually(ready, timeout=60, what="the bot ready again")
        took = time.monotonic() - started

        click = await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)

        assert click.acked, (click.status, click.seconds)
        assert "Sent." in await scene.answer(thread_id, timeout=60)
        assert ledger.read_text().splitlines() == ["a@acme.com"]
        assert await resume_commands(scene) == 1
        run = await scene.store.runs.get(thread_id)
        assert [m.kind for m in scene.standin.thread(run.channel, run.thread_ts)].count("answer") == 1
        print(f"{failover.url.partition(':')[0]}: ready again {took:.1f}s after the kill")
