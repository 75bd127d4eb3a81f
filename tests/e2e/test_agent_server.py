"""Agents on a LangGraph Agent Server: a real `langgraph dev`, reached only through langgraph-sdk.

The server (started once for this module, on a free port) serves the test project
in tests/support/agent_server: the deepagents demo agent (refunds written to a payments
ledger) and a per_call `create_agent` whose tools write every execution to a ledger.
Signoff's side is the real bot over HTTP, a real runner, the stand-in Slack.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from langgraph_sdk import get_client

from core.messages import Resume
from core.records import RunState
from signoff_demo.agent_server import SECRET_ENV, running
from signoff_demo.payments import ledger as payments
from tests.support.harness import (
    CHANNEL,
    LANGGRAPH_JSON,
    Harness,
    Later,
    bound_thread,
    buttons,
    card_text,
    eventually,
)
from tests.support.paths import AGENT_SERVER_PROJECT
from tests.support.people import ALICE, BOB

WEBHOOK_SECRET = "test-webhook-secret-0123456789"


@dataclass
class Served:
    url: str
    tools: Path  # the per_call agent's ledger: one line per tool execution
    payments: Path  # the demo agent's payment API ledger
    fail: Path  # while it exists, the flaky agent's model fails


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    ledgers = tmp_path_factory.mktemp("agent-server")
    tools, paid, fail = ledgers / "tools.txt", ledgers / "payments.jsonl", ledgers / "fail"
    env = {
        "SIGNOFF_TEST_LEDGER": str(tools),
        "SIGNOFF_DEMO_PAYMENTS": str(paid),
        "SIGNOFF_TEST_FAIL": str(fail),
        SECRET_ENV: WEBHOOK_SECRET,
    }
    with running(AGENT_SERVER_PROJECT, env) as server:
        yield Served(server.url, tools, paid, fail)


def remote_env(scene: Harness, served: Served, **more: str) -> dict[str, str]:
    return {
        "SIGNOFF_AGENT_SERVER_URL": served.url,
        "SIGNOFF_WEBHOOK_URL": f"http://127.0.0.1:{scene.port}/agent-server/webhook",
        "SIGNOFF_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "SIGNOFF_GRAPHS_FILE": os.devnull,  # no local graphs: every graph is an assistant
        "SIGNOFF_AGENT_SERVER_POLL": "1s",
        **more,
    }


@pytest.fixture
async def scene(redis_url, served):
    async with Harness(redis_url) as harness:
        harness.env.update(remote_env(harness, served))
        await harness.start_bot()
        await harness.start_remote_runner()
        yield harness


def executed(served: Served, line: str) -> int:
    text = served.tools.read_text() if served.tools.exists() else ""
    return text.splitlines().count(line)


def refunds(served: Served, order: str) -> list[dict]:
    return (
        [e for e in payments(served.payments) if e["order_id"] == order] if served.payments.exists() else []
    )


async def server_runs(served: Served, thread_id: str) -> list[dict]:
    return list(await get_client(url=served.url, api_key=None).runs.list(thread_id, limit=100))


async def approve_elsewhere(served: Served, thread_id: str, interrupt_id: str) -> None:
    """Another client (Agent Inbox, Studio, a script) approves an interrupt, keyed, and waits."""
    client = get_client(url=served.url, api_key=None)
    elsewhere = await client.runs.create(
        thread_id, "per_call", command={"resume": {interrupt_id: {"type": "approve"}}}
    )
    await client.runs.join(thread_id, elsewhere["run_id"])


def tag() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


async def test_a_mention_runs_on_the_server_and_one_approval_resumes_it_once(scene, served):
    order = tag()
    asked, delivered = await scene.standin.mention(
        ALICE, CHANNEL, f"ask the bookkeeper to refund order {order} for 5000"
    )
    assert delivered.acked
    thread_id = await bound_thread(scene, CHANNEL, asked.ts)
    card = await scene.card(thread_id)

    # The pause of the subagent, on the server, as for a local run.
    assert card.thread_ts == asked.ts
    assert "subagent bookkeeper" in card_text(card)
    assert buttons(card) == ["approve:0", "reject:0"]
    assert refunds(served, order) == []
    thread = await get_client(url=served.url, api_key=None).threads.get(thread_id)
    assert thread["status"] == "interrupted"
    assert thread["metadata"]["signoff_channel"] == CHANNEL
    assert thread["metadata"]["signoff_slack_thread"] == asked.ts
    # The plan, read from the thread's state: the subagent's call, and under it the one it waits on.
    tasks = await scene.task_shows(thread_id, "pending", "Waiting for approval")
    assert [(t["title"], t["status"]) for t in tasks] == [
        ("Subagent bookkeeper", "pending"),
        (f"Subagent bookkeeper › issue refund: order_id {order}", "pending"),
    ]

    assert (await scene.standin.click(BOB, card, "approve:0")).acked
    answer = await scene.answer(thread_id, contains="Refunded 5000")
    (streamed,) = await scene.messages(thread_id, "answer")
    assert streamed.markdown is not None  # the server's answer, streamed in pieces
    await scene.task_shows(thread_id, "complete", "Approved by Bob")

    assert f"order {order}" in answer
    assert [e["effect"] for e in refunds(served, order)] == ["refunded"]
    assert await scene.card_shows(card, "▶️ The agent carries on")
    # the start and the resume: two runs on the server, each sent once
    assert len(await server_runs(served, thread_id)) == 2


async def test_an_edit_file_card_shows_the_diff_of_the_file_on_the_server(scene, served):
    """The deepagents agent on the server: its files, read from the thread's state through the
    SDK, make the card's diff, as for a local run; an edit that will fail is said."""
    thread_id = await scene.ask('In /plans/launch.md replace "Monday" with "Tuesday"')
    failing = await scene.ask('In /plans/launch.md replace "Friday" with "Saturday"')
    card, doomed = await scene.card(thread_id), await scene.card(failing)

    assert "📄 *edits /plans/launch.md: +1 −1 lines*" in card_text(card)
    assert "-- Launch on Monday at 10:00 UTC\n+- Launch on Tuesday at 10:00 UTC" in card_text(card)
    assert "⚠️ *this edit will fail: the text is not in the file*" in card_text(doomed)
    assert (await scene.standin.click(ALICE, card, "approve:0")).acked
    await scene.answer(thread_id, contains="Successfully replaced 1 instance")
    state = await get_client(url=served.url, api_key=None).threads.get_state(thread_id)
    assert "- Launch on Tuesday at 10:00 UTC" in state["values"]["files"]["/plans/launch.md"]["content"]


async def test_edit_and_reject_on_per_call_cards_reach_the_tools_as_decided(scene, served):
    name = tag()
    thread_id = await scene.ask(name, graph="per_call")
    write, email = await scene.card(thread_id, 1), await scene.card(thread_id, 2)
    assert "write_file" in card_text(write) and "send_email" in card_text(email)
    assert buttons(email) == ["approve:0", "reject:0"]

    modal = await scene.open_modal(ALICE, write, "edit:0")
    assert (await scene.standin.submit(ALICE, modal, {"content": f"{name} edited"})).acked
    await scene.card_shows(write, "▶️ The agent carries on")
    reject = await scene.open_modal(ALICE, email, "reject:0")
    assert (await scene.standin.submit(ALICE, reject, {"reason": "not today"})).acked

    answer = await scene.answer(thread_id, contains="All done")
    # the reason reached the agent on the server, as the rejected call's result…
    state = await get_client(url=served.url, api_key=None).threads.get_state(thread_id)
    told = [m for m in state["values"]["messages"] if m["type"] == "tool" and m["tool_call_id"] == "c1"]
    assert [(m["name"], m["status"]) for m in told] == [("send_email", "error")]
    assert "not today" in told[0]["content"]
    assert "not today" in answer  # …and the agent's answer in Slack says it
    assert executed(served, f"write_file /notes/{name}.md {name} edited") == 1
    assert executed(served, f"send_email {name}@acme.com") == 0
    assert executed(served, f"write_file /notes/{name}.md {name}") == 0


async def test_an_mcp_servers_form_is_answered_from_slack_on_the_agent_server(scene, served):
    thread_id = await scene.ask("Deploy checkout to staging", graph="mcp")
    card = await scene.card(thread_id)
    assert buttons(card) == ["elicit_accept", "elicit_decline", "elicit_cancel"]
    modal = await scene.open_modal(ALICE, card, "elicit_accept")
    fields = {b["label"]["text"]: b["block_id"] for b in modal["blocks"] if b["type"] == "input"}

    await scene.standin.submit(
        ALICE, modal, {fields["Replicas"]: "4", fields["Strategy"]: "Blue/green (switch at once)"}
    )

    # the tool, on the server, got a number and a boolean (the form's default), not text
    answer = await scene.answer(thread_id, contains="Deployed checkout")
    assert '{"notify": true, "replicas": 4, "strategy": "blue_green"}' in answer
    await scene.card_shows(card, "▶️ The tool has the answer and carries on")
    resumes = [r for r in await server_runs(served, thread_id) if r["kwargs"].get("command")]
    assert len(resumes) == 1


async def test_twenty_concurrent_clicks_send_one_resume(scene, served):
    name = tag()
    thread_id = await scene.ask(name, graph="per_call")
    write = await scene.card(thread_id, 1)
    people = [f"U0P{n:02d}" for n in range(20)]

    clicks = await asyncio.gather(*(scene.standin.click(p, write, "approve:0") for p in people))

    assert all(c.acked for c in clicks)
    await scene.card_shows(write, "▶️ The agent carries on")
    await eventually(lambda: executed(served, f"write_file /notes/{name}.md {name}") == 1, what="the write")
    email = await scene.card(thread_id, 2)
    await scene.standin.click(ALICE, email, "approve:0")
    await scene.answer(thread_id, contains="All done")
    assert executed(served, f"write_file /notes/{name}.md {name}") == 1
    assert executed(served, f"send_email {name}@acme.com") == 1
    resumes = [r for r in await server_runs(served, thread_id) if r["kwargs"].get("command")]
    assert len(resumes) == 2  # one per card


async def test_a_stale_card_is_refused_and_never_sent_after_the_interrupt_was_answered_elsewhere(
    redis_url, served
):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served, SIGNOFF_AGENT_SERVER_POLL="1h"))  # the click comes first
        await scene.start_bot()
        await scene.start_remote_runner()
        await _stale_card(scene, served)


async def _stale_card(scene: Harness, served: Served) -> None:
    name = tag()
    thread_id = await scene.ask(name, graph="per_call")
    write, email = await scene.card(thread_id, 1), await scene.card(thread_id, 2)
    approval = await scene.store.approvals.get(write.metadata["event_payload"]["approval_id"])

    # Someone answers the write in another tool (Agent Inbox, Studio): a newer state on the server.
    await approve_elsewhere(served, thread_id, approval.interrupt_id)
    before = len(await server_runs(served, thread_id))

    assert (await scene.standin.click(ALICE, write, "approve:0")).acked

    shown = await scene.card_shows(write, "no longer waiting")
    assert buttons(shown) == []
    await eventually(lambda: scene.says(thread_id, "nothing was sent"), what="the reason in the thread")
    assert len(await server_runs(served, thread_id)) == before  # nothing was sent
    assert executed(served, f"write_file /notes/{name}.md {name}") == 1  # once, by the other tool
    # What it waits for now still works from its own card.
    await scene.standin.click(ALICE, email, "approve:0")
    await scene.answer(thread_id, contains="All done")
    assert executed(served, f"send_email {name}@acme.com") == 1
    assert executed(served, f"write_file /notes/{name}.md {name}") == 1


async def test_a_refused_answer_never_reaches_the_server(scene, served):
    name = tag()
    thread_id = await scene.ask(name, graph="per_call")
    email = await scene.card(thread_id, 2)
    approval_id = email.metadata["event_payload"]["approval_id"]
    approval = await scene.store.approvals.get(approval_id)
    before = len(await server_runs(served, thread_id))
    # Someone with Redis access skips the bot: an edit the pause does not allow (approve / reject).
    await scene.store.redis.hset(scene.store.keys.approval(approval_id), "status", "resuming")
    edit = {"type": "edit", "edited_action": {"name": "send_email", "args": {"to": "x@evil.example"}}}
    forged = Resume(
        approval_id=approval_id,
        thread_id=thread_id,
        interrupt_id=approval.interrupt_id,
        graph="per_call",
        decisions=[edit],
    )
    await scene.store.queue.send(forged)

    again = await scene.card(thread_id, 3)  # offered again on a new card

    assert buttons(again) == ["approve:0", "reject:0"]
    assert len(await server_runs(served, thread_id)) == before
    thread = await get_client(url=served.url, api_key=None).threads.get(thread_id)
    pending = [i["id"] for found in thread["interrupts"].values() for i in found]
    assert approval.interrupt_id in pending  # still waiting, not poisoned
    await scene.standin.click(ALICE, again, "approve:0")
    await eventually(lambda: executed(served, f"send_email {name}@acme.com") == 1, what="the email")
    assert executed(served, "send_email x@evil.example") == 0


async def runner_that_dies_after_sending(scene: Harness, **options):
    """A runner that sends the run, then never sees it end (as if it died meanwhile); returns
    `die()`, which stops it the way a killed process stops: its work unacknowledged."""
    worker = await scene.start_remote_runner(**options)
    serving = scene.tasks[-1]

    async def never(*args, **kwargs):
        await asyncio.Event().wait()

    worker.remote.follow = never

    def die() -> None:
        for entry in list(worker._entries.values()):
            entry.task.cancel()
        serving.cancel()

    return die


async def test_a_pause_no_runner_saw_reaches_slack_by_the_webhook(redis_url, served):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served, SIGNOFF_AGENT_SERVER_POLL="1h"))  # no poll to help
        await scene.start_bot()
        die = await runner_that_dies_after_sending(scene)
        order = tag()

        thread_id = await scene.ask(f"ask the bookkeeper to refund order {order} for 7000")

        card = await scene.card(thread_id)
        assert "bookkeeper" in card_text(card)
        assert await scene.store.redis.zcard(scene.store.keys.thread_approvals(thread_id)) == 1
        die()


async def test_a_webhook_that_never_arrives_the_poll_finds_the_pause_and_nothing_is_sent_twice(
    redis_url, served
):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served))
        del scene.env["SIGNOFF_WEBHOOK_URL"]  # runs carry no webhook at all
        await scene.start_bot()
        die = await runner_that_dies_after_sending(scene, lease_ms=1_500)
        order = tag()

        thread_id = await scene.ask(f"ask the bookkeeper to refund order {order} for 8000")
        card = await scene.card(thread_id)  # found by the poll
        die()  # its start command is handed over
        await scene.start_remote_runner(lease_ms=1_500)
        await scene.standin.click(ALICE, card, "approve:0")

        await scene.answer(thread_id, contains="Refunded 8000")
        (start,) = [
            json.loads(f["command"])["command_id"]
            for _, f in await scene.store.queue.entries(lambda p: p.commands)
            if '"start"' in f["command"] and thread_id in f["command"]
        ]
        await eventually(
            lambda: scene.store.queue.is_done(thread_id, start), what="the handed-over start, carried out"
        )
        assert [e["effect"] for e in refunds(served, order)] == ["refunded"]
        assert len(await server_runs(served, thread_id)) == 2  # the start once, the resume once
        assert len(await scene.messages(thread_id, "answer")) == 1
        assert await scene.store.redis.zcard(scene.store.keys.thread_approvals(thread_id)) == 1


async def test_watch_mode_gives_a_thread_started_with_the_sdk_a_card(redis_url, served):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served, SIGNOFF_AGENT_SERVER_WATCH="true"))
        await scene.start_bot()
        await scene.start_remote_runner()
        name = tag()
        client = get_client(url=served.url, api_key=None)
        thread = await client.threads.create()
        run = await client.runs.create(
            thread["thread_id"], "per_call", input={"messages": [{"role": "user", "content": name}]}
        )
        await client.runs.join(thread["thread_id"], run["run_id"])

        write = await scene.card(thread["thread_id"], 1)
        email = await scene.card(thread["thread_id"], 2)

        root = scene.standin.message(CHANNEL, write.thread_ts)
        assert "per_call" in root.text and name in root.text
        await scene.standin.click(ALICE, write, "approve:0")
        await scene.card_shows(write, "▶️ The agent carries on")
        reject = await scene.open_modal(ALICE, email, "reject:0")
        await scene.standin.submit(ALICE, reject, {"reason": "not now"})
        await scene.answer(thread["thread_id"], contains="All done")
        assert executed(served, f"write_file /notes/{name}.md {name}") == 1
        assert executed(served, f"send_email {name}@acme.com") == 0


@pytest.mark.slow
async def test_the_bot_killed_between_pause_and_click_and_started_again(redis_url, served):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served))
        bot = scene.spawn("bot")
        scene.spawn("runner")
        await scene.wait_healthy(scene.port, timeout=60)
        order = tag()
        thread_id = await scene.ask(f"ask the bookkeeper to refund order {order} for 9000")
        card = await scene.card(thread_id, timeout=60)

        os.kill(bot.pid, signal.SIGKILL)
        bot.wait(10)
        scene.spawn("bot")
        await scene.wait_healthy(scene.port, timeout=60)
        assert (await scene.standin.click(ALICE, card, "approve:0")).acked

        await scene.answer(thread_id, contains="Refunded 9000", timeout=60)
        assert [e["effect"] for e in refunds(served, order)] == ["refunded"]


async def test_the_webhook_takes_only_the_secret_and_a_thread_id(scene, served):
    thread_id = await scene.ask(tag(), graph="per_call")
    await scene.card(thread_id, 2)
    url = f"http://127.0.0.1:{scene.port}/agent-server/webhook"
    import aiohttp

    async with aiohttp.ClientSession() as session:

        async def post(headers: dict, body: object) -> tuple[int, dict]:
            async with session.post(url, headers=headers, json=body) as reply:
                return reply.status, await reply.json()

        good = {"X-Signoff-Webhook-Secret": WEBHOOK_SECRET}
        assert (await post({}, {"thread_id": thread_id}))[0] == 401
        assert (await post({"X-Signoff-Webhook-Secret": WEBHOOK_SECRET[:-1]}, {"thread_id": thread_id}))[
            0
        ] == 401
        assert (await post(good, {"thread_id": "../../etc"}))[0] == 400
        assert (await post(good, ["not", "an", "object"]))[0] == 400
        # A delivery repeated (the server retries) changes nothing: still one record per interrupt.
        for _ in range(3):
            assert await post(good, {"thread_id": thread_id}) == (200, {"ok": True, "state": "waiting"})
    assert await scene.store.redis.zcard(scene.store.keys.thread_approvals(thread_id)) == 2
    assert len([m for m in scene.standin.messages if m.kind == "approval"]) == 2


async def test_one_approval_per_interrupt_whoever_reconciles_at_once(redis_url, served):
    from core.agent_server import AgentServer
    from core.reconciler import Reconciler

    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served, SIGNOFF_AGENT_SERVER_POLL="1h"))
        del scene.env["SIGNOFF_WEBHOOK_URL"]
        await scene.start_bot()
        die = await runner_that_dies_after_sending(scene)
        thread_id = await scene.ask(tag(), graph="per_call")
        client = get_client(url=served.url, api_key=None)
        await eventually(
            lambda: _status(client, thread_id, "interrupted"), what="the pause, that nobody saw yet"
        )
        # Three replicas (each its own client) reconcile the same pause twenty times at once.
        replicas = [AgentServer(served.url, prefix=scene.prefix) for _ in range(3)]
        reconcilers = [Reconciler(scene.store, server) for server in replicas]

        await asyncio.gather(*(reconcilers[n % 3].reconcile(thread_id) for n in range(20)))

        assert await scene.store.redis.zcard(scene.store.keys.thread_approvals(thread_id)) == 2
        await scene.card(thread_id, 2)
        assert len([m for m in scene.standin.messages if m.kind == "approval"]) == 2
        for server in replicas:
            await server.close()
        die()


async def _status(client, thread_id: str, status: str) -> bool:
    try:
        return (await client.threads.get(thread_id))["status"] == status
    except Exception:  # not created yet
        return False


def test_agent_server_settings_that_make_no_sense_are_refused():
    from core.config import Settings, SettingsError

    def problems(**env: str) -> list[str]:
        try:
            Settings.from_env(env)
        except SettingsError as exc:
            return exc.problems
        return []

    assert problems(SIGNOFF_AGENT_SERVER_URL="localhost:2024") == [
        "SIGNOFF_AGENT_SERVER_URL='localhost:2024': the Agent Server's http(s) URL, e.g. http://127.0.0.1:2024"
    ]
    assert problems(
        SIGNOFF_AGENT_SERVER_URL="http://a:1", SIGNOFF_WEBHOOK_URL="http://b:2/agent-server/webhook"
    ) == [
        "SIGNOFF_WEBHOOK_URL needs SIGNOFF_WEBHOOK_SECRET (at least 16 characters), which the Agent Server "
        "sends in X-Signoff-Webhook-Secret"
    ]
    assert problems(SIGNOFF_AGENT_SERVER_URL="http://a:1", SIGNOFF_AGENT_SERVER_WATCH="true") == [
        "SIGNOFF_AGENT_SERVER_WATCH needs SIGNOFF_CHANNEL: the channel where the cards of threads Signoff did "
        "not start go"
    ]
    assert problems(SIGNOFF_WEBHOOK_SECRET="short", SIGNOFF_AGENT_SERVER_URL="http://a:1")[0].startswith(
        "SIGNOFF_WEBHOOK_SECRET=(hidden)"
    )
    assert problems(
        SIGNOFF_AGENT_SERVER_URL="http://agents.example.com", SIGNOFF_AGENT_SERVER_API_KEY="k"
    ) == [
        "SIGNOFF_AGENT_SERVER_API_KEY would travel in clear text to SIGNOFF_AGENT_SERVER_URL: use https:// "
        "(plain http only to this machine)"
    ]
    assert (
        problems(SIGNOFF_AGENT_SERVER_URL="https://agents.example.com", SIGNOFF_AGENT_SERVER_API_KEY="k")
        == []
    )
    assert problems(SIGNOFF_AGENT_SERVER_URL="http://127.0.0.1:2024", SIGNOFF_AGENT_SERVER_API_KEY="k") == []


async def test_a_run_that_fails_on_the_server_is_said_once_and_retry_continues_it(scene, served):
    served.fail.write_text("down")
    try:
        thread_id = await scene.ask("hello", graph="flaky")
        failed = await scene.answer(thread_id, contains="The run failed")
    finally:
        served.fail.unlink()
    assert "failed on the Agent Server" in failed
    (error,) = await scene.messages(thread_id, "error")  # told once, though runner and webhook both saw it

    assert (await scene.standin.click(ALICE, error, "retry")).acked

    assert "Recovered and done." in await scene.answer(thread_id, contains="Recovered")
    assert len(await scene.messages(thread_id, "error")) == 1
    told = [
        f["event"]
        for _, f in await scene.store.queue.entries(lambda p: p.events)
        if thread_id in f["event"] and '"failed"' in f["event"]
    ]
    assert len(told) == 1  # the runner and the webhook both saw the failure: one event


async def test_a_card_answered_in_another_tool_closes_by_itself(scene, served):
    name = tag()
    thread_id = await scene.ask(name, graph="per_call")
    write, email = await scene.card(thread_id, 1), await scene.card(thread_id, 2)
    approval = await scene.store.approvals.get(write.metadata["event_payload"]["approval_id"])

    await approve_elsewhere(served, thread_id, approval.interrupt_id)

    closed = await scene.card_shows(write, "no longer waiting")  # found by the poll, nobody clicked
    assert buttons(closed) == []
    assert buttons(scene.fresh(email)) == ["approve:0", "reject:0"]  # still waited for


async def test_every_way_to_start_a_run_reaches_the_server(redis_url, served):
    import aiohttp

    token = "t" * 32
    async with Harness(redis_url) as scene:
        scene.env.update({**remote_env(scene, served), "SIGNOFF_API_TOKEN": token})
        await scene.start_bot()
        await scene.start_remote_runner()
        client = get_client(url=served.url, api_key=None)
        # /signoff use <assistant> <task>
        first = tag()
        assert (await scene.standin.slash(ALICE, CHANNEL, f"use per_call {first}")).acked
        # POST /runs (the bot learned the assistants at its first poll)
        second = tag()
        async with aiohttp.ClientSession() as session:
            reply = await session.post(
                f"http://127.0.0.1:{scene.port}/runs",
                headers={"Authorization": f"Bearer {token}"},
                json={"task": second, "channel": CHANNEL, "graph": "per_call"},
            )
            assert reply.status == 202, await reply.text()
        # `signoff run --graph <assistant>` (the CLI asks the server which assistants there are)
        third = tag()
        cli = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "signoff"),
            "run",
            "--graph",
            "per_call",
            third,
            "--channel",
            CHANNEL,
            env=scene.process_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await cli.communicate()
        assert cli.returncode == 0, err.decode()
        started = out.decode().strip()

        async def paused() -> set[str] | None:
            threads = await client.threads.search(
                metadata={"signoff": scene.prefix}, status="interrupted", limit=100
            )
            return {t["thread_id"] for t in threads} if len(threads) == 3 else None

        on_the_server = await eventually(paused, timeout=30, what="three paused threads on the server")
        assert started in on_the_server
        runs = [await scene.store.runs.get(t) for t in on_the_server]
        assert sorted(r.task for r in runs) == sorted([first, second, third])
        # each has its cards in Slack (Slack posts about one message a second in a channel)
        for thread_id in on_the_server:
            await scene.card(thread_id, 2, timeout=40)


async def test_a_reply_in_the_slack_thread_continues_the_thread_on_the_server(scene, served):
    asked, _ = await scene.standin.mention(ALICE, CHANNEL, 'Email one@acme.com "first"')
    thread_id = await bound_thread(scene, CHANNEL, asked.ts)
    await scene.standin.click(ALICE, await scene.card(thread_id), "approve:0")
    await scene.answer(thread_id, contains="Email to one@acme.com sent")

    await scene.standin.say(ALICE, CHANNEL, 'Email two@acme.com "second"', thread_ts=asked.ts)
    await scene.standin.click(ALICE, await scene.card(thread_id, 2), "approve:0")

    assert "Email to two@acme.com sent" in await scene.answer(thread_id, contains="two@acme.com")
    state = await get_client(url=served.url, api_key=None).threads.get_state(thread_id)
    said = [m["content"] for m in state["values"]["messages"] if m["type"] == "human"]
    assert said == ['Email one@acme.com "first"', 'Email two@acme.com "second"']


async def test_a_local_graph_wins_over_an_assistant_of_the_same_name(scene, served):
    from agent_runner.remote import RemoteRunner
    from agent_runner.worker import RunnerWorker
    from core.agent_server import AgentServer
    from core.reconciler import Reconciler

    server = AgentServer(served.url, prefix=scene.prefix)
    remote = RemoteRunner(scene.store, server, Reconciler(scene.store, server))
    local = SimpleNamespace(
        on_tool=None, fence=None, on_task=None
    )  # a graph of the project's own, named per_call
    worker = RunnerWorker(scene.store, {"per_call": local}, remote=remote)  # type: ignore[dict-item]
    try:
        assert await worker._remote("per_call") is None
        assert await worker._remote("demo") is remote
        assert await worker._remote("nope") is None
    finally:
        await server.close()


async def test_the_retention_never_deletes_a_thread_on_the_server(scene, served):
    from agent_runner.checkpointer import AsyncRedisCheckpointer
    from agent_runner.retention import Janitor

    thread_id = await scene.ask("hello", graph="flaky")
    await scene.answer(thread_id, contains="Recovered")
    async with AsyncRedisCheckpointer.from_conn_string(scene.redis_url) as saver:
        swept = await Janitor(
            scene.store, saver, retention_s=60, audit_retention_s=60, clock=Later(120)
        ).sweep()

    assert swept.threads >= 1 and await scene.store.runs.get(thread_id) is None  # Signoff's records went
    thread = await get_client(url=served.url, api_key=None).threads.get(thread_id)
    assert thread["status"] == "idle"  # the server's thread stays


async def test_signoff_doctor_checks_the_agent_server(served):
    import io

    from core.config import Settings
    from signoff import doctor

    settings = Settings.from_env({"SIGNOFF_AGENT_SERVER_URL": served.url, "SIGNOFF_GRAPHS_FILE": os.devnull})
    checks = {c.name: c for c in await doctor.doctor(settings, None, [])}
    assert checks["Agent Server"].ok
    assert checks["Agent Server"].detail == "4 assistants: demo, flaky, mcp, per_call"
    assert "graphs" not in checks  # no local graphs is fine: the server's are the graphs
    away = Settings.from_env(
        {"SIGNOFF_AGENT_SERVER_URL": "http://127.0.0.1:9", "SIGNOFF_GRAPHS_FILE": os.devnull}
    )
    out = io.StringIO()
    doctor.report(await doctor.doctor(away, None, []), out)
    assert "✗ Agent Server: the Agent Server is unreachable (assistants.search)" in out.getvalue()


async def test_local_and_remote_graphs_mixed_in_one_runner(redis_url, served):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served, SIGNOFF_GRAPHS_FILE=str(LANGGRAPH_JSON)))
        await scene.start_bot()
        await scene.start_remote_runner("memory")

        here = await scene.ask("remember the blue door", graph="memory")  # the project's own graph
        there = await scene.ask("hello", graph="flaky")  # an assistant on the server

        assert "You said: remember the blue door" in await scene.answer(here, contains="You said")
        assert "Recovered and done." in await scene.answer(there, contains="Recovered")
        assert await get_client(url=served.url, api_key=None).threads.get(there)
        with pytest.raises(Exception, match="404|not found|Not Found"):
            await get_client(url=served.url, api_key=None).threads.get(here)


async def _started_elsewhere_right_after(scene: Harness, served: Served, patch: str) -> None:
    """Another client (Agent Inbox) answers the email at the moment the runner sends the write:
    its run is queued on the server (it starts 2 s later), so Signoff's own is refused or finds
    the thread busy. `patch`: the runner step after which it happens ("settle" or "send")."""
    name = tag()
    thread_id = await scene.ask(name, graph="per_call")
    write, email = await scene.card(thread_id, 1), await scene.card(thread_id, 2)
    other = await scene.store.approvals.get(email.metadata["event_payload"]["approval_id"])
    client = get_client(url=served.url, api_key=None)
    worker = scene.runner_worker
    server = worker.remote.server
    real = getattr(server, patch)

    async def then_someone_else(*args, **kwargs):
        setattr(server, patch, real)
        if patch == "settle":
            await real(*args, **kwargs)
        await client.runs.create(
            thread_id,
            "per_call",
            command={"resume": {other.interrupt_id: {"type": "reject"}}},
            after_seconds=2,
        )
        if patch == "send":
            return await real(*args, **kwargs)

    setattr(server, patch, then_someone_else)
    assert (await scene.standin.click(ALICE, write, "approve:0")).acked

    await eventually(lambda: scene.says(thread_id, "nothing was sent"), what="the refusal, in the thread")
    assert "running something else" in card_text(await scene.card_shows(write, "Could not resume"))
    again = await scene.card(thread_id, 3, timeout=30)  # once the other run ended: the write again
    assert "write_file" in card_text(again) and buttons(again)
    await scene.standin.click(ALICE, again, "approve:0")
    await scene.answer(thread_id, contains="All done")
    assert executed(served, f"write_file /notes/{name}.md {name}") == 1
    assert executed(served, f"send_email {name}@acme.com") == 0  # the other client rejected it


async def test_a_409_is_said_and_the_pause_offered_again_once_the_thread_is_free(scene, served):
    await _started_elsewhere_right_after(scene, served, "send")


async def test_a_run_started_elsewhere_after_the_look_is_not_taken_for_an_answer(scene, served):
    await _started_elsewhere_right_after(scene, served, "settle")


async def test_a_late_reading_never_undoes_a_newer_one(scene, served):
    from core.agent_server import AgentServer
    from core.producer import start_run
    from core.reconciler import Reconciler
    from core.records import ApprovalStatus

    thread_id = await scene.ask(tag(), graph="per_call")
    for number in (1, 2):
        await scene.standin.click(ALICE, await scene.card(thread_id, number), "approve:0")
        await scene.card_shows(await scene.card(thread_id, number), "▶️ The agent carries on")
    await scene.answer(thread_id, contains="All done")
    late = AgentServer(served.url, prefix=scene.prefix)
    finished = await late.read(thread_id)  # a reading of the finished thread, delivered late
    assert finished is not None and finished.status == "idle"
    run = await scene.store.runs.get(thread_id)
    await start_run(scene.store, tag(), run.channel, "per_call", thread_id, thread_ts=run.thread_ts)
    cards = [await scene.card(thread_id, 3), await scene.card(thread_id, 4)]
    real = late.read

    async def late_then_real(tid: str):
        late.read = real
        return finished

    late.read = late_then_real
    await Reconciler(scene.store, late).reconcile(thread_id)
    await late.close()

    for card in cards:
        approval = await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])
        assert approval.status is ApprovalStatus.PENDING  # not closed by the old reading
        assert buttons(scene.fresh(card))
    assert await scene.store.runs.state(thread_id) is RunState.WAITING


async def test_a_thread_goes_on_with_its_own_assistant_when_names_are_shared(redis_url, served):
    async with Harness(redis_url) as scene:
        scene.env.update(remote_env(scene, served, SIGNOFF_AGENT_SERVER_WATCH="true"))
        client = get_client(url=served.url, api_key=None)
        name = f"reviewer-{tag()}"
        first = await client.assistants.create("per_call", name=name)
        second = await client.assistants.create("per_call", name=name)
        await scene.start_bot()
        await scene.start_remote_runner()
        thread = await client.threads.create()
        started = await client.runs.create(
            thread["thread_id"],
            second["assistant_id"],
            input={"messages": [{"role": "user", "content": tag()}]},
        )
        await client.runs.join(thread["thread_id"], started["run_id"])

        write = await scene.card(thread["thread_id"], 1)
        await scene.standin.click(ALICE, write, "approve:0")
        await scene.card_shows(write, "▶️ The agent carries on")

        runs = await server_runs(served, thread["thread_id"])
        assert {r["assistant_id"] for r in runs} == {second["assistant_id"]} != {first["assistant_id"]}


async def test_a_thread_that_changes_while_it_is_read_is_read_again(scene, served):
    """A reply starts a run between the reading's calls: the answer of the first run is not told
    again under the new run's name, and the new run's failure is told."""
    from core.agent_server import AgentServer
    from core.producer import start_run
    from core.reconciler import Reconciler

    thread_id = await scene.ask("hello", graph="flaky")
    await scene.answer(thread_id, contains="Recovered")
    run = await scene.store.runs.get(thread_id)
    server = AgentServer(served.url, prefix=scene.prefix)
    real = server.client.runs.list
    client = get_client(url=served.url, api_key=None)

    async def a_reply_meanwhile(tid, **kwargs):
        server.client.runs.list = real
        served.fail.write_text("down")  # the reply's run fails on the server
        await start_run(scene.store, "again", run.channel, "flaky", tid, thread_ts=run.thread_ts)
        await eventually(lambda: _runs_at_least(served, tid, 2), what="the reply's run on the server")
        return await real(tid, **kwargs)

    server.client.runs.list = a_reply_meanwhile
    try:
        await Reconciler(scene.store, server).reconcile(thread_id)
        await eventually(lambda: _status(client, thread_id, "error"), what="the reply's run failing")
        failed = await scene.answer(thread_id, contains="The run failed")
    finally:
        served.fail.unlink(missing_ok=True)
        await server.close()
    assert "failed on the Agent Server" in failed
    assert len(await scene.messages(thread_id, "answer")) == 1  # the first run's answer, once


async def _runs_at_least(served: Served, thread_id: str, count: int) -> bool:
    return len(await server_runs(served, thread_id)) >= count


async def test_the_poll_outlives_a_refusing_server_and_keeps_the_bot_ready(store):
    from bot.watch import Watcher
    from core.health import Health

    class RotatedKey:
        prefix = store.keys.prefix
        refused: list[float] = []

        async def refresh(self):
            self.refused.append(time.monotonic())
            raise PermissionError("403 Forbidden: the key was rotated")

    server = RotatedKey()
    health = Health(stale_after_s=1.0)
    watcher = Watcher(store, server, reconciler=None, every_s=0.2, health=health)  # type: ignore[arg-type]
    stop = asyncio.Event()
    polling = asyncio.create_task(watcher.serve(stop))
    problems: list[dict] = []

    async def ready() -> bool:
        report = await health.readiness(store.redis, expected=(Watcher.name,))
        if not report["ok"]:
            problems.append(report["problems"])
        return report["ok"]

    async def refused_once() -> bool:
        return bool(server.refused) and await ready()

    async def refused_for_long() -> bool:
        ok = await ready()  # as a probe sees it, all along
        return (
            ok
            and len(server.refused) >= 3
            and time.monotonic() - server.refused[0] > 2 * health.stale_after_s
        )

    await eventually(refused_once, what="the poll refused a first time and the bot ready")
    problems.clear()
    # Refused again and again (still polling, trying again), for twice as long as readiness lets
    # a loop go unseen: the bot stays ready all along.
    await eventually(refused_for_long, what="the poll refused for longer than a loop may go unseen")

    assert problems == [] and not polling.done()
    stop.set()
    await polling


def test_langgraph_dev_gets_no_secrets(monkeypatch):
    from signoff_demo.agent_server import agent_environment

    for name in ("SLACK_BOT_TOKEN", "SIGNOFF_WEBHOOK_SECRET", "SIGNOFF_AGENT_SERVER_API_KEY", "REDIS_URL"):
        monkeypatch.setenv(name, "secret-value")
    monkeypatch.setenv("SIGNOFF_DEMO_PAYMENTS", "/tmp/ledger")

    given = agent_environment()

    assert "secret-value" not in given.values()
    assert given["SIGNOFF_DEMO_PAYMENTS"] == "/tmp/ledger"  # what the agents' tools need stays
