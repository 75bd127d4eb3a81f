"""Batches of any size and mixed outcomes, end to end: stand-in Slack, the real bot, a real runner.

A batch bigger than a card is still decided from Slack (the review modal, Approve all), each
action as decided; a withdraw after a partial approval tells the truth about what runs; an edited
value reaches the card inert.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import Run, RunState, approval_for
from slack_standin import ACK_LIMIT_S
from tests.support.harness import Harness, buttons, card_text, eventually, header, start_scene
from tests.support.people import ALICE, BOB, RILEY


@pytest.fixture(params=["http", "socket"])
async def scene(request, redis_url, tmp_path, monkeypatch):
    """Slack reaching the bot over HTTP, then over Socket Mode (clicks inside a modal included)."""
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.txt"))  # what the tools really did
    async with start_scene(redis_url, "batch", "demo", mode=request.param) as running:
        yield running


def view_text(view: dict[str, Any]) -> str:
    """Everything a person reads in a modal, flattened."""
    parts = []
    for block in view["blocks"]:
        if isinstance(block.get("text"), dict):
            parts.append(block["text"]["text"])
        parts += [e["text"] for e in block.get("elements", []) if isinstance(e.get("text"), str)]
    return "\n".join(parts)


def view_buttons(view: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]


async def on_screen(scene: Harness, user: str, showing: str, what: str) -> dict[str, Any]:
    """The view `user` sees, once it shows `showing`."""

    def seen() -> dict[str, Any] | None:
        view = scene.standin.on_screen(user)
        return view if view and showing in view_text(view) else None

    return await eventually(seen, what=what)


async def pushed(scene: Harness, user: str, form: str) -> dict[str, Any]:
    """The form pushed over the review modal, once it is on `user`'s screen."""

    def seen() -> dict[str, Any] | None:
        view = scene.standin.on_screen(user)
        return view if view and view["callback_id"] == form else None

    return await eventually(seen, what=f"the {form} form")


async def test_a_batch_of_60_is_decided_from_slack_and_each_tool_runs_as_decided(scene, tmp_path):
    thread_id = await scene.ask("Email 60 people", graph="batch", requester=RILEY)
    card = await scene.card(thread_id)

    # The card says how many there are and which it shows; Approve all covers them all.
    assert header(card) == "60 actions need review"
    assert (
        "*60 actions*: `send_email` ×60. This card shows actions 1–40; *Review all 60* to read and "
        "decide each one." in card_text(card)
    )
    assert buttons(card)[:2] == ["approve_all", "reject_all"]
    review = await scene.open_modal(ALICE, card, "review")
    assert review["title"]["text"] == "Review 60 actions"
    assert "*Actions 1–20 of 60* · 0 decided, 60 waiting" in view_text(review)

    # ▶ twice: actions 41–60, none of which the card shows.
    for page in ("page:20", "page:40"):
        assert (await scene.standin.click_in_view(ALICE, review, page)).acked
        first = int(page[5:]) + 1
        review = await on_screen(scene, ALICE, f"*Actions {first}–{first + 19} of 60*", f"page {first}")
    assert view_buttons(review)[:4] == ["approve:40", "edit:40", "reject:40", "respond:40"]

    # Approve #41 here: the page shows it, with no buttons left for it.
    stale = review
    assert (await scene.standin.click_in_view(ALICE, review, "approve:40")).acked
    review = await on_screen(scene, ALICE, f"✅ Approved by <@{ALICE}>", "#41 approved")
    assert "approve:40" not in view_buttons(review) and "*Actions 41–60 of 60* · 1 decided" in view_text(
        review
    )

    # Reject #50 with a reason: the form is pushed over the page, and the page shows the outcome.
    assert (await scene.standin.click_in_view(ALICE, review, "reject:49")).acked
    form = await pushed(scene, ALICE, "reject")
    assert form["previous_view_id"] == review["id"]
    assert (await scene.standin.submit(ALICE, form, {"reason": "Not u49"})).acked
    review = await on_screen(scene, ALICE, f"❌ Rejected by <@{ALICE}>", "#50 rejected, back on the page")

    # Edit #45 the same way.
    assert (await scene.standin.click_in_view(ALICE, review, "edit:44")).acked
    form = await pushed(scene, ALICE, "edit")
    assert (await scene.standin.submit(ALICE, form, {"to": "edited@acme.com"})).acked
    review = await on_screen(scene, ALICE, "*edited@acme.com* (was ~u44@acme.com~)", "#45 edited")

    # A click on what a screen showed before (#41 again): refused at the top of the page.
    assert (await scene.standin.click_in_view(ALICE, stale, "approve:40")).acked
    review = await on_screen(scene, ALICE, "⚠️ Already decided: approved by <@U0ALICE>", "the refusal")
    assert "Nothing changed." in view_text(review)
    assert len(await scene.store.audit.entries()) == 3

    # Then Approve all on the card, for the 57 still waiting.
    scene.standin.close_view(ALICE, review)
    fresh = await scene.card_shows(card, "3 of 60 decided")
    assert (await scene.confirm(ALICE, fresh, "approve_all")).acked

    assert await scene.answer(thread_id, "Sent 59 of 60 emails.")
    ran = Counter((tmp_path / "ledger.txt").read_text().splitlines())
    expected = Counter([f"u{n}@acme.com" for n in range(60) if n not in (44, 49)] + ["edited@acme.com"])
    assert ran == expected  # each ran once, as decided: #50 never, #45 with its edit
    (approval,) = await scene.store.approvals.of_thread(thread_id)
    assert [approval.decided[i].decision["type"] for i in (40, 44, 49)] == ["approve", "edit", "reject"]
    assert Counter(d.decision["type"] for d in approval.decided.values()) == {
        "approve": 58,
        "edit": 1,
        "reject": 1,
    }
    commands = await scene.store.queue.entries(lambda p: p.commands)
    assert sum('"type":"resume"' in fields["command"] for _, fields in commands) == 1
    # Slack refused one call: the redraw for the click on a stale screen, with its stale hash (the
    # page was then read again and redrawn without it).
    assert [(c.method, c.reply.get("error")) for c in scene.standin.calls if c.reply.get("error")] == [
        ("views.update", "hash_conflict")
    ]
    assert scene.standin.late_acks() == []


async def paused_batch(scene: Harness, actions: int, channel: str) -> tuple[str, str]:
    """A run paused on a batch of `actions` emails, written as the runner writes it: (thread, approval)."""
    email = ActionReview(
        name="send_email",
        args={"to": "finance@acme.com", "subject": "Q3", "body": "numbers"},
        allowed_decisions=("approve", "reject"),
    )
    request = PendingRequest(
        interrupt_id=uuid.uuid4().hex, kind=RequestKind.BATCHED, actions=(email,) * actions
    )
    run = Run(thread_id=f"t-{uuid.uuid4().hex[:12]}", graph="batch", channel=channel, requester=RILEY)
    await scene.store.runs.save(run)
    await scene.store.runs.set_state(run.thread_id, RunState.WAITING)
    approval, _ = await scene.store.approvals.create(approval_for(request, run, "batch"))
    return run.thread_id, approval.approval_id


async def test_500_actions_are_decided_in_one_click_acked_in_time_and_told_in_one_line(redis_url):
    async with Harness(redis_url) as scene:
        await scene.start_bot()  # no runner: the resume command is what is checked
        approved, approve_id = await paused_batch(scene, 500, "C0BATCH1")
        rejected, reject_id = await paused_batch(scene, 500, "C0BATCH2")
        card = await scene.card(approved)
        assert header(card) == "500 actions need review"

        clicked = await scene.confirm(ALICE, card, "approve_all")
        modal = await scene.open_modal(BOB, await scene.card(rejected), "reject_all")
        assert modal["title"]["text"] == "Reject all 500"
        submitted = await scene.standin.submit(BOB, modal, {"reason": "Not this quarter"})

        for interaction in (clicked, submitted):
            assert interaction.acked and interaction.seconds < ACK_LIMIT_S
        for approval_id, kind in ((approve_id, "approve"), (reject_id, "reject")):
            decided = await eventually(
                lambda a=approval_id: _complete(scene, a), what=f"all 500 {kind} recorded", timeout=30
            )
            assert {d.decision["type"] for d in decided.values()} == {kind}
        commands = await scene.store.queue.entries(lambda p: p.commands)
        resumes = [f for _, f in commands if '"type":"resume"' in f["command"]]
        assert len(resumes) == 2  # one per approval, with its 500 decisions
        # The thread hears one line for 500 rejections, not 500.
        line = "> `send_email` ×500: Bob said: Not this quarter"  # in the outcome line
        await eventually(lambda: scene.says(rejected, line), what="the one line")
        assert sum("Not this quarter" in t for t in await scene.thread_texts(rejected)) == 1
        await scene.card_shows(scene.fresh(card), "Reviewed: 500 approved")


async def _complete(scene: Harness, approval_id: str) -> dict | None:
    approval = await scene.store.approvals.get(approval_id)
    return approval.decided if approval and len(approval.decided) == 500 else None


async def test_a_withdraw_after_a_partial_approval_says_what_runs_and_what_does_not(scene):
    thread_id = await scene.ask(
        'Delete /reports/old.pdf and write "Q3" to /plans/q3.md and email team@acme.com', requester=RILEY
    )
    card = await scene.card(thread_id)
    assert header(card) == "3 actions need review"
    await scene.standin.click(ALICE, card, "approve:2")  # send_email
    halfway = await scene.card_shows(card, "1 of 3 decided")

    await scene.confirm(RILEY, halfway, "withdraw")

    said = (
        "↩️ *Riley* withdrew the request: `delete` and `write_file` were not run; "
        "`send_email`, approved before by <@U0ALICE>, runs."
    )
    await eventually(lambda: scene.says(thread_id, said), what="the truth in the thread")
    answer = await scene.answer(thread_id, "Email to team@acme.com sent")
    assert "did not run delete" in answer and "did not run write_file" in answer
    assert not await scene.says(thread_id, "nothing was run")
    closed = await scene.card_shows(card, "Withdrawn by")
    assert header(closed) == "Withdrawn by Riley: 1 approved before still runs, 2 not run"


async def test_an_edited_value_reaches_the_card_inert(scene):
    thread_id = await scene.ask('Write "Launch on Monday." to /plans/launch.md')
    card = await scene.card(thread_id)
    modal = await scene.open_modal(ALICE, card, "edit:0")

    hostile = "<@U123> <https://evil.example|click>"
    await scene.standin.submit(ALICE, modal, {"file_path": "/plans/<!channel>.md", "content": hostile})

    updated = await scene.card_shows(card, "Edited by")
    shown = card_text(updated)
    assert "`file_path`: */plans/&lt;!channel&gt;.md* (was ~/plans/launch.md~)" in shown
    assert "`content`: *&lt;@U123&gt; &lt;https://evil.example|click&gt;* (was ~Launch on Monday.~)" in shown
    # the card's changes (through the click's response_url, or chat.update of its ts); the run's
    # status message names the call too, in a task's title: plain text, where nothing is a mention
    updates = [
        c.args
        for c in scene.standin.calls
        if (c.method == "response_url" or (c.method == "chat.update" and c.args.get("ts") == card.ts))
        and c.args.get("blocks")
    ]
    for sent in [updates[-1]["text"], str(updates[-1]["blocks"]), updated.text]:
        for raw in ("<!channel>", "<@U123>", "<https://evil.example"):
            assert raw not in sent
