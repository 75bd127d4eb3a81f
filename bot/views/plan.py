"""The run's plan, drawn: Slack's `plan` block of `task_card`s in the run's status message. Pure.

One task per tool call the runner noted (`core.plan`); each approval's actions are laid over
the calls they gate (same tool, same arguments), so a gated call's task says it waits for
approval, by whom, with a link to its card, and then what was decided. A gated call the
runner has not seen (a subagent's, before it runs) is a task of its own under its subagent.

Everything here is plain text Slack shows as written (task titles, rich_text): agent-written
text goes through `visible` and is bounded, so nothing hidden reaches an approver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    PlanBlock,
    RichTextBlock,
    RichTextElementParts,
    RichTextSectionElement,
    TaskCardBlock,
)

from bot.views.text import cut, visible
from core.plan import RANK, PlanTask, TaskStatus, args_digest, nth
from core.protocol import ActionReview
from core.records import Approval, ApprovalStatus, Decided, Outcome, RunState

MOST_SHOWN = 30  # tasks drawn: the latest, the plan's title says how many there are
TITLE_MOST = 120  # a task's title (Slack cuts titles near 256)
SKEW_S = 5.0  # the runner's clock against Redis's, when a task noted is compared with an approval
TEXT_MOST = 200  # a task's details or output (Slack cuts them near 256)

PLAN_TITLES = {
    RunState.RUNNING: "Working on it",
    RunState.WAITING: "Waiting for approval",
    RunState.FINISHED: "Finished",
    RunState.FAILED: "Stopped with an error",
}


@dataclass(frozen=True)
class GatedCall:
    """One action of an approval, with what the bot knows of its people and its card."""

    approval: Approval
    index: int
    approvers: tuple[str, ...] = ()  # display names of who may decide it
    names: dict[str, str] | None = None  # user id -> display name (its deciders)
    link: str | None = None  # the card's permalink

    @property
    def action(self) -> ActionReview:
        return self.approval.request.actions[self.index]

    @property
    def decided(self) -> Decided | None:
        return self.approval.decided.get(self.index)

    def digests(self) -> set[str]:
        """The arguments asked, and those an edit runs instead."""
        found = {args_digest(self.action.real_args)}  # (as the runner noted the call: real values)
        decided = self.decided
        if decided is not None and decided.decision.get("type") == "edit":
            found.add(args_digest(decided.decision.get("edited_action", {}).get("args")))
        return found


def words(name: str) -> str:
    return name.replace("_", " ").strip() or "a tool"


def action_title(action: ActionReview, decided: Decided | None = None) -> str:
    """A gated call, as a phone would say it: `send email: to finance@acme.com` (an edit: with
    the arguments it runs with)."""
    args = action.args
    if decided is not None and decided.decision.get("type") == "edit":
        args = action.shown(decided.decision.get("edited_action", {}).get("args") or args)
    first = next((f"{k} {v}" for k, v in args.items() if isinstance(v, str | int | float)), "")
    return words(action.name) + (f": {first}" if first else "")


def task_title(task: PlanTask) -> str:
    if task.label:
        return f"Subagent {task.label}"
    return words(task.name)


def _rich(text: str, link: str | None = None) -> RichTextBlock:
    """Plain text as Slack's rich_text shows it (a text element is never parsed for mentions)."""
    elements: list[Any] = [RichTextElementParts.Text(text=cut(visible(text), TEXT_MOST))]
    if link:
        elements.append(RichTextElementParts.Text(text=" · "))
        elements.append(RichTextElementParts.Link(url=link, text="open the card"))
    return RichTextBlock(elements=[RichTextSectionElement(elements=elements)])


def _who(decided: Decided, names: dict[str, str] | None) -> str:
    return (names or {}).get(decided.user) or decided.user


def spoken_list(names: list[str], joint: str) -> str:
    """`Alice`, `Alice and Dana`, `Alice, Bob or Dana`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {joint} {names[-1]}"


def waiting_words(gate: GatedCall) -> str:
    """Who a gated call waits for: any one of its approvers, or, for a quorum, how many of them
    have approved and who is still to (`Alice and Dana: 1 of 2, waiting for Dana`)."""
    approvers = list(gate.approvers)
    terms = gate.approval.terms
    needed = terms.quorum.get(gate.index, 1) if terms else 1
    if not approvers:
        return "✋ Waiting for approval by an approver"
    if needed < 2:
        return f"✋ Waiting for approval by {spoken_list(approvers, 'or')}"
    voted = [_who(v, gate.names) for v in gate.approval.votes.get(gate.index, [])]
    still = [a for a in approvers if a not in voted] or approvers
    everyone = spoken_list(approvers, "and" if len(approvers) <= needed else "or")
    return f"✋ {everyone}: {len(voted)} of {needed}, waiting for {spoken_list(still, 'or')}"


def gate_words(gate: GatedCall, status: TaskStatus) -> tuple[TaskStatus, str, str]:
    """(status, details, output) of a gated call: waiting, decided, or what became of it."""
    decided = gate.decided
    if decided is None:
        if gate.approval.status is ApprovalStatus.PENDING:
            return TaskStatus.PENDING, waiting_words(gate), ""
        return status, "Closed without a decision", ""
    if decided.outcome is Outcome.EXPIRED:
        return TaskStatus.ERROR, "⌛ Expired: no decision in time", "Not run"
    if decided.outcome is Outcome.WITHDRAWN:
        return TaskStatus.ERROR, "↩️ Withdrawn by the requester", "Not run"
    kind = decided.decision.get("type")
    if decided.outcome is Outcome.AUTO:
        by = f"by policy ({decided.rule or 'a rule'})"
    elif decided.outcome is Outcome.TRUSTED:
        by = "under trust"
    else:
        by = f"by {_who(decided, gate.names)}"
    if kind == "reject":  # (its reason: on the card and in the outcome, not a third time here)
        return TaskStatus.ERROR, f"❌ Rejected {by}", "Not run"
    if kind == "respond":  # the tool never ran: not done, whatever the agent does with the answer
        return TaskStatus.ERROR, f"💬 Answered {by} instead of running", "Not run"
    verb = "✏️ Edited" if kind == "edit" else "✅ Approved"
    after = max(status, TaskStatus.IN_PROGRESS, key=RANK.__getitem__)  # approved: it runs next
    return after, f"{verb} {by}", ""


def plan_block(state: RunState | None, tasks: list[PlanTask], gates: list[GatedCall]) -> PlanBlock | None:
    """The run's plan, or None before its first call."""
    cards = _cards(tasks, gates, state)
    if not cards:
        return None
    title = PLAN_TITLES.get(state or RunState.RUNNING, "Working on it")
    done = sum(1 for c in cards if c.status == "complete")
    stopped = sum(1 for c in cards if c.status == "error")  # failed, or not run (rejected, expired)
    title += f" · {done} of {len(cards)} done" + (f", {stopped} stopped" if stopped else "")
    if len(cards) > MOST_SHOWN:
        title += f" (the last {MOST_SHOWN} shown)"
    return PlanBlock(title=title, tasks=cards[-MOST_SHOWN:])


def _cards(tasks: list[PlanTask], gates: list[GatedCall], state: RunState | None) -> list[TaskCardBlock]:
    by_key = {task.key: task for task in tasks}
    order = list(tasks)
    laid: dict[str, GatedCall] = {}
    unseen: set[str] = set()  # gated calls the runner never noted (an Agent Server's subagent)
    # oldest first; in one approval, the calls that run first (they take the calls that ran)
    for gate in sorted(gates, key=lambda g: (g.approval.created_at, not _ran(g), g.index)):
        match = _match(gate, order, by_key, laid)
        if match is None:  # not seen by the runner yet (a subagent's call): a task of its own
            origin = gate.approval.origin.removeprefix("subagent ")
            parent = next((t for t in reversed(order) if t.label and t.label == origin), None)
            match = PlanTask(
                key=f"{gate.approval.approval_id}:{gate.index}",
                name=gate.action.name,
                group=parent.key if parent else "",
                at=nth(gate.approval.created_at, gate.index),
            )
            order.append(match)
            by_key[match.key] = match
            unseen.add(match.key)
        laid[match.key] = gate
    order.sort(key=lambda task: task.at)
    cards = []
    for task in _grouped(order):
        over = laid.get(task.key)
        status, details, output = task.status, "", ""
        title = task_title(task)
        parent = by_key.get(task.group)
        if over is not None:
            status, details, output = gate_words(over, task.status)
            title = action_title(over.action, over.decided)
            if task.key in unseen and status is TaskStatus.IN_PROGRESS:  # approved, never noted:
                ended = parent.status if parent is not None else TaskStatus.PENDING  # it ended with
                if RANK[ended] == RANK[TaskStatus.COMPLETE]:  # its subagent, or with the run
                    status = ended
                elif state is RunState.FINISHED:
                    status = TaskStatus.COMPLETE
        if parent is not None:
            title = f"{task_title(parent)} › {title}"
        cards.append(
            TaskCardBlock(
                task_id=task.key[:64],
                title=cut(visible(title), TITLE_MOST),
                status=status.value,
                details=_rich(details, over.link if over else None) if details else None,
                output=_rich(output) if output else None,
            )
        )
    return cards


def _ran(gate: GatedCall) -> bool:
    """Whether the gated call runs: approved, edited, or still waiting for its decision."""
    decided = gate.decided
    if decided is None:
        return True
    if decided.outcome not in (None, Outcome.AUTO, Outcome.TRUSTED):  # expired, withdrawn
        return False
    return decided.decision.get("type") in ("approve", "edit")


def _match(
    gate: GatedCall, order: list[PlanTask], by_key: dict[str, PlanTask], laid: dict[str, GatedCall]
) -> PlanTask | None:
    """The task of a gated call: the call it names (`core.plan.with_call_ids`); else one of the
    same tool and arguments: for a call that runs, the one noted last before it was asked, or
    the first noted after; a call that did not run only takes one that never started or failed."""
    call_id = gate.action.tool_call_id
    if call_id and (task := by_key.get(call_id)) is not None and task.key not in laid:
        return task
    free = [
        t for t in order if t.key not in laid and t.name == gate.action.name and t.digest in gate.digests()
    ]
    if not _ran(gate):
        return next((t for t in free if t.status in (TaskStatus.PENDING, TaskStatus.ERROR)), None)
    before = [t for t in free if t.at <= gate.approval.created_at + SKEW_S]
    return before[-1] if before else free[0] if free else None


def _grouped(order: list[PlanTask]) -> list[PlanTask]:
    """A subagent's calls right after the call that runs it."""
    children: dict[str, list[PlanTask]] = {}
    for task in order:
        if task.group:
            children.setdefault(task.group, []).append(task)
    keys = {task.key for task in order}
    out: list[PlanTask] = []
    for task in order:
        if task.group and task.group in keys:
            continue
        out.append(task)
        out.extend(children.get(task.key, []))
    return out
