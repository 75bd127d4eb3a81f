"""Calls the policy decides itself: a rule's `decide` ("approve" or "reject"), with no card.

When an approval's terms are set, each action routed by a rule that says `decide` is decided
through the decide script (`Store.decide_by_policy`), before any card is posted: the first
decision wins, so a second bot replica handling the same event records nothing, and an expiry
or a click cannot make a second outcome. Only the rule stored with the card's terms for that
action counts (never `[defaults]`, never a neighbouring action's rule), and only under the policy
those terms name: a replica with another policy file decides nothing and the card asks. An
action that does not allow the rule's decision is left to people, and logged.

The run's thread is told once (one post id per approval), from what was recorded: whichever
replica says it, it says the same. The card shows the asked actions only (`bot.views.cards`).
"""

from __future__ import annotations

from typing import Any

from bot.routing import summary_line
from bot.slack.io import SlackIO
from bot.views.card_words import trusted_words
from bot.views.text import cut, escape
from core import metrics
from core.logs import get_logger
from core.policy_file import PolicyFile
from core.records import Approval, ApprovalStatus, DecisionResult, Outcome, rule_of
from core.store import Store

log = get_logger("policy")

SHOWN_LINES = 20  # the thread line names this many calls, then counts the rest


def planned(policy: PolicyFile, approval: Approval) -> dict[int, tuple[dict[str, Any], str]]:
    """Action index -> (the decision, the rule's label) for every action whose own rule, as
    stored with the card's terms under this policy, says `decide`, and every action whose
    arguments its tool's own schema refuses (the tool would fail on them: rejected unasked,
    where the action allows a reject)."""
    terms = approval.terms
    if terms is None or not approval.request.actions or terms.policy != policy.fingerprint:
        return {}
    plan: dict[int, tuple[dict[str, Any], str]] = {}
    for index, action in enumerate(approval.request.actions):
        if action.refused is not None:
            if "reject" in action.allowed_decisions:
                plan[index] = (
                    {"type": "reject", "message": refused_message(action.name, action.refused)},
                    f"{action.name}'s argument schema",
                )
            continue  # (no reject allowed: people are asked; the card says the tool would fail)
        rule = terms.rules.get(index, -1)
        if not 0 <= rule < len(policy.routes) or policy.routes[rule].decide is None:
            continue
        if index in terms.unread:  # a rule's `when` could not read this call: it is asked
            log.warning("policy_decision_withheld", approval_id=approval.approval_id, index=index, rule=rule)
            continue
        route = policy.routes[rule]
        decision: dict[str, Any] = {"type": route.decide}
        if route.message:
            decision["message"] = route.message
        plan[index] = (decision, policy.rule_label(rule))
    return plan


def refused_message(tool: str, problem: str) -> str:
    """What the agent is told of a call whose arguments its tool's schema refuses."""
    return (
        f"Not run, and no one was asked: the arguments do not fit {tool}'s own schema "
        f"({cut(problem, 500)}). Call it again with arguments it accepts."
    )


async def decide_by_policy(store: Store, policy: PolicyFile, approval: Approval) -> Approval:
    """Record the policy's decisions for `approval` (pending, terms set); the record after."""
    plan = planned(policy, approval) if approval.status is ApprovalStatus.PENDING else {}
    for index, (decision, rule) in plan.items():
        verdict = await store.decisions.decide_by_policy(approval.approval_id, index, decision, rule)
        bound = {"approval_id": approval.approval_id, "index": index, "tool": verdict.tool, "rule": rule}
        if verdict.result in (DecisionResult.RECORDED, DecisionResult.COMPLETE):
            metrics.DECISIONS.labels(decision["type"], verdict.tool, "auto").inc()
            log.info("decided_by_policy", decision=decision["type"], **bound)
        elif verdict.result is DecisionResult.NOT_ALLOWED:
            log.warning(
                "policy_decision_not_allowed",
                decision=decision["type"],
                allowed=",".join(verdict.allowed),
                **bound,
            )
    if not plan:
        return approval
    return await store.approvals.get(approval.approval_id) or approval


def decided_lines(policy: PolicyFile, approval: Approval) -> str:
    """What the run's thread is told of the calls decided unasked (mrkdwn), one per call: by a
    rule's `decide`, or under a trust grant (`bot.trust`)."""
    lines = []
    for index in approval.by_policy():
        decided, action = approval.decided[index], approval.request.actions[index]
        route = policy.route_at(rule_of(approval, policy, index))
        if decided.outcome is Outcome.TRUSTED:
            lines.append(f"🤝 {trusted_words(decided)} · {escape(summary_line(action, route))}")
            continue
        verb = "Approved" if decided.decision.get("type") == "approve" else "Rejected"
        icon = "🤖✅" if verb == "Approved" else "🤖❌"
        summary = escape(summary_line(action, route))
        line = f"{icon} {verb} by policy: {escape(decided.rule or 'a rule')} · {summary}"
        message = decided.decision.get("message")
        lines.append(line + (f": {escape(cut(str(message), 300))}" if message else ""))
    more = len(lines) - SHOWN_LINES
    return "\n".join(lines[:SHOWN_LINES]) + (f"\n…and {more} more decided unasked" if more > 0 else "")


async def say_decided(slack: SlackIO, policy: PolicyFile, approval: Approval) -> None:
    """Tell the run's thread what the policy decided, once per approval (whoever says it)."""
    if approval.by_policy():
        await slack.thread_reply(approval, decided_lines(policy, approval), f"auto:{approval.approval_id}")
