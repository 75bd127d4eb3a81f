"""Previews on cards and in View the whole change (`bot.views.previews`): the first lines, as
a phone shows them, escaped like every agent text, within Slack's limits; edits before/after."""

from __future__ import annotations

import json

import pytest

from bot.views import previews
from bot.views.cards import CardView, approval_card
from core.previews import Preview, file_call, file_preview
from core.protocol import ActionReview
from core.records import Decided
from slack_standin import Message
from slack_standin.blockkit import block_problems, message_problem, total_text, view_problems
from tests.support.harness import card_text, rich_text
from tests.support.records import approval

STEPS = "".join(f"- step {n}: do the thing number {n} carefully and then report\n" for n in range(60))


def edit_file(old: str, new: str, before: str | None = STEPS, path: str = "/plans/launch.md") -> ActionReview:
    args = {"file_path": path, "old_string": old, "new_string": new}
    return ActionReview(
        name="edit_file",
        args=args,
        allowed_decisions=("approve", "edit", "reject"),
        preview=file_preview(file_call("edit_file", args), args, before),
    )


def as_message(blocks, text: str = "") -> Message:
    return Message(channel="C1", ts="1.1", user="U0SIGNOFF", text=text, blocks=[b.to_dict() for b in blocks])


def test_a_card_shows_the_diff_of_the_file_as_the_edit_will_change_it():
    text, blocks = approval_card(approval(edit_file("step 30: do", "step 30: skip")))
    as_dicts = [b.to_dict() for b in blocks]

    assert message_problem({"text": text, "blocks": as_dicts}) is None
    line = next(b for b in as_dicts if b.get("block_id") == "preview:0")
    assert line["text"]["text"].startswith("📄 *edits /plans/launch.md: +1 −1 lines*")
    assert line["accessory"] == {
        "type": "button",
        "text": {"type": "plain_text", "text": "View the whole change", "emoji": True},
        "action_id": "preview:0",
        "value": "a1:0",
    }
    lines = next(b for b in as_dicts if b.get("block_id") == "lines:0")
    assert lines["elements"][0]["type"] == "rich_text_preformatted"
    shown = rich_text(lines).split("\n")
    assert shown[0] == "@@ -28,7 +28,7 @@"
    assert (
        "-- step 30: do the thing number 30 care…" in shown
        and "+- step 30: skip the thing number 30 ca…" in shown
    )
    assert all(len(s) <= previews.CARD_WIDTH for s in shown)  # a phone shows it without a sideways scroll
    # the order people read: the action, what it does, its lines, then the buttons
    assert [b["type"] for b in as_dicts[2:6]] == ["section", "section", "rich_text", "actions"]


def test_a_failing_edit_is_flagged_on_the_card_before_anyone_approves():
    _, blocks = approval_card(approval(edit_file("step 99", "step 100")))

    flat = card_text(as_message(blocks))
    assert "⚠️ *this edit will fail: the text is not in the file*" in flat
    assert "-step 99\n+step 100" in flat


def test_preview_text_is_shown_as_written_and_cannot_ping_or_hide_characters():
    evil = "<!channel> <@U0BOSS> &amp; \u202egnp.exe \x07bell"
    action = edit_file("step 1: do", evil, path="/<!here>.md")
    _, blocks = approval_card(approval(action))
    as_dicts = [b.to_dict() for b in blocks]

    lines = rich_text(next(b for b in as_dicts if b.get("block_id") == "lines:0"))
    # rich_text is never parsed: the text as written, hidden characters shown, controls gone
    assert (
        "+- <!channel> <@U0BOSS> &amp; ⟨U+202E⟩g…" in lines and "\x07" not in lines and "\u202e" not in lines
    )
    summary = next(b for b in as_dicts if b.get("block_id") == "preview:0")["text"]["text"]
    assert "/&lt;!here&gt;.md" in summary and "<!here>" not in summary  # mrkdwn: escaped


def test_a_markdown_or_text_preview_from_a_hook_is_on_the_card():
    email = ActionReview(
        name="send_email",
        args={"to": "a@acme.com"},
        allowed_decisions=("approve", "reject"),
        preview=Preview.of(
            "markdown", "**To**: a@acme.com\n\nHello <!channel>", "an email", source="app:email"
        ),
    )
    slow = ActionReview(
        name="run_sql",
        args={"q": "select 1"},
        allowed_decisions=("approve", "reject"),
        preview=Preview.of("text", "", warning="no preview: it took longer than 5 s", source="app:explain"),
    )
    _, blocks = approval_card(approval(email, slow))
    flat = card_text(as_message(blocks))

    assert "*To*: a@acme.com" in flat and "Hello &lt;!channel&gt;" in flat
    assert "⚠️ *no preview: it took longer than 5 s*" in flat
    assert "📄 *Preview (app:explain)*" in flat
    assert message_problem({"text": "x", "blocks": [b.to_dict() for b in blocks]}) is None


@pytest.mark.parametrize("count", [1, 2, 5, 14, 15, 41])
@pytest.mark.parametrize("edited", [False, True])
def test_any_batch_of_previews_stays_within_slacks_limits(count, edited):
    actions = [edit_file(f"step {n}: do", f"step {n}: " + "x\n" * 200) for n in range(count)]
    changes = {}
    if edited:  # an edit waiting for its quorum on each: its diff too
        proposal = Decided(
            decision={
                "type": "edit",
                "edited_action": {"name": "edit_file", "args": {"new_string": "y\n" * 300}},
            },
            user="U0BOB",
            at=1.0,
        )
        changes = {"proposals": dict.fromkeys(range(count), proposal), "votes": {}}
    _, blocks = approval_card(approval(*actions, **changes), view=CardView())
    as_dicts = [b.to_dict() for b in blocks]

    assert block_problems(as_dicts, limit=50) == []
    assert total_text(as_dicts) <= 12_000
    assert as_dicts[-1]["block_id"] == "more"  # nothing cut off the end
    flat = json.dumps(as_dicts)
    assert "edits /plans/launch.md" in flat  # every card says what the calls do, one way or another


def test_the_whole_change_pages_through_every_line():
    big = "".join(f"line {n}\n" for n in range(250))
    args = {"file_path": "/big.txt", "content": big}
    action = ActionReview(
        name="write_file",
        args=args,
        allowed_decisions=("approve",),
        preview=file_preview(file_call("write_file", args), args, None),
    )
    pending = approval(action)
    pages = [previews.preview_modal(pending, 0, page).to_dict() for page in range(3)]

    assert all(view_problems(page) == [] for page in pages)
    read = [
        line
        for page in pages
        for b in page["blocks"]
        if b["type"] == "rich_text"
        for line in rich_text(b).split("\n")
    ]
    assert read == [f"+line {n}" for n in range(250)]
    buttons = [
        [e["action_id"] for b in page["blocks"] if b["type"] == "actions" for e in b["elements"]]
        for page in pages
    ]
    assert buttons == [["preview_page:1"], ["preview_page:0", "preview_page:2"], ["preview_page:1"]]
    assert pages[1]["private_metadata"] == "a1:0" and pages[1]["callback_id"] == "preview"
    assert "lines 101–200 of 250" in json.dumps(pages[1], ensure_ascii=False)
    assert previews.preview_modal(pending, 0, 99).to_dict()["blocks"] == pages[2]["blocks"]  # (clamped)


def test_an_edit_shows_before_and_after_per_argument():
    action = ActionReview(
        name="write_file",
        args={"file_path": "/notes/a.md", "content": "Launch on Monday\nThen party\n"},
        allowed_decisions=("approve", "edit", "reject"),
    )
    edited = {"file_path": "/notes/b.md", "content": "Launch on Tuesday\nThen party\n"}
    decided = Decided(
        decision={"type": "edit", "edited_action": {"name": "write_file", "args": edited}},
        user="U0ALICE",
        at=1.0,
    )
    _, blocks = approval_card(approval(action, decided={0: decided}))
    flat = card_text(as_message(blocks))

    assert "`file_path`: */notes/b.md* (was ~/notes/a.md~)" in flat  # a short one: in its one line
    assert "content:\n@@ -1,2 +1,2 @@\n-Launch on Monday\n+Launch on Tuesday\n Then party" in flat

    proposal = Decided(
        decision={"type": "edit", "edited_action": {"name": "write_file", "args": edited}},
        user="U0BOB",
        at=1.0,
    )
    waiting = approval(action, proposals={0: proposal}, votes={0: [proposal]})
    _, blocks = approval_card(waiting)
    as_dicts = [b.to_dict() for b in blocks]
    assert "-Launch on Monday\n+Launch on Tuesday" in card_text(as_message(blocks))
    order = [b.get("block_id", b["type"]) for b in as_dicts]
    assert order.index("edit:0") < order.index("decide:0:r0")  # read before the buttons that approve it
