"""Cards and modals as people see them: escaped, within Slack's limits, readable on phones."""

from __future__ import annotations

import json
import time

import pytest

from bot.routing import summary_line
from bot.views import modals
from bot.views.card_words import edited_changes, state_title, withdrawal_line
from bot.views.cards import CardView, approval_card, approve_all_words, approve_words, withdraw_words
from bot.views.text import escape
from core.approval_requirements import Requirement
from core.policy_file import PolicyFile
from core.protocol import ActionReview
from core.records import ApprovalStatus, Decided, Outcome, Terms
from slack_standin.blockkit import block_problems, total_text, view_problems
from tests.support.records import EVIL, approval, email


def rendered(blocks) -> tuple[list[dict], str]:
    as_dicts = [b.to_dict() for b in blocks]
    return as_dicts, json.dumps(as_dicts, ensure_ascii=False)


def test_agent_text_cannot_ping_or_disguise_links():
    text, blocks = approval_card(approval(email(to=EVIL, body=EVIL)))
    _, flat = rendered(blocks)

    for raw in ("<!channel>", "<@U0BOSS>", "<https://evil.example|", "<!subteam"):
        assert raw not in flat and raw not in text
    assert "&lt;!channel&gt; &lt;@U0BOSS&gt; &lt;https://evil.example|your bank&gt; &amp;" in flat
    assert text.startswith("An agent wants to run send_email: &lt;!channel&gt;")


def test_one_action_card_is_short_with_labelled_buttons():
    _, blocks = approval_card(approval(email()), destructive=("send_email",))
    as_dicts, _ = rendered(blocks)

    assert [b["type"] for b in as_dicts] == ["header", "context", "section", "actions", "actions"]
    assert as_dicts[0]["text"]["text"] == "Send email"
    assert (  # (the middleware's default description says nothing: left out)
        as_dicts[2]["text"]["text"] == "*send_email*\n`to`: finance@acme.com\n`subject`: Q3\n`body`: hello"
    )
    assert as_dicts[3]["block_id"] == "decide:0:r0:sure"  # a destructive tool: confirmed once checked
    approve, reject = as_dicts[3]["elements"]
    assert (approve["text"]["text"], approve["style"], approve["action_id"], approve["value"]) == (
        "Approve",
        "primary",
        "approve:0",
        "a1:0",
    )
    # no Slack confirm: it would show to anyone before Signoff checks them (the dialog is a modal)
    assert (approve.get("confirm"), reject["style"], reject.get("confirm")) == (None, "danger", None)
    assert [e["text"]["text"] for e in as_dicts[4]["elements"]] == ["Details"]  # no requester: no Withdraw
    assert approve_words(approval(email()), 0) == (
        "Run this action?",
        "Run send_email? It cannot be undone once it runs.",
    )


@pytest.mark.parametrize("count", [1, 2, 14, 15, 30, 40, 41, 60, 120, 500])
@pytest.mark.parametrize("terms", [False, True])
def test_any_batch_stays_within_slacks_limits(count, terms):
    long_body = "x" * 10_000
    actions = [email(to=f"u{i}@acme.com", body=long_body) for i in range(count)]
    view = CardView()
    changes = {}
    if terms:  # the longest card: a quorum on each action, votes, a proposal, escalated, withdrawable
        people = tuple(f"U0PERSON{n}" for n in range(40))
        view = CardView(approvers=people, escalated_to=people[:10], barred="U0RILEY")
        vote = Decided(decision={"type": "approve"}, user="U0PERSON1", at=1.0)
        proposal = Decided(
            decision={"type": "edit", "edited_action": {"name": "send_email", "args": {"to": "x" * 5000}}},
            user="U0PERSON2",
            at=1.0,
        )
        changes = dict(
            requester="U0RILEY",
            escalated=(30,),
            terms=Terms(
                quorum=dict.fromkeys(range(count), 3),
                expires_at=dict.fromkeys(range(count), 2e9),
                timeout=dict.fromkeys(range(count), 60),
                escalations={30: people[:10]},
            ),
            votes={i: [vote, proposal] for i in range(count)},
            proposals=dict.fromkeys(range(count), proposal),
            revisions=dict.fromkeys(range(count), 1),
        )
    pending = approval(*actions, **changes)
    _, blocks = approval_card(pending, view=view)
    as_dicts, _ = rendered(blocks)

    assert block_problems(as_dicts, limit=50) == []
    assert total_text(as_dicts) <= 12_000
    together = [b for b in as_dicts if b.get("block_id") == "decide:all"]
    # Approve all / Reject all… for a batch of any size; never while an edit waits for its
    # quorum (each proposal is approved where it is shown).
    assert len(together) == (1 if count > 1 else 0)
    shown = [e["action_id"] for b in together for e in b["elements"]]
    assert shown == ([] if not together else ["reject_all"] if terms else ["approve_all", "reject_all"])
    review = [b["accessory"]["action_id"] for b in as_dicts if b.get("block_id") == "batch"]
    assert review == (["review"] if count > 40 else [])  # the way to every action the card cannot show
    more = next(b for b in as_dicts if b.get("block_id") == "more")
    withdraw = [e for e in more["elements"] if e["action_id"] == "withdraw"]
    assert len(withdraw) == (1 if terms else 0)  # the requester's, kept whatever the batch
    decide = [
        b
        for b in as_dicts
        if (b["type"] == "actions" and b["block_id"] not in ("decide:all", "more"))
        or (b.get("accessory") or {}).get("type") == "overflow"
    ]
    assert len(decide) == min(count, 40)  # each with its choices; the rest in the review modal
    if count > 1:
        for start in range(0, count, modals.REVIEW_PAGE):  # and every page of the review modal
            page = modals.review_modal(pending, start, view=view).to_dict()
            assert view_problems(page) == [], start
            assert len(page["private_metadata"]) <= 3_000


def test_a_batch_larger_than_a_card_says_how_many_it_shows_and_approves_all_of_them():
    batch = approval(
        *[email(to=f"u{i}@acme.com") for i in range(100)], *[delete(f"/d/{i}") for i in range(20)]
    )

    text, blocks = approval_card(batch, destructive=("delete",))
    as_dicts, _ = rendered(blocks)

    assert as_dicts[0]["text"]["text"] == "120 actions need review"
    assert text == "An agent wants to run 120 actions (send_email, delete)"
    assert as_dicts[2] == {
        "type": "section",
        "block_id": "batch",
        "text": {
            "type": "mrkdwn",
            "text": "*120 actions*: `send_email` ×100 and `delete` ×20. This card shows actions 1–40; "
            "*Review all 120* to read and decide each one.",
        },
        "accessory": {
            "type": "button",
            "action_id": "review",
            "value": "a1:0",
            "style": "primary",
            "text": {"type": "plain_text", "text": "Review all 120", "emoji": True},
        },
    }
    approve_all, reject_all = as_dicts[3]["elements"]
    assert (approve_all["action_id"], reject_all["action_id"]) == ("approve_all", "reject_all")
    assert approve_all_words(batch, ("delete",))[1] == (
        "Each of the 120 undecided actions runs, including delete. "
        "80 of them are not on this card: Review all shows every one."
    )
    rows = [b["block_id"] for b in as_dicts if b.get("block_id", "").startswith("action:")]
    assert rows == [f"action:{i}:r0" for i in range(40)]
    assert as_dicts[-2]["elements"][0]["text"] == "0 of 120 decided"


def test_the_review_modal_shows_every_action_of_a_big_batch_with_its_choices_a_page_at_a_time():
    batch = approval(*[email(to=f"u{i}@acme.com") for i in range(499)], delete("/last"))
    decided = Decided(decision={"type": "approve"}, user="U0ALICE", at=1_700_000_100.0)
    batch = batch.model_copy(update={"decided": {0: decided, 1: decided}})
    seen: list[int] = []
    starts = [0]
    while starts[-1] is not None:
        page = modals.review_modal(batch, starts[-1], destructive=("delete",)).to_dict()
        assert view_problems(page) == []
        assert page["title"]["text"] == "Review 500 actions" and page["close"]["text"] == "Done"
        assert page["private_metadata"] == f"a1:{starts[-1]}"
        rows = [
            int(b["block_id"].split(":")[1])
            for b in page["blocks"]
            if b.get("block_id", "").startswith("action:")
        ]
        seen += rows
        for index in rows:
            buttons = [
                e["action_id"]
                for b in page["blocks"]
                if b.get("block_id", "").startswith(f"decide:{index}:")
                for e in b["elements"]
            ]
            assert buttons == (
                []
                if index < 2
                else [f"approve:{index}", f"reject:{index}"]
                if index < 499
                else [f"{k}:{index}" for k in ("approve", "edit", "reject", "respond")]
            )
        pages = next(b for b in page["blocks"] if b.get("block_id") == "pages")["elements"]
        for button in pages:
            assert button["value"] == "a1:" + button["action_id"].removeprefix("page:")
        after = [int(b["action_id"][5:]) for b in pages if b["text"]["text"].endswith("▶")]
        starts.append(after[0] if after else None)

    assert seen == list(range(500))  # each action on exactly one page, in order
    assert len(starts) == 26  # 25 pages of 20

    last = modals.review_modal(batch, 480, destructive=("delete",)).to_dict()
    assert last["blocks"][0] == {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": "*Actions 481–500 of 500* · 2 decided, 498 waiting"}],
    }
    assert [(b["action_id"], b["text"]["text"]) for b in last["blocks"][-1]["elements"]] == [
        ("page:460", "◀ 461–480"),
        ("page:0", "First waiting: #3"),
    ]
    approve_delete = next(  # destructive: confirmed in a dialog once the clicker may approve
        e for b in last["blocks"] if b.get("block_id") == "decide:499:r0:sure" for e in b["elements"]
    )
    assert approve_delete["action_id"] == "approve:499"
    assert approve_words(batch, 499)[0] == "Approve action 500?"
    first = modals.review_modal(batch, 0).to_dict()
    assert "✅ Approved by <@U0ALICE>" in first["blocks"][2]["elements"][0]["text"]
    assert modals.review_modal(batch, 9_999).to_dict()["private_metadata"] == "a1:480"  # clamped


def delete(path: str) -> ActionReview:
    return ActionReview(
        name="delete", args={"path": path}, allowed_decisions=("approve", "edit", "reject", "respond")
    )


def test_decided_actions_show_who_and_what_changed():
    write = ActionReview(
        name="write_file",
        args={"file_path": "/a.md", "content": "x"},
        allowed_decisions=("approve", "edit", "reject"),
    )
    edit = {
        "type": "edit",
        "edited_action": {"name": "write_file", "args": {"file_path": "/b.md", "content": "x"}},
    }
    decided = approval(
        write,
        email(),
        decided={0: Decided(decision=edit, user="U0ALICE", at=time.time())},
        status=ApprovalStatus.PENDING,
    )
    _, blocks = approval_card(decided)
    _, flat = rendered(blocks)

    assert "✏️ Edited by <@U0ALICE>" in flat
    assert "`file_path`: */b.md* (was ~/a.md~)" in flat
    assert "1 of 2 decided" in flat
    assert '"approve:0"' not in flat and '"approve:1"' in flat


def test_edited_changes_list_only_changed_arguments():
    assert edited_changes({"a": 1, "b": "x"}, {"a": 2, "b": "x", "c": [1]}) == [
        "`a`: *2* (was ~1~)",
        "`c`: *[1]* (was —)",
    ]


def test_edit_modal_prefills_each_argument_and_parses_types():
    refund = ActionReview(
        name="issue_refund",
        args={"order_id": "o1", "amount": 5000},
        allowed_decisions=("approve", "edit"),
        args_schema={
            "type": "object",
            "properties": {"amount": {"type": "integer"}, "order_id": {"type": "string"}},
            "required": ["order_id", "amount"],
        },
    )
    view = modals.edit_modal(approval(refund), 0).to_dict()
    inputs = {b["block_id"]: b["element"]["initial_value"] for b in view["blocks"] if b["type"] == "input"}

    assert view_problems(view) == []
    assert inputs == {"order_id": "o1", "amount": "5000"}
    decision, errors = modals.parse_edit(refund, {"order_id": "o2", "amount": "50"})
    assert errors == {} and decision["edited_action"]["args"] == {"order_id": "o2", "amount": 50}
    _, errors = modals.parse_edit(refund, {"order_id": "o2", "amount": "lots"})
    assert errors == {"amount": "Not valid JSON (text needs quotes, numbers don't)."}
    _, errors = modals.parse_edit(refund, {"order_id": "o2", "amount": '"lots"'})
    assert errors == {"amount": "'lots' is not of type 'integer'"}


def test_required_arguments_are_required_inputs_and_a_blank_one_is_an_error_on_its_field():
    write = ActionReview(
        name="write_file",
        args={"path": "/notes/a.md", "content": "hello", "mode": "w"},
        allowed_decisions=("approve", "edit"),
        args_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "mode": {"type": "string"},
            },
            "required": ["path", "content"],
        },
    )
    view = modals.edit_modal(approval(write), 0).to_dict()
    optional = {b["block_id"]: b.get("optional", False) for b in view["blocks"] if b["type"] == "input"}
    labels = {b["block_id"]: b["label"]["text"] for b in view["blocks"] if b["type"] == "input"}

    assert optional == {"path": False, "content": False, "mode": True}
    assert "optional" not in " ".join(labels.values())  # Slack adds "(optional)" itself
    _, errors = modals.parse_edit(write, {"path": "/notes/a.md", "content": "  ", "mode": "w"})
    assert errors == {"content": "Required: the tool cannot run without it."}
    decision, errors = modals.parse_edit(write, {"path": "/notes/b.md", "content": "hi", "mode": ""})
    assert errors == {} and decision["edited_action"]["args"] == {"path": "/notes/b.md", "content": "hi"}
    reason = next(
        b for b in modals.reject_modal(approval(write), 0).to_dict()["blocks"] if b["type"] == "input"
    )
    assert reason["label"]["text"] == "Reason" and reason["optional"] is True


def test_modals_stay_within_limits_for_huge_arguments():
    huge = ActionReview(
        name="a_tool_with_a_very_long_name_indeed",
        args={"body": "y" * 400_000, "n": 1},
        description=EVIL,
        allowed_decisions=("approve", "edit", "reject", "respond"),
    )
    pending = approval(huge)
    for view in (
        modals.edit_modal(pending, 0),
        modals.reject_modal(pending, 0),
        modals.respond_modal(pending, 0),
        modals.args_modal(pending, 0),
    ):
        as_dict = view.to_dict()
        assert view_problems(as_dict) == [], as_dict["callback_id"]
        assert "<!channel>" not in json.dumps(as_dict)


def test_escape_only_touches_the_three_control_characters():
    assert escape("a < b > c & d * _ ~ `") == "a &lt; b &gt; c &amp; d * _ ~ `"


async def test_the_stand_in_refuses_what_slack_refuses():
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from slack_standin import SlackStandin

    standin = SlackStandin("secret")
    client = AsyncWebClient(token=standin.token, base_url=await standin.start())
    try:
        too_many = [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}] * 51
        too_long = [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 2_900}}] * 5
        errors = []
        for blocks in (too_many, too_long):
            with pytest.raises(SlackApiError) as refused:
                await client.chat_postMessage(channel="C1", text="t", blocks=blocks)
            errors.append(refused.value.response["error"])
        bad_view = {
            "type": "modal",
            "title": {"type": "plain_text", "text": "A title that is far too long"},
            "blocks": [],
        }
        with pytest.raises(SlackApiError):
            await client.views_open(trigger_id="nope", view=bad_view)
    finally:
        await standin.stop()

    assert errors == ["invalid_blocks", "msg_blocks_too_long"]
    assert [c.reply.get("error") for c in standin.calls][-1] == "invalid_trigger_id"


def test_a_quorum_card_shows_progress_what_is_proposed_and_who_may_still_approve():
    alice = Decided(decision={"type": "approve"}, user="U0ALICE", at=1.0)
    view = CardView(approvers=("U0ALICE", "U0BOB", "U0RILEY", "S0FIN"), barred="U0RILEY")
    waiting = approval(email(), requester="U0RILEY", terms=Terms(quorum={0: 2}), votes={0: [alice]})

    _, flat = rendered(approval_card(waiting, view=view)[1])

    assert "👥 *1 of 2 approvals*: <@U0ALICE>" in flat
    assert "May still approve: <@U0BOB>, <!subteam^S0FIN>" in flat  # not Alice again, not the requester
    assert '"decide:0:r0"' in flat

    bob = Decided(
        decision={"type": "edit", "edited_action": {"name": "send_email", "args": {"to": "b@acme.com"}}},
        user="U0BOB",
        at=2.0,
    )
    proposed = waiting.model_copy(update={"votes": {0: [bob]}, "proposals": {0: bob}, "revisions": {0: 1}})
    _, flat = rendered(approval_card(proposed, view=view)[1])

    assert "✏️ <@U0BOB> proposed new arguments; approving approves these:" in flat
    assert "`to`: *b@acme.com* (was ~finance@acme.com~)" in flat
    assert '"decide:0:r1"' in flat  # an Approve from this card names the proposal it showed


def test_an_expired_card_says_so_with_the_time_and_offers_nothing():
    expired = Decided(
        decision={"type": "reject", "message": "No decision within 2h"},
        user="signoff",
        at=1_700_007_200.0,
        outcome=Outcome.EXPIRED,
    )
    closed = approval(email(), requester="U0RILEY", decided={0: expired}, status=ApprovalStatus.RESUMED)

    _, blocks = approval_card(closed)
    as_dicts, flat = rendered(blocks)

    assert as_dicts[0]["text"]["text"] == "Expired: no decision in time"
    assert "⌛ Expired <!date^1700007200^" in flat and "so it was not run" in flat
    assert [b["block_id"] for b in as_dicts if b["type"] == "actions"] == ["more"]  # Details only


def test_a_withdrawal_after_a_partial_approval_says_what_runs_and_what_does_not():
    write = ActionReview(name="write_file", args={"path": "/a"}, allowed_decisions=("approve", "reject"))
    batch = approval(delete("/old"), write, email(), requester="U0RILEY")
    alice = Decided(decision={"type": "approve"}, user="U0ALICE", at=1.0)
    withdrawn = Decided(
        decision={"type": "reject", "message": "withdrawn"}, user="U0RILEY", at=2.0, outcome=Outcome.WITHDRAWN
    )
    partly = batch.model_copy(update={"decided": {2: alice}})
    closed = batch.model_copy(
        update={"decided": {0: withdrawn, 1: withdrawn, 2: alice}, "status": ApprovalStatus.RESUMING}
    )

    assert withdrawal_line(closed, "*Riley*") == (  # a name: she did it, she is not pinged
        "↩️ *Riley* withdrew the request: `delete` and `write_file` were not run; "
        "`send_email`, approved before by <@U0ALICE>, runs."
    )
    names = {"U0RILEY": "Riley", "U0ALICE": "Alice"}
    assert state_title(closed, names) == "Withdrawn by Riley: 1 approved before still runs, 2 not run"
    more = next(b for b in rendered(approval_card(partly)[1])[0] if b.get("block_id") == "more")
    assert [e["text"]["text"] for e in more["elements"]] == ["Details", "Withdraw my request"]
    assert withdraw_words(partly) == (
        "The agent is told you withdrew it; the undecided actions "
        "are not run; `send_email`, approved already, still runs."
    )
    # Nothing decided before: nothing runs, as before.
    everything = batch.model_copy(update={"decided": dict.fromkeys(range(3), withdrawn)})
    assert withdrawal_line(everything, "*Riley*") == "↩️ *Riley* withdrew the request; nothing was run."
    assert state_title(everything, names) == "Withdrawn by Riley"
    # Rejected before: not run either; and agent text stays inert.
    evil = ActionReview(name="<!channel> <@U0BOSS>", args={}, allowed_decisions=("approve", "reject"))
    bob = Decided(decision={"type": "reject"}, user="U0BOB", at=1.5)
    mixed = approval(evil, write, email(), requester="U0RILEY").model_copy(
        update={"decided": {0: withdrawn, 1: bob, 2: alice}}
    )
    assert withdrawal_line(mixed, "*Riley*") == (
        "↩️ *Riley* withdrew the request: `&lt;!channel&gt; &lt;@U0BOSS&gt;` was not run; "
        "`write_file`, rejected before by <@U0BOB>, is not run either; "
        "`send_email`, approved before by <@U0ALICE>, runs."
    )


def test_an_edited_value_on_a_card_is_shown_inert():
    write = ActionReview(
        name="write_file", args={"path": "/a.md", "content": "x"}, allowed_decisions=("approve", "edit")
    )
    hostile = {"path": "<!channel>", "content": "<@U123> <https://evil.example|click>"}
    edit = {"type": "edit", "edited_action": {"name": "write_file", "args": hostile}}
    decided = approval(write, email(), decided={0: Decided(decision=edit, user="U0ALICE", at=1.0)})
    proposed = approval(
        write,
        terms=Terms(quorum={0: 2}),
        votes={0: [Decided(decision=edit, user="U0ALICE", at=1.0)]},
        proposals={0: Decided(decision=edit, user="U0ALICE", at=1.0)},
        revisions={0: 1},
    )

    for shown in (decided, proposed):
        text, blocks = approval_card(shown)
        _, flat = rendered(blocks)
        for raw in ("<!channel>", "<@U123>", "<https://evil.example"):
            assert raw not in flat and raw not in text
        assert "`path`: *&lt;!channel&gt;* (was ~/a.md~)" in flat
        assert "`content`: *&lt;@U123&gt; &lt;https://evil.example|click&gt;* (was ~x~)" in flat


def test_a_require_card_shows_each_entry_s_progress_and_who_may_still_fill_it():
    entries = (
        Requirement(name="Finance", approvers=("S0FIN",), count=1),
        Requirement(name="Security", approvers=("U0SAM", "U0KIM", "U0ALICE"), count=1),
    )
    alice = Decided(decision={"type": "approve"}, user="U0ALICE", at=1.0, eligible=(0, 1))
    waiting = approval(email(), terms=Terms(quorum={0: 2}, require={0: entries}), votes={0: [alice]})

    _, flat = rendered(approval_card(waiting, view=CardView(approvers=("S0FIN", "U0SAM")))[1])

    assert "👥 *1 of 2 approvals*: <@U0ALICE>" in flat
    # Alice counts once, where the matching puts her; Security names who may still fill it
    assert "Finance 1 of 1 ✓ · Security 0 of 1: <@U0SAM>, <@U0KIM>" in flat
    assert "May still approve" not in flat

    unnamed = (Requirement(approvers=("U0SAM",), count=1), Requirement(approvers=("U0KIM",), count=1))
    sam = Decided(decision={"type": "approve"}, user="U0SAM", at=1.0, eligible=(0,))
    both = approval(email(), terms=Terms(quorum={0: 2}, require={0: unnamed}), votes={0: [sam]})
    _, flat = rendered(approval_card(both)[1])
    assert "<@U0SAM> 1 of 1 ✓ · <@U0KIM> 0 of 1" in flat  # an entry without a name: its approvers

    dan = Decided(decision={"type": "approve"}, user="U0DAN", at=2.0, eligible=(0,))
    two = both.model_copy(update={"votes": {0: [sam, dan]}})
    _, flat = rendered(approval_card(two)[1])
    assert "👥 *1 of 2 approvals*: <@U0SAM>, <@U0DAN>" in flat  # Dan's waits: Sam's entry is full


def test_an_approver_whose_entries_are_full_is_told_the_approval_does_not_count_yet():
    from bot.views.card_words import require_said

    unnamed = (Requirement(approvers=("U0SAM", "U0DAN"), count=1), Requirement(approvers=("U0KIM",), count=1))
    sam = Decided(decision={"type": "approve"}, user="U0SAM", at=1.0, eligible=(0,))
    dan = Decided(decision={"type": "approve"}, user="U0DAN", at=2.0, eligible=(0,))
    waiting = approval(email(), terms=Terms(quorum={0: 2}, require={0: unnamed}), votes={0: [sam, dan]})

    assert require_said(waiting, 0, "U0SAM", "send_email") == (
        "Your approval of `send_email` is counted: 1 of 2. It runs once 1 more approver agrees."
    )
    assert require_said(waiting, 0, "U0DAN", "send_email") == (
        "Your approval of `send_email` is recorded, but every entry you may fill is full: "
        "it does not count yet (1 of 2)."
    )


def test_a_description_s_first_line_reads_as_a_sentence_without_its_trailing_colon():
    write = ActionReview(
        name="write_file",
        args={"file_path": "/plans/launch.md"},
        allowed_decisions=("approve",),
        description="Write 17 characters to /plans/launch.md:\nLaunch on Tuesday",
    )

    assert summary_line(write, PolicyFile().default_route) == "Write 17 characters to /plans/launch.md"


def test_every_character_visible_shows_or_removes_lies_beyond_ascii():
    """`visible` returns ASCII text as it is (less control characters): that holds only while
    every character it would show as ⟨U+…⟩ is beyond ASCII."""
    from bot.views import text

    shown = [chr(c) for c in range(0x110000) if text._HIDDEN.match(chr(c))]
    assert shown and min(map(ord, shown)) > 0x7F
    assert text.visible("a\x07b\u200bc") == "ab⟨U+200B⟩c"
    assert text.visible("plain <text> & more") == "plain <text> & more"
