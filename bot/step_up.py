"""The one-time links a person is sent in Slack to Signoff's passkey pages (`bot.passkeys`): to
approve with a passkey (a step-up, bound to each action's revision and the hash of its arguments),
or to add one (an enrolment); and the words that carry them."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from bot.views.text import escape
from core.records import Approval
from core.store import Store
from core.store.passkeys import Link, canonical, new_nonce

STEP_UP_TTL_S = 300  # a step-up link works once, within 5 minutes
ENROL_TTL_S = 600
HOW_TO_ENROL = "type `/signoff passkey` to add one (a minute), then click Approve again"
NO_PAGE = (
    "🔑 This call needs a passkey to approve, and Signoff has no public URL to serve its page on "
    "(SIGNOFF_PUBLIC_URL): ask whoever runs Signoff. Nothing changed."
)


def args_hash(args: Any) -> str:
    """The SHA-256 of a call's arguments as JSON with sorted keys: what a step-up is bound to."""
    return hashlib.sha256(canonical(args).encode()).hexdigest()


def shown_args(approval: Approval, index: int) -> Any:
    """The arguments an approval of action `index` runs it with: the edit proposed (with a quorum),
    else the call's own (the real values: what the card shows masked is bound all the same)."""
    proposal = approval.proposals.get(index)
    if proposal is not None and isinstance(proposal.decision.get("edited_action"), dict):
        return proposal.decision["edited_action"].get("args", {})
    return approval.request.actions[index].real_args


def bound_actions(approval: Approval, indexes: list[int]) -> list[tuple[int, int, str]]:
    """Each action as a step-up binds it: (index, revision, hash of its arguments)."""
    return [(i, approval.revisions.get(i, 0), args_hash(shown_args(approval, i))) for i in indexes]


class Links:
    """Issues the links, under the bot's public URL."""

    def __init__(self, store: Store, public_url: str | None):
        self.store, self.public_url = store, public_url

    async def step_up(self, approval_id: str, indexes: list[int], what: str, user: str) -> str:
        """What the person is told: their link to approve `indexes` with a passkey (`what`:
        approve, trust, approve_all), or how to add a passkey first."""
        approval = await self.store.approvals.get(approval_id)
        if approval is None or not approval.request.actions:
            return "This approval no longer exists."
        names = ", ".join(dict.fromkeys(f"`{escape(approval.request.actions[i].name)}`" for i in indexes))
        if not self.public_url:
            return NO_PAGE
        if not await self.store.passkeys.of(user):
            return f"🔑 Approving {names} needs your passkey, and you have none yet: {HOW_TO_ENROL}. Nothing changed."
        link = Link(
            kind="step_up",
            user=user,
            nonce=new_nonce(),
            expires_at=time.time() + STEP_UP_TTL_S,
            approval_id=approval_id,
            actions=bound_actions(approval, indexes),
            what=what,
        )
        token = await self.store.passkeys.issue(link, STEP_UP_TTL_S)
        return (
            f"🔑 Approving {names} needs your passkey: <{self.public_url}/step-up/{token}|Approve with "
            "your passkey>. The link is yours alone and works once, for 5 minutes; nothing is recorded "
            "until your passkey says so."
        )

    async def enrol(self, user: str) -> str:
        """What `/signoff passkey` answers: a link to add (list, remove) passkeys."""
        if not self.public_url:
            return "Signoff has no public URL (SIGNOFF_PUBLIC_URL), so it serves no passkey page."
        link = Link(kind="enrol", user=user, nonce=new_nonce(), expires_at=time.time() + ENROL_TTL_S)
        token = await self.store.passkeys.issue(link, ENROL_TTL_S)
        return (
            f"🔑 <{self.public_url}/passkeys/{token}|Add a passkey> (or see and remove yours): for rules "
            "that ask approvers to confirm with a passkey. The link is yours alone, for 10 minutes."
        )
