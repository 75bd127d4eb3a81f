"""Time limits, quorum and escalation through the real bot, runner and Redis, on short real
durations: what the approvers see and hear in Slack, what the agent is told, what runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.harness import Loop, buttons, card_text, consumed, eventually, free_port

ALICE, BOB, CAROL, LEAD, RILEY = "U0ALICE", "U0BOB", "U0CAROL", "U0LEAD", "U0RILEY"
EMAIL = 'Email finance@acme.com "numbers"'


def policy(tmp_path: Path, rules: str) -> dict[str, str]:
    path = tmp_path / "signoff.toml"
    path.write_text(
        '[defaults]\napprovers = ["U0ALICE", "U0BOB", "U0CAROL"]\nrequester_may_approve = false\n' + rules
    )
    return {"SIGNOFF_POLICY": str(path)}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def outcomes(loop: Loop) -> list[tuple[str, str]]:
    return [(e["outcome"], e["user"]) for e in await loop.store.audit_entries()]


async def deadline_of(loop: Loop, thread_id: str) -> float:
    """When the run's one time limit is due (ms, Redis's clock), as the schedule has it."""
    scheduled = await loop.store.redis.zrange(loop.store.keys.of(thread_id).deadlines, 0, -1, withscores=True)
    (due,) = [at for item, at in scheduled if item.startswith("expire:")]
    return due


async def passed(loop: Loop, due_ms: float) -> bool:
    return await loop.store.time() * 1000 > due_ms


async def fired(loop: Loop, thread_id: str) -> bool:
    partition = loop.store.keys.of(thread_id)
    return (
        not await loop.store.redis.zcard(partition.deadlines)
        and not await loop.store.redis.zcard(partition.deadline_claims)
        and await consumed(loop.store)
        and await consumed(loop.store, "events")
    )


async def test_a_pending_send_email_expires_the_agent_is_told_and_a_late_click_is_refused(
    redis_url, tmp_path
):
    env = policy(tmp_path, '[[rules]]\ntools = ["send_email"]\ntimeout = "3s"\n')
    async with Loop(redis_url, env=env) as loop:
        await loop.start_bot()
        await loop.start_runner("demo")
        thread_id = await loop.ask(EMAIL, requester=RILEY)
        card = await loop.card(thread_id)
        assert "Expires" in card_text(card) and "(3s limit)" in card_text(card)
        stale = copy.deepcopy(card)  # as a phone that has not refreshed shows it

        answer = await loop.answer(thread_id, "did not run send_email")

        assert "No decision within 3s; the call was not run. Do not retry unless asked." in answer
        assert "Email to" not in answer  # the tool never ran
        expired = await loop.card_shows(card, "Expired: no decision in time")
        assert buttons(expired) == [] and buttons(expired, withdraw=True) == []
        assert await loop.says(
            thread_id, "⌛ `send_email` expired: no decision within 3s, so it was not run."
        )

        await loop.standin.click(ALICE, stale, "approve:0")

        refusal = await eventually(lambda: loop.standin.ephemerals_for(ALICE), what="the refusal")
        assert "This request expired" in refusal[0] and "Nothing changed." in refusal[0]
        assert await outcomes(loop) == [("expired", "signoff")]


@pytest.fixture
async def quorum(redis_url, tmp_path, monkeypatch):
    """send_email needs two approvers; the ledger agent writes each real send to a file."""
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(ledger))
    env = policy(tmp_path, '[[rules]]\ntools = ["send_email"]\nquorum = 2\n')
    async with Loop(redis_url, env=env) as loop:
        await loop.start_bot()
        await loop.start_runner("ledger")
        thread_id = await loop.ask("send the mail", graph="ledger", requester=RILEY)
        yield loop, thread_id, await loop.card(thread_id), ledger


async def test_quorum_two_one_approval_waits_the_same_persons_second_too_a_second_persons_runs_once(quorum):
    loop, thread_id, card, ledger = quorum
    assert "0 of 2 approvals" in card_text(card)

    await loop.standin.click(ALICE, card, "approve:0")
    counted = await loop.card_shows(card, "1 of 2 approvals")
    assert "May still approve: <@U0BOB>, <@U0CAROL>" in card_text(counted)
    said = await eventually(lambda: loop.standin.ephemerals_for(ALICE), what="Alice told")
    assert said == ["Your approval of `send_email` is counted: 1 of 2. It runs once 1 more approver agrees."]
    await loop.standin.click(ALICE, counted, "approve:0")
    await loop.standin.click(RILEY, counted, "approve:0")
    await eventually(lambda: len(loop.standin.ephemerals) == 3, what="two refusals")
    assert "counts already" in loop.standin.ephemerals_for(ALICE)[1]
    assert "You started this run" in loop.standin.ephemerals_for(RILEY)[0]
    # A click's decision, and any resume it queues, is recorded before the click is answered;
    # once the runner has read and acknowledged every command, a resume queued too early has run.
    await eventually(lambda: consumed(loop.store), what="the runner done with every command")
    assert lines(ledger) == [] and await loop.store.run_state(thread_id) == "waiting"
    assert await outcomes(loop) == [("vote", ALICE)]

    await loop.standin.click(BOB, counted, "approve:0")

    await loop.answer(thread_id, "Sent.")
    assert lines(ledger) == ["a@acme.com"]
    done = await loop.card_shows(card, "Approved by")
    assert "Approved by Alice, Bob" in card_text(done)
    assert await outcomes(loop) == [("vote", ALICE), ("vote", BOB), ("quorum", BOB)]


async def test_with_a_quorum_one_reject_decides_at_once(quorum):
    loop, thread_id, card, ledger = quorum
    await loop.standin.click(ALICE, card, "approve:0")
    await loop.card_shows(card, "1 of 2 approvals")

    view = await loop.open_modal(BOB, loop.fresh(card), "reject:0")
    await loop.standin.submit(BOB, view, {"reason": "Not this quarter"})

    await loop.answer(thread_id)
    assert lines(ledger) == []
    await loop.card_shows(card, "Rejected by")
    assert await loop.says(thread_id, "❌ <@U0BOB> rejected `send_email`: Not this quarter")


async def test_escalation_after_two_seconds_notifies_and_empowers_the_escalation_group(redis_url, tmp_path):
    env = policy(
        tmp_path,
        '[[rules]]\ntools = ["send_email"]\napprovers = ["U0ALICE"]\n'
        'escalate_after = "2s"\nescalate_to = ["U0LEAD"]\nremind_every = "1s"\n',
    )
    async with Loop(redis_url, env=env) as loop:
        await loop.start_bot()
        await loop.start_runner("demo")
        thread_id = await loop.ask(EMAIL, requester=RILEY)
        card = await loop.card(thread_id)
        await loop.standin.click(LEAD, card, "approve:0")
        refused = await eventually(lambda: loop.standin.ephemerals_for(LEAD), what="the lead refused")
        assert "You are not on the approver list" in refused[0]
        assert loop.standin.notifications_for(LEAD) == []

        reminded = await eventually(
            lambda: [m for m in loop.standin.notifications_for(ALICE) if "⏰ Waiting" in m.text],
            what="Alice reminded",
        )
        assert "for a decision: Riley's agent wants to run send_email" in reminded[0].text
        heard = await eventually(lambda: loop.standin.notifications_for(LEAD), what="the lead notified")
        assert "⏫ Escalated after 2s without a decision" in heard[0].text and "<@U0LEAD>" in heard[0].text
        escalated = await loop.card_shows(card, "escalated to <@U0LEAD>")

        await loop.standin.click(LEAD, escalated, "approve:0")

        assert "Email to finance@acme.com sent" in await loop.answer(thread_id)
        assert [o for o, _ in await outcomes(loop)] == ["escalated", "decided"]


async def test_the_requester_withdraws_and_nobody_else_can(redis_url, tmp_path):
    async with Loop(redis_url, env=policy(tmp_path, "")) as loop:
        await loop.start_bot()
        await loop.start_runner("demo")
        thread_id = await loop.ask(EMAIL, requester=RILEY)
        card = await loop.card(thread_id)
        assert "withdraw" in buttons(card, withdraw=True)

        await loop.standin.click(ALICE, card, "withdraw")
        said = await eventually(lambda: loop.standin.ephemerals_for(ALICE), what="Alice refused")
        assert said == ["Only <@U0RILEY>, who asked, may withdraw this request. Nothing changed."]
        await loop.standin.click(RILEY, card, "withdraw")

        answer = await loop.answer(thread_id, "did not run send_email")
        assert "Withdrawn by the requester" in answer
        await loop.card_shows(card, "Withdrawn by")
        assert await loop.says(thread_id, "↩️ <@U0RILEY> withdrew the request; nothing was run.")


@pytest.mark.slow
async def test_a_deadline_that_passes_while_every_process_is_down_fires_on_start_once(redis_url, tmp_path):
    ledger = tmp_path / "ledger.txt"
    env = policy(tmp_path, '[[rules]]\ntools = ["send_email"]\ntimeout = "3s"\n')
    runner_env = {"SIGNOFF_GRAPH": "tests.graphs:build_ledger_agent", "SIGNOFF_TEST_LEDGER": ledger}
    async with Loop(redis_url, env=env) as loop:
        processes = [loop.spawn("bot"), loop.spawn("runner", **runner_env)]
        await loop.wait_healthy(loop.port)
        thread_id = await loop.ask("send the mail", graph="ledger", requester=RILEY)
        card = await loop.card(thread_id)
        for process in processes:
            process.kill()  # kill -9: no process is left to remember the deadline
            process.wait()

        due = await deadline_of(loop, thread_id)
        await eventually(
            lambda: passed(loop, due), timeout=10, what="the deadline passing while everything is down"
        )
        assert "Expired" not in card_text(loop.fresh(card))
        second = free_port()
        loop.spawn("bot", PORT=second, SIGNOFF_CONSUMER="bot-b")  # two replicas, both sweeping
        loop.spawn("bot")
        loop.spawn("runner", **runner_env)

        await loop.card_shows(card, "Expired: no decision in time")
        await loop.answer(thread_id, timeout=30)
        # The deadline done with (out of the schedule and of every sweeper's hands: none can fire
        # it again), the runner done with every command and the bots with every event.
        await eventually(lambda: fired(loop, thread_id), timeout=60, what="the deadline fired and released")
        assert lines(ledger) == []  # fail closed: the tool never ran
        assert await outcomes(loop) == [("expired", "signoff")]  # fired once across two sweepers
        notes = [t for t in await loop.thread_texts(thread_id) if t.startswith("⌛")]
        assert len(notes) == 1
