"""Exactly one resume per pause: concurrent clicks on two bot processes, a runner killed mid-resume.

Each test runs on one Redis server and on a three-master Redis Cluster.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from signoff_demo.redis_server import free_port
from tests.support.harness import APPROVE_BUTTON, Harness, eventually, resume_commands


@pytest.fixture
def redis_url(layout_url: str) -> str:
    return layout_url


async def test_fifty_concurrent_clicks_on_two_bots_resume_once(redis_url, tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    async with Harness(redis_url) as scene:
        ports = [free_port(), free_port()]
        for port in ports:
            scene.spawn("bot", PORT=port, SIGNOFF_CONSUMER=f"bot-{port}")
        for port in ports:
            await scene.wait_healthy(port)
        await scene.start_runner("ledger")
        thread_id = await scene.ask("send it", graph="ledger")
        card = await scene.card(thread_id)
        users = [f"U{n:04d}" for n in range(50)]

        clicks = await asyncio.gather(
            *(
                scene.standin.click(
                    user, card, APPROVE_BUTTON, bot_url=f"http://127.0.0.1:{ports[n % 2]}/slack/events"
                )
                for n, user in enumerate(users)
            )
        )

        assert all(click.acked for click in clicks), [(c.status, round(c.seconds, 2)) for c in clicks]
        assert "Sent." in await scene.answer(thread_id)
        assert ledger.read_text().splitlines() == ["a@acme.com"]
        assert await resume_commands(scene) == 1
        (entry,) = await scene.store.audit.entries()
        # 49 ephemerals exceed chat.postEphemeral's rate: some wait out 429s (Retry-After).
        told = await eventually(
            lambda: len(scene.standin.ephemerals) >= 49 and scene.standin.ephemerals,
            what="49 late-click notes",
            timeout=30,
        )
        assert {e["user"] for e in told} == set(users) - {entry["user"]}
        assert all(e["text"].startswith("Already decided: approved by") for e in told)


async def test_a_runner_killed_mid_resume_is_replaced_and_resumes_once(redis_url, tmp_path):
    ledger = tmp_path / "ledger.txt"
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        common = dict(
            SIGNOFF_GRAPH="tests.support.graphs:build_ledger_agent",
            SIGNOFF_TEST_LEDGER=ledger,
            SIGNOFF_LEASE_MS=1_500,
        )
        first = scene.spawn("runner", SIGNOFF_CONSUMER="runner-1", SIGNOFF_TEST_TOOL_SECONDS=30, **common)
        thread_id = await scene.ask("send it", graph="ledger")
        card = await scene.card(thread_id, 1)
        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)

        # runner-1 took the resume command and is inside the (slow) tool: kill it there.
        async def in_flight() -> bool:
            pending = await scene.store.redis.xpending(scene.store.keys.of(thread_id).commands, "runners")
            return pending["pending"] == 1 and pending["consumers"][0]["name"] == "runner-1"

        await eventually(in_flight, what="runner-1 holding the resume")
        await asyncio.sleep(1)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert not ledger.exists()

        scene.spawn("runner", SIGNOFF_CONSUMER="runner-2", SIGNOFF_TEST_TOOL_SECONDS=0, **common)

        assert "Sent." in await scene.answer(thread_id)
        assert ledger.read_text().splitlines() == ["a@acme.com"]
        assert await resume_commands(scene) == 1
        await scene.card_shows(card, "▶️ The agent carries on")
        run = await scene.store.runs.get(thread_id)
        assert [m.kind for m in scene.standin.thread(run.channel, run.thread_ts)].count("answer") == 1

        async def acknowledged() -> bool:  # (after the run's end, which the answer may precede)
            pending = await scene.store.redis.xpending(scene.store.keys.of(thread_id).commands, "runners")
            return pending["pending"] == 0

        await eventually(acknowledged, what="runner-2 acknowledging the resume")


async def test_signoff_serve_runs_bot_and_runner_in_one_process(redis_url):
    async with Harness(redis_url) as scene:
        scene.spawn("serve", SIGNOFF_GRAPH="signoff_demo.agent:build_demo_agent")
        await scene.wait_healthy(scene.port)
        thread_id = await scene.ask("Refund order 8 for 9000", graph="demo")
        card = await scene.card(thread_id)

        await scene.standin.click("U0ALICE", card, APPROVE_BUTTON)

        assert "Refunded 9000 on order 8" in await scene.answer(thread_id)
