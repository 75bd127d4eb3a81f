"""What the policy says about one call: its `Route` (its rule merged with `[defaults]`), and
which rule applies to it (`Match`), with what makes one route stricter or weaker than another
(the fail-closed choice of `PolicyFile.match`, and the start-up check against a weaker rule
catching what a `when` says no to)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from core.requirements import Requirement


@dataclass(frozen=True)
class Route:
    """What the policy says about one tool: merged from its rule and `[defaults]`."""

    approvers: tuple[str, ...]  # empty: anyone who sees the card
    requester_may_approve: bool
    notify: str
    channel: str | None
    summary: str | None
    rule: int | None  # the index of the rule that matched, None for `[defaults]`
    timeout: int | None = None  # seconds
    remind_every: int | None = None
    escalate_after: int | None = None
    escalate_to: tuple[str, ...] = ()
    quorum: int = 1
    name: str | None = None  # the rule's name, for people
    decide: str | None = None  # "approve" or "reject": the policy decides, no one is asked
    message: str | None = None  # a decided reject's message
    require: tuple[Requirement, ...] = ()  # every entry met by distinct people (approvers: theirs)
    trust: int | None = None  # seconds a grant lasts: the card offers "Approve & trust"
    trust_args: tuple[str, ...] | None = None  # the arguments a grant compares (None: all)
    trust_uses: int | None = None  # calls a grant lets through (None: until it expires)
    trust_scope: str = "channel"  # where a grant holds: the run's channel, or "anywhere"
    fingerprint: str = ""  # names the rule alone: a grant holds under the rule that made it

    @property
    def approvals_needed(self) -> int:
        """Distinct approvals an action of this route needs: its quorum, or its entries' counts."""
        return sum(entry.count for entry in self.require) if self.require else self.quorum

    @property
    def strictness(self) -> tuple[bool, int, bool, bool]:
        """What makes a route stricter, in order: it asks people (no `decide`), it needs more
        approvals, it names who approves (not anyone), it bars the requester."""
        return (
            self.decide is None,
            self.approvals_needed,
            bool(self.approvers),
            not self.requester_may_approve,
        )

    def weaker_than(self, other: Route) -> str | None:
        """How this route lets through what `other` would hold back, if it does (in words)."""
        if self.decide == "approve" and other.decide != "approve":
            return "approves by itself"
        if self.decide is not None or other.decide is not None:
            return None  # (a reject is never weaker; a rule that decides asks no one)
        if self.approvals_needed < other.approvals_needed:
            needed = self.approvals_needed
            return f"needs {needed} approval{'s' if needed > 1 else ''}, not {other.approvals_needed}"
        if other.approvers and not self.approvers:
            return "lets anyone approve"
        if self.requester_may_approve and not other.requester_may_approve:
            return "lets the requester approve"
        return None


class Match(NamedTuple):
    """Which rule applies to a call (-1: `[defaults]`), and why it was chosen closed when a
    `when` could not read the call ("" when every condition gave true or false)."""

    rule: int
    failed: str = ""
