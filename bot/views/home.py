"""The Home tab and the lists people read (pure): what waits for a person, what they asked for,
what they decided lately; `/signoff pending`'s lines. `bot.chatops` gathers what they show."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.views.card_words import DONE, mention, when
from bot.views.text import cut, escape
from core.records import Approval


def home_view(waiting: list[Block], asked: list[Block], decided: list[str], passkeys: bool = False) -> View:
    """The Home tab: what waits for this person's decision, what they asked for that waits on
    others, and their recent decisions (one line each); with `passkeys` (a rule steps up), a
    button that sends them a link to add one."""
    blocks: list[Block] = [HeaderBlock(text="Waiting for you")]
    blocks += waiting or [
        ContextBlock(elements=[MarkdownTextObject(text="Nothing waits for your decision.")])
    ]
    blocks += [DividerBlock(), HeaderBlock(text="You asked, waiting on others")]
    blocks += asked or [ContextBlock(elements=[MarkdownTextObject(text="Nothing you asked for is waiting.")])]
    blocks += [DividerBlock(), HeaderBlock(text="Your recent decisions")]
    blocks.append(
        SectionBlock(text=MarkdownTextObject(text="\n".join(decided)))
        if decided
        else ContextBlock(elements=[MarkdownTextObject(text="No decisions yet.")])
    )
    if passkeys:
        blocks += [DividerBlock(), passkeys_section()]
    return View(type="home", blocks=blocks)


def passkeys_section() -> SectionBlock:
    return SectionBlock(
        block_id="passkeys",
        text=MarkdownTextObject(
            text="🔑 Some approvals here need a passkey: add yours (or see and remove them)."
        ),
        accessory=ButtonElement(text="Passkeys", action_id="passkey_link"),
    )


def passkey_link_view(text: str) -> View:
    """The modal the Home tab's Passkeys button opens: the person's one-time link (mrkdwn)."""
    return View(
        type="modal",
        title="Your passkeys",
        close="Close",
        blocks=[SectionBlock(text=MarkdownTextObject(text=text))],
    )


def home_item(approval: Approval, what: str, link: str | None, waiting_on: list[str] | None = None) -> Block:
    """One approval on the Home tab: what for, who asked, where, when; Open lands on the card;
    for its requester (`waiting_on` given), whom it waits on (a view never notifies)."""
    who = f"asked by <@{approval.requester}> · " if approval.requester else ""
    text = f"*{escape(what)}*\n{who}<#{approval.card_where}> · {when(approval.created_at)}"
    if waiting_on is not None:
        text += "\nWaiting on " + (
            ", ".join(mention(i) for i in waiting_on[:8]) if waiting_on else "anyone who may approve"
        )
    accessory = (
        ButtonElement(text="Open", url=link, action_id=f"open:{approval.approval_id}") if link else None
    )
    return SectionBlock(text=MarkdownTextObject(text=text), accessory=accessory)


def decision_line(entry: dict[str, Any], what: str, link: str | None) -> str:
    """One of a person's decisions on Home, in words (mrkdwn): what they did (withdrew, rejected
    with the reason…) to which call (`what`, plain: escaped here), when, linked to its card."""
    decision, outcome = entry["decision"] or {}, entry.get("outcome", "")
    kind = str(decision.get("type", ""))
    if outcome == "withdrawn":
        icon, verb = "↩️", "Withdrew"
    elif outcome == "voted":
        icon, verb = "👥", "Approved (counted towards the approvals needed)"
    elif outcome == "proposed":
        icon, verb = "✏️", "Proposed an edit of"
    else:
        icon, verb = {**DONE, "respond": ("💬", "Answered instead of")}.get(kind, ("💬", "Answered"))
    shown = f"<{link}|{escape(what)}>" if link else escape(what)
    reason = decision.get("message") if kind in ("reject", "respond") and outcome != "withdrawn" else None
    said = f": “{escape(cut(str(reason), 200))}”" if reason else ""
    more = f" (and {entry['more']} more)" if entry.get("more") else ""
    return f"{icon} {verb} {shown}{more}{said} · {when(entry['at'])}"


def listed_line(approval: Approval, what: str, link: str | None) -> str:
    """One approval in a list: what it asks, linked to its card; who asked; when."""
    name = f"<{link}|{escape(what)}>" if link else escape(what)
    return f"• {name} · {escape(approval.origin)} · {when(approval.created_at)}"


def pending_text(total: int, lines: list[str]) -> str:
    """`/signoff pending`: the newest approvals waiting here, and how many in all."""
    if not total:
        return "Nothing waits for a decision in this channel."
    if total > len(lines):
        more = f"_Showing the newest {len(lines)} of {total}: `signoff pending`, run where Signoff runs, "
        lines = [*lines, more + "lists every one._"]
    return f"*Waiting for a decision here ({total}):*\n" + "\n".join(lines)
