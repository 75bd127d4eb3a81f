"""What a button or menu click says (`Click`): who, where, which approval and action, the proposal
its card showed, and the review modal page it came from (`Shown`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.cards import parse_value
from bot.payloads import BlockActions


@dataclass(frozen=True)
class Shown:
    """The review modal a click came from, or a form was pushed over: where to answer."""

    view_id: str
    start: int  # the first action of the page it shows
    hash: str | None = None  # the view as the click saw it


@dataclass(frozen=True)
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

    @classmethod
    def of(cls, payload: BlockActions, value: str | None) -> Click:
        approval_id, index = parse_value(value or "")
        block = payload.action.block_id or ""
        seen = None
        if block == "decide:all":  # "Approve all" is only shown while no edit is proposed
            seen = 0
        elif match := re.fullmatch(r"(?:decide|action):\d{1,4}:r(\d{1,6})", block):
            seen = int(match.group(1))
        shown = None
        view = payload.view
        if payload.container.type == "view" and view and view.id and view.callback_id == "review":
            reviewed, start = parse_value(view.private_metadata)
            if reviewed == approval_id:  # a page of this approval (else: nothing of it to redraw)
                shown = Shown(view.id, start, view.hash)
        return cls(
            payload.user.id,
            payload.channel_id,
            approval_id,
            index,
            payload.trigger_id,
            payload.team_id,
            seen,
            shown,
        )
