"""What the policy says about one call: its `Route` (its rule merged with `[defaults]`), and
which rule applies to it (`Match`), with what makes one route stricter or weaker than another
(the fail-closed choice of `PolicyFile.match`, and the start-up check against a weaker rule
catching what a `when` says no to)."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import BaseModel

from core.approval_requirements import Requirement


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
    reveal: bool = False  # an approver may open "Show secret values" (audited)
    step_up: str | None = None  # "passkey": Approve needs the approver's passkey, not a click
    step_up_trust: str | None = None  # "passkey": Approve & trust does (so does any step_up)

    @property
    def approvals_needed(self) -> int:
        """Distinct approvals an action of this route needs: its quorum, or its entries' counts."""
        return sum(entry.count for entry in self.require) if self.require else self.quorum

    @property
    def strictness(self) -> tuple[bool, int, bool, bool, bool]:
        """What makes a route stricter, in order: it asks people (no `decide`), it needs more
        approvals, it names who approves (not anyone), it bars the requester, it asks for a
        passkey."""
        return (
            self.decide is None,
            self.approvals_needed,
            bool(self.approvers),
            not self.requester_may_approve,
            self.step_up is not None,
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
        if other.step_up and not self.step_up:
            return "approves with a click where that rule asks for a passkey"
        return None


class Match(NamedTuple):
    """Which rule applies to a call (-1: `[defaults]`), and why it was chosen closed when a
    `when` could not read the call ("" when every condition gave true or false)."""

    rule: int
    failed: str = ""


def weaker_words(later: str, above: str, how: str) -> str:
    return (
        f"{later} catches every call the `when` of {above} above it says no to, and {how}: give it a "
        f'`when` of its own (an allow-list), or set fallthrough = "deliberate" on it'
    )


@functools.lru_cache(maxsize=4_096)
def tools_overlap(one: str, other: str) -> bool:
    """Whether two tool globs (`*` any run, `?` one character) match some name in common: the
    intersection of the two patterns, walked together."""

    @functools.cache
    def meet(i: int, j: int) -> bool:
        if i == len(one) and j == len(other):
            return True
        if i < len(one) and one[i] == "*" and (meet(i + 1, j) or (j < len(other) and meet(i, j + 1))):
            return True
        if j < len(other) and other[j] == "*" and (meet(i, j + 1) or (i < len(one) and meet(i + 1, j))):
            return True
        if i < len(one) and j < len(other) and one[i] != "*" and other[j] != "*":
            fits = one[i] == other[j] or "?" in (one[i], other[j])
            return fits and meet(i + 1, j + 1)
        return False

    return meet(0, 0)


def tools_cover(wide: str, narrow: str) -> bool:
    """Whether every tool `narrow` matches, `wide` matches too (conservatively: when unsure, no)."""
    if wide in ("*", narrow):
        return True
    if not any(c in narrow for c in "*?"):
        return fnmatch.fnmatchcase(narrow, wide)
    prefix = wide[:-1]
    return wide.endswith("*") and not any(c in prefix for c in "*?") and narrow.startswith(prefix)


def route_fingerprint(rule: dict[str, Any], route: Route) -> str:
    """Names what a rule says (`rule`: its keys as JSON), with what it inherits from `[defaults]`
    (who approves, how many, the requester rule): an edit to either ends the rule's grants; an
    edit elsewhere does not."""
    fields = dataclasses.asdict(route).items()  # (a step-up unset names what it named before it)
    kept = {k: v for k, v in fields if k != "reveal" and (v is not None or not k.startswith("step_up"))}
    said = {"rule": rule, "route": kept}
    text = json.dumps(said, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)
