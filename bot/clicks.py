"""What a button or menu click says (`Click`): who, where, which approval and action, the proposal
its card showed, the review modal page it came from (`Shown`), and where Slack lets the bot
answer it (`Reply`: the click's response_url, kept for the work after the ack in `answering`,
and carried in a form's private_metadata so its submission can use it too)."""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

from bot.payloads import BlockActions
from bot.views.cards import parse_value
from core.protocol import PersonDecision


@dataclass(frozen=True)
class Shown:
    """The review modal a click came from, or a form was pushed over: where to answer."""

    view_id: str
    start: int  # the first action of the page it shows
    hash: str | None = None  # the view as the click saw it


@dataclass(frozen=True)
class Reply:
    """Where Slack lets the bot answer one interaction at once, unpaced: the click's
    `response_url` (five uses within 30 minutes), and the message it was clicked on."""

    response_url: str
    message_ts: str


# The interaction whose work runs after its ack (each request sets its own; the tasks it starts
# inherit it): a decision's card change goes through its response_url (`SlackIO.replace_card`).
answering: ContextVar[Reply | None] = ContextVar("answering", default=None)


def form_metadata(value: str, reply: Reply | None) -> str:
    """A form's private_metadata: `approval_id:index`, and the click's reply when there is one."""
    return value if reply is None else f"{value}\n{reply.message_ts}\n{reply.response_url}"


def parse_form_metadata(text: str) -> tuple[str, Reply | None]:
    """(`approval_id:index`, the reply it carries) from a form's private_metadata."""
    value, *rest = text.split("\n")
    if len(rest) == 2 and all(rest):
        return value, Reply(response_url=rest[1], message_ts=rest[0])
    return value, None


@dataclass(frozen=True, kw_only=True)
class Click:
    """What a button or menu click says: who, where, which approval and action."""

    user: str
    channel: str | None
    approval_id: str
    index: int
    trigger_id: str
    team: str | None = None
    seen: int | None = None  # the proposal the card showed (its block id's `r<n>`), when it says
    shown: Shown | None = None  # the review modal it was clicked in
    reply: Reply | None = None  # where Slack lets the bot answer it (a click on a message)
    sure: bool = False  # an Approve to confirm first (its block says `:sure`: a destructive tool)

    @classmethod
    def of(cls, payload: BlockActions, value: str | None) -> Click:
        approval_id, index = parse_value(value or "")
        block = payload.action.block_id or ""
        seen = None
        if block == "decide:all":  # "Approve all" is only shown while no edit is proposed
            seen = 0
        elif match := re.fullmatch(r"(?:decide|action):\d{1,4}:r(\d{1,6})(?::sure)?", block):
            seen = int(match.group(1))
        shown = None
        view = payload.view
        if payload.container.type == "view" and view and view.id and view.callback_id == "review":
            reviewed, start = parse_value(view.private_metadata)
            if reviewed == approval_id:  # a page of this approval (else: nothing of it to redraw)
                shown = Shown(view.id, start, view.hash)
        ts = payload.container.message_ts
        reply = Reply(payload.response_url, ts) if payload.response_url and ts else None
        return cls(
            user=payload.user.id,
            channel=payload.channel_id,
            approval_id=approval_id,
            index=index,
            trigger_id=payload.trigger_id,
            team=payload.team_id,
            seen=seen,
            shown=shown,
            reply=reply,
            sure=block.endswith(":sure"),
        )


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A decision recorded (or being recorded) for a person, and where they made it: what the
    work after its ack needs (`DecisionService.answered`)."""

    approval_id: str
    index: int
    decision: PersonDecision
    user: str
    channel: str | None
    shown: Shown | None = None  # the review modal it was made in

    @classmethod
    def of(cls, click: Click, decision: PersonDecision) -> Decision:
        return cls(
            approval_id=click.approval_id,
            index=click.index,
            decision=decision,
            user=click.user,
            channel=click.channel,
            shown=click.shown,
        )
