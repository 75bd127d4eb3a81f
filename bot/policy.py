"""Who may decide what: checked on the server for every click and submission.

Anyone who can see a card can click it, so the clicker is authorised here:
by default everyone; with `SIGNOFF_APPROVERS` only the listed users (U…) or
members of the listed user groups (S…) for that tool (or "*" for any tool);
with `SIGNOFF_REQUESTER_CANNOT_APPROVE` the person who started the run may
not decide its approvals. The policy turns a person into a `Gate`, which the
decide script in Redis applies to the action's tool in the same step that
records the decision. Group members come from the `GroupDirectory` (memory,
filled in the background), never from a Slack call on the click path; a
group that could not be fetched yet makes the answer "unknown", and the
decide script refuses such a click without writing anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent_runner.records import UNKNOWN, Gate
from bot.groups import GroupDirectory


class Policy:
    def __init__(
        self,
        approvers: dict[str, tuple[str, ...]] | None = None,
        requester_cannot_approve: bool = False,
        directory: GroupDirectory | None = None,
    ):
        self.approvers = approvers or {}
        self.requester_cannot_approve = requester_cannot_approve
        self.directory = directory

    def gate(self, user: str) -> Gate:
        """What `user` may decide, per tool (True, False, or UNKNOWN while a group is not loaded)."""
        tools = {
            tool: _gate_value(self.member(user, ids)) for tool, ids in self.approvers.items() if tool != "*"
        }
        default = _gate_value(self.member(user, self.approvers["*"])) if "*" in self.approvers else True
        return Gate(default, tools, self.requester_cannot_approve)

    def member(self, user: str, ids: Iterable[str]) -> bool | None:
        """Whether `user` is one of `ids`, directly or through a user group (S…); None if unknown."""
        ids = tuple(ids)
        if user in ids:
            return True
        unknown = False
        for group in (i for i in ids if i.startswith("S")):
            members = self.directory.members(group) if self.directory else frozenset()
            if members is None:
                unknown = True
            elif user in members:
                return True
        return None if unknown else False


def _gate_value(member: bool | None) -> bool | str:
    return UNKNOWN if member is None else member
