"""The run's plan (core.plan, bot.views.plan), the answer's Markdown for streams, and the stand-in's
rules for plan blocks: pure, no Redis."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from bot.agent_threads import prompted
from bot.slack.surfaces import Surfaces, pieces
from bot.views.markdown import to_markdown
from bot.views.plan import GatedCall, plan_block
from core.plan import PlanTask, TaskStatus, args_digest, tasks_from_messages, with_call_ids
from core.protocol import ActionReview
from core.records import ApprovalStatus, Decided, Outcome, Run, RunState, Terms
from slack_standin.blockkit import block_problems
from slack_standin.models import Message
from slack_standin.streaming import markdown_html
from tests.support.records import EVIL, approval, email, task_words


def drawn(state, tasks, gates) -> dict:
    block = plan_block(state, tasks, gates)
    assert block is not None
    shown = block.to_dict()
    assert block_problems([shown], limit=50) == []  # as Slack takes it
    return shown


BOOKKEEPER_REFUND = ActionReview(
    name="issue_refund", args={"order_id": "7", "amount": 5}, allowed_decisions=("approve", "reject")
)


def refund_ran(key: str, group: str, at: float) -> PlanTask:
    """The subagent's refund call as the runner noted it once it ran."""
    return PlanTask(
        key=key,
        name="issue_refund",
        digest=args_digest(BOOKKEEPER_REFUND.args),
        group=group,
        status=TaskStatus.COMPLETE,
        at=at,
    )


def test_the_messages_show_each_call_pending_until_a_tool_message_answers_it():
    messages = [
        HumanMessage("go"),
        AIMessage(
            "",
            tool_calls=[
                {"id": "c1", "name": "send_email", "args": {"to": "a@b.c"}},
                {"id": "c2", "name": "task", "args": {"subagent_type": "bookkeeper", "description": "x"}},
                {"id": "c3", "name": "delete", "args": {"file_path": "/x"}},
            ],
        ),
        ToolMessage("sent", tool_call_id="c1"),
        ToolMessage("no", tool_call_id="c3", status="error"),
    ]
    tasks = tasks_from_messages(messages, at=10.0)
    assert [(t.key, t.status, t.label) for t in tasks] == [
        ("c1", TaskStatus.COMPLETE, ""),
        ("c2", TaskStatus.PENDING, "bookkeeper"),
        ("c3", TaskStatus.ERROR, ""),
    ]
    assert tasks[0].digest == args_digest({"to": "a@b.c"})
    # the Agent Server's dict form reads the same
    as_dicts = [m.model_dump() for m in messages]
    assert tasks_from_messages(as_dicts, at=10.0) == tasks
    assert PlanTask.decoded(tasks[1].encoded()) == tasks[1]


def test_a_gated_call_waits_for_its_approvers_with_a_link_then_says_who_decided():
    action = email()
    task = PlanTask(key="call_0", name="send_email", digest=args_digest(action.args), at=1.0)
    waiting = GatedCall(approval(action), 0, ("Alice", "Bob"), {}, "http://slack/archives/C1/p1")
    (card,) = drawn(RunState.WAITING, [task], [waiting])["tasks"]
    assert (card["task_id"], card["status"], card["title"]) == (
        "call_0",
        "pending",
        "send email: to finance@acme.com",
    )
    assert "Waiting for approval by Alice or Bob" in task_words(card)
    assert card["details"]["elements"][0]["elements"][-1] == {
        "type": "link",
        "url": "http://slack/archives/C1/p1",
        "text": "open the card",
    }

    decided = approval(action, decided={0: Decided(decision={"type": "approve"}, user="U0ALICE", at=2.0)})
    running = task.model_copy(update={"status": TaskStatus.IN_PROGRESS})
    (card,) = drawn(RunState.RUNNING, [running], [GatedCall(decided, 0, (), {"U0ALICE": "Alice"})])["tasks"]
    assert (card["status"], task_words(card)) == ("in_progress", "✅ Approved by Alice")


def test_a_quorum_says_everyone_it_needs_how_many_approved_and_who_is_still_to():
    action = email()
    task = PlanTask(key="call_0", name="send_email", digest=args_digest(action.args), at=1.0)
    alice = Decided(decision={"type": "approve"}, user="U0ALICE", at=2.0)
    names = {"U0ALICE": "Alice"}
    cases = {
        ("Alice", "Dana"): "✋ Alice and Dana: 1 of 2, waiting for Dana",
        ("Alice", "Bob", "Dana"): "✋ Alice, Bob or Dana: 1 of 2, waiting for Bob or Dana",
    }
    for approvers, words in cases.items():
        record = approval(action, terms=Terms(quorum={0: 2}), votes={0: [alice]})
        (card,) = drawn(RunState.WAITING, [task], [GatedCall(record, 0, approvers, names)])["tasks"]
        assert (card["status"], task_words(card)) == ("pending", words)
    none_yet = approval(action, terms=Terms(quorum={0: 2}))
    (card,) = drawn(RunState.WAITING, [task], [GatedCall(none_yet, 0, ("Alice", "Dana"), {})])["tasks"]
    assert task_words(card) == "✋ Alice and Dana: 0 of 2, waiting for Alice or Dana"


def test_an_edit_is_matched_by_the_arguments_it_runs_with():
    action = email()
    edited = {"type": "edit", "edited_action": {"name": "send_email", "args": {**action.args, "to": "x@y.z"}}}
    record = approval(action, decided={0: Decided(decision=edited, user="U0ALICE", at=2.0)})
    ran = PlanTask(
        key="call_0",
        name="send_email",
        digest=args_digest(edited["edited_action"]["args"]),
        status=TaskStatus.COMPLETE,
        at=1.0,
    )
    (card,) = drawn(RunState.FINISHED, [ran], [GatedCall(record, 0, (), {"U0ALICE": "Alice"})])["tasks"]
    assert (card["status"], task_words(card)) == ("complete", "✏️ Edited by Alice")


def test_rejected_expired_withdrawn_and_answered_calls_are_errors_that_say_why():
    action = email()
    task = PlanTask(key="c", name="send_email", digest=args_digest(action.args), at=1.0)
    cases = {
        "❌ Rejected by Bob Not run": Decided(
            decision={"type": "reject", "message": "not today"}, user="U0BOB", at=2.0
        ),
        "⌛ Expired: no decision in time Not run": Decided(
            decision={"type": "reject"}, user="signoff", at=2.0, outcome=Outcome.EXPIRED
        ),
        "↩️ Withdrawn by the requester Not run": Decided(
            decision={"type": "reject"}, user="U0R", at=2.0, outcome=Outcome.WITHDRAWN
        ),
        # a Respond answers the agent instead: the tool never ran, so it is not done
        "💬 Answered by Bob instead of running Not run": Decided(
            decision={"type": "respond", "message": "use the draft"}, user="U0BOB", at=2.0
        ),
    }
    for words, decided in cases.items():
        record = approval(action, decided={0: decided}, status=ApprovalStatus.RESUMED)
        (card,) = drawn(RunState.FINISHED, [task], [GatedCall(record, 0, (), {"U0BOB": "Bob"})])["tasks"]
        assert (card["status"], task_words(card)) == ("error", words)


def test_a_subagents_gated_call_sits_under_the_subagent_before_and_after_it_runs():
    refund = BOOKKEEPER_REFUND
    parent = PlanTask(key="call_task", name="task", label="bookkeeper", status=TaskStatus.IN_PROGRESS, at=1.0)
    other = PlanTask(key="call_9", name="write_file", status=TaskStatus.COMPLETE, at=3.0)
    record = approval(refund, origin="subagent bookkeeper", created_at=2.0)
    before = drawn(RunState.WAITING, [parent, other], [GatedCall(record, 0)])["tasks"]
    assert [(c["title"], c["status"]) for c in before] == [
        ("Subagent bookkeeper", "in_progress"),
        ("Subagent bookkeeper › issue refund: order_id 7", "pending"),
        ("write file", "complete"),
    ]
    ran = refund_ran("call_task/call_0", "call_task", 4.0)
    approved = approval(
        refund,
        origin="subagent bookkeeper",
        decided={0: Decided(decision={"type": "approve"}, user="U0A", at=3)},
    )
    after = drawn(RunState.RUNNING, [parent, other, ran], [GatedCall(approved, 0)])["tasks"]
    assert [(c["task_id"], c["status"]) for c in after] == [
        ("call_task", "in_progress"),
        ("call_task/call_0", "complete"),
        ("call_9", "complete"),
    ]


def test_task_titles_show_hidden_characters_and_stay_within_slacks_bounds():
    action = ActionReview(
        name="send_email", args={"to": "a\u202egnp.exe" + "x" * 500}, allowed_decisions=("approve",)
    )
    name = EVIL + "\u200b" * 3 + "y" * 900  # (a decider's display name, as Slack gave it)
    record = approval(action, decided={0: Decided(decision={"type": "reject"}, user="U0B", at=1)})
    tasks = [PlanTask(key="k" * 300, name="send_email", digest=args_digest(action.args), at=1.0)]
    (card,) = drawn(RunState.FINISHED, tasks, [GatedCall(record, 0, (), {"U0B": name})])["tasks"]
    assert "\u202e" not in card["title"] and "⟨U+202E⟩" in card["title"]
    assert len(card["title"]) <= 120 and len(card["task_id"]) <= 64
    assert "⟨U+200B⟩" in task_words(card) and len(task_words(card)) < 500
    # rich_text shows a text element as written: only `user` / `usergroup` elements mention anyone
    kinds = {e["type"] for key in ("details", "output") for s in card[key]["elements"] for e in s["elements"]}
    assert kinds == {"text"}


def test_a_tasks_text_is_bounded_in_characters_whatever_their_encoding():
    name = "👩‍💻" * 400  # far longer as JSON escapes than as text
    action = ActionReview(name="send_email", args={"to": "a"}, allowed_decisions=("approve", "reject"))
    record = approval(action, decided={0: Decided(decision={"type": "reject"}, user="U0B", at=1)})
    (card,) = drawn(
        RunState.FINISHED, [], [GatedCall(record, 0, (), {"U0B": name}, "http://slack/archives/C1/p1")]
    )["tasks"]
    said = "".join(e["text"] for e in card["details"]["elements"][0]["elements"])
    assert (
        said.startswith("❌ Rejected by 👩") and len(said) <= 250
    )  # (and `drawn` checked it as Slack would)


def test_a_long_run_shows_its_latest_tasks_and_says_how_many_there_are():
    tasks = [PlanTask(key=f"c{n}", name="write_file", status=TaskStatus.COMPLETE, at=n) for n in range(45)]
    shown = drawn(RunState.FINISHED, tasks, [])
    assert shown["title"] == "Finished · 45 of 45 done (the last 30 shown)"
    assert [t["task_id"] for t in shown["tasks"]][0] == "c15"
    assert plan_block(RunState.RUNNING, [], []) is None  # before any call: the status line alone


def test_streamed_markdown_keeps_the_formatting_and_escapes_what_the_agent_wrote():
    answer = (
        f"**Done.** {EVIL}\n\nSee [https://acme.example](https://evil.example) and \\[x\\](https://e.example)"
    )
    markdown = to_markdown(answer)
    assert markdown.startswith("**Done.** &lt;!channel&gt; &lt;@U0BOSS&gt;")
    assert "https://acme.example (https://evil.example)" in markdown
    assert "\\[x\\](https://e.example)" in markdown  # not a link when drawn
    html = markdown_html(markdown)
    assert "<strong>Done.</strong>" in html and 'href="https://e.example"' not in html
    assert "<@U0BOSS>" not in markdown and Message.mentioned(markdown) == frozenset()


def test_an_answer_is_streamed_in_slices_that_join_to_the_whole():
    text = ("a line of the answer\n" * 100) + "z" * 1_500
    parts = pieces(text)
    assert "".join(parts) == text
    assert all(len(p) <= 600 for p in parts)
    assert parts[0].endswith("\n")
    assert pieces("") == []
    long = "x" * 30_000  # a long answer: larger slices, never more than twenty appends
    assert len(pieces(long)) == 20 and "".join(pieces(long)) == long


async def test_an_answer_too_long_for_one_message_is_not_streamed():
    run = Run(thread_id="t", graph="demo", channel="C1", thread_ts="1.0", requester="U0R")
    assert await Surfaces(None)._streamed(run, "1.0", "word " * 8_000, "answer:1") is False  # type: ignore[arg-type]


def test_a_call_asked_again_in_a_later_turn_is_matched_to_its_own_task():
    action = email()
    first = approval(
        action.model_copy(update={"tool_call_id": "c_1"}),
        approval_id="a1",
        created_at=10.0,
        status=ApprovalStatus.RESUMED,
        decided={0: Decided(decision={"type": "approve"}, user="U0ALICE", at=11)},
    )
    again = approval(action.model_copy(update={"tool_call_id": "c_5"}), approval_id="a2", created_at=20.0)
    digest = args_digest(action.args)
    tasks = [
        PlanTask(key="c_1", name="send_email", digest=digest, status=TaskStatus.COMPLETE, at=9.0),
        PlanTask(key="c_5", name="send_email", digest=digest, at=19.0),
    ]
    names = {"U0ALICE": "Alice"}
    cards = drawn(
        RunState.WAITING, tasks, [GatedCall(again, 0, ("Alice",), names), GatedCall(first, 0, (), names)]
    )["tasks"]
    assert [(c["task_id"], c["status"], task_words(c)) for c in cards] == [
        ("c_1", "complete", "✅ Approved by Alice"),
        ("c_5", "pending", "✋ Waiting for approval by Alice"),
    ]
    # without the call ids (a record of an earlier version): the call noted last before each ask
    bare = [
        GatedCall(g.approval.model_copy(update={"request": approval(action).request}), 0, g.approvers, names)
        for g in (GatedCall(again, 0, ("Alice",)), GatedCall(first, 0))
    ]
    assert [c["status"] for c in drawn(RunState.WAITING, tasks, bare)["tasks"]] == ["complete", "pending"]


def test_of_two_identical_subagent_calls_the_one_rejected_takes_no_task_the_one_approved_ran():
    refund = BOOKKEEPER_REFUND
    parent = PlanTask(
        key="t", name="task", label="bookkeeper", status=TaskStatus.COMPLETE, at=1.0, settled=True
    )
    ran = refund_ran("t/c", "t", 5.0)
    record = approval(
        refund,
        refund,
        origin="subagent bookkeeper",
        created_at=2.0,
        decided={
            0: Decided(decision={"type": "reject", "message": "no"}, user="U0B", at=3),
            1: Decided(decision={"type": "approve"}, user="U0A", at=3),
        },
    )
    cards = drawn(RunState.FINISHED, [parent, ran], [GatedCall(record, 0), GatedCall(record, 1)])["tasks"]
    assert [(c["task_id"], c["status"]) for c in cards] == [
        ("t", "complete"),
        ("a1:0", "error"),  # rejected: never ran
        ("t/c", "complete"),  # approved: the call that ran
    ]


def test_an_edited_calls_task_shows_the_arguments_it_ran_with():
    action = email()
    edited = {"type": "edit", "edited_action": {"name": "send_email", "args": {**action.args, "to": "x@y.z"}}}
    record = approval(action, decided={0: Decided(decision=edited, user="U0ALICE", at=2.0)})
    (card,) = drawn(RunState.RUNNING, [], [GatedCall(record, 0)])["tasks"]
    assert card["title"] == "send email: to x@y.z"


def test_each_action_takes_the_id_of_its_call_in_order():
    same = {"name": "send_email", "args": {"to": "a@b.c"}}
    messages = [
        AIMessage(
            "",
            tool_calls=[
                {**same, "id": "c1"},
                {"name": "delete", "args": {}, "id": "c2"},
                {**same, "id": "c3"},
            ],
        )
    ]
    action = ActionReview(name="send_email", args={"to": "a@b.c"}, allowed_decisions=("approve",))
    request = approval(action, action).request
    assert [a.tool_call_id for a in with_call_ids(request, messages).actions] == ["c1", "c3"]
    subagents = approval(ActionReview(name="issue_refund", args={}, allowed_decisions=("approve",))).request
    assert [a.tool_call_id for a in with_call_ids(subagents, messages).actions] == [None]


def test_what_the_messages_say_of_an_ended_call_outranks_a_late_callback():
    noted = PlanTask(key="c", name="x", status=TaskStatus.COMPLETE, at=1.0)
    settled = noted.model_copy(update={"status": TaskStatus.ERROR, "settled": True})
    assert noted.encoded()[0] == "2" and settled.encoded()[0] == "3"
    assert PlanTask(key="c", name="x", status=TaskStatus.IN_PROGRESS).encoded()[0] == "1"


async def test_use_a_word_reaches_the_agent_unless_the_word_names_a_graph():
    class Chat:
        def graphs_for(self, channel: str) -> list[str]:
            return ["demo"]

    assert await prompted(Chat(), "U0A", "DU0A", "1.0", "Use Python") is False  # type: ignore[arg-type]
    assert await prompted(Chat(), "U0A", "DU0A", "1.0", "Refund order 1 for 5") is False  # type: ignore[arg-type]


def test_calls_noted_together_keep_their_order_through_redis_at_any_moment():
    calls = [{"id": f"c{i}", "name": "delete", "args": {"n": i}} for i in range(3)]
    for moment in (1796684412.1234565, 1796684412.9999995, 1796684412.4999985, 10.0):
        kept = [
            PlanTask.decoded(t.encoded())
            for t in tasks_from_messages([AIMessage("", tool_calls=calls)], moment)
        ]
        assert len({t.at for t in kept}) == 3, moment  # (Redis hands fields back in no order)
        assert [t.key for t in sorted(kept, key=lambda t: t.at)] == ["c0", "c1", "c2"]
