"""The people of the tests: Slack user ids (Riley asks; Alice, Bob, Carol and the lead decide),
and the user groups they are in."""

from __future__ import annotations

ALICE, BOB, CAROL, LEAD, RILEY = "U0ALICE", "U0BOB", "U0CAROL", "U0LEAD", "U0RILEY"


class Directory:
    """The user groups' members, as the bot's GroupDirectory answers from memory (None: not read
    yet); `change` is a refresh that read other members."""

    def __init__(self, groups: dict[str, frozenset[str] | None]):
        self._members = dict(groups)
        self.groups = sorted(groups)
        self.version = 0

    def members(self, group: str) -> frozenset[str] | None:
        return self._members.get(group)

    def fresh_until(self) -> float:
        return float("inf")

    def change(self, group: str, members: frozenset[str] | None) -> None:
        self._members[group] = members
        self.version += 1  # (what the bot's directory does when a refresh read something new)
