"""Runs exactly once through faults, with real processes and a real Redis.

Each test is a row of the table in issue 8 (measured on the code before it):
slow tools with two runners, head-of-line blocking, Redis restarted, paused or
cutting a connection, Slack rate limiting or failing, processes killed between
a side effect and its record. What is asserted is what people would count:
how often a tool ran, how many cards and answers a thread shows, whether a
click was acked within Slack's 3 s, whether the process says it is not ready.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.views.refusals import FORM_TOO_LATE, STILL_RECORDING
from signoff_demo import payments as demo_payments
from signoff_demo import redis_server
from signoff_demo.redis_server import free_port
from tests.support.files import lines
from tests.support.harness import (
    CHANNEL,
    DEMO,
    Harness,
    card_text,
    consumed,
    eventually,
    probe,
    runners_idle,
    start_scene,
)
from tests.support.people import ALICE, BOB
from tests.support.savers import APPROVE, USER, cfg, history_of, in_memory_history, write_agent


class OwnRedis:
    """A Redis of the test's own, with AOF on, that the test stops and starts again."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.server = redis_server.start(data_dir=data_dir, appendonly=True)
        self.port = self.server.port
        self.url = self.server.url

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server = redis_server.start(port=self.port, data_dir=self.data_dir, appendonly=True)


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
async def scene(redis_url):
    async with start_scene(redis_url, "demo", "slow") as running:
        yield running


# two runners, slow tools ------------------------------------------------------------


@pytest.mark.slow
async def test_a_tool_slower_than_the_lease_runs_once_with_two_runners(redis_url, tmp_path):
    ledger = tmp_path / "ledger.txt"
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        common = dict(
            SIGNOFF_GRAPH="tests.support.graphs:build_slow_agent",
            SIGNOFF_TEST_LEDGER=ledger,
            SIGNOFF_TEST_REPORT_SECONDS=10,
            SIGNOFF_LEASE_MS=3_000,
        )
        scene.spawn("runner", SIGNOFF_CONSUMER="runner-1", **common)
        scene.spawn("runner", SIGNOFF_CONSUMER="runner-2", **common)
        thread_id = await scene.ask("compile the q3 report", graph="slow")

        assert "Report ready." in await scene.answer(thread_id, timeout=40)
        # Every command read and acknowledged and the thread's lock free: no runner holds or
        # works on the run any more, so a takeover (right or wrong) has run its tool by now and
        # none can come; every event handled: every answer is posted.
        await eventually(lambda: runners_idle(scene, thread_id), what="both runners done with the run")
        await eventually(lambda: consumed(scene.store, "events"), what="the bot done with every event")

        assert lines(ledger) == ["report q3"]
        assert len(await scene.messages(thread_id, "answer")) == 1


async def test_a_slow_run_does_not_hold_up_the_next_one(scene, tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    monkeypatch.setenv("SIGNOFF_TEST_REPORT_SECONDS", "8")
    slow = await scene.ask("compile the q3 report", graph="slow")
    await eventually(lambda: lines(ledger), what="the slow tool at work")

    quick = await scene.ask("Refund order 5 for 5000")
    await scene.card(quick)

    assert not await scene.messages(slow, "answer"), "the second run's card waited for the first run's tool"
    assert "Report ready." in await scene.answer(slow)


# Redis away -------------------------------------------------------------------------


async def readiness(port: int) -> int | None:
    return await probe(port, "readyz")


async def ready_is(port: int, wanted: int) -> bool:
    return await readiness(port) == wanted


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["serve", "bot and two runners"])
async def test_processes_carry_on_when_redis_restarts(own_redis, layout):
    async with Harness(own_redis.url) as scene:
        ports = [scene.port]
        if layout == "serve":
            processes = [scene.spawn("serve", SIGNOFF_GRAPH=DEMO, SIGNOFF_LEASE_MS=3_000)]
        else:
            ports += [free_port(), free_port()]
            processes = [scene.spawn("bot", SIGNOFF_LEASE_MS=3_000)] + [
                scene.spawn(
                    "runner",
                    SIGNOFF_GRAPH=DEMO,
                    SIGNOFF_LEASE_MS=3_000,
                    SIGNOFF_CONSUMER=f"runner-{port}",
                    SIGNOFF_RUNNER_PORT=port,
                )
                for port in ports[1:]
            ]
        for port in ports:
            await eventually(lambda p=port: ready_is(p, 200), timeout=30, what=f"ready on {port}")
        before = await scene.ask("Refund order 1 for 5000")
        card = await scene.card(before, timeout=30)

        own_redis.stop()
        for port in ports:
            await eventually(lambda p=port: ready_is(p, 503), what=f"not ready on {port} while Redis is down")
            assert await probe(port, "healthz") == 200
        await asyncio.sleep(4)
        own_redis.start()

        for port in ports:
            await eventually(lambda p=port: ready_is(p, 200), timeout=30, what=f"ready again on {port}")
        assert (await scene.standin.click(ALICE, card, "approve:0")).acked
        assert "Refunded 5000 on order 1" in await scene.answer(before, timeout=30)
        after = await scene.ask("Refund order 2 for 6000")
        assert (await scene.standin.click(ALICE, await scene.card(after, timeout=30), "approve:0")).acked
        assert "Refunded 6000 on order 2" in await scene.answer(after, timeout=30)
        assert all(process.poll() is None for process in processes)


async def test_a_click_while_redis_is_paused_is_acked_in_time_and_told_the_truth(scene):
    thread_id = await scene.ask("Refund order 6 for 6000")
    card = await scene.card(thread_id)
    admin = aioredis.Redis.from_url(scene.redis_url)
    try:
        await admin.execute_command("CLIENT", "PAUSE", 4_000, "ALL")
        click = await scene.standin.click(ALICE, card, "approve:0")
        assert click.acked, click.seconds
        told = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="a note to Alice")
        assert told[0] == STILL_RECORDING
    finally:
        await admin.aclose()

    assert "✅ Approved by" in card_text(await scene.card_shows(card, "Approved by"))
    assert "Refunded 6000 on order 6" in await scene.answer(thread_id)
    assert len(await scene.store.audit.entries()) == 1


@pytest.mark.slow
async def test_a_killed_consumer_connection_is_noticed_and_replaced(scene):
    admin = aioredis.Redis.from_url(scene.redis_url, decode_responses=True)
    try:
        first = await scene.ask("Refund order 7 for 7000")
        await scene.card(first)
        killed = 0
        for client in await admin.client_list():
            if client.get("cmd") == "xreadgroup":
                await admin.client_kill_filter(_id=client["id"])
                killed += 1
        assert killed >= 2  # the bot's events consumer and the runner's commands consumer

        second = await scene.ask("Refund order 8 for 8000")
        assert (await scene.standin.click(ALICE, await scene.card(second), "approve:0")).acked
        assert "Refunded 8000 on order 8" in await scene.answer(second)
        assert await readiness(scene.port) == 200
    finally:
        await admin.aclose()


# Slack slow or refusing ----------------------------------------------------------------


async def test_a_cold_group_lookup_that_slack_rate_limits_never_delays_the_ack(redis_url):
    env = {"SIGNOFF_APPROVERS": json.dumps({"*": ["S0FINANCE"]})}
    async with Harness(redis_url, env=env, groups={"S0FINANCE": [ALICE]}) as scene:
        scene.standin.fail_next("usergroups.users.list", 429, count=3, retry_after=2)
        await scene.start_bot()
        await scene.start_runner("demo")
        card = await scene.card(await scene.ask("Refund order 9 for 9000"))

        early = await scene.standin.click(ALICE, card, "approve:0")

        assert early.acked and early.seconds < 1, early.seconds
        assert await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="a refusal") == [
            "Signoff could not check the approver groups just now; nothing changed. Try again in a moment."
        ]
        assert not await scene.store.audit.entries()
        # Once the group is known (fetched in the background), the same click decides.
        await eventually(
            lambda: scene.store.redis.hexists(scene.store.keys.groups, "S0FINANCE"), what="the group"
        )
        await eventually(lambda: _decided_by(scene, card, ALICE), what="a decision once the group is known")


async def _decided_by(scene: Harness, card, user: str) -> bool:
    if not await scene.store.audit.entries():
        await scene.standin.click(user, card, "approve:0")
        await asyncio.sleep(0.2)
    return bool(await scene.store.audit.entries())


async def test_a_modal_slack_cannot_open_in_time_says_so(scene):
    card = await scene.card(await scene.ask('Write "draft" to /plans/a.md'))
    scene.standin.fail_next("views.open", 429, retry_after=5)

    click = await scene.standin.click(ALICE, card, "edit:0")

    assert click.acked
    told = await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="a note to Alice")
    assert told == [FORM_TOO_LATE.format(label="Edit")]
    assert not scene.standin.open_views(ALICE)
    assert (await scene.open_modal(ALICE, card, "edit:0"))["callback_id"] == "edit"  # one more click works


async def test_a_thread_root_slack_refuses_four_times_is_retried_and_the_run_talks_in_one_thread(scene):
    scene.standin.fail_next("chat.postMessage", 500, count=4)
    thread_id = await scene.ask("Refund order 10 for 1500")
    card = await scene.card(thread_id, timeout=30)
    await scene.standin.click(ALICE, card, "approve:0")
    assert "Refunded 1500 on order 10" in await scene.answer(thread_id)

    run = await scene.store.runs.get(thread_id)
    top_level = [
        m
        for m in scene.standin.messages
        if m.channel == CHANNEL
        and not m.thread_ts
        and (m.metadata or {}).get("event_payload", {}).get("thread_id") == thread_id
    ]
    assert [m.ts for m in top_level] == [run.thread_ts]
    assert {m.kind for m in scene.standin.thread(CHANNEL, run.thread_ts)} >= {"run", "approval", "answer"}
    assert sum(c.status == 500 for c in scene.standin.calls if c.method == "chat.postMessage") == 4


# crashes between a side effect and its record ---------------------------------------


@pytest.mark.slow
async def test_a_refund_reexecuted_after_a_crash_is_refunded_once_with_its_idempotency_key(
    redis_url, tmp_path
):
    payments = tmp_path / "payments.jsonl"
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        common = dict(SIGNOFF_GRAPH=DEMO, SIGNOFF_DEMO_PAYMENTS=payments, SIGNOFF_LEASE_MS=1_500)
        first = scene.spawn(
            "runner", SIGNOFF_CONSUMER="runner-1", SIGNOFF_DEMO_PAYMENTS_LATENCY_S=60, **common
        )
        thread_id = await scene.ask("Refund order 1235 for 5000")
        await scene.standin.click(ALICE, await scene.card(thread_id, timeout=30), "approve:0")

        # The payment API took the refund; its answer (the tool's result) never reaches a checkpoint.
        await eventually(lambda: demo_payments.ledger(payments), what="the refund at the payment API")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        scene.spawn("runner", SIGNOFF_CONSUMER="runner-2", **common)

        assert "Refunded 5000 on order 1235" in await scene.answer(thread_id, timeout=40)
        calls = demo_payments.ledger(payments)
        assert [c["effect"] for c in calls] == ["refunded", "replayed"]  # the tool ran twice...
        assert len({c["key"] for c in calls}) == 1  # ...with one key, so one refund
        assert len(await scene.messages(thread_id, "answer")) == 1


async def test_an_approval_whose_announcement_was_lost_gets_its_card_when_its_command_comes_again(redis_url):
    async with Harness(redis_url) as scene:
        await scene.start_runner("demo")
        thread_id = await scene.ask("Refund order 11 for 1100")
        approval_id = await eventually(
            lambda: scene.store.redis.zrange(scene.store.keys.thread_approvals(thread_id), 0, 0),
            what="the approval record",
        )
        # The event never reaches a bot (the gap between record and announcement, or a lost entry)…
        here = scene.store.keys.of(thread_id)
        for entry_id, _ in await scene.store.redis.xrange(here.events):
            await scene.store.redis.xdel(here.events, entry_id)
        # …and the runner died before it finished the command: it is handed out again.
        ((_, fields),) = await scene.store.queue.entries(lambda p: p.commands)
        await scene.store.redis.delete(
            scene.store.keys.command_done(thread_id, json.loads(fields["command"])["command_id"])
        )
        await scene.store.redis.xadd(here.commands, fields)
        await scene.start_bot()

        card = await scene.card(thread_id)

        assert card.metadata["event_payload"]["approval_id"] == approval_id[0]
        assert len(await scene.messages(thread_id, "approval")) == 1


@pytest.mark.slow
async def test_a_bot_killed_after_slack_took_the_card_leaves_one_card(redis_url):
    async with Harness(redis_url) as scene:
        await scene.start_runner("demo")
        scene.standin.delay_next("chat.postMessage", 30, kind="approval")
        first = scene.spawn("bot", SIGNOFF_LEASE_MS=2_000)
        await scene.wait_healthy(scene.port)
        thread_id = await scene.ask("Refund order 12 for 1200")
        await eventually(lambda: scene.messages(thread_id, "approval"), what="the card in Slack")
        first.send_signal(signal.SIGKILL)  # before it learned the card's ts
        first.wait(10)

        scene.spawn("bot", SIGNOFF_LEASE_MS=2_000)
        await scene.wait_healthy(scene.port)

        approval_id = (await scene.messages(thread_id, "approval"))[0].metadata["event_payload"][
            "approval_id"
        ]
        await eventually(lambda: _card_saved(scene, approval_id), timeout=30, what="the card adopted")
        (card,) = await scene.messages(thread_id, "approval")
        assert (await scene.standin.click(ALICE, card, "approve:0")).acked
        assert "Approved by" in card_text(await scene.card_shows(card, "Approved by"))
        assert "Refunded 1200 on order 12" in await scene.answer(thread_id)
        assert len(await scene.messages(thread_id, "approval")) == 1


@pytest.mark.slow
async def test_a_distributed_apps_bot_killed_after_slack_took_the_card_finds_it_within_slacks_history_limit(
    redis_url,
):
    """An app commercially distributed outside the Marketplace reads history once a minute, 15
    messages a call: the card is found again in a thread with more than a page of talk."""
    async with Harness(redis_url) as scene:
        scene.standin.distributed_app()
        await scene.start_runner("demo")
        scene.standin.delay_next("chat.postMessage", 10, kind="approval")  # (killed before it answers)
        first = scene.spawn("bot", SIGNOFF_LEASE_MS=2_000, SLACK_APP_DISTRIBUTION="distributed")
        await scene.wait_healthy(scene.port)
        thread_id = await scene.ask("Refund order 16 for 1600")
        await eventually(lambda: scene.messages(thread_id, "approval"), what="the card in Slack")
        first.send_signal(signal.SIGKILL)  # before it learned the card's ts
        first.wait(10)
        run = await scene.store.runs.get(thread_id)
        assert run is not None and run.thread_ts is not None
        for n in range(20):  # people talk in the run's thread meanwhile: more than a page of it
            scene.standin.write(BOB, CHANNEL, f"Is this order 16's refund? ({n})", run.thread_ts)

        scene.spawn("bot", SIGNOFF_LEASE_MS=2_000, SLACK_APP_DISTRIBUTION="distributed")
        await scene.wait_healthy(scene.port)

        approval_id = (await scene.messages(thread_id, "approval"))[0].metadata["event_payload"][
            "approval_id"
        ]
        await eventually(lambda: _card_saved(scene, approval_id), timeout=30, what="the card adopted")
        (card,) = await scene.messages(thread_id, "approval")
        assert (await scene.standin.click(ALICE, card, "approve:0")).acked
        assert "Refunded 1600 on order 16" in await scene.answer(thread_id)
        assert len(await scene.messages(thread_id, "approval")) == 1
        reads = [
            c for c in scene.standin.calls if c.method in ("conversations.replies", "conversations.history")
        ]
        assert reads and all(c.status == 200 and int(c.args["limit"]) <= 15 for c in reads)


async def _card_saved(scene: Harness, approval_id: str) -> bool:
    approval = await scene.store.approvals.get(approval_id)
    return bool(approval and approval.card_ts)


@pytest.mark.slow
async def test_a_card_post_slower_than_its_claim_with_two_bots_leaves_one_live_card(redis_url):
    async with Harness(redis_url) as scene:
        await scene.start_runner("demo")
        ports = [scene.port, free_port()]
        for port in ports:
            scene.spawn("bot", PORT=port, SIGNOFF_LEASE_MS=2_000, SIGNOFF_CONSUMER=f"bot-{port}")
        for port in ports:
            await scene.wait_healthy(port)
        # Slack sits on the first card post for 6 s before it takes it; the claim lasts 2 s.
        scene.standin.delay_next("chat.postMessage", 6, kind="approval", before=True)
        thread_id = await scene.ask("Refund order 13 for 1300")
        approval_id = await eventually(
            lambda: scene.store.redis.zrange(scene.store.keys.thread_approvals(thread_id), 0, 0),
            what="the approval",
        )
        await asyncio.sleep(0.5)
        # The approval is announced again meanwhile (a retried command): the other bot takes it.
        await scene.store.approvals.announce(await scene.store.approvals.get(approval_id[0]))

        await eventually(lambda: scene.standin.deleted, timeout=30, what="the late copy deleted")
        (card,) = await scene.messages(thread_id, "approval")
        assert (await scene.store.approvals.get(approval_id[0])).card_ts == card.ts
        assert (await scene.standin.click(ALICE, card, "approve:0")).acked
        assert "Refunded 1300 on order 13" in await scene.answer(thread_id)
        assert "Approved by" in card_text(await scene.card_shows(card, "Approved by"))


# a burst under Slack's rate limits ----------------------------------------------------


@pytest.mark.slow
async def test_a_burst_of_decisions_changes_every_card_at_once_and_posts_every_answer(redis_url):
    runs_per_channel, channels = 10, [f"C0BURST{n:02d}" for n in range(20)]  # 200 approvals
    async with start_scene(redis_url, "demo") as scene:
        threads = [
            await scene.ask(f"Refund order {c}{n} for 5000", channel=channel)
            for n in range(runs_per_channel)
            for c, channel in enumerate(channels)
        ]
        cards = [await scene.card(t, timeout=180) for t in threads]

        clicks = await asyncio.gather(*(scene.standin.click(ALICE, card, "approve:0") for card in cards))
        assert all(c.acked for c in clicks)

        for thread_id in threads:
            await scene.answer(thread_id, "Refunded 5000", timeout=240)
        answers = [len(await scene.messages(t, "answer")) for t in threads]
        assert answers == [1] * len(threads)
        # Every card changed through its click's response_url: none waited in chat.update's queue
        # (Slack's tier-3 pace would take minutes for 200), the outcome included.
        await eventually(
            lambda: all("▶️ The agent carries on" in card_text(scene.fresh(card)) for card in cards),
            timeout=60,
            what="every card showing its outcome",
        )
        assert {source for card in cards for _, source in scene.fresh(card).changes} == {"response_url"}
        shown = {card.ts for card in cards}
        assert [
            c for c in scene.standin.calls if c.method == "chat.update" and c.args.get("ts") in shown
        ] == []


@pytest.mark.slow
async def test_processes_started_before_redis_wait_for_it(own_redis):
    async with Harness(own_redis.url) as scene:
        own_redis.stop()
        runner_port = free_port()
        scene.spawn("bot")
        scene.spawn("runner", SIGNOFF_GRAPH=DEMO, SIGNOFF_RUNNER_PORT=runner_port)
        await scene.wait_healthy(scene.port, timeout=30)
        await eventually(
            lambda: ready_is(runner_port, 503), timeout=30, what="the runner saying it is not ready"
        )
        assert await readiness(scene.port) == 503

        own_redis.start()

        for port in (scene.port, runner_port):
            await eventually(lambda p=port: ready_is(p, 200), timeout=30, what=f"ready on {port}")
        thread_id = await scene.ask("Refund order 14 for 1400")
        assert (await scene.standin.click(ALICE, await scene.card(thread_id, timeout=30), "approve:0")).acked
        assert "Refunded 1400 on order 14" in await scene.answer(thread_id)


@pytest.mark.slow
async def test_an_answer_waits_out_a_slack_outage_longer_than_the_retry_limit(scene):
    card = await scene.card(thread_id := await scene.ask("Refund order 15 for 1500"))
    # Six attempts in a row (each one Slack call and the client's three retries) answer 500.
    scene.standin.fail_next("chat.postMessage", 500, count=24)

    await scene.standin.click(ALICE, card, "approve:0")

    assert "Refunded 1500 on order 15" in await scene.answer(thread_id, timeout=60)
    assert not await scene.store.queue.length(lambda p: p.dead_letters)


async def test_runners_starting_together_on_a_fresh_redis_all_start(own_redis):
    """Four runners' checkpointers set up at once on a fresh Redis (two replicas once made its
    indexes at once, and one crashed on "Index already exists"), and each of them works: a run
    pauses through one, is approved through the next and read back through a third, and its
    history is the one LangGraph's in-memory saver gives."""
    import contextlib

    from agent_runner.checkpointer import AsyncRedisCheckpointer

    threads = [f"together-{n}" for n in range(4)]
    async with contextlib.AsyncExitStack() as opened:
        savers = await asyncio.gather(
            *(opened.enter_async_context(AsyncRedisCheckpointer.from_url(own_redis.url)) for _ in range(4))
        )
        paused = [
            await write_agent(saver).ainvoke(USER, cfg(t)) for saver, t in zip(savers, threads, strict=True)
        ]
        for n, thread_id in enumerate(threads):
            await write_agent(savers[(n + 1) % 4]).ainvoke(APPROVE, cfg(thread_id))
        histories = [
            history_of([s async for s in write_agent(savers[(n + 2) % 4]).aget_state_history(cfg(t))])
            for n, t in enumerate(threads)
        ]

    assert all(run["__interrupt__"] for run in paused)
    assert histories == [in_memory_history()] * 4
