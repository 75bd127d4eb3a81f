"""Slack's agent surfaces end to end (stand-in Slack, the real bot and runner, the demo agent):
the run's plan in its status message, the answer streamed, the fallback where streams are refused;
the Messages tab as Slack's agent view has it (what a new app gets) and as an install with the
earlier assistant view has it.

The issue's ends (a plan that waits and completes, the answer streamed, the fallback, a batch
of two, an expiry) run on one Redis server and on a three-master Redis Cluster."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.slack import surfaces as agent_surfaces
from slack_standin.app_config import assistant_view_install
from tests.support.harness import (
    ASK_BATCH,
    CHANNEL,
    Harness,
    bound_thread,
    eventually,
    start_scene,
)
from tests.support.people import ALICE, BOB, RILEY
from tests.support.records import task_words

ASK_Q3 = 'Email finance@acme.com "Q3 numbers are in"'


@pytest.fixture(params=["node", "cluster"])
async def scene(request):
    env = {"SIGNOFF_APPROVERS": json.dumps({"send_email": [ALICE], "delete": [ALICE, BOB]})}
    async with start_scene(request.getfixturevalue(f"{request.param}_url"), "demo", env=env) as running:
        yield running


def calls(scene: Harness, method: str) -> list:
    return [c for c in scene.standin.calls if c.method == method]


async def test_a_paused_run_shows_a_plan_whose_task_waits_then_completes_and_the_answer_streams(scene):
    thread_id = await scene.ask(ASK_Q3, requester=RILEY)
    card = await scene.card(thread_id)

    tasks = await scene.task_shows(thread_id, "pending", "Waiting for approval by Alice")
    (waiting,) = tasks
    assert waiting["title"] == "send email: to finance@acme.com"
    link = scene.standin._chat_getPermalink({"channel": card.channel, "message_ts": card.ts})["permalink"]
    assert link in task_words(waiting)  # the task links to the card, which keeps the buttons

    await scene.standin.click(ALICE, card, "approve:0")

    (done,) = await scene.task_shows(thread_id, "complete", "Approved by Alice")
    assert done["task_id"] == waiting["task_id"]
    assert (await scene.plan(thread_id))["title"] == "Finished · 1 of 1 done"
    answer = await scene.answer(thread_id, "Email to finance@acme.com sent")
    (streamed,) = await scene.messages(thread_id, "answer")
    assert not streamed.streaming and streamed.markdown == answer
    started, stopped = calls(scene, "chat.startStream"), calls(scene, "chat.stopStream")
    assert [c.reply["ok"] for c in started + stopped] == [True, True]
    assert started[0].args["thread_ts"] == (await scene.store.runs.get(thread_id)).thread_ts
    assert started[0].args["recipient_user_id"] == RILEY  # a channel's stream is for the requester
    assert calls(scene, "chat.appendStream") and all(c.reply["ok"] for c in calls(scene, "chat.appendStream"))
    # The plan replaces the status line (in the root): the thread holds what it held before it.
    run = await scene.store.runs.get(thread_id)
    kinds = [m.kind for m in scene.standin.thread(run.channel, run.thread_ts)]
    assert kinds == ["run", "approval", "outcome", "answer"]


@pytest.mark.parametrize("layout", ["node", "cluster"])
async def test_where_slack_refuses_a_stream_the_answer_is_posted(request, layout):
    async with start_scene(request.getfixturevalue(f"{layout}_url"), "demo") as scene:
        scene.standin.refuse_streaming(CHANNEL)
        thread_id = await scene.ask(ASK_Q3)
        await scene.standin.click(ALICE, await scene.card(thread_id), "approve:0")

        answer = await scene.answer(thread_id, "Email to finance@acme.com sent")
        assert "• ✅ Email to finance@acme.com sent: Q3 numbers are in" in answer  # mrkdwn, as before
        (posted,) = await scene.messages(thread_id, "answer")
        assert posted.markdown is None  # a chat.postMessage
        assert [c.reply.get("error") for c in calls(scene, "chat.startStream")] == [
            "channel_type_not_supported"
        ]

        # The next run in that channel is not offered a stream again for a while.
        again = await scene.ask('Email ops@acme.com "later"')
        await scene.standin.click(ALICE, await scene.card(again), "approve:0")
        await scene.answer(again, "Email to ops@acme.com sent")
        assert len(calls(scene, "chat.startStream")) == 1


async def test_a_batch_of_two_gated_calls_shows_two_waiting_tasks(scene):
    thread_id = await scene.ask(ASK_BATCH)
    await scene.card(thread_id)

    async def both_waiting() -> list[dict] | None:
        tasks = (await scene.plan(thread_id)).get("tasks", [])
        return (
            tasks if len(tasks) == 2 and all("Waiting for approval" in task_words(t) for t in tasks) else None
        )

    tasks = await eventually(both_waiting, what="two tasks waiting")
    assert [(t["title"], t["status"]) for t in tasks] == [
        ("delete: file_path /reports/old.pdf", "pending"),
        ("send email: to team@acme.com", "pending"),
    ]
    assert "by Alice or Bob  ·" in task_words(tasks[0]) and "by Alice  ·" in task_words(
        tasks[1]
    )  # (per call)
    assert (await scene.plan(thread_id))["title"] == "Waiting for approval · 0 of 2 done"


@pytest.mark.parametrize("layout", ["node", "cluster"])
async def test_an_expired_calls_task_says_it_expired(request, layout, tmp_path):
    policy = tmp_path / "signoff.toml"
    policy.write_text('[[rules]]\ntools = ["send_email"]\napprovers = ["U0ALICE"]\ntimeout = "2s"\n')
    async with start_scene(request.getfixturevalue(f"{layout}_url"), "demo", policy=policy) as scene:
        thread_id = await scene.ask(ASK_Q3)
        await scene.card(thread_id)

        (expired,) = await scene.task_shows(thread_id, "error", "Expired")
        assert "Not run" in task_words(expired)
        assert (await scene.plan(thread_id))["title"].endswith("0 of 1 done, 1 stopped")  # never ran
        await scene.answer(thread_id)


async def test_agent_text_in_a_streamed_answer_pings_nobody_and_hides_no_link(redis_url):
    hostile = (
        'Email team@acme.com "<!channel> <@U0BOB> [https://acme.example](https://evil.example) \u202egnp"'
    )
    async with start_scene(redis_url, "demo") as scene:
        thread_id = await scene.ask(hostile)
        card = await scene.card(thread_id)
        await scene.standin.click(ALICE, card, "approve:0")
        await scene.answer(thread_id, "sent")

        (streamed,) = await scene.messages(thread_id, "answer")
        assert streamed.pinged == frozenset()
        assert "<!channel>" not in streamed.markdown and "<@U0BOB>" not in streamed.markdown
        assert "https://acme.example (https://evil.example)" in streamed.markdown  # where it points, shown
        assert "⟨U+202E⟩" in streamed.markdown
        assert streamed not in scene.standin.notifications_for(BOB)


def prompts_set(scene: Harness) -> list:
    return [c for c in scene.standin.calls if c.method == "assistant.threads.setSuggestedPrompts"]


async def test_the_agent_views_messages_tab_offers_prompts_and_each_message_there_is_a_thread(redis_url):
    env = {"SIGNOFF_APPROVERS": json.dumps({"send_email": [ALICE]})}
    async with start_scene(redis_url, "demo", "memory", env=env) as scene:
        standin = scene.standin
        assert standin.experience == "agent"  # what deploy/slack-manifest.yml makes
        dm = standin.dm_channel(ALICE)
        assert [p["title"] for p in standin.shown_prompts(dm)] == ["What is waiting for me?", "My requests"]
        opened = await standin.open_messages_tab(ALICE)  # app_home_opened, tab "messages"
        assert opened.acked
        offered = await eventually(lambda: standin.tab_prompts.get(dm), what="suggested prompts")
        assert [p["title"] for p in offered] == [
            "What is waiting for me?",
            "My requests",
            "Use demo",
            "Use memory",
        ]
        (call,) = prompts_set(scene)
        assert "thread_ts" not in call.args  # (an agent-view app's call with one fails silently)

        # "Use memory" is a message of its own, answered in its thread; the next message starts a
        # run on that graph in its own thread, as each message in the tab is one
        chose, _ = await standin.say(ALICE, dm, "Use memory", channel_type="im")
        await eventually(
            lambda: any("I'll use *memory*" in m.text for m in standin.thread(dm, chose.ts)), what="chosen"
        )
        asked, _ = await standin.say(ALICE, dm, "remember the tulips", channel_type="im")
        remembered = await bound_thread(scene, dm, asked.ts)
        run = await scene.store.runs.get(remembered)
        assert (run.graph, run.thread_ts) == ("memory", asked.ts)
        await scene.answer(remembered, "remember the tulips")

        # the choice was for one run: the next top-level message uses the default graph
        paused, _ = await standin.say(ALICE, dm, ASK_Q3, channel_type="im")
        thread_id = await bound_thread(scene, dm, paused.ts)
        card = await scene.card(thread_id)
        assert (await scene.store.runs.get(thread_id)).graph == "demo"
        where = (dm, paused.ts)
        await eventually(
            lambda: standin.statuses.get(where) == "is waiting for Alice's approval",
            what="the thread's status",
        )
        asked_list, _ = await standin.say(ALICE, dm, "What is waiting for me?", channel_type="im")
        listed = await eventually(
            lambda: next(
                (m for m in standin.thread(dm, asked_list.ts) if "Waiting for your decision (1)" in m.text),
                None,
            ),
            what="the list, in the prompt's own thread",
        )
        assert "Send email: to finance@acme.com" in listed.text

        await standin.click(ALICE, card, "approve:0")
        await scene.answer(thread_id, "Email to finance@acme.com sent")
        await eventually(lambda: where not in standin.statuses, what="the status cleared")
        (streamed,) = await scene.messages(thread_id, "answer")
        assert streamed.thread_ts == paused.ts  # the answer is in the message's own thread
        await standin.open_messages_tab(ALICE)  # again, soon: the same prompts are not set again
        await standin.open_home(ALICE)
        await eventually(lambda: standin.home.get(ALICE), what="the Home tab")
        assert len(prompts_set(scene)) == 1
        starts = [
            f for _, f in await scene.store.queue.entries(lambda p: p.commands) if '"start"' in f["command"]
        ]
        assert len(starts) == 2  # the prompts started nothing


async def test_an_assistant_view_install_gets_prompts_in_each_new_thread_and_none_for_the_tab(redis_url):
    """An app installed before Slack's agent view, from the manifest with `assistant_view`: Slack
    opens a thread of its own and sends assistant_thread_started; Signoff's prompts go in it."""
    env = {"SIGNOFF_APPROVERS": json.dumps({"send_email": [ALICE]})}
    async with start_scene(redis_url, "demo", "memory", env=env) as scene:
        standin = scene.standin
        standin.app_manifest = assistant_view_install(standin.app_manifest)
        root, opened = await standin.open_agent_thread(ALICE)
        where = (root.channel, root.ts)
        await eventually(lambda: standin.prompts.get(where), what="suggested prompts in the thread")
        await standin.open_messages_tab(ALICE)  # (were Slack to send it too: the thread has them)
        await standin.open_home(ALICE)
        await eventually(lambda: standin.home.get(ALICE), what="the Home tab")
        assert [c.args.get("thread_ts") for c in prompts_set(scene)] == [root.ts]


async def test_the_messages_tab_offers_prompts_and_a_dm_session_says_whom_the_run_waits_for(redis_url):
    """The same, in an install with Slack's earlier assistant view (threads Slack opens)."""
    env = {"SIGNOFF_APPROVERS": json.dumps({"send_email": [ALICE]})}
    async with start_scene(redis_url, "demo", "memory", env=env) as scene:
        standin = scene.standin
        standin.app_manifest = assistant_view_install(standin.app_manifest)
        root, opened = await standin.open_agent_thread(ALICE)
        assert opened.acked
        where = (root.channel, root.ts)
        offered = await eventually(lambda: standin.prompts.get(where), what="suggested prompts")
        assert [p["title"] for p in offered] == [
            "What is waiting for me?",
            "My requests",
            "Use demo",
            "Use memory",
        ]

        # A prompt is answered by Signoff in the thread; it never reaches an agent.
        await standin.say(ALICE, root.channel, "Use demo", root.ts, channel_type="im")
        await eventually(
            lambda: any("I'll use *demo*" in m.text for m in standin.thread(*where)), what="chosen"
        )
        await standin.say(ALICE, root.channel, ASK_Q3, root.ts, channel_type="im")
        thread_id = await bound_thread(scene, *where)
        card = await scene.card(thread_id)
        assert (await scene.store.runs.get(thread_id)).graph == "demo"
        await eventually(
            lambda: standin.statuses.get(where) == "is waiting for Alice's approval",
            what="the session's status",
        )

        other, _ = await standin.open_agent_thread(ALICE)  # a new chat: its prompts again
        await standin.say(ALICE, other.channel, "What is waiting for me?", other.ts, channel_type="im")
        listed = await eventually(
            lambda: next(
                (
                    m
                    for m in standin.thread(other.channel, other.ts)
                    if "Waiting for your decision (1)" in m.text
                ),
                None,
            ),
            what="the list",
        )
        assert "Send email: to finance@acme.com" in listed.text and "/archives/" in listed.text

        await standin.click(ALICE, card, "approve:0")
        await scene.answer(thread_id, "Email to finance@acme.com sent")
        await eventually(lambda: where not in standin.statuses, what="the status cleared")
        said = [c.args["status"] for c in standin.calls if c.method == "assistant.threads.setStatus"]
        assert "is waiting for Alice's approval" in said and said[-1] == ""
        assert all(a != b for a, b in zip(said, said[1:], strict=False))  # set only when it changes
        started = [c for c in standin.calls if c.method == "chat.startStream"]
        assert started and "recipient_user_id" not in started[0].args  # a DM's stream needs none
        starts = [
            f for _, f in await scene.store.queue.entries(lambda p: p.commands) if '"start"' in f["command"]
        ]
        assert len(starts) == 1  # the prompts started nothing


async def test_streams_cut_off_midway_are_deleted_and_the_answer_streamed_again_whole(redis_url):
    async with start_scene(redis_url, "demo") as scene:
        scene.standin.fail_next("chat.stopStream", 500, count=2)  # two attempts cut off (never re-sent)
        thread_id = await scene.ask(ASK_Q3)
        await scene.standin.click(ALICE, await scene.card(thread_id), "approve:0")

        await scene.answer(thread_id, "Email to finance@acme.com sent", timeout=40)
        started = [c.reply["ts"] for c in calls(scene, "chat.startStream") if c.reply.get("ok")]
        assert len(started) == 3
        deleted = [c.args["ts"] for c in calls(scene, "chat.delete") if c.reply.get("ok")]
        assert sorted(deleted) == sorted(started[:2])  # both cut-off ones, whichever attempt saw them
        (answer,) = await scene.messages(thread_id, "answer")
        assert answer.ts == started[2] and not answer.streaming
        assert len(calls(scene, "chat.stopStream")) == 3  # a failed stop is not sent again


async def test_a_stream_slack_ended_early_is_deleted_and_the_answer_posted(redis_url):
    async with start_scene(redis_url, "demo") as scene:
        scene.standin.refuse_next("chat.appendStream", "message_not_in_streaming_state")
        thread_id = await scene.ask(ASK_Q3)
        await scene.standin.click(ALICE, await scene.card(thread_id), "approve:0")

        await scene.answer(thread_id, "Email to finance@acme.com sent")
        (answer,) = await scene.messages(thread_id, "answer")
        assert answer.markdown is None  # posted
        (started,) = calls(scene, "chat.startStream")
        assert [c.args["ts"] for c in calls(scene, "chat.delete")] == [started.reply["ts"]]


async def test_a_run_with_nobody_to_stream_to_in_a_channel_answers_with_a_post(redis_url):
    async with start_scene(redis_url, "demo") as scene:
        thread_id = await scene.ask("Say hello", requester=None)  # (no tool call: it answers at once)
        await scene.answer(thread_id)
        assert calls(scene, "chat.startStream") == []


async def test_a_waiting_dm_session_status_is_set_again_before_slack_drops_it(redis_url, monkeypatch):
    monkeypatch.setattr(agent_surfaces, "SESSION_AGAIN_S", 1.0)  # (Slack: two minutes; Signoff: 100 s)
    env = {"SIGNOFF_APPROVERS": json.dumps({"send_email": [ALICE]})}
    async with start_scene(redis_url, "demo", env=env) as scene:
        standin = scene.standin
        standin.status_timeout_s = 2.0
        asked, _ = await standin.say(RILEY, standin.dm_channel(RILEY), ASK_Q3, channel_type="im")
        where = (asked.channel, asked.ts)  # (the agent view: the message is its thread's root)
        waiting = "is waiting for Alice's approval"
        await eventually(lambda: standin.statuses.get(where) == waiting, what="the session's status")
        await asyncio.sleep(3.0)  # past Slack's timeout: shown all along, set again
        assert standin.statuses.get(where) == waiting
        said = [c.args["status"] for c in standin.calls if c.method == "assistant.threads.setStatus"]
        assert said.count(waiting) >= 2


async def test_in_a_burst_beyond_slacks_streaming_budget_an_answer_is_posted_at_once(redis_url):
    async with start_scene(redis_url, "demo") as scene:
        while await scene.slack_state.rate_wait("streams", *agent_surfaces.STREAMS) <= 0:
            pass  # other answers took the workspace's streams for now
        thread_id = await scene.ask(ASK_Q3)
        await scene.standin.click(ALICE, await scene.card(thread_id), "approve:0")

        await scene.answer(thread_id, "Email to finance@acme.com sent")
        (posted,) = await scene.messages(thread_id, "answer")
        assert posted.markdown is None and calls(scene, "chat.startStream") == []


async def test_a_status_redraw_that_would_change_nothing_sends_nothing(scene):
    thread_id = await scene.ask(ASK_Q3, requester=RILEY)
    await scene.standin.click(ALICE, await scene.card(thread_id), "approve:0")
    await scene.answer(thread_id, "Email to finance@acme.com sent")
    ts = await scene.slack_state.status_line(thread_id)
    due = scene.store.keys.of(thread_id).refresh_due("status")

    async def settled() -> bool:  # no redraw of the status waits or is being drawn
        return await scene.store.redis.zscore(due, f"status:{thread_id}") is None

    await eventually(settled, what="the status drawn")
    drawn = [c for c in calls(scene, "chat.update") if c.args.get("ts") == ts]
    assert "Finished" in drawn[-1].args["text"]

    await scene.store.cards.touch_status(thread_id, debounce_ms=0)  # drawn again: the same
    await eventually(settled, what="the redraw taken")
    assert [c for c in calls(scene, "chat.update") if c.args.get("ts") == ts] == drawn
