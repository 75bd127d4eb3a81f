"""What a card says in words: its header, its top-level text (the phone notification), who may
decide, each decision, what an edit changed, the footer, a withdrawal's line. Pure functions.

Agent text is untrusted: what came from the agent is escaped before it reaches mrkdwn
(`bot.views.text`); plain_text is never parsed.
"""

from __future__ import annotations

import json
from typing import Any

from bot.views import elicitation
from bot.views.text import cut, escape, visible
from core.approval_requirements import matched
from core.policy_file import spoken
from core.protocol import ActionReview, RequestKind
from core.records import UNASKED, Approval, ApprovalStatus, Decided, Outcome

LABELS = {"approve": "Approve", "edit": "Edit", "reject": "Reject", "respond": "Respond"}

DONE = {
    "approve": ("✅", "Approved"),
    "edit": ("✏️", "Edited"),
    "reject": ("❌", "Rejected"),
    "respond": ("💬", "Responded"),
}


def when(timestamp: float) -> str:
    """A Slack date token: shown in each reader's own time zone."""
    return f"<!date^{int(timestamp)}^{{date_short_pretty}} {{time}}|{int(timestamp)}>"


def until(timestamp: float) -> str:
    """A time of day, in each reader's own time zone (a grant's end)."""
    return f"<!date^{int(timestamp)}^{{time}}|{int(timestamp)}>"


def trusted_words(decided: Decided) -> str:
    """ "Approved under @Alice's trust (Deploys), until 15:40": an approval a grant made."""
    grant = decided.grant or {}
    by = str(grant.get("by") or "")
    whose = f"<@{by}>'s" if by.startswith(("U", "W")) and by.isalnum() else "a"
    rule = f" ({escape(decided.rule)})" if decided.rule else ""
    end = grant.get("until")
    return f"Approved under {whose} trust{rule}" + (f", until {until(int(end) / 1000)}" if end else "")


def asked_actions(approval: Approval) -> list[ActionReview]:
    """The actions people are asked: all but those the policy decided (`decide`)."""
    by_policy = approval.by_policy()
    return [a for i, a in enumerate(approval.request.actions) if i not in by_policy]


def title(approval: Approval, headline: str = "") -> str:
    """A waiting card's header: what the call does ("Refund 5,000 on order 1235"), not its tool."""
    actions = asked_actions(approval)
    if approval.request.kind is RequestKind.ELICITATION:
        return f"{visible(approval.request.tool_name).replace('_', ' ').capitalize()} asks"
    if not actions:
        return "The agent has a question"
    if len(actions) == 1:
        return headline or visible(actions[0].name).replace("_", " ").capitalize()
    return f"{len(actions)} actions need review"


ELICITED = {"accept": "Answered", "decline": "Declined", "cancel": "Call cancelled"}
HEADER_VERBS = {
    "approve": "Approved",
    "edit": "Edited and approved",
    "reject": "Rejected",
    "respond": "Answered instead",
}


def settled(approval: Approval) -> bool:
    """Whether the approval has its outcome: every action decided, or closed unanswered."""
    return len(approval.decided) >= approval.size or approval.status is ApprovalStatus.EXPIRED


def state_title(approval: Approval, names: dict[str, str] | None = None, headline: str = "") -> str:
    """The header: what state the approval is in, in words ("Approved by Alice")."""
    names = names or {}
    if len(approval.decided) < approval.size:
        if approval.status is ApprovalStatus.EXPIRED:
            return "Closed unanswered: nothing runs"
        return title(approval, headline)
    outcomes = {d.outcome for d in approval.decided.values()}
    if outcomes == {Outcome.EXPIRED}:
        return "Expired: no decision in time"
    if Outcome.WITHDRAWN in outcomes:
        who = next(d.user for d in approval.decided.values() if d.outcome is Outcome.WITHDRAWN)
        withdrawn = f"Withdrawn by {visible(names.get(who, who))}" if who in names else "Withdrawn"
        runs = len(approved_indices(approval))
        if outcomes == {Outcome.WITHDRAWN}:
            return withdrawn
        if not runs:
            return f"{withdrawn}: nothing runs"
        return (
            f"{withdrawn}: {runs} approved before still run{'s' if runs == 1 else ''}, "
            f"{approval.size - runs} not run"
        )
    if approval.request.kind is RequestKind.ELICITATION:
        first = approval.decided[0]
        verb = ELICITED.get(str(first.decision.get("action")), "Answered")
        return f"{verb} by {visible(names.get(first.user, first.user))}"
    if not approval.request.actions:
        first = approval.decided[0]
        return f"Answered by {visible(names.get(first.user, first.user))}"
    if approval.size == 1:
        first = approval.decided[0]
        verb = HEADER_VERBS.get(str(first.decision.get("type")), "Decided")
        voters = approval.votes.get(0, []) if first.decision.get("type") in ("approve", "edit") else []
        who = ", ".join(visible(names.get(v.user, v.user)) for v in voters) or visible(
            names.get(first.user, first.user)
        )
        return f"{verb} by {who}"
    counts: dict[str, int] = {}
    for decided in approval.decided.values():
        word = (
            decided.outcome.value
            if decided.outcome and decided.outcome not in UNASKED
            else DONE.get(str(decided.decision.get("type")), ("", "decided"))[1].lower()
        ) + {Outcome.AUTO: " by policy", Outcome.TRUSTED: " under trust"}.get(
            decided.outcome or Outcome.EXPIRED, ""
        )
        counts[word] = counts.get(word, 0) + 1
    return "Reviewed: " + ", ".join(f"{n} {word}" for word, n in counts.items())


def notification_text(approval: Approval) -> str:
    """The top-level text: the push notification on phones, a real sentence."""
    actions = asked_actions(approval)
    request = approval.request
    if request.kind is RequestKind.ELICITATION:
        return f"{cut(request.tool_name, 60)} asks: {cut(request.elicitations[0].message, 120)}"
    if not actions:
        return f"The agent asks: {cut(str(request.question), 120)}"
    if len(actions) == 1:
        action = actions[0]
        target = next((str(v) for k, v in action.args.items() if isinstance(v, str | int | float)), "")
        return f"An agent wants to run {action.name}" + (f": {cut(target, 80)}" if target else "")
    names = ", ".join(dict.fromkeys(a.name for a in actions))
    return f"An agent wants to run {len(actions)} actions ({cut(names, 100)})"


STATE_ICONS = {"Approved": "✅", "Edited": "✏️", "Rejected": "❌", "Responded": "💬", "Answered": "💬"}


def outcome_icon(approval: Approval) -> str:
    """The icon of a settled approval's outcome: ✅ only when everything asked was approved."""
    outcomes = {d.outcome for d in approval.decided.values() if d.outcome not in (None, *UNASKED)}
    if outcomes == {Outcome.EXPIRED} or approval.status is ApprovalStatus.EXPIRED:
        return "⌛"
    if Outcome.WITHDRAWN in outcomes:
        return "↩️"
    kinds = {str(d.decision.get("type")) for d in approval.decided.values() if d.outcome is None}
    if approval.request.kind is RequestKind.ELICITATION:
        action = next((str(d.decision.get("action")) for d in approval.decided.values()), "")
        return {"decline": "🙅", "cancel": "✖️"}.get(action, "💬")
    if not approval.request.actions:
        return "💬"
    if kinds <= {"approve"} and not outcomes:
        return "✅"
    if kinds <= {"approve", "edit"} and not outcomes:
        return "✏️"
    if kinds == {"reject"} and not outcomes:
        return "❌"
    if kinds == {"respond"} and not outcomes:
        return "💬"
    return "☑️"


def card_text(
    approval: Approval, asking: str, headline: str, names: dict[str, str], asked_by: bool = True
) -> str:
    """The card's top-level text, kept in step with it (notifications, Activity, search and
    screen readers show it): while it waits, `asking` (who asks for what); once settled, the
    outcome in a sentence: "✅ Approved by Alice, Dana: refund 5,000 on order 1235 (asked by
    Riley)". Plain words: escaped by the caller."""
    if not settled(approval):
        return asking
    what = f"{headline[:1].lower()}{headline[1:]}" if headline else ""
    size = len(asked_actions(approval))
    if what and size > 1:
        what += f" (and {size - 1} more)"
    who = names.get(approval.requester or "", "") if asked_by else ""
    asked = f" (asked by {who})" if who else ""
    state = state_title(approval, names)
    return f"{outcome_icon(approval)} {state}" + (f": {what}" if what else "") + asked


def mention(slack_id: str) -> str:
    """A user (U…, W…) or user group (S…) as Slack shows, and notifies, it."""
    return f"<!subteam^{slack_id}>" if slack_id.startswith("S") else f"<@{slack_id}>"


def named(slack_id: str, names: dict[str, str] | None) -> str:
    """A person or group on a card: a mention when the card may ping them (`names` None), else a
    name that pings nobody (a policy with `notify = "dm"` or `"none"`)."""
    if names is None:
        return mention(slack_id)
    if slack_id.startswith("S"):
        return f"the `{escape(slack_id)}` group"
    return f"*{escape(names.get(slack_id, slack_id))}*"


def rules_line(names: tuple[str, ...]) -> str:
    """Which policy rules applied, by the names people gave them (mrkdwn, escaped already)."""
    if not names:
        return ""
    return ("Rule: " if len(names) == 1 else "Rules: ") + ", ".join(names)


def closed_line(unread: dict[int, str]) -> str:
    """Why a rule stricter than the call's might have been chosen: a `when` could not read it
    (mrkdwn, escaped). One problem is named; the others are counted."""
    if not unread:
        return ""
    first = escape(cut(next(iter(unread.values())), 200))
    more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
    return f"⚠️ A rule could not read this call{more}: {first}. The strictest rule it could fall under applies"


def approvers_line(
    approvers: tuple[str, ...],
    escalated_to: tuple[str, ...] = (),
    grant_nobody: dict[str, str] | None = None,
    names: dict[str, str] | None = None,
) -> str:
    """Who may decide (mentioned, or by `names` when the card pings nobody), and which of the
    user groups named grant nobody, and why; when every one named grants nobody, the line says
    that nobody can approve."""
    line = "Approvers: " + ", ".join(named(i, names) for i in approvers) if approvers else ""
    if escalated_to:
        line += " · ⏫ escalated to " + ", ".join(named(i, names) for i in escalated_to)
    broken = {g: why for g, why in (grant_nobody or {}).items() if g in (*approvers, *escalated_to)}
    if broken:
        everyone = set(approvers) | set(escalated_to)
        said = "; ".join(f"`{g}` {why}" for g, why in broken.items())
        if everyone <= set(broken):
            line += f"\n⚠️ Nobody can approve this: {said}. Fix the policy (or the group) to decide it."
        else:
            line += f"\n⚠️ {said}: it grants nobody."
    return line.lstrip(" ·")


def tally(approval: Approval, indices: list[int] | None = None, most: int = 6) -> str:
    """The tools of these actions (all by default), in mrkdwn: "`send_email` ×60, `delete` and 2 more"."""
    actions = approval.request.actions
    counts: dict[str, int] = {}
    for index in range(len(actions)) if indices is None else indices:
        counts[actions[index].name] = counts.get(actions[index].name, 0) + 1
    words = [f"`{escape(cut(name, 60))}`" + (f" ×{n}" if n > 1 else "") for name, n in counts.items()]
    if len(words) > most:
        words = [*words[: most - 1], f"{len(words) - most + 1} more tools"]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def approved_indices(approval: Approval) -> list[int]:
    """The actions people approved (or edited): they run whatever happens to the others."""
    return [
        i
        for i, decided in sorted(approval.decided.items())
        if decided.outcome in (None, *UNASKED) and decided.decision.get("type") in ("approve", "edit")
    ]


def withdrawal_line(approval: Approval, who: str) -> str:
    """What the run's thread is told when the requester (`who`: a name, mrkdwn, not a mention:
    she did it) withdrew the request: what was not run, and what people had decided before,
    which stands (an approved action still runs)."""
    decided = sorted(approval.decided.items())
    withdrawn = [i for i, d in decided if d.outcome is Outcome.WITHDRAWN]
    before = [(i, d) for i, d in decided if d.outcome in (None, *UNASKED)]
    if not before or not withdrawn:
        return f"↩️ {who} withdrew the request; nothing was run."
    parts = [f"{tally(approval, withdrawn)} {'was' if len(withdrawn) == 1 else 'were'} not run"]
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for index, earlier in before:
        kind = str(earlier.decision.get("type"))
        voters = tuple(v.user for v in approval.votes.get(index, [])) if kind in ("approve", "edit") else ()
        groups.setdefault((kind, tuple(dict.fromkeys(voters)) or (earlier.user,)), []).append(index)
    for (kind, people), indices in groups.items():
        one = len(indices) == 1
        verb, outcome = {
            "approve": ("approved", "runs" if one else "run"),
            "edit": ("edited", "runs with the edited arguments" if one else "run with the edited arguments"),
            "reject": ("rejected", "is not run either" if one else "are not run either"),
            "respond": ("answered", "is not run either" if one else "are not run either"),
        }.get(kind, ("decided", "stands" if one else "stand"))
        deciders = " and ".join("the policy" if u == "signoff" else f"<@{u}>" for u in people)
        parts.append(f"{tally(approval, indices)}, {verb} before by {deciders}, {outcome}")
    return f"↩️ {who} withdrew the request: " + "; ".join(parts) + "."


def decided_line(
    action: ActionReview, decided: Decided, votes: list[Decided] | None = None, brief: bool = False
) -> str:
    """How an action was decided, on its card: by whom, when, what an edit changed and, unless
    `brief` (a large batch's compact line), the reason or answer given, quoted: the card is where
    it is read, the run's thread says it once more with the outcome (`outcome_line`)."""
    if decided.outcome is Outcome.EXPIRED:
        return f"⌛ Expired {when(decided.at)}: no decision in time, so it was not run"
    if decided.outcome is Outcome.WITHDRAWN:
        return f"↩️ Withdrawn by the requester {when(decided.at)}: not run"
    kind = decided.decision.get("type", "")
    icon, verb = DONE.get(kind, ("•", kind))
    if decided.outcome is Outcome.AUTO:
        return f"🤖 {verb} by policy ({escape(decided.rule or 'a rule')}) {when(decided.at)}"
    if decided.outcome is Outcome.TRUSTED:
        return f"🤝 {trusted_words(decided)} {when(decided.at)}"
    line = f"{icon} {verb} by <@{decided.user}> {when(decided.at)}"
    if votes and len(votes) > 1:
        line += " · approved by " + ", ".join(f"<@{v.user}>" for v in votes)
    if kind == "edit":
        changes = edited_changes(
            action.args, action.shown(decided.decision.get("edited_action", {}).get("args", {}))
        )
        if changes:
            line += "\n" + "\n".join(changes)
    message = decided.decision.get("message")
    if kind in ("reject", "respond") and message and not brief:
        line += "\n" + quoted(escape(cut(str(message), 500)))
    return line


def edited_changes(original: dict[str, Any], edited: dict[str, Any], limit: int = 80) -> list[str]:
    """`name`: *what runs* (was ~what the agent asked~), for every argument the reviewer changed."""
    changes = []
    for name in dict.fromkeys([*original, *edited]):
        before, after = original.get(name), edited.get(name)
        if before != after:
            old = "—" if name not in original else _short(before, limit)
            new = "—" if name not in edited else _short(after, limit)
            was = f"~{escape(old)}~" if name in original else old
            changes.append(f"`{escape(name)}`: *{escape(new)}* (was {was})")
    return changes


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return cut(text.replace("\n", " ⏎ "), limit)


def footer_line(approval: Approval) -> str:
    size, decided = approval.size, len(approval.decided)
    status = approval.status
    if status is ApprovalStatus.RESUMING:
        return "⏳ All decided: resuming the agent…"
    if status is ApprovalStatus.RESUMED:
        runs = approved_indices(approval)
        if approval.request.kind is RequestKind.ELICITATION:
            action = next((str(d.decision.get("action")) for d in approval.decided.values()), "cancel")
            return {
                "accept": "▶️ The tool has the answer and carries on",
                "decline": "▶️ The tool carries on without an answer",
            }.get(action, "📨 The call was cancelled; the agent was told")
        if not approval.request.actions:
            return "▶️ The agent has the answer and carries on"
        if not runs:
            return "📨 The agent was told; nothing was run"
        return f"▶️ The agent carries on: {tally(approval, runs)} " + ("runs" if len(runs) == 1 else "run")
    if status is ApprovalStatus.FAILED:
        again = " Nothing was sent; it is offered again on a new card." if approval.replaced_by else ""
        return f"⚠️ Could not resume: {escape(cut(approval.error or 'unknown error', 300))}.{again}"
    if status is ApprovalStatus.EXPIRED:
        return f"⌛ Closed unanswered: {escape(cut(approval.error or 'its time limit passed', 300))}. Nothing runs."
    parts = [f"{decided} of {size} decided"] if size > 1 else []
    terms = approval.terms
    if status is ApprovalStatus.PENDING and terms:
        due = sorted(
            (at, i)
            for i in terms.timeout
            if i not in approval.decided and (at := approval.expires(i)) is not None
        )
        if due:
            at, first = due[0]
            limit = terms.timeout.get(first, 0)
            what = f"`{escape(approval.request.actions[first].name)}` expires" if size > 1 else "Expires"
            then = (
                "the call is cancelled"
                if approval.request.kind is RequestKind.ELICITATION
                else "it is not run"
            )
            parts.append(f"⏳ {what} {when(at)} if undecided ({spoken(limit)} limit): then {then}")
        if approval.escalated:
            parts.append(f"⏫ Escalated after {spoken(max(approval.escalated))}")
    return " · ".join(parts)


def counted(approval: Approval, index: int) -> int:
    """Approvals of action `index` that count: all of them under a quorum; under a `require`,
    those the matching places (a second of a full entry waits for another entry)."""
    votes = approval.votes.get(index, [])
    entries = approval.required(index)
    if not entries:
        return len(votes)
    return matched([e.count for e in entries], [list(v.eligible) for v in votes])[0]


def require_said(approval: Approval, index: int, user: str, name: str) -> str:
    """What an approver is told of their approval under a `require`: counted for an entry (and
    how many are still missing), or recorded but filling none, every entry they may fill being
    full (it counts if the matching can move someone else)."""
    votes = approval.votes.get(index, [])
    placed, seats = matched([e.count for e in approval.required(index)], [list(v.eligible) for v in votes])
    seat = next((seats[n] for n, vote in enumerate(votes) if vote.user == user), None)
    need = approval.quorum(index)
    if seat is None:
        return (
            f"Your approval of `{name}` is recorded, but every entry you may fill is full: it does not "
            f"count yet ({placed} of {need})."
        )
    more = need - placed
    return (
        f"Your approval of `{name}` is counted: {placed} of {need}. It runs once "
        f"{more} more approver{'s' if more > 1 else ''} agree{'s' if more == 1 else ''}."
    )


def require_progress(
    approval: Approval, index: int, barred: str | None = None, names: dict[str, str] | None = None
) -> str:
    """Each `require` entry's progress, as the decide script counts it (the same matching):
    "Finance 1 of 1 ✓ · Security 0 of 1: @Sam, @Kim" (who may still fill an entry that waits)."""
    entries = approval.required(index)
    votes = approval.votes.get(index, [])
    _, seats = matched([e.count for e in entries], [list(v.eligible) for v in votes])
    voted = {v.user for v in votes}
    parts = []
    for k, entry in enumerate(entries):
        filled = sum(1 for seat in seats if seat == k)
        label = escape(entry.name) if entry.name else ", ".join(named(a, names) for a in entry.approvers)
        part = f"{label} {filled} of {entry.count}"
        if filled >= entry.count:
            part += " ✓"
        else:
            still = [a for a in entry.approvers if a not in voted and a != barred]
            part += (": " + ", ".join(named(a, names) for a in still[:8])) if still and entry.name else ""
        parts.append(part)
    return " · ".join(parts)


def outcome_told(approval: Approval) -> bool:
    """Whether the run's thread hears a settled approval's outcome in a line of its own: there
    is a requester to tell, or the card is elsewhere (else the card in the thread says it)."""
    return bool(approval.requester) or approval.card_where != approval.channel


def outcome_line(approval: Approval, names: dict[str, str], sentence: str) -> str:
    """The outcome in the run's thread (mrkdwn): the requester mentioned once, here, with the
    reasons and answers people gave and what an edit changed; a withdrawal says what stands
    (she did it: named, not mentioned). An MCP server's questions: who asked what, who answered
    what ("@Riley's agent asked `deploy_service` for *Replicas*: Alice answered *3*")."""
    if approval.request.kind is RequestKind.ELICITATION:
        first = approval.decided.get(0)
        whose = f"<@{approval.requester}>'s agent" if approval.requester else "The agent"
        return elicitation.outcome_sentence(
            approval, whose, escape(names.get(first.user, first.user)) if first else ""
        )
    if any(d.outcome is Outcome.WITHDRAWN for d in approval.decided.values()):
        who = approval.requester or ""
        return withdrawal_line(approval, f"*{escape(names.get(who, who) or 'The requester')}*")
    lines = [(f"<@{approval.requester}> " if approval.requester else "") + sentence]
    actions = approval.request.actions
    said: dict[tuple[str, str, str], list[int]] = {}  # (who, how, what) -> the actions: one line each
    for index, decided in sorted(approval.decided.items()):
        who = escape(names.get(decided.user, decided.user))
        if not actions and decided.outcome in (None, Outcome.EXPIRED):  # a question: the answer given
            who = who if decided.outcome is None else "Signoff"
            lines.append(quoted(f"{who} answered: {escape(cut(str(decided.decision.get('answer')), 1_500))}"))
        if decided.outcome is not None or index >= len(actions):
            continue
        kind, message = decided.decision.get("type"), decided.decision.get("message")
        if kind in ("reject", "respond") and message:
            how = "said" if kind == "reject" else "answered instead"
            said.setdefault((who, how, escape(cut(str(message), 1_500))), []).append(index)
        elif kind == "edit" and len(lines) < 20:
            edited = decided.decision.get("edited_action", {}).get("args", {})
            label = f"`{escape(cut(actions[index].name, 60))}`: " if len(actions) > 1 else ""
            shown = actions[index].shown(edited)
            lines += [f"> {label}{change}" for change in edited_changes(actions[index].args, shown)]
    for (who, how, message), indices in list(said.items())[:10]:
        label = f"{tally(approval, indices)}: " if len(actions) > 1 else ""
        lines.append(quoted(f"{label}{who} {how}: {message}"))
    return "\n".join(lines)


def quoted(text: str) -> str:
    """`text` as a quote, every line of it: a reason of several lines cannot end the quote and
    pass a line of its own off as Signoff's."""
    return "\n".join(f"> {line}" for line in text.split("\n"))
