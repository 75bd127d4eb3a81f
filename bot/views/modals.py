"""Edit / reject / respond / answer modals, the review modal, and reading what comes back. Pure.

Every modal carries only `approval_id:index` in private_metadata; what it
edits is read back from Redis. Parsing returns either a decision or
`{block_id: message}` errors that Slack shows inline under the inputs.

The review modal shows a batch of any size, `REVIEW_PAGE` actions a page
(its private_metadata is `approval_id:<first action of the page>`): each
action as on a card, with its own buttons (the same action ids, so the same
listeners decide them), and ◀ / ▶ buttons that name the page they go to
(`page:<first action>`), so a double tap lands on one page. Clicks inside
it come back with the view, and the bot answers them in it: a decision
refreshes the page (views.update), a form (edit, reject, respond, the full
arguments) is pushed over it (views.push) and, once submitted, the page
under it shows the outcome.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.views.cards import CardView, action_blocks, button_value
from bot.views.text import cut, escape, hidden, visible
from core.logs import redact
from core.protocol import ActionReview, DecisionRefused, args_problems, check_decision
from core.records import Approval, ApprovalStatus
from core.secrets import MASK, pointer, restored

INPUT_MAX = 3_000  # plain_text_input max_length
VIEW_BLOCKS = 100
SECTION_MAX = 2_900
REVIEW_PAGE = 20  # actions a review page shows: 2 blocks each, a short scroll on a phone
REVIEW_TEXT = 1_000  # characters of one action's text there (a page stays far under Slack's 250 kB)


def _title(text: str) -> str:
    return cut(visible(text), 24)


def _input(
    block_id: str,
    label: str,
    *,
    initial: str | None = None,
    multiline: bool = False,
    optional: bool = False,
    hint: str | None = None,
    placeholder: str | None = None,
) -> InputBlock:
    return InputBlock(
        block_id=block_id,
        label=cut(visible(label), 2_000),
        optional=optional,
        hint=cut(hint, 2_000) if hint else None,
        element=PlainTextInputElement(
            action_id="value",
            initial_value=initial,
            multiline=multiline,
            max_length=INPUT_MAX,
            placeholder=cut(placeholder, 150) if placeholder else None,
        ),
    )


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)


def not_editable(value: Any) -> str | None:
    """Why an argument cannot be edited in a text input (kept as is), or None.

    Too long for the input, or holding characters the input would hide (bidi
    overrides, zero-width or control characters) or credentials in a URL that
    Slack is never shown: the approver could not see what they would send.
    """
    text = as_text(value)
    if len(text) > INPUT_MAX:
        return f"{len(text):,} characters: too long to edit here"
    if hidden(text):
        return "it holds hidden characters (shown as ⟨U+…⟩)"
    if redact(text) != text:
        return "it holds a credential"
    return None


def required_args(action: ActionReview) -> set[str]:
    """The arguments the tool cannot run without: its schema's `required`, else every one it was called with."""
    if action.args_schema is not None:
        return set(action.args_schema.get("required", []))
    return set(action.args)


def edit_modal(approval: Approval, index: int) -> View:
    action = approval.request.actions[index]
    required = required_args(action)
    blocks: list[Block] = [
        ContextBlock(
            elements=[
                MarkdownTextObject(
                    text="Change what the tool runs with. Text arguments are taken as typed; others as JSON. "
                    "Unchanged arguments are kept; an optional one left blank is left out."
                )
            ]
        )
    ]
    real = action.real_args
    for name, value in action.args.items():
        reason = not_editable(value)
        if reason:
            blocks.append(
                SectionBlock(text=MarkdownTextObject(text=f"`{escape(name)}`: {reason}, kept as is."))
            )
            continue
        text = as_text(value)
        kind = "text" if isinstance(real.get(name), str) else "JSON"
        blocks.append(
            _input(
                name,
                f"{name} ({kind})",
                initial=text,
                multiline=len(text) > 60 or "\n" in text,
                optional=name not in required,
                hint=_secret_hint(action, name),
            )
        )
    return View(
        type="modal",
        callback_id="edit",
        title=_title(f"Edit {action.name}"),
        submit="Run edited",
        close="Cancel",
        private_metadata=button_value(approval, index),
        blocks=blocks[:VIEW_BLOCKS],
    )


def _secret_hint(action: ActionReview, name: str) -> str | None:
    """What a field holding a secret says: it is shown masked, and left so, the original is sent."""
    mine = [at for at in action.hidden if at == pointer((name,)) or at.startswith(pointer((name,)) + "/")]
    if not mine:
        return None
    if mine == [pointer((name,))]:
        return "A secret, shown masked: left as it is, the original is sent; type a new value to replace it."
    return "Holds secrets, shown masked: left as shown, the originals are kept."


def reject_modal(approval: Approval, index: int) -> View:
    action = approval.request.actions[index]
    return _reason_modal(
        approval,
        index,
        "reject",
        f"Reject {action.name}",
        "Reject",
        f"*{escape(action.name)}* will not run.\n"
        "• *No reason*: the agent is told not to retry this call.\n"
        "• *With a reason*: the agent reads it, adjusts and may try again.",
        "e.g. Use the staging bucket instead",
    )


def reject_all_modal(approval: Approval, index: int) -> View:
    """One reason (or none) for every undecided action of a batch."""
    names = [a.name for i, a in enumerate(approval.request.actions) if i not in approval.decided]
    return _reason_modal(
        approval,
        index,
        "reject_all",
        f"Reject all {len(names)}",
        "Reject all",
        cut(f"None of these will run: {escape(', '.join(names))}. One reason goes to each.", 2_900),
        "e.g. Not this quarter",
    )


def _reason_modal(
    approval: Approval, index: int, callback: str, title: str, submit: str, text: str, placeholder: str
) -> View:
    return View(
        type="modal",
        callback_id=callback,
        title=_title(title),
        submit=submit,
        close="Cancel",
        private_metadata=button_value(approval, index),
        blocks=[
            SectionBlock(text=MarkdownTextObject(text=text)),
            _input("reason", "Reason", multiline=True, optional=True, placeholder=placeholder),
        ],
    )


def respond_modal(approval: Approval, index: int) -> View:
    action = approval.request.actions[index]
    return View(
        type="modal",
        callback_id="respond",
        title=_title(f"Respond: {action.name}"),
        submit="Respond",
        close="Cancel",
        private_metadata=button_value(approval, index),
        blocks=[
            SectionBlock(
                text=MarkdownTextObject(
                    text=(
                        f"*{escape(action.name)}* will not run. Your text goes back to the agent "
                        "as the tool's result, word for word."
                    )
                )
            ),
            _input("message", "Message to the agent", multiline=True),
        ],
    )


def answer_modal(approval: Approval) -> View:
    question = approval.request.question
    shown = question if isinstance(question, str) else json.dumps(question, indent=1, ensure_ascii=False)
    hint = "Answer as text, or as JSON where the agent expects structured data."
    return View(
        type="modal",
        callback_id="answer",
        title="Answer the agent",
        submit="Send",
        close="Cancel",
        private_metadata=button_value(approval, 0),
        blocks=[
            SectionBlock(text=MarkdownTextObject(text=cut(escape(shown), SECTION_MAX))),
            _input("answer", "Your answer", multiline=True, hint=hint),
        ],
    )


def args_modal(approval: Approval, index: int) -> View:
    """Every argument in full (read only), in as many sections as it takes."""
    action = approval.request.actions[index]
    blocks: list[Block] = []
    if action.description:
        blocks += _chunks(f"*Description*\n{escape(action.description)}")
    proposal = approval.proposals.get(index)
    shown = action.args
    if proposal:  # approving approves the edit waiting for its quorum: that is what to read
        shown = action.shown(proposal.decision.get("edited_action", {}).get("args", action.args))
        blocks += _chunks(f"*Edit proposed by <@{proposal.user}>*: approving runs these arguments.")
    for name, value in shown.items():
        text = as_text(value)
        blocks += _chunks(f"*{escape(name)}* ({len(text):,} chars)\n```{escape(text)}```")
    if len(blocks) > VIEW_BLOCKS:
        blocks = blocks[: VIEW_BLOCKS - 1] + [
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text="The rest is too long to show in Slack; the audit log has it in full."
                    )
                ]
            )
        ]
    return View(
        type="modal",
        callback_id="view_args",
        title=_title(f"{action.name} arguments"),
        close="Close",
        blocks=blocks or [SectionBlock(text="No arguments.")],
    )


def secrets_modal(approval: Approval, index: int) -> View:
    """An action's secret values as the tool gets them, for the approver who asked (the rule
    says `reveal = true`): escaped, hidden characters made visible, each where it sits."""
    action = approval.request.actions[index]
    blocks: list[Block] = [
        ContextBlock(
            elements=[
                MarkdownTextObject(
                    text="Only you see this. Opening it is in the audit (who and when); "
                    "the card and the thread still show the values masked."
                )
            ]
        )
    ]
    for at, value in action.hidden.items():
        text = visible(as_text(value))
        blocks += _chunks(f"*{escape(at.lstrip('/').replace('/', '.'))}*\n```{escape(text)}```")
    return View(
        type="modal",
        callback_id="secrets",
        title=_title(f"{action.name} secrets"),
        close="Close",
        blocks=blocks[:VIEW_BLOCKS],
    )


def review_start(index: int, size: int) -> int:
    """The first action of the review page that shows action `index` (clamped to the batch)."""
    return (min(max(0, index), max(0, size - 1)) // REVIEW_PAGE) * REVIEW_PAGE


def first_undecided(approval: Approval) -> int | None:
    return next((i for i in range(len(approval.request.actions)) if i not in approval.decided), None)


CLOSED = {
    ApprovalStatus.RESUMING: "all decided: resuming the agent",
    ApprovalStatus.RESUMED: "all decided, the agent resumed",
    ApprovalStatus.FAILED: "the agent could not take the decisions",
    ApprovalStatus.EXPIRED: "closed unanswered",
}


def review_modal(
    approval: Approval,
    start: int,
    destructive: tuple[str, ...] = (),
    view: CardView | None = None,
    notice: str | None = None,
) -> View:
    """One page of every action of a batch, each with its choices; `notice` (mrkdwn, safe) says
    what became of the person's last click when it was not taken."""
    actions = approval.request.actions
    size = len(actions)
    start = review_start(start, size)
    end = min(size, start + REVIEW_PAGE)
    decided = len(approval.decided)
    where = f"*Actions {start + 1}–{end} of {size}* · {decided} decided, {size - decided} waiting"
    if approval.status is not ApprovalStatus.PENDING:
        where += f" · {CLOSED.get(approval.status, 'closed')}"
    blocks: list[Block] = [ContextBlock(elements=[MarkdownTextObject(text=where)])]
    if notice:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=cut(notice, SECTION_MAX))]))
    for index in range(start, end):
        blocks += action_blocks(approval, index, actions[index], REVIEW_TEXT, destructive, view or CardView())
    pages = _page_buttons(approval, start, end)
    if pages:
        blocks.append(ActionsBlock(block_id="pages", elements=pages))
    return View(
        type="modal",
        callback_id="review",
        title=_title(f"Review {size} actions"),
        close="Done",
        private_metadata=button_value(approval, start),
        blocks=blocks or [SectionBlock(text="No actions.")],
    )


def _page_buttons(approval: Approval, start: int, end: int) -> list[ButtonElement]:
    """◀ the page before, the page after ▶, and a jump to the first action still waiting."""
    size = len(approval.request.actions)

    def to(first: int, label: str, style: str | None = None) -> ButtonElement:
        return ButtonElement(
            text=label, action_id=f"page:{first}", value=button_value(approval, first), style=style
        )

    buttons = []
    if start > 0:
        buttons.append(to(start - REVIEW_PAGE, f"◀ {start - REVIEW_PAGE + 1}–{start}"))
    if end < size:
        buttons.append(to(end, f"{end + 1}–{min(size, end + REVIEW_PAGE)} ▶"))
    waiting = first_undecided(approval)
    if approval.status is ApprovalStatus.PENDING and waiting is not None:
        jump = review_start(waiting, size)
        if jump not in (start, start - REVIEW_PAGE, end):
            buttons.append(to(jump, f"First waiting: #{waiting + 1}", "primary"))
    return buttons


def _chunks(text: str) -> list[Block]:
    return [
        SectionBlock(text=MarkdownTextObject(text=text[i : i + SECTION_MAX]))
        for i in range(0, len(text), SECTION_MAX)
    ]


def _holds_a_mask(value: Any, action: ActionReview) -> bool:
    """Whether an edited value still holds a secret's mask: moved, or with text typed around it,
    it was not put back (the tool would get "••••")."""
    return bool(action.hidden) and MASK in json.dumps(value, ensure_ascii=False)


def parse_edit(action: ActionReview, values: dict[str, str | None]) -> tuple[dict[str, Any], dict[str, str]]:
    """(the edit decision, inline errors). Arguments not in the form are kept.

    A required argument left blank is an error on its field (Slack checks this in
    its clients, but a submission is checked here whatever sent it); an optional
    one left blank is left out, so the tool uses its default.
    """
    args: dict[str, Any] = dict(action.args)
    errors: dict[str, str] = {}
    required = required_args(action)
    real = action.real_args
    for name, original in action.args.items():
        if name not in values:
            continue
        typed = values[name]
        if not (typed or "").strip():
            if name in required:
                errors[name] = "Required: the tool cannot run without it."
            else:
                del args[name]
            continue
        if isinstance(real.get(name, original), str) or typed == original:
            args[name] = typed  # (a secret left masked: the original, below)
            continue
        try:
            args[name] = json.loads(typed or "")
        except ValueError:
            errors[name] = "Not valid JSON (text needs quotes, numbers don't)."
    args = restored(args, action.hidden, action.args)  # secrets left as shown: the originals
    for name in [n for n in values if n in args and n not in errors and _holds_a_mask(args[n], action)]:
        errors[name] = (
            "A secret here is shown masked (••••): leave it exactly as it is, where it is, "
            "or type the whole value."
        )
    if not errors:
        for problem in args_problems(action, args):
            name, _, message = problem.partition(": ")
            block = name.split(".")[0] if name.split(".")[0] in values else next(iter(values), "")
            errors.setdefault(block, cut(message or problem, 150))
    decision = {"type": "edit", "edited_action": {"name": action.name, "args": args}}
    if not errors:
        try:
            check_decision(action, decision)
        except DecisionRefused as refused:
            errors[next(iter(values), "")] = cut(str(refused), 150)
    return decision, errors


def parse_reject(values: dict[str, str | None]) -> dict[str, Any]:
    reason = (values.get("reason") or "").strip()
    return {"type": "reject", "message": reason} if reason else {"type": "reject"}


def parse_respond(values: dict[str, str | None]) -> tuple[dict[str, Any], dict[str, str]]:
    message = (values.get("message") or "").strip()
    if not message:
        return {}, {"message": "Write what the agent should get as the tool's result."}
    return {"type": "respond", "message": message}, {}


def parse_answer(values: dict[str, str | None], expects_json: bool) -> Any:
    text = (values.get("answer") or "").strip()
    if expects_json:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def sure_modal(approval: Approval, index: int, what: str, title: str, text: str, confirm: str) -> View:
    """The confirmation of `what` (approve, trust, approve_all, withdraw), opened by Signoff once
    the clicker may do it: Slack's own confirm dialog shows to anyone who taps, before a check."""
    return View(
        type="modal",
        callback_id=f"sure:{what}",
        title=_title(title),
        submit=cut(confirm, 24),
        close="Back",
        private_metadata=button_value(approval, index),
        blocks=[SectionBlock(text=MarkdownTextObject(text=cut(text, SECTION_MAX)))],
    )


def details_modal(approval: Approval, rules: tuple[str, ...] = ()) -> View:
    """What the card face leaves out: which graph and thread, the ids to quote to an operator."""
    lines = [
        f"*Graph*: {escape(approval.graph)}",
        *(
            [f"*Asked by the subagent*: {escape(approval.origin)}"]
            if approval.origin != approval.graph
            else []
        ),
        f"*Thread*: `{escape(approval.thread_id)}`",
        f"*Approval*: `{escape(approval.approval_id)}`",
        f"*Interrupt*: `{escape(approval.interrupt_id)}`",
        *([f"*Rules*: {', '.join(rules)}"] if rules else []),
    ]
    return View(
        type="modal",
        callback_id="details",
        title="Details",
        close="Close",
        blocks=_chunks("\n".join(lines)),
    )
