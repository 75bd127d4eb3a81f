"""Approval record -> Block Kit. Pure functions, no I/O (what the card says in words is
`bot.views.card_words`).

A card is rebuilt from the record every time, so whatever order updates land
in, the last one shows the truth. Agent text is untrusted: everything that
came from the agent goes through `escape` before it reaches mrkdwn.

Slack's limits are respected by construction: at most 50 blocks and about
12,000 characters of text per message, 3,000 per section. Long arguments
become previews with their length and a "View full arguments" modal; large
batches get one compact block per action, for the first `SHOWN_ACTIONS`.
A batch larger than that says how many actions it has and which it shows,
and offers "Review all N actions" (a paged modal, `bot.views.modals.review_modal`,
where every action has its buttons); Approve all and Reject all… cover the
whole batch, whatever its size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    Option,
    OverflowMenuElement,
    PlainTextObject,
    SectionBlock,
)

from bot.views import elicitation, previews
from bot.views.card_words import (
    LABELS,
    approved_indices,
    approvers_line,
    card_text,
    counted,
    decided_line,
    edited_changes,
    footer_line,
    named,
    notification_text,
    require_progress,
    rules_line,
    settled,
    state_title,
    tally,
    when,
)
from bot.views.text import cut, escape
from bot.views.trust import trust_button
from core.protocol import ActionReview, RequestKind, preview_args
from core.records import Approval, ApprovalStatus, Outcome
from core.routes import Route

MAX_BLOCKS = 50
MAX_MESSAGE_TEXT = 11_000  # Slack refuses about 12,000 (msg_blocks_too_long); keep a margin
FULL_ACTIONS = 14  # header, context, progress, status + 3 blocks each stays under 50
# Compact rows a card shows: with header, context, approvers, the batch line, the "all" buttons,
# Withdraw and footer, 47 blocks. More actions are read and decided in the review modal.
SHOWN_ACTIONS = 40


def button_value(approval: Approval, index: int) -> str:
    return f"{approval.approval_id}:{index}"


def parse_value(value: str) -> tuple[str, int]:
    """`approval_id:index` from a button or modal; a forged value names no approval."""
    approval_id, _, index = str(value).rpartition(":")
    plain_number = index.isascii() and index.isdigit() and len(index) <= 4  # not "²", not 10**5000
    return (approval_id, int(index)) if plain_number else ("", 0)


@dataclass(frozen=True)
class CardView:
    """What the policy adds to a card: who may decide it, and a line for people per action."""

    approvers: tuple[str, ...] = ()
    summaries: dict[int, str] = field(default_factory=dict)  # mrkdwn, escaped
    names: dict[str, str] = field(default_factory=dict)  # user id -> display name, for the header
    barred: str | None = None  # the requester, when they may not decide their own request
    escalated_to: tuple[str, ...] = ()  # approvers added by an escalation
    # user groups among them that grant nobody (gone from Slack, unreadable): group -> why
    grant_nobody: dict[str, str] = field(default_factory=dict)
    rules: tuple[str, ...] = ()  # the names of the policy rules that applied (mrkdwn, escaped)
    ping: bool = True  # the policy pings approvers (`notify = "mention"`): else they are named
    trust: dict[int, Route] = field(default_factory=dict)  # actions offering "Approve & trust"
    headline: str = ""  # what the first call asked does, plain: "Refund 5,000 on order 1235"
    asking: str = ""  # the waiting card's top-level text (mrkdwn, escaped): who asks for what
    closed: str = ""  # why a call's rule was chosen closed (`card_words.closed_line`), or ""

    @property
    def unpinged(self) -> dict[str, str] | None:
        """The names to show people by when the card may not ping them (None: mention them)."""
        return None if self.ping else self.names


def approval_card(
    approval: Approval, destructive: tuple[str, ...] = (), view: CardView | None = None
) -> tuple[str, list[Block]]:
    """(top-level text, blocks) for the approval's Slack message."""
    view = view or CardView()
    actions = approval.request.actions
    blocks: list[Block] = [
        HeaderBlock(
            text=PlainTextObject(text=cut(state_title(approval, view.names, view.headline), 150), emoji=True)
        ),
        ContextBlock(elements=[MarkdownTextObject(text=_context_line(approval, view.names))]),
    ]
    people = view.approvers or view.escalated_to or view.rules or view.closed
    if people:
        line = approvers_line(view.approvers, view.escalated_to, view.grant_nobody, view.unpinged)
        line = " · ".join(part for part in (rules_line(view.rules), line, view.closed) if part)
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=cut(line, 3_000))]))
    by_policy = set(approval.by_policy())  # decided by the policy: said in the thread, not shown
    asked = [i for i in range(len(actions)) if i not in by_policy]
    if approval.request.kind is RequestKind.ELICITATION:
        blocks += elicitation.card_blocks(approval)
    elif not actions:
        blocks += _question_blocks(approval)
    elif len(asked) <= FULL_ACTIONS:
        budget = min(2_800, MAX_MESSAGE_TEXT // max(1, len(asked)) - 200)
        spare = MAX_BLOCKS - 8 - 3 * len(asked)  # blocks left for previews and edits' diffs
        for index in asked:
            if len(actions) > 1:
                blocks.append(DividerBlock())
            made = action_blocks(
                approval, index, actions[index], budget, destructive, view, max(0, min(2, spare))
            )
            spare -= previews.extras_in(made)
            blocks += made
    else:
        shown = asked[:SHOWN_ACTIONS]
        budget = min(1_000, (MAX_MESSAGE_TEXT - (700 if len(asked) > len(shown) else 0)) // len(shown) - 60)
        for index in shown:
            blocks.append(_compact_action(approval, index, actions[index], budget, destructive))
    top = 3 if people else 2
    together = _all_buttons(approval)
    if together:
        blocks.insert(top, together)
    if len(asked) > SHOWN_ACTIONS:
        blocks.insert(top, _batch_line(approval))
    footer = footer_line(approval)
    if footer:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=footer)]))
    blocks.append(_more_buttons(approval))
    if view.asking and not settled(approval):
        return view.asking, blocks[:MAX_BLOCKS]
    return escape(card_text(approval, notification_text(approval), view.headline, view.names)), blocks[
        :MAX_BLOCKS
    ]


def _batch_line(approval: Approval) -> SectionBlock:
    """A batch larger than a card: how many actions, which the card shows, and the way to all."""
    size = len(approval.request.actions)
    text = (
        f"*{size} actions*: {tally(approval)}. This card shows actions 1–{SHOWN_ACTIONS}; "
        f"*Review all {size}* to read and decide each one."
    )
    return SectionBlock(
        block_id="batch",
        text=MarkdownTextObject(text=cut(text, 690)),
        accessory=ButtonElement(
            text=f"Review all {size}", action_id="review", value=button_value(approval, 0), style="primary"
        ),
    )


def _context_line(approval: Approval, names: dict[str, str]) -> str:
    """Who asked, through which agent, when: the graph and thread ids are under Details."""
    parts = []
    if approval.requester:
        # a name, not a mention: the requester is not pinged by her own cards (she hears the outcome)
        parts.append(f"Asked by *{escape(names.get(approval.requester, approval.requester))}*")
    if approval.origin and approval.origin != approval.graph:
        parts.append(f"via *{escape(approval.origin)}*")
    parts.append(when(approval.created_at))
    unasked = [approval.decided[i].outcome for i in approval.by_policy()]
    auto, trusted = unasked.count(Outcome.AUTO), unasked.count(Outcome.TRUSTED)
    if auto:
        parts.append(f"🤖 {auto} more decided by policy (in the thread)")
    if trusted:
        parts.append(f"🤝 {trusted} more approved under trust (in the thread)")
    return " · ".join(parts)


def _question_blocks(approval: Approval) -> list[Block]:
    question = approval.request.question
    text = question if isinstance(question, str) else json.dumps(question, indent=1, ensure_ascii=False)
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=cut(escape(text), 2_900)))]
    decided = approval.decided.get(0)
    if decided:
        answer = decided.decision.get("answer")
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text=(
                            f"⌛ Expired {when(decided.at)}, so Signoff answered: {cut(escape(answer), 500)}"
                            if decided.outcome is Outcome.EXPIRED
                            else f"💬 Answered by <@{decided.user}> {when(decided.at)}: {cut(escape(answer), 500)}"
                        )
                    )
                ]
            )
        )
    elif approval.status is ApprovalStatus.PENDING:
        blocks.append(
            ActionsBlock(
                block_id="decide:0",
                elements=[
                    ButtonElement(
                        text="Answer", action_id="answer:0", value=button_value(approval, 0), style="primary"
                    )
                ],
            )
        )
    return blocks


def _action_text(
    action: ActionReview, number: int | None, budget: int, summary: str | None = None
) -> tuple[str, bool]:
    """Section mrkdwn for one action, within `budget` characters; and whether it was cut."""
    heading = f"*{number}. {escape(action.name)}*" if number else f"*{escape(action.name)}*"
    description = summary or _description(action)
    lines = [heading]
    if description:
        lines.append(escape(cut(description, min(300, budget // 4))))
    room = max(60, (budget - sum(len(line) for line in lines)) // max(1, len(action.args)) - 20)
    was_cut = len(description) > min(300, budget // 4)
    for preview in preview_args(action.args, limit=min(200, room)):
        text = escape(preview.text)  # several lines (an email's body): quoted, as they read
        shown = ("\n>" + "\n>".join(text.split("\n"))) if "\n" in text else text
        size = f" _({preview.length:,} chars)_" if preview.cut else ""
        lines.append(f"`{escape(preview.name)}`: {shown}{size}")
        was_cut = was_cut or preview.cut
    text = "\n".join(lines)
    if len(text) > budget:
        text, was_cut = cut(text, budget), True
    return text, was_cut


def _description(action: ActionReview) -> str:
    """The reviewer-facing description, minus the default one's repr of the args."""
    text = action.description.strip()
    if text.startswith("Tool execution requires approval"):  # the middleware's default: says nothing
        return ""
    if "\n\nTool: " in text and "\nArgs: " in text:
        return text.split("\n\n", 1)[0]
    return text


def action_blocks(
    approval: Approval,
    index: int,
    action: ActionReview,
    budget: int,
    destructive: tuple[str, ...],
    view: CardView,
    room: int = 2,
) -> list[Block]:
    """Action `index` as a card (or a review page) shows it; `room`: blocks it may add for what
    the call does and an edit's diff (`bot.views.previews`)."""
    number = index + 1 if len(approval.request.actions) > 1 else None
    summary = view.summaries.get(index)
    value = button_value(approval, index)
    shown, diff, said = previews.action_extras(approval, index, action, value, budget // 2, room)
    if shown or diff:
        budget -= budget // 2
    waiting = ""
    if index not in approval.decided and (approval.quorum(index) > 1 or approval.required(index)):
        waiting = "\n" + _whole_lines(quorum_lines(approval, index, action, view), min(600, budget // 2))
    said = f"\n{said}" if said else ""
    text, was_cut = _action_text(action, number, budget - len(waiting) - len(said), summary)
    text += waiting + said
    accessory = None
    if was_cut or (index in approval.proposals and index not in approval.decided):  # read it all
        accessory = ButtonElement(text="View full arguments", action_id=f"view_args:{index}", value=value)
    blocks: list[Block] = [
        SectionBlock(block_id=f"action:{index}", text=MarkdownTextObject(text=text), accessory=accessory),
        *shown,
    ]
    decided = approval.decided.get(index)
    if decided:
        line = decided_line(action, decided, approval.votes.get(index))
        blocks += [ContextBlock(elements=[MarkdownTextObject(text=line)]), *diff]
    elif approval.status is ApprovalStatus.PENDING:
        blocks += diff
        # The block id names the proposal the card shows: an Approve of older arguments is refused.
        # ":sure": its Approve is confirmed first (a destructive tool), after the clicker is checked
        revision = approval.revisions.get(index, 0)
        sure = ":sure" if action.name in destructive else ""
        blocks.append(
            ActionsBlock(
                block_id=f"decide:{index}:r{revision}{sure}",
                elements=_buttons(
                    approval, index, action, action.name in destructive, summary, view.trust.get(index)
                ),
            )
        )
        passkey = step_up_line(approval, index)
        if passkey:
            blocks.append(
                ContextBlock(block_id=f"step_up:{index}", elements=[MarkdownTextObject(text=passkey)])
            )
    return blocks


def step_up_line(approval: Approval, index: int) -> str | None:
    """Said before anyone clicks: this call's Approve (or its Approve & trust) needs a passkey."""
    terms = approval.terms
    if terms is not None and index in terms.step_up:
        return "🔑 Approve needs a passkey: Signoff sends you a private link to confirm with it"
    if terms is not None and index in terms.step_up_trust:
        return "🔑 Approve & trust needs a passkey: Signoff sends you a private link to confirm with it"
    return None


def _whole_lines(text: str, limit: int) -> str:
    """`text` cut to whole lines within `limit` (a cut mention would show as broken markup)."""
    kept: list[str] = []
    for line in text.split("\n"):
        if sum(len(k) + 1 for k in kept) + len(line) > limit:
            break
        kept.append(line)
    return "\n".join(kept) or cut(text.split("\n")[0], limit)


def quorum_lines(approval: Approval, index: int, action: ActionReview, view: CardView) -> str:
    """What an action with a quorum waits for: the edit proposed (if any), the approvals so far,
    and who may still approve (mrkdwn)."""
    lines = []
    proposal = approval.proposals.get(index)
    if proposal:
        edited = proposal.decision.get("edited_action", {}).get("args", {})
        lines.append(f"✏️ <@{proposal.user}> proposed new arguments; approving approves these:")
        lines += edited_changes(action.args, action.shown(edited)) or ["(the same arguments)"]
    votes = approval.votes.get(index, [])
    need = approval.quorum(index)
    who = ", ".join(f"<@{v.user}>" for v in votes) or "none yet"
    lines.append(f"👥 *{counted(approval, index)} of {need} approvals*: {who}")
    if approval.required(index):  # each entry met by distinct people
        lines.append(require_progress(approval, index, view.barred, view.unpinged))
        return "\n".join(lines)
    voted = {v.user for v in votes}
    still = [a for a in view.approvers + view.escalated_to if a not in voted and a != view.barred]
    if still:
        more = f" and {len(still) - 8} more" if len(still) > 8 else ""
        lines.append("May still approve: " + ", ".join(named(a, view.unpinged) for a in still[:8]) + more)
    else:
        not_them = ", ".join(  # by name: the requester is never mentioned on her cards
            f"*{escape(view.names.get(u, u))}*" for u in [*voted, *([view.barred] if view.barred else [])]
        )
        lines.append("Anyone else may approve" + (f" (not {not_them})" if not_them else ""))
    return "\n".join(lines)


def _more_buttons(approval: Approval) -> ActionsBlock:
    """Set apart at the bottom: Details (graph, thread and ids, in a modal) and, while the
    request waits, "Withdraw my request" (only the requester may: anyone else is told so
    before any dialog, and the requester confirms in a modal)."""
    value = button_value(approval, 0)
    elements = [ButtonElement(text="Details", action_id="details", value=value)]
    answerable = approval.request.actions or approval.request.kind is RequestKind.ELICITATION
    if approval.status is ApprovalStatus.PENDING and approval.requester and answerable:
        elements.append(ButtonElement(text="Withdraw my request", action_id="withdraw", value=value))
    if approval.status is ApprovalStatus.PENDING and approval.terms:  # its rule says reveal = true
        several = len(approval.request.actions) > 1
        for index in [i for i in approval.terms.reveal if i not in approval.decided][:3]:
            elements.append(
                ButtonElement(
                    text=f"Show secret values (#{index + 1})" if several else "Show secret values",
                    action_id=f"reveal:{index}",
                    value=button_value(approval, index),
                )
            )
    return ActionsBlock(block_id="more", elements=elements)


def withdraw_words(approval: Approval) -> str:
    """What withdrawing does, said in the requester's confirm dialog."""
    if approval.request.kind is RequestKind.ELICITATION:
        return f"The agent is told you withdrew it: its `{escape(approval.request.tool_name)}` call is cancelled."
    runs = approved_indices(approval)
    after = (
        f"the undecided actions are not run; {tally(approval, runs)}, approved already, still "
        + ("runs." if len(runs) == 1 else "run.")
        if runs
        else "nothing runs."
    )
    return f"The agent is told you withdrew it; {after}"


def _all_buttons(approval: Approval) -> ActionsBlock | None:
    """ "Approve all" and "Reject all…" for a batch whose undecided actions all allow them:
    one click (and one confirmation), each action still recorded on its own."""
    actions = approval.request.actions
    undecided = [a for i, a in enumerate(actions) if i not in approval.decided]
    if approval.status is not ApprovalStatus.PENDING or len(undecided) < 2:
        return None
    elements = []
    undecided_ids = [i for i in range(len(actions)) if i not in approval.decided]
    proposals = any(i in approval.proposals for i in undecided_ids)  # each is approved on its own
    if all("approve" in a.allowed_decisions for a in undecided) and not proposals:
        elements.append(  # confirmed in a modal once the clicker is checked (`approve_all_words`)
            ButtonElement(
                text="Approve all", action_id="approve_all", value=button_value(approval, 0), style="primary"
            )
        )
    if all("reject" in a.allowed_decisions for a in undecided):
        elements.append(
            ButtonElement(
                text="Reject all…", action_id="reject_all", value=button_value(approval, 0), style="danger"
            )
        )
    return ActionsBlock(block_id="decide:all", elements=elements) if elements else None


def _buttons(
    approval: Approval,
    index: int,
    action: ActionReview,
    destructive: bool,
    summary: str | None = None,
    trust: Route | None = None,
) -> list[ButtonElement]:
    """The action's decisions. No confirm dialog is Slack's here: Slack shows one to whoever
    taps, before Signoff hears of it, so a person who may not decide would confirm and then be
    refused. A destructive Approve (its block says `:sure`) and Approve & trust are confirmed
    in a modal Signoff opens after checking the clicker (`approve_words`, `bot.trust`)."""
    buttons = []
    for kind in action.allowed_decisions:
        style = {"approve": "primary", "reject": "danger"}.get(kind)
        buttons.append(
            ButtonElement(
                text=LABELS[kind],
                action_id=f"{kind}:{index}",
                value=button_value(approval, index),
                style=style,
            )
        )
        if kind == "approve" and trust is not None and index not in approval.proposals:
            buttons.append(trust_button(button_value(approval, index), index, trust))
    return buttons


def approve_words(approval: Approval, index: int, summary: str | None = None) -> tuple[str, str]:
    """(title, text) of the dialog confirming a destructive Approve: the action restated."""
    action = approval.request.actions[index]
    size = len(approval.request.actions)
    which = f"Action {index + 1} of {size}: " if size > 1 else ""
    what = summary or f"Run {escape(action.name)}"
    need = approval.quorum(index)
    after = (
        f"It runs once {need} approvers agree, and cannot be undone then."
        if need > 1
        else "It cannot be undone once it runs."
    )
    title = f"Approve action {index + 1}?" if size > 1 else ("Approve?" if need > 1 else "Run this action?")
    return title, cut(f"{which}{what}? {after}", 300)


def approve_all_words(approval: Approval, destructive: tuple[str, ...]) -> tuple[str, str]:
    """(title, text) of the dialog confirming Approve all."""
    actions = approval.request.actions
    undecided = [a for i, a in enumerate(actions) if i not in approval.decided]
    unseen = len([i for i in range(SHOWN_ACTIONS, len(actions)) if i not in approval.decided])
    beyond = f" {unseen} of them are not on this card: Review all shows every one." if unseen else ""
    risky = [a.name for a in undecided if a.name in destructive]
    text = (
        f"Each of the {len(undecided)} undecided actions runs"
        + (f", including {escape(', '.join(dict.fromkeys(risky)))}" if risky else "")
        + "."
        + beyond
    )
    return f"Approve all {len(undecided)}?", cut(text, 300)


def _compact_action(
    approval: Approval, index: int, action: ActionReview, budget: int, destructive: tuple[str, ...] = ()
) -> Block:
    """One block per action for large batches: the choices sit in an overflow menu."""
    text, _ = _action_text(action, index + 1, budget)
    if action.preview is not None:  # what the call does, in a line (Review all shows it whole)
        text = cut(text, max(60, budget - 260)) + "\n" + previews.compact_line(action.preview)
    decided = approval.decided.get(index)
    accessory = None
    if decided:
        text = cut(text, budget - 120) + "\n" + decided_line(action, decided, brief=True)
    elif approval.status is ApprovalStatus.PENDING:
        need = approval.quorum(index)
        if need > 1:  # short: the full arguments modal shows what an edit proposes
            votes = counted(approval, index)
            edited = " · ✏️ edited, approving approves the edit" if index in approval.proposals else ""
            text = cut(text, budget - 80) + f"\n👥 {votes} of {need} approvals{edited}"
        accessory = OverflowMenuElement(
            action_id=f"choose:{index}",
            options=[
                Option(text=LABELS[k], value=f"{k}:{button_value(approval, index)}")
                for k in action.allowed_decisions
            ]
            + [Option(text="View full arguments", value=f"view_args:{button_value(approval, index)}")],
        )
    # The block id names the proposal shown, as the full card's buttons do (and `:sure`: its
    # Approve is confirmed once the clicker is checked).
    sure = ":sure" if action.name in destructive else ""
    block_id = f"action:{index}:r{approval.revisions.get(index, 0)}{sure}"
    return SectionBlock(block_id=block_id, text=MarkdownTextObject(text=text), accessory=accessory)
