"""What people read of trust grants: the card's **Approve & trust** button and its confirm dialog,
and the run's thread told of a grant made or revoked (`bot.trust` decides them)."""

from __future__ import annotations

import json

from slack_sdk.models.blocks import ButtonElement

from bot.views.card_words import until
from bot.views.text import cut, escape, visible
from core.grants import Grant
from core.policy_file import spoken
from core.records import Approval
from core.routes import Route


def granted_line(grant: Grant) -> str:
    """What the run's thread is told of a new grant (mrkdwn)."""
    args = json.loads(grant.compared)
    what = ", ".join(f"{escape(cut(visible(k), 40))}" for k in args) if args else "no arguments"
    uses = f", at most {grant.uses} time{'s' if grant.uses != 1 else ''}" if grant.uses else ""
    where = f" in <#{grant.channel}>" if grant.channel else " in any channel"
    return (
        f"🤝 <@{grant.granted_by}> trusted `{escape(grant.tool)}`: the same call "
        f"(same {what}) by <@{grant.requester}> from *{escape(grant.graph)}*{where} runs without asking "
        f"until {until(grant.until)}{uses}."
    )


def trust_button(approval_id_value: str, index: int, route: Route) -> ButtonElement:
    """Approve & trust for 1h: approves, and (when it decides the call) grants. Confirmed in a
    modal Signoff opens once the clicker is checked (`trust_words`)."""
    return ButtonElement(
        text=cut(f"Approve & trust for {spoken(route.trust or 0)}", 75),
        action_id=f"trust:{index}",
        value=approval_id_value,
    )


def trust_words(approval: Approval, index: int, route: Route) -> tuple[str, str]:
    """(title, text) of the dialog confirming Approve & trust: what it grants."""
    length = spoken(route.trust or 0)
    same = (
        "the same arguments"
        if route.trust_args is None
        else "the same " + ", ".join(cut(visible(a), 40) for a in route.trust_args)
    )
    uses = f", at most {route.trust_uses} times" if route.trust_uses else ""
    several = approval.quorum(index) > 1 or bool(approval.required(index))
    how = (
        " Several approvals are needed: trust is granted by the approval that completes them."
        if several
        else ""
    )
    where = "in any channel" if route.trust_scope == "anywhere" else "in this channel"
    return "Approve and trust?", cut(
        f"This approves the call. The same call ({same}) by the same requester and graph, {where}, "
        f"then runs without a card for {length}{uses}.{how} It can be revoked with /signoff trust.",
        300,
    )


def revoked_line(grant: Grant, user: str) -> str:
    whose = f"<@{grant.granted_by}>'s"
    return f"🚫 <@{user}> revoked {whose} trust for `{escape(grant.tool)}`: the next such call asks again."
