"""Who may decide what: checked on the server for every click and submission.

Anyone who can see a card can click it, so the clicker is authorised here:
by default everyone; with `SIGNOFF_APPROVERS` only the listed users (U…) or
members of the listed user groups (S…) for that tool (or "*" for any tool);
with `SIGNOFF_REQUESTER_CANNOT_APPROVE` the person who started the run may
not decide its approvals.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from agent_runner.logs import get_logger
from agent_runner.store import Approval

log = get_logger("policy")

GroupMembers = Callable[[str], Awaitable[Iterable[str]]]


class Policy:
    def __init__(
        self,
        approvers: dict[str, tuple[str, ...]] | None = None,
        requester_cannot_approve: bool = False,
        group_members: GroupMembers | None = None,
        cache_seconds: float = 300,
    ):
        self.approvers = approvers or {}
        self.requester_cannot_approve = requester_cannot_approve
        self.group_members = group_members
        self.cache_seconds = cache_seconds
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    def allowed_ids(self, tool: str | None) -> tuple[str, ...] | None:
        """The ids allowed to decide `tool`, or None when anyone may."""
        if tool is not None and tool in self.approvers:
            return self.approvers[tool]
        return self.approvers.get("*")

    async def refusal(self, user: str, approval: Approval, index: int) -> str | None:
        """Why `user` may not decide action `index`, or None."""
        if self.requester_cannot_approve and approval.requester == user:
            return "You started this run, so someone else has to decide its approvals."
        actions = approval.request.actions
        tool = actions[index].name if actions else None
        allowed = self.allowed_ids(tool)
        if allowed is None or user in allowed:
            return None
        try:
            for group in (i for i in allowed if i.startswith("S")):
                if user in await self._members(group):
                    return None
        except Exception as exc:  # Slack unreachable: refuse, say so, change nothing
            log.warning("group_lookup_failed", error=repr(exc))
            return "Signoff could not check the approver groups just now; try again in a moment."
        what = f"`{tool}`" if tool else "this question"
        return f"You are not on the approver list for {what}."

    async def _members(self, group: str) -> frozenset[str]:
        cached = self._groups.get(group)
        if cached and time.monotonic() - cached[0] < self.cache_seconds:
            return cached[1]
        members = frozenset(await self.group_members(group)) if self.group_members else frozenset()
        self._groups[group] = (time.monotonic(), members)
        return members
