"""Approval cards end to end: stand-in Slack, the real bot, a real runner, real agents.

Every test here runs three times: Slack reaching the bot over HTTP and over Socket Mode on one
Redis server, and over HTTP on a three-master Redis Cluster (the partitioned layout, the
checkpointer without cross-shard search).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.harness import buttons, card_text, eventually, header, start_scene
from tests.support.people import ALICE, BOB


@pytest.fixture(params=[("http", "node"), ("socket", "node"), ("http", "cluster")], ids="-".join)
async def scene(request):
    mode, layout = request.param
    async with start_scene(
        request.getfixturevalue(f"{layout}_url"), "demo", "per_call", "question", mode=mode
    ) as running:
        yield running


async def test_approve_runs_the_tool_and_the_answer_lands_in_the_thread(scene):
    thread_id = await scene.ask('Email finance@acme.com "Q3 numbers are in"')
    card = await scene.card(thread_id)

    # What a phone shows: who asked, and what for.
    # without a summary: the tool's name in words and its first arguments, never "Approval needed"
    assert (
        card.text == "Requester's agent wants to send email: to finance@acme.com, subject Q3 numbers are in"
    )
    assert buttons(card) == ["approve:0", "reject:0"]
    interaction = await scene.standin.click(ALICE, card, "approve:0")

    assert interaction.acked
    answer = await scene.answer(thread_id)
    assert "✅ Email to finance@acme.com sent: Q3 numbers are in" in answer
    updated = await scene.card_shows(card, "▶️ The agent carries on")
    assert f"✅ Approved by <@{ALICE}>" in card_text(updated)
    assert buttons(updated) == []


async def test_a_required_argument_left_blank_runs_nothing(scene):
    thread_id = await scene.ask('Write "Launch on Monday." to /plans/launch.md')
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, "edit:0")
    assert {b["block_id"]: b.get("optional", False) for b in modal["blocks"] if b["type"] == "input"} == {
        "file_path": False,
        "content": False,
    }

    # Slack's own client will not send it…
    client = await scene.standin.submit(ALICE, modal, {"content": ""})
    assert client.json() == {
        "response_action": "errors",
        "errors": {"content": "Please fill out this field."},
    }
    # …but it sends one of blanks, and the bot refuses that on the field, with nothing recorded.
    forged = await scene.standin.submit(ALICE, modal, {"content": "  "})

    assert forged.acked
    assert forged.json() == {
        "response_action": "errors",
        "errors": {"content": "Required: the tool cannot run without it."},
    }
    assert await scene.store.audit.entries() == []
    assert scene.standin.open_views(ALICE)


async def test_reject_with_a_reason_is_threaded_and_the_agent_reads_it(scene):
    thread_id = await scene.ask("Refund order 1235 for 5000")
    card = await scene.card(thread_id)
    modal = await scene.open_modal(BOB, card, "reject:0")
    assert modal["callback_id"] == "reject"
    assert "the agent is told not to retry" in card_text_of_view(modal)

    interaction = await scene.standin.submit(BOB, modal, {"reason": "Over the monthly limit; ask <!channel>"})

    assert interaction.acked and interaction.json() == {}
    answer = await scene.answer(thread_id)
    assert (
        "❌ I did not run issue_refund; the reviewer said: Over the monthly limit; ask &lt;!channel&gt;"
        in answer
    )
    # the requester hears the outcome once, with the reason, in her thread (escaped as ever)
    said = "> Bob said: Over the monthly limit; ask &lt;!channel&gt;"
    await eventually(lambda: scene.says(thread_id, said), what="the threaded reason")
    assert await scene.says(thread_id, "<@U0REQUESTER> ❌ Rejected by Bob: issue refund: order_id")
    assert f"❌ Rejected by <@{BOB}>" in card_text(await scene.card_shows(card, "Rejected by"))
    await scene.card_shows(card, "> Over the monthly limit; ask &lt;!channel&gt;")  # on the card
    # Signoff says it once on the card and once in the outcome, not again in the plan (the
    # agent's answer is the agent's own)
    assert await said_by_signoff(scene, thread_id, "Over the monthly limit") == 2


async def test_reject_without_a_reason_tells_the_agent_not_to_retry(scene):
    thread_id = await scene.ask("Refund order 9 for 7000")
    modal = await scene.open_modal(BOB, await scene.card(thread_id), "reject:0")

    await scene.standin.submit(BOB, modal, {"reason": ""})

    answer = await scene.answer(thread_id)
    # The agent was told not to retry; it says so to people.
    assert "❌ I did not run issue_refund, and I won't retry it unless you ask." in answer


async def test_edit_runs_the_edited_call_and_the_card_shows_old_and_new(scene):
    thread_id = await scene.ask('Write "Launch on Monday." to /plans/launch.md')
    card = await scene.card(thread_id)
    assert buttons(card) == ["approve:0", "edit:0", "reject:0"]
    modal = await scene.open_modal(ALICE, card, "edit:0")
    inputs = {
        b["block_id"]: b["element"].get("initial_value") for b in modal["blocks"] if b["type"] == "input"
    }
    assert inputs == {"file_path": "/plans/launch.md", "content": "Launch on Monday."}

    interaction = await scene.standin.submit(ALICE, modal, {"file_path": "/plans/launch-v2.md"})

    assert interaction.acked and interaction.json() == {}
    answer = await scene.answer(thread_id)
    # in people's words: what the middleware wrote for the model stays out
    assert "✏️ I ran write_file as a reviewer edited it: Updated file /plans/launch-v2.md" in answer
    assert "Executed instead" not in answer and "Note:" not in answer
    updated = await scene.card_shows(card, "Edited by")
    assert "`file_path`: */plans/launch-v2.md* (was ~/plans/launch.md~)" in card_text(updated)
    (entry,) = await scene.store.audit.entries()
    assert entry["user"] == ALICE
    assert entry["original_args"] == {"file_path": "/plans/launch.md", "content": "Launch on Monday."}
    assert entry["decision"]["edited_action"]["args"]["file_path"] == "/plans/launch-v2.md"


async def test_edit_with_a_bad_value_shows_the_error_inline_and_records_nothing(scene):
    thread_id = await scene.ask("Refund order 77 for 2500", graph="demo")
    card = await scene.card(thread_id)
    assert buttons(card) == ["approve:0", "reject:0"]  # refunds: approve / reject only
    forged = scene.standin.block_action_payload(ALICE, card, "reject:0")
    forged["actions"][0]["action_id"] = "edit:0"

    interaction = await scene.standin.send(forged)

    assert interaction.acked
    await eventually(lambda: scene.standin.ephemerals_for(ALICE), what="refusal")
    assert scene.standin.ephemerals_for(ALICE) == [
        "Edit is not allowed for `issue_refund` (allowed: Approve, Reject)."
    ]
    assert scene.standin.open_views(ALICE) == []
    assert await scene.store.audit.entries() == []


async def test_respond_returns_the_text_as_the_tools_result(scene):
    thread_id = await scene.ask("Delete /reports/old.pdf")
    card = await scene.card(thread_id)
    assert buttons(card) == ["approve:0", "edit:0", "reject:0", "respond:0"]
    modal = await scene.open_modal(ALICE, card, "respond:0")

    empty = await scene.standin.submit(ALICE, modal, {"message": "  "})
    assert empty.json() == {
        "response_action": "errors",
        "errors": {"message": "Write what the agent should get as the tool's result."},
    }
    await scene.standin.submit(ALICE, modal, {"message": "Archived it instead."})

    answer = await scene.answer(thread_id)
    # nothing ran: the reviewer's answer is shown as such, not as a success
    assert (
        "- 💬 I did not run delete; a reviewer answered instead: Archived it instead." in answer
    )  # (a list)
    assert "✅" not in answer
    await eventually(
        lambda: scene.says(thread_id, "> Alice answered instead: Archived it instead."),
        what="the threaded answer",
    )
    assert header(await scene.card_shows(card, "Answered instead")) == "Answered instead by Alice"
    await scene.card_shows(card, "> Archived it instead.")
    assert await said_by_signoff(scene, thread_id, "Archived it instead.") == 2


async def said_by_signoff(scene, thread_id: str, text: str) -> int:
    """How many times Signoff's messages in the run's thread (the agent's answer aside) hold `text`."""
    run = await scene.store.runs.get(thread_id)
    ours = [m for m in scene.standin.thread(run.channel, run.thread_ts) if m.kind != "answer"]
    return sum(json.dumps([m.text, m.blocks]).count(text) for m in ours)


async def test_a_batch_of_two_shows_progress_and_resumes_once_with_both(scene):
    thread_id = await scene.ask("Delete /reports/old.pdf and email team@acme.com that the old report is gone")
    card = await scene.card(thread_id)
    assert card.text == "Requester's agent wants to delete: file_path /reports/old.pdf (and 1 more)"
    assert buttons(card) == [
        "approve_all",
        "reject_all",
        "approve:0",
        "edit:0",
        "reject:0",
        "respond:0",
        "approve:1",
        "reject:1",
    ]
    assert "0 of 2 decided" in card_text(card)

    await scene.standin.click(ALICE, card, "approve:0")
    halfway = await scene.card_shows(card, "1 of 2 decided")
    assert buttons(halfway) == ["approve:1", "reject:1"]
    modal = await scene.open_modal(BOB, halfway, "reject:1")
    await scene.standin.submit(BOB, modal, {"reason": ""})

    answer = await scene.answer(thread_id)
    assert "❌ I did not run send_email" in answer
    assert re.search(r"- (✅ Deleted|⚠️ delete failed)", answer)  # delete ran (the demo file may not exist)
    commands = await scene.store.queue.entries(lambda p: p.commands)
    assert sum('"type":"resume"' in fields["command"] for _, fields in commands) == 1


async def test_small_refunds_run_without_a_card(scene):
    small = await scene.ask("Refund order 1234 for 500")
    big = await scene.ask("Refund order 1236 for 5000")

    assert "Refunded 500 on order 1234" in await scene.answer(small)
    await scene.card(big)
    assert not [m for m in scene.standin.thread(*await _thread(scene, small)) if "actions" in str(m.blocks)]


async def _thread(scene, thread_id):
    run = await scene.store.runs.get(thread_id)
    return run.channel, run.thread_ts


async def test_a_long_file_body_is_previewed_and_shown_in_full_in_a_modal(scene):
    body = "All hands: " + "lorem ipsum " * 900
    thread_id = await scene.ask(f'Write "{body}" to /plans/all-hands.md')
    card = await scene.card(thread_id)

    text = card_text(card)
    assert f"({len(body):,} chars)" in text
    assert len(text) < 3_000
    view = await scene.open_modal(ALICE, card, "view_args:0")
    shown = card_text_of_view(view)
    assert body.strip()[:2_000] in shown.replace("\n", "")
    assert not [c for c in scene.standin.calls if c.reply.get("error")]


async def test_a_subagents_pause_names_the_subagent_on_the_card(scene):
    thread_id = await scene.ask("Ask the bookkeeper to refund order 77 for 2500")
    card = await scene.card(thread_id)

    assert "via *subagent bookkeeper*" in card_text(card)
    await scene.standin.click(ALICE, card, "approve:0")
    assert "Refunded 2500 on order 77" in await scene.answer(thread_id)


async def test_per_call_mode_gets_a_card_per_call_and_finishes_after_both(scene):
    thread_id = await scene.ask("write and email", graph="per_call")
    first, second = await scene.card(thread_id, 1), await scene.card(thread_id, 2)
    by_tool = {("send email" in c.text): c for c in (first, second)}
    assert buttons(by_tool[True]) == ["approve:0", "reject:0"]
    assert buttons(by_tool[False]) == ["approve:0", "edit:0", "reject:0", "respond:0"]

    await scene.standin.click(ALICE, by_tool[False], "approve:0")
    await scene.card_shows(by_tool[False], "▶️ The agent carries on")
    await scene.standin.click(BOB, by_tool[True], "approve:0")

    answer = await scene.answer(thread_id, contains="")
    assert answer
    assert len(await scene.store.audit.entries()) == 2


async def test_a_plain_question_is_answered_with_text(scene):
    thread_id = await scene.ask("go", graph="question")
    card = await scene.card(thread_id)
    assert "&lt;!channel&gt;" in card_text(card)
    modal = await scene.open_modal(ALICE, card, "answer:0")

    await scene.standin.submit(ALICE, modal, {"answer": "TRAVEL-7"})

    await scene.card_shows(card, "▶️ The agent has the answer")
    await eventually(lambda: scene.says(thread_id, "> Alice answered: TRAVEL-7"), what="the answer")


async def test_a_late_click_is_told_who_decided_and_changes_nothing(scene):
    thread_id = await scene.ask('Email finance@acme.com "late"')
    card = await scene.card(thread_id)
    await scene.standin.click(ALICE, card, "approve:0")

    await scene.standin.click(BOB, card, "approve:0")  # the card BOB still has on screen

    said = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="ephemeral")
    assert said[0].startswith(f"Already decided: approved by <@{ALICE}> <!date^")
    assert len(await scene.store.audit.entries()) == 1


async def test_slack_errors_are_retried_and_lose_nothing(scene):
    scene.standin.response_url_ttl = 0  # the card changes through chat.update (its fallback)
    scene.standin.fail_next("chat.postMessage", status=500, count=2)
    scene.standin.fail_next("chat.update", status=429, count=2, retry_after=1)
    thread_id = await scene.ask('Email finance@acme.com "retry"')
    card = await scene.card(thread_id)

    await scene.standin.click(ALICE, card, "approve:0")

    await scene.card_shows(card, "Approved by")
    assert "Email to finance@acme.com sent" in await scene.answer(thread_id)
    statuses = [c.status for c in scene.standin.calls if c.method in ("chat.postMessage", "chat.update")]
    assert statuses.count(500) == 2 and statuses.count(429) >= 2


async def test_forged_signature_and_stale_timestamp_get_401_and_record_nothing(scene):
    thread_id = await scene.ask('Email finance@acme.com "forged"')
    card = await scene.card(thread_id)
    payload = scene.standin.block_action_payload(ALICE, card, "approve:0")

    forged = await scene.standin.send(payload, signature="v0=" + "0" * 64)
    stale = await scene.standin.send(payload, timestamp=1_000_000_000)

    assert (forged.status, stale.status) == (401, 401)
    assert await scene.store.audit.entries() == []
    assert buttons(scene.fresh(card)) == ["approve:0", "reject:0"]


def card_text_of_view(view) -> str:
    parts = []
    for block in view["blocks"]:
        if isinstance(block.get("text"), dict):
            parts.append(block["text"]["text"])
        for element in block.get("elements", []):
            if isinstance(element, dict) and isinstance(element.get("text"), str):
                parts.append(element["text"])
    return "\n".join(parts)


async def test_approver_lists_user_groups_and_the_requester_rule_are_enforced(redis_url):
    env = {
        "SIGNOFF_APPROVERS": '{"send_email": ["S0FINANCE"], "*": ["U0CAROL"]}',
        "SIGNOFF_REQUESTER_CANNOT_APPROVE": "1",
    }
    async with start_scene(redis_url, "demo", env=env, groups={"S0FINANCE": [ALICE, "U0REQUESTER"]}) as scene:
        thread_id = await scene.ask('Email finance@acme.com "who may"', requester="U0REQUESTER")
        card = await scene.card(thread_id)

        await scene.standin.click(BOB, card, "approve:0")
        await scene.standin.click("U0REQUESTER", card, "approve:0")
        await scene.standin.click("U0CAROL", card, "reject:0")
        await eventually(lambda: len(scene.standin.ephemerals) == 3, what="three refusals")

        assert scene.standin.ephemerals_for(BOB) == [
            "You are not on the approver list for `send_email`. Approvers: <!subteam^S0FINANCE>."
        ]
        assert scene.standin.ephemerals_for("U0REQUESTER") == [
            "You started this run, so someone else has to decide its approvals."
        ]
        assert scene.standin.ephemerals_for("U0CAROL") == [
            "You are not on the approver list for `send_email`. Approvers: <!subteam^S0FINANCE>."
        ]
        assert await scene.store.audit.entries() == []
        await scene.standin.click(ALICE, card, "approve:0")
        assert "Email to finance@acme.com sent" in await scene.answer(thread_id)


async def test_a_forged_resume_command_never_reaches_langgraph(scene):
    thread_id = await scene.ask('Email finance@acme.com "forged command"')
    card = await scene.card(thread_id)
    approval_id = card.metadata["event_payload"]["approval_id"]
    approval = await scene.store.approvals.get(approval_id)
    # Someone with Redis access skips the bot and queues a resume the middleware would refuse.
    await scene.store.redis.hset(scene.store.keys.approval(approval_id), "status", "resuming")
    await scene.store.redis.xadd(
        scene.store.keys.of(thread_id).commands,
        {
            "command": json.dumps(
                {
                    "type": "resume",
                    "approval_id": approval_id,
                    "thread_id": thread_id,
                    "interrupt_id": approval.interrupt_id,
                    "graph": "demo",
                }
            ),
            "decisions": json.dumps([{"type": "accept"}]),
        },
    )

    shown = await scene.card_shows(card, "Could not resume")

    assert "'accept' is not a decision" in card_text(shown)
    assert buttons(shown) == []
    await eventually(
        lambda: scene.says(
            thread_id, "⚠️ The agent could not take the decisions on this approval, so nothing was sent"
        ),
        what="the reason, in the thread",
    )
    # Never a dead end: the pause is offered again on a new card, and the thread is not poisoned.
    again = await scene.card(thread_id, 2)
    assert buttons(again) == ["approve:0", "reject:0"]
    assert (await scene.standin.click(ALICE, again, "approve:0")).acked
    assert "Email to finance@acme.com sent" in await scene.answer(thread_id)
    assert (await scene.store.approvals.get(approval_id)).replaced_by == again.metadata["event_payload"][
        "approval_id"
    ]


async def test_malformed_payloads_get_a_clear_answer_and_change_nothing(scene):
    thread_id = await scene.ask('Email finance@acme.com "garbage"')
    card = await scene.card(thread_id)
    forged = scene.standin.block_action_payload(BOB, card, "approve:0")
    forged["actions"][0]["value"] = "not-an-approval"
    broken_view = {
        "id": "V0NOPE",
        "callback_id": "edit",
        "private_metadata": "zzz",
        "blocks": [],
        "type": "modal",
        "title": {"type": "plain_text", "text": "x"},
    }

    clicked = await scene.standin.send(forged)
    submitted = await scene.standin.submit(BOB, {**broken_view, "user": BOB, "open": True}, {})

    assert clicked.acked and submitted.acked
    assert submitted.json() == {
        "response_action": "errors",
        "errors": {"value": "This approval no longer exists."},
    }
    said = await eventually(lambda: scene.standin.ephemerals_for(BOB), what="the refusal")
    assert said == ["This approval no longer exists."]
    assert await scene.store.audit.entries() == []


async def test_a_run_for_a_graph_the_runner_lacks_fails_plainly(scene):
    thread_id = await scene.ask("Refund order 1 for 10", graph="no_such_graph")

    error = await scene.answer(thread_id)

    assert (
        error
        == "⚠️ The run failed: this runner has no graph 'no_such_graph' (it has: demo, per_call, question)"
    )
    assert await scene.store.runs.state(thread_id) == "failed"
