"""Cards show what a call will do: the diff of a file as the agent will change it, an edit that
will fail said before anyone approves, a team's own preview hook, an edit's before and after.

Stand-in Slack, the real bot, a real runner, the deepagents demo agent (its threads start with a
small workspace: /plans/launch.md, /docs/README.md). The file tests run on one Redis and on a
cluster; the hooks' on one Redis.
"""

from __future__ import annotations

import json

import pytest

from tests.support.harness import (
    card_text,
    consumed,
    eventually,
    rich_text,
    start_scene,
)
from tests.support.people import ALICE

EDIT = 'In /plans/launch.md replace "Monday" with "Tuesday"'
HOOKS = {
    "send_email": "tests.support.previews:rendered_email",
    "delete": "tests.support.previews:broken",
    "issue_refund": "tests.support.previews:slow",
}


@pytest.fixture(params=["node", "cluster"])
async def scene(request):
    async with start_scene(
        request.getfixturevalue(f"{request.param}_url"), "demo", "editor", "disk", "text_editor"
    ) as running:
        yield running


def lines_of(card) -> list[str]:
    """The lines a card's preview shows (its first rich_text block)."""
    block = next(b for b in card.blocks if b["type"] == "rich_text")
    return rich_text(block).split("\n")


async def test_an_edit_file_card_shows_the_diff_of_the_file_as_the_agent_will_change_it(scene):
    thread_id = await scene.ask(EDIT)
    card = await scene.card(thread_id)

    assert "📄 *edits /plans/launch.md: +1 −1 lines*" in card_text(card)
    assert lines_of(card) == [
        "@@ -1,7 +1,7 @@",
        " # Launch plan",
        " ",
        " - Freeze the release branch on Thursday",
        "-- Launch on Monday at 10:00 UTC",
        "+- Launch on Tuesday at 10:00 UTC",
        " - Post the announcement in #general",
        " - Watch the error dashboards for an ho…",  # (cut: a phone's width)
        " - Send the launch email to customers",
    ]
    modal = await scene.open_modal(ALICE, card, "preview:0")  # View the whole change
    assert modal["title"]["text"] == "The whole change"
    assert "+- Launch on Tuesday at 10:00 UTC" in json.dumps(modal, ensure_ascii=False)

    await scene.standin.click(ALICE, card, "approve:0")
    assert "Successfully replaced 1 instance(s) of the string in '/plans/launch.md'" in await scene.answer(
        thread_id
    )
    # audited with the preview it showed: its hash, in the decision's entry
    approval = await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])
    shown = approval.request.actions[0].preview
    entries = [e for e in await scene.store.audit.entries() if e["approval_id"] == approval.approval_id]
    assert [e["preview_sha256"] for e in entries] == [shown.sha256]


async def test_a_failing_edit_is_flagged_before_approval_and_fails_as_said(scene):
    thread_id = await scene.ask('In /plans/launch.md replace "Friday" with "Saturday"')
    card = await scene.card(thread_id)

    assert "⚠️ *this edit will fail: the text is not in the file*" in card_text(card)
    assert lines_of(card) == ["-Friday", "+Saturday"]
    await scene.standin.click(ALICE, card, "approve:0")  # approved all the same: it fails, as said
    assert "String not found in file" in await scene.answer(thread_id, contains="edit_file failed")


async def test_a_subagents_edit_is_previewed_from_its_own_files(scene):
    """The editor subagent wrote /notes/draft.md itself: only its own state has the file."""
    thread_id = await scene.ask("Fix the draft", graph="editor")
    card = await scene.card(thread_id)

    assert "via *subagent editor*" in card_text(card)
    assert "📄 *edits /notes/draft.md: +1 −1 lines*" in card_text(card)
    assert "-Ship on Monday." in lines_of(card) and "+Ship on Friday." in lines_of(card)


@pytest.mark.parametrize("graph", ["disk", "text_editor"])
async def test_a_file_on_disk_is_diffed_as_the_tool_will_read_it(scene, graph):
    """deepagents' filesystem backend, Anthropic's text editor on a folder: read from disk."""
    thread_id = await scene.ask("Move the launch", graph=graph)
    card = await scene.card(thread_id)

    assert "📄 *edits /plans/launch.md: +1 −1 lines*" in card_text(card)
    new = "Tuesday" if graph == "disk" else "Friday"
    assert lines_of(card)[3:6] == [" - Freeze on Thursday", "-- Launch on Monday", f"+- Launch on {new}"]
    await scene.standin.click(ALICE, card, "approve:0")
    await scene.answer(thread_id, contains="Done:")


async def test_an_edit_shows_before_and_after_on_the_card(scene):
    thread_id = await scene.ask('Write "Launch on Monday\\nParty after" to /plans/launch.md')
    card = await scene.card(thread_id)
    assert "📄 *overwrites /plans/launch.md:" in card_text(card)  # the workspace has it already
    modal = await scene.open_modal(ALICE, card, "edit:0")

    await scene.standin.submit(ALICE, modal, {"content": "Launch on Tuesday\nParty after"})

    updated = await scene.card_shows(card, "✏️ Edited by")
    shown = card_text(updated)
    assert "content:\n@@ -1,2 +1,2 @@\n-Launch on Monday\n+Launch on Tuesday\n Party after" in shown
    assert "_The call as the agent asked it: the edit below changes it._" in shown
    assert "Updated file /plans/launch.md" in await scene.answer(thread_id)


async def test_a_secret_in_a_written_file_is_masked_in_its_diff_and_the_audit_hashes_what_was_shown(scene):
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    thread_id = await scene.ask(f'Write "# Deploy\\nkey: {token}\\nthen ship" to /plans/deploy.md')
    card = await scene.card(thread_id)

    assert lines_of(card) == ["+# Deploy", "+key: ••••6789", "+then ship"]  # the rest stays readable
    assert token not in json.dumps(card.blocks)
    modal = await scene.open_modal(ALICE, card, "preview:0")
    assert token not in json.dumps(modal) and "+key: ••••6789" in json.dumps(modal, ensure_ascii=False)
    await scene.standin.click(ALICE, card, "approve:0")
    await scene.answer(thread_id, contains="Updated file /plans/deploy.md")
    approval = await scene.store.approvals.get(card.metadata["event_payload"]["approval_id"])
    entries = [e for e in await scene.store.audit.entries() if e["approval_id"] == approval.approval_id]
    assert [e["preview_sha256"] for e in entries] == [approval.request.actions[0].preview.sha256]


async def test_preview_hooks_are_on_the_card_and_a_slow_or_broken_one_never_blocks(node_url):
    env = {
        "SIGNOFF_PREVIEWS": json.dumps(HOOKS),
        "SIGNOFF_PREVIEW_TIMEOUT": "1s",
        "SIGNOFF_TEST_PREVIEW_SECONDS": "4",
    }
    async with start_scene(node_url, "demo", env=env) as scene:
        email = await scene.ask('Email finance@acme.com "Q3 numbers are in"')
        batch = await scene.ask(
            "Delete /reports/old.pdf and refund order 12 for 5000"
        )  # (refunds over 1,000 pause)
        email_card, batch_card = await scene.card(email), await scene.card(batch)

        said = card_text(email_card)
        assert "📄 *an email to finance@acme.com*" in said
        assert "*To*: finance@acme.com\n*Subject*: Q3 numbers are in" in said  # Markdown made mrkdwn
        said = card_text(batch_card)
        assert "⚠️ *no preview: it failed (RuntimeError; details in the logs, ref " in said
        assert "⚠️ *no preview: it took longer than 1 s (the approval did not wait)*" in said

        await scene.standin.click(ALICE, email_card, "approve:0")
        await scene.confirm(ALICE, batch_card, "approve_all")
        assert "Email to finance@acme.com sent" in await scene.answer(email)
        assert "Refunded 5000 on order 12" in await scene.answer(batch)
        await eventually(lambda: consumed(scene.store), what="every command done")
