"""/metrics on the bot and on the runner: an approval moves the counters an operator graphs,
and the Grafana dashboard only names metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import ROOT, Harness, eventually, free_port
from tests.support.people import ALICE, RILEY

DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"


async def exported(port: int) -> set[str]:
    """The metric families a process exports (those without samples yet too)."""
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as reply:
        return set(re.findall(r"^# TYPE (\S+) ", await reply.text(), re.M))


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as reply:
        assert reply.status == 200 and reply.content_type == "text/plain"
        text = await reply.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_an_approval_moves_the_bot_and_runner_metrics(redis_url):
    runner_port = free_port()
    async with Harness(redis_url) as scene:
        await scene.start_bot()
        scene.spawn(
            "runner", SIGNOFF_GRAPH="signoff_demo.agent:build_demo_agent", SIGNOFF_RUNNER_PORT=runner_port
        )
        await scene.wait_healthy(runner_port)
        before = await scrape(scene.port)

        thread_id = await scene.ask('Email finance@acme.com "numbers"', requester=RILEY)
        card = await scene.card(thread_id)
        waiting = await scrape(scene.port)
        assert value(waiting, "signoff_pending_approvals") == 1
        await scene.standin.click(ALICE, card, "approve:0")
        await scene.answer(thread_id)
        bot = await scrape(scene.port)
        runner = await eventually(lambda: _finished(runner_port), what="the runner's metrics after the run")
        families = await exported(scene.port) | await exported(runner_port)

    approve = dict(type="approve", tool="send_email", result="complete")
    assert (
        value(bot, "signoff_decisions_total", **approve)
        == value(before, "signoff_decisions_total", **approve) + 1
    )
    clicks = value(bot, "signoff_ack_seconds_count", kind="block_actions")
    assert clicks >= value(before, "signoff_ack_seconds_count", kind="block_actions") + 1
    assert value(bot, "signoff_card_to_decision_seconds_count") >= 1
    assert value(bot, "signoff_pending_approvals") == 0
    assert ("signoff_stream_lag", (("group", "bots"), ("stream", "events"))) in bot
    assert value(runner, "signoff_runs_total", outcome="waiting") == 1
    assert value(runner, "signoff_decision_to_resume_seconds_count") == 1
    assert value(runner, "signoff_decision_to_tool_start_seconds_count") == 1

    # The dashboard graphs only what the processes export.
    named = set(re.findall(r"\b(signoff_[a-z_]+)", json.dumps(json.loads(DASHBOARD.read_text()))))
    named = {re.sub(r"_(bucket|count|sum)$", "", n) for n in named}
    assert named and named <= families, named - families


async def _finished(port: int) -> dict | None:
    samples = await scrape(port)
    return samples if value(samples, "signoff_runs_total", outcome="finished") >= 1 else None


def test_the_dashboard_is_grafana_json():
    board = json.loads(Path(DASHBOARD).read_text())
    assert board["title"] and all(panel["targets"] for panel in board["panels"])


async def test_every_429_is_counted_even_those_slack_sdk_retries():
    from bot.slack.clients import web_client
    from core.metrics import SLACK_429
    from slack_standin import SlackStandin

    standin = SlackStandin("secret", bot_url="http://127.0.0.1:9/slack/events")
    await standin.start()
    try:
        before = SLACK_429.labels("chat.postMessage")._value.get()
        standin.fail_next("chat.postMessage", 429, count=3, retry_after=0)
        client = web_client(standin.token, standin.base_url)
        reply = await client.chat_postMessage(channel="C0X", text="hi")
        await client.close()
        assert reply["ok"]
        assert SLACK_429.labels("chat.postMessage")._value.get() == before + 3
    finally:
        await standin.stop()


async def test_what_redis_holds_is_unknown_not_stale_while_redis_is_away():
    import math

    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from core import metrics

    class Away:
        async def stream_figures(self) -> None:
            raise ConnectionError("Redis is away")

    metrics.PENDING.set(7)
    app = web.Application()
    metrics.add_route(app, Away())
    handler = next(r.handler for r in app.router.routes() if r.method == "GET")

    await handler(make_mocked_request("GET", "/metrics"))

    assert math.isnan(metrics.PENDING._value.get()) and metrics.REDIS_UP._value.get() == 0


def test_a_log_line_naming_a_thread_carries_the_same_trace_id_in_every_process():
    from core.logs import add_trace_id, trace_id

    line = add_trace_id(None, "info", {"event": "decision", "thread_id": "run-1234"})

    assert (
        line["trace_id"]
        == trace_id("run-1234")
        == add_trace_id(None, "x", {"thread_id": "run-1234"})["trace_id"]
    )
    assert len(line["trace_id"]) == 32 and int(line["trace_id"], 16) >= 0
    assert "trace_id" not in add_trace_id(None, "info", {"event": "bot_started"})
