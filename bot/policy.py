"""Who may decide what: checked on the server for every click and submission.

Anyone who can see a card can click it, so the clicker is authorised here:
by default everyone; with `SIGNOFF_APPROVERS` only the listed users (U…) or
members of the listed user groups (S…) for that tool (or "*" for any tool);
with `SIGNOFF_REQUESTER_CANNOT_APPROVE` the person who started the run may
not decide its approvals. The policy turns a person into a `Gate`, which the
decide script in Redis applies to the action's tool in the same step that
records the decision.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from agent_runner.store import Gate

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

    async def gate(self, user: str) -> Gate:
        """What `user` may decide. Group lists are cached, so a click rarely waits on Slack;
        if Slack cannot say who is in a group, this raises and the click is refused."""
        tools = {tool: await self.member(user, ids) for tool, ids in self.approvers.items() if tool != "*"}
        default = await self.member(user, self.approvers["*"]) if "*" in self.approvers else True
        return Gate(default, tools, self.requester_cannot_approve)

    async def member(self, user: str, ids: Iterable[str]) -> bool:
        """Whether `user` is one of `ids`, directly or through a user group (S…)."""
        ids = tuple(ids)
        if user in ids:
            return True
        for group in (i for i in ids if i.startswith("S")):
            if user in await self._members(group):
                return True
        return False

    async def _members(self, group: str) -> frozenset[str]:
        cached = self._groups.get(group)
        if cached and time.monotonic() - cached[0] < self.cache_seconds:
            return cached[1]
        members = frozenset(await self.group_members(group)) if self.group_members else frozenset()
        self._groups[group] = (time.monotonic(), members)
        return members
