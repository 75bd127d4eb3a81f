"""Chat-ops end to end: people start and continue runs from Slack, and follow them there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import aiohttp
import pytest

from tests.support.harness import (
    CHANNEL,
    ROOT,
    Harness,
    bound_thread,
    buttons,
    eventually,
    start_scene,
    waiting_approvals,
)
from tests.support.people import ALICE, BOB


@pytest.fixture
async def scene(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SIGNOFF_TEST_FAIL", str(tmp_path / "provider-down"))
    env = {"SIGNOFF_API_TOKEN": "s3cret", "SIGNOFF_APPROVERS": json.dumps({"send_email": [ALICE]})}
    async with start_scene(redis_url, "demo", "memory", "flaky", "per_call", env=env) as running:
        yield running


async def test_a_mention_runs_the_agent_in_that_thread_with_cards_status_and_answer(scene):
    asked, delivered = await scene.standin.mention(ALICE, CHANNEL, 'Email finance@acme.com "numbers"')
    assert delivered.acked
    thread_id = await bound_thread(scene, CHANNEL, asked.ts)
    card = await scene.card(thread_id)
    assert card.thread_ts == asked.ts

    await scene.standin.click(ALICE, card, "approve:0")

    answer = await scene.answer(thread_id)
    assert "- ✅ Email to finance@acme.com sent: numbers" in answer  # (a Markdown list, streamed)
    # One status line, edited in place (coalesced: it shows the latest state, not every step).
    status = await eventually(
        lambda: [m for m in scene.standin.thread(CHANNEL, asked.ts) if m.kind == "status"],
        what="the status line",
    )
    await eventually(lambda: scene.fresh(status[0]).text == "✅ Finished", what="status finished")
    assert len([m for m in scene.standin.thread(CHANNEL, asked.ts) if m.kind == "status"]) == 1
    assert float(card.ts) < float(status[0].ts)  # the card first: the status line never delays it


async def test_a_reply_in_the_thread_continues_the_agents_memory(scene):
    # The default graph is the demo; /signoff use picks the memory graph.
    interaction = await scene.standin.slash(ALICE, CHANNEL, "use memory remember apples")
    assert interaction.said.startswith("Started *memory*")
    started = await eventually(
        lambda: [
            m
            for m in scene.standin.messages
            if m.kind == "run" and "apples" in m.text and m.thread_ts is None
        ],
        what="the run's thread",
    )
    root = started[0].ts
    thread_id = await bound_thread(scene, CHANNEL, root)
    assert "You said: remember apples" in await scene.answer(thread_id)

    await scene.standin.say(BOB, CHANNEL, "and pears", thread_ts=root)

    assert "You said: remember apples | and pears" in await scene.answer(thread_id, contains="pears")


async def test_a_retried_event_starts_one_run(scene):
    message = scene.standin.write(ALICE, CHANNEL, "<@U0SIGNOFF> Refund order 1 for 200")
    envelope = scene.standin.message_event(message, "app_mention")

    first = await scene.standin.deliver(envelope)
    again = await scene.standin.deliver(envelope, retry=1)

    assert first.acked and again.acked
    thread_id = await bound_thread(scene, CHANNEL, message.ts)
    assert "Refunded 200 on order 1" in await scene.answer(thread_id)
    starts = [
        f for _, f in await scene.store.queue.entries(lambda p: p.commands) if '"start"' in f["command"]
    ]
    assert len(starts) == 1


async def test_direct_messages_work_the_same_way(scene):
    asked, _ = await scene.standin.say(ALICE, "D0ALICE", "Refund order 2 for 300", channel_type="im")
    thread_id = await bound_thread(scene, "D0ALICE", asked.ts)

    assert "Refunded 300 on order 2" in await scene.answer(thread_id)


async def test_bots_and_strangers_threads_never_start_runs(scene):
    bot_message = scene.standin.write("U0OTHERBOT", CHANNEL, "Refund order 3 for 100")
    envelope = scene.standin.message_event(bot_message, channel_type="im", bot_id="B0OTHER")
    await scene.standin.deliver(envelope)
    await scene.standin.say(BOB, CHANNEL, "a message in a thread nobody bound", thread_ts="1.000001")

    assert await scene.store.queue.length(lambda p: p.commands) == 0


async def test_while_an_approval_waits_a_new_message_points_at_the_card(scene):
    asked, _ = await scene.standin.mention(ALICE, CHANNEL, "Refund order 4 for 5000")
    thread_id = await bound_thread(scene, CHANNEL, asked.ts)
    card = await scene.card(thread_id)

    await scene.standin.mention(BOB, CHANNEL, "and refund order 5 for 10", thread_ts=asked.ts)

    note = await eventually(
        lambda: [
            m.text
            for m in scene.standin.thread(CHANNEL, asked.ts)
            if m.text.startswith("⏸ Waiting on the approval above")
        ],
        what="the note",
    )
    assert f"/p{card.ts.replace('.', '')}|Issue refund: order_id 4, amount 5,000>" in note[0]
    starts = [
        f for _, f in await scene.store.queue.entries(lambda p: p.commands) if '"start"' in f["command"]
    ]
    assert len(starts) == 1


async def test_slash_pending_lists_what_waits_in_the_channel(scene):
    asked, _ = await scene.standin.mention(ALICE, CHANNEL, "Refund order 6 for 6000")
    card = await scene.card(await bound_thread(scene, CHANNEL, asked.ts))

    interaction = await scene.standin.slash(BOB, CHANNEL, "pending")

    assert interaction.acked
    (listing,) = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="the list")
    assert listing.startswith("*Waiting for a decision here (1):*")
    assert f"/p{card.ts.replace('.', '')}|Issue refund: order_id" in listing
    help_text = (await scene.standin.slash(BOB, CHANNEL, "")).said
    assert "`/signoff pending`" in help_text
    assert scene.standin.ephemerals_for(BOB)[-1] == help_text  # shown to him, as Slack shows it
    unknown = (await scene.standin.slash(BOB, CHANNEL, "use nope do it")).said
    assert unknown.startswith("There is no graph called `nope`")


async def test_slash_pending_says_how_many_wait_in_all_and_where_every_one_is_listed(redis_url):
    async with Harness(redis_url) as scene:
        await waiting_approvals(scene.store, 120)
        for partition in scene.store.keys.partitions:  # their cards were posted long ago
            await scene.store.redis.xtrim(partition.events, maxlen=0)
        await scene.start_bot()

        interaction = await scene.standin.slash(BOB, CHANNEL, "pending")
        (listing,) = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="the list")

    assert interaction.acked
    header, *items, note = listing.splitlines()
    assert header == "*Waiting for a decision here (120):*"
    assert len(items) == 20 and all(item.startswith("• Issue refund: n ") for item in items)
    assert note == (
        "_Showing the newest 20 of 120: `signoff pending`, run where Signoff runs, lists every one._"
    )


async def test_post_runs_starts_a_run_in_a_new_thread_and_needs_the_token(scene):
    url = f"http://127.0.0.1:{scene.port}/runs"
    task = {"task": "Refund order 7 for 700", "channel": CHANNEL}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=task) as refused:
            assert refused.status == 401
        async with session.post(url, json=task, headers={"Authorization": "Bearer wrong"}) as refused:
            assert refused.status == 401
        async with session.post(
            url, json={"channel": CHANNEL}, headers={"Authorization": "Bearer s3cret"}
        ) as bad:
            assert bad.status == 400 and "task" in (await bad.json())["error"]
        async with session.post(url, json=task, headers={"Authorization": "Bearer s3cret"}) as accepted:
            assert accepted.status == 202
            thread_id = (await accepted.json())["thread_id"]

    assert "Refunded 700 on order 7" in await scene.answer(thread_id)
    run = await scene.store.runs.get(thread_id)
    root = scene.standin.message(CHANNEL, run.thread_ts)
    assert root.thread_ts is None and root.text.startswith("🤖 *demo* ")
    # once finished, the root no longer says it is working on it
    finished = "🤖 *demo* worked on this: Refund order 7 for 700\n✅ Finished"
    await eventually(lambda: scene.standin.message(CHANNEL, run.thread_ts).text == finished, what=finished)


async def test_signoff_run_from_the_command_line(scene):
    env = {
        **scene.process_env(),
        "SIGNOFF_CHANNEL": CHANNEL,
        "SIGNOFF_GRAPH": "signoff_demo.agent:build_demo_agent",
    }
    done = subprocess.run(
        [sys.executable, "-m", "signoff", "run", "Refund order 8 for 800"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    thread_id = done.stdout.strip()
    assert "Refunded 800 on order 8" in await scene.answer(thread_id)


async def test_an_agent_error_is_shown_in_the_thread_and_retried(scene):
    down = os.environ["SIGNOFF_TEST_FAIL"]
    open(down, "w").close()
    interaction = await scene.standin.slash(ALICE, CHANNEL, "use flaky do the thing")
    assert interaction.acked
    error = await eventually(
        lambda: [m for m in scene.standin.messages if m.kind == "error"], what="the error"
    )
    # The error's type and a reference for the logs; its text (it could hold anything) stays out.
    assert re.fullmatch(
        r"⚠️ The run failed: RuntimeError — details in the logs, ref [0-9a-f]{8}", error[0].text
    )
    assert buttons(error[0]) == ["retry"]

    os.remove(down)
    await scene.standin.click(BOB, error[0], "retry")
    await scene.standin.click(ALICE, error[0], "retry")  # a second click does not run it twice

    thread_id = error[0].metadata["event_payload"]["thread_id"]
    assert "**Recovered** and done." in await scene.answer(thread_id, contains="Recovered")  # (Markdown)
    assert f"↻ Retried by <@{BOB}>" in scene.fresh(error[0]).text
    started, *told = scene.standin.ephemerals_for(ALICE)  # (the command's answer, shown to her)
    assert started.startswith("Started *flaky*")
    assert told == ["This run is not failed (any more): someone retried it already."]


async def test_the_home_tab_lists_what_waits_for_the_person_looking(scene):
    asked, _ = await scene.standin.mention(BOB, CHANNEL, 'Email finance@acme.com "home"')
    card = await scene.card(await bound_thread(scene, CHANNEL, asked.ts))

    await scene.standin.open_home(ALICE)
    await scene.standin.open_home(BOB)
    homes = await eventually(
        lambda: len(scene.standin.home) == 2 and scene.standin.home, what="two home tabs"
    )

    alice = json.dumps(homes[ALICE], ensure_ascii=False)
    assert "Send email: to finance@acme.com" in alice and f"/p{card.ts.replace('.', '')}" in alice
    assert f"asked by <@{BOB}>" in alice
    bob = json.dumps(homes[BOB], ensure_ascii=False)
    assert "Nothing waits for your decision." in bob
    # Bob asked: he sees it waiting on others, with the same link.
    assert "You asked, waiting on others" in bob and f"/p{card.ts.replace('.', '')}" in bob
    assert "Waiting on <@U0ALICE>" in bob  # on whom
    await scene.standin.click(ALICE, card, "approve:0")
    await scene.card_shows(card, "Approved by")
    scene.standin.home.clear()
    await scene.standin.open_home(ALICE)
    home = await eventually(lambda: scene.standin.home.get(ALICE), what="the refreshed home")
    text = json.dumps(home, ensure_ascii=False)
    assert "Nothing waits for your decision." in text
    # the decision in words, linked to its card, once
    link = f"/p{card.ts.replace('.', '')}|send email: to finance@acme.com"
    assert "✅ Approved <http" in text and text.count(link) == 1


async def test_starters_and_channel_graphs_are_enforced(redis_url):
    env = {
        "SIGNOFF_STARTERS": json.dumps({"*": [ALICE]}),
        "SIGNOFF_CHANNEL_GRAPHS": json.dumps({CHANNEL: ["demo"]}),
    }
    async with start_scene(redis_url, "demo", env=env) as scene:
        await scene.standin.mention(BOB, CHANNEL, "Refund order 9 for 90")
        other = (await scene.standin.slash(ALICE, CHANNEL, "use memory hi")).said

        assert other == "`memory` is not enabled in this channel. Here: demo."
        said = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="refusal")
        assert said == ["You are not on the list of people who may start runs here."]
        assert await scene.store.queue.length(lambda p: p.commands) == 0
