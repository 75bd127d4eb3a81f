"""Trust grants on the Slack side (`core.grants`): the card's **Approve & trust** button, the
calls a grant lets through before any card, and `/signoff trust` with its Revoke buttons.

* A trust click is an approval (the decide script's checks, one round trip) and, when that
  approval decides the call (with a quorum or `require`, when it completes them), the grant,
  written before the ack. A counted vote grants nothing: the person is told so.
* When a pause comes, each undecided action its rule offers trust for is looked up: a live
  grant for the same match is used once and the action approved through the decide script
  (outcome `trusted`), so a second replica, an expiry or a click end in one outcome. The run's
  thread hears it ("Approved under @Alice's trust, until 15:40"), with the calls the policy
  decided (`bot.policy_decisions.say_decided`).
* Only the live policy's rule, as routed for that very call, offers or honours trust; a call
  one of whose rules' `when` could not read it is asked, as for `decide`.
* A grant is revoked by who granted it or by anyone the rule names as an approver; the grant is
  gone for the next call.
"""

from __future__ import annotations

import json
import re

from slack_sdk.models.blocks import Block, ButtonElement, MarkdownTextObject, SectionBlock

from bot.permissions import Permissions
from bot.views.card_words import until
from bot.views.text import cut, escape, visible
from core import metrics
from core.grants import Grant, compared, grant_id, match_of
from core.logs import get_logger
from core.policy_file import PolicyFile
from core.records import Approval, ApprovalStatus, DecisionResult, rule_of
from core.routes import Route
from core.secrets import conceal
from core.store import Store

log = get_logger("trust")

SHOWN_GRANTS = 20  # `/signoff trust` lists these; `signoff trust list` lists every one


def offered(policy: PolicyFile, approval: Approval, index: int) -> Route | None:
    """Action `index`'s route when it offers trust for this very call, else None."""
    actions = approval.request.actions
    if (
        not approval.grants
        or not 0 <= index < len(actions)
        or "approve" not in actions[index].allowed_decisions
    ):
        return None  # (a run the API started uses and makes no grant, unless SIGNOFF_API_GRANTS)
    call = approval.calls()[index]
    route = policy.route_at(rule_of(approval, policy, index))
    if route.trust is None or match_of(route, call) is None or _unread(policy, approval, index):
        return None
    return route


def _unread(policy: PolicyFile, approval: Approval, index: int) -> bool:
    """Whether a rule's `when` could not read action `index`'s call (its rule was chosen closed),
    as its card's terms say under this policy; a card of another policy is taken as unread (its
    conditions are not evaluated here: `PolicyFile.closed_match`), unless no rule for its tool
    has a `when`."""
    terms = approval.terms
    if terms is not None and terms.policy == policy.fingerprint and index in terms.rules:
        return index in terms.unread
    return bool(policy.closed_match(approval.calls()[index]).failed)


def offers(policy: PolicyFile, approval: Approval) -> dict[int, Route]:
    """The actions of a card that offer trust, with their routes."""
    found = {i: offered(policy, approval, i) for i in range(len(approval.request.actions))}
    return {i: route for i, route in found.items() if route is not None}


async def use_grants(store: Store, permissions: Permissions, approval: Approval) -> Approval:
    """Approve, before any card, each undecided action a live grant covers, if whoever granted
    it may still approve the call (a grant never outlives its granter's rights); the record
    after."""
    if approval.status is not ApprovalStatus.PENDING:
        return approval
    policy, calls, used = permissions.rules, approval.calls(), 0
    for index, route in offers(policy, approval).items():
        match = match_of(route, calls[index])
        if index in approval.decided or match is None:
            continue
        grant = await store.grants.use(match, approval.approval_id, index)
        if grant is None:
            continue
        used += 1  # (recorded here or by another replica: the record is read again)
        if not permissions.may_decide(approval, index, str(grant.get("by"))):
            log.warning("grant_granter_may_not_approve", approval_id=approval.approval_id, grant=grant["id"])
            continue  # (its use is spent: a grant never widens, it may lose a use)
        label = policy.rule_label(rule_of(approval, policy, index))
        verdict = await store.decisions.decide_trusted(approval.approval_id, index, grant, label)
        bound = {
            "approval_id": approval.approval_id,
            "index": index,
            "grant": grant["id"],
            "tool": verdict.tool,
        }
        if verdict.result in (DecisionResult.RECORDED, DecisionResult.COMPLETE):
            metrics.DECISIONS.labels("approve", verdict.tool, "trusted").inc()
            log.info("approved_under_trust", granted_by=grant.get("by"), **bound)
        else:
            log.info("grant_use_not_recorded", result=verdict.result.value, **bound)
    return (await store.approvals.get(approval.approval_id) or approval) if used else approval


async def grant_after(
    store: Store, policy: PolicyFile, approval_id: str, index: int, user: str
) -> tuple[Grant | None, str]:
    """The grant a trust click makes, once its approval decided the action; or why none: (None,
    what the person is told)."""
    approval = await store.approvals.get(approval_id)
    if approval is None:
        return None, "The approval is gone, so no trust was granted."
    decided = approval.decided.get(index)
    if decided is None or decided.outcome is not None or decided.decision.get("type") != "approve":
        return None, "Your approval did not decide this call, so no trust was granted."
    if approval.proposals.get(index) is not None or "edited_action" in decided.decision:
        return None, "What runs is an edit, not the call as asked, so no trust was granted."
    route = offered(policy, approval, index)
    # the card's terms, or the rule as it is now (tightened since the card was posted: the grant
    # would be made under it, and would let its later calls through without a passkey)
    stepped = (approval.terms and index in approval.terms.step_up_trust) or (route and route.step_up_trust)
    if stepped and not decided.step_up:
        return (
            None,
            "Trust on this call needs your passkey (Approve & trust gives you its link), so none was granted.",
        )
    match = match_of(route, approval.calls()[index]) if route else None
    if route is None or route.trust is None or match is None:
        return None, "This call's rule does not offer trust now, so none was granted."
    grant = Grant(
        id=grant_id(match, approval_id, index),
        match=match,
        tool=approval.request.actions[index].name,
        requester=approval.requester or "",
        graph=approval.graph,
        channel="" if route.trust_scope == "anywhere" else approval.channel,
        rule=route.fingerprint,
        rule_name=policy.rule_label(rule_of(approval, policy, index)),
        granted_by=user,
        approval_id=approval_id,
        index=index,
        compared=json.dumps(
            compared(route, approval.calls()[index].args), ensure_ascii=False, sort_keys=True
        ),
        approvers=",".join(route.approvers),
        created_at=0,
        expires_at=0,
        uses=route.trust_uses,
    )
    fresh, expires_ms, standing = await store.grants.add(grant, route.trust)
    if standing != grant.id:  # another grant for the same call is live: it stands, unchanged
        return (
            None,
            f"Approved. The same call was trusted already, until {until(expires_ms / 1000)}: that stands.",
        )
    grant = grant.model_copy(update={"expires_at": expires_ms, "uses_left": route.trust_uses})
    if fresh:
        metrics.DECISIONS.labels("trust", grant.tool, "granted").inc()
        log.info("trust_granted", grant=grant.id, approval_id=approval_id, index=index, slack_user=user)
    return grant, ""


def may_revoke(grant: Grant, user: str, permissions: Permissions) -> bool:
    """Who granted it, or whoever its rule named as an approver when it was granted."""
    approvers = tuple(a for a in grant.approvers.split(",") if a)
    return user == grant.granted_by or bool(approvers) and permissions.member(user, approvers) is True


def may_see(grant: Grant, user: str, permissions: Permissions) -> bool:
    """Who may revoke it, and its requester: a grant shows a call's arguments, which only the
    card's audience saw."""
    return user == grant.requester or may_revoke(grant, user, permissions)


def grant_blocks(grants: list[Grant], user: str, permissions: Permissions) -> tuple[str, list[Block]]:
    """`/signoff trust`: the live grants `user` may see, a Revoke button on those they may revoke."""
    grants = [g for g in grants if may_see(g, user, permissions)]
    if not grants:
        return "No trust grants you may see are live.", []
    blocks: list[Block] = []
    for grant in grants[:SHOWN_GRANTS]:
        # the arguments it compares, their secrets masked as on the card (by name, shape, `redact`)
        args, _ = conceal(json.loads(grant.compared), permissions.rules.redactions(grant.tool))
        shown = (
            ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()) or "no arguments"
        )
        left = f" · {grant.uses_left} of {grant.uses} uses left" if grant.uses else ""
        where = f"<#{grant.channel}>" if grant.channel else "any channel"
        text = (
            f"*{escape(grant.tool)}* ({escape(cut(visible(shown), 200))}) for <@{grant.requester}> in "
            f"*{escape(grant.graph)}*, {where} · trusted by <@{grant.granted_by}> · until {until(grant.until)}"
            f" · used {grant.used}{left} · `{grant.id}`"
        )
        button = None
        if may_revoke(grant, user, permissions):
            button = ButtonElement(text="Revoke", action_id="trust_revoke", value=grant.id, style="danger")
        blocks.append(SectionBlock(text=MarkdownTextObject(text=cut(text, 2_900)), accessory=button))
    more = len(grants) - SHOWN_GRANTS
    head = f"*Live trust grants ({len(grants)}):*" + (
        f" the {SHOWN_GRANTS} ending soonest" if more > 0 else ""
    )
    return head, [SectionBlock(text=MarkdownTextObject(text=head)), *blocks]


async def revoke(
    store: Store, permissions: Permissions, grant_id_: str, user: str
) -> tuple[Grant | None, str]:
    """Revoke a grant for `user` if they may: (the grant revoked, what they are told)."""
    grant = await store.grants.get(grant_id_) if re.fullmatch(r"[0-9a-f]{20}", grant_id_) else None
    if grant is None:
        return None, "That grant is no longer live (expired, used up or revoked); nothing changed."
    if not may_revoke(grant, user, permissions):
        return None, "Only who granted this trust, or the rule's approvers, may revoke it; nothing changed."
    if not await store.grants.revoke(grant.id, user):
        return None, "That grant is no longer live (expired, used up or revoked); nothing changed."
    metrics.DECISIONS.labels("trust", grant.tool, "revoked").inc()
    log.info("trust_revoked", grant=grant.id, slack_user=user)
    return grant, f"Revoked: the next `{escape(grant.tool)}` call like it asks again."
