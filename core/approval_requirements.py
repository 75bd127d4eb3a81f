"""Compound approvals (a rule's `require`): which approvals fill which entry.

Every entry (`count` people of its `approvers`) must be met by distinct people, one person
counting toward one entry only. Whom to count where is not decided when a person approves (a
greedy choice can be wrong: someone who may fill either entry, counted for the one that others
could fill too, leaves the scarce one empty); it is a bipartite matching, worked out again over
every approval so far each time one is added. The set is met when the largest matching fills
every entry. Augmenting paths (Kuhn's algorithm, entries holding `count` people each) find it:
at most 20 approvals count in all, so the work stays tiny.

The decide script does it in Lua (`MATCH_LUA`, composed into it: the step that records the
approval decides whether the set is complete); the card draws the same matching (`matched`),
approvals in the order they were given, to show who fills which entry.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

ApproverId = Annotated[str, StringConstraints(pattern=r"^[UWS][A-Z0-9]{2,32}$")]  # a person or a group
Quorum = Annotated[int, Field(ge=1, le=20)]
# A rule's (or an entry's) name on the card: one line of plain words.
RuleName = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f]{1,80}$")]


class Requirement(BaseModel):
    """One entry of a rule's `require`: `count` distinct people of `approvers` must approve (a
    person counts toward one entry only; `matched` assigns them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: RuleName | None = None  # what the card calls the entry; else its approvers' names
    approvers: tuple[ApproverId, ...] = Field(min_length=1)
    count: Quorum

    @model_validator(mode="after")
    def _enough_people(self) -> Requirement:
        named = set(self.approvers)
        if not any(p.startswith("S") for p in named) and len(named) < self.count:
            raise ValueError(f"count: {self.count} distinct approvers needed, {len(named)} named")
        return self


def matched(counts: list[int], eligible: list[list[int]]) -> tuple[int, list[int | None]]:
    """The largest assignment of approvals to entries: how many it counts, and the entry each
    approval fills (None: it fills none). `counts[k]`: people entry k needs; `eligible[v]`: the
    entries approval v may fill."""
    holders: list[list[int]] = [[] for _ in counts]
    assigned: list[int | None] = [None] * len(eligible)

    def place(vote: int, seen: set[int]) -> bool:
        for entry in eligible[vote]:
            if entry in seen or not 0 <= entry < len(counts):
                continue
            seen.add(entry)
            if len(holders[entry]) < counts[entry]:
                holders[entry].append(vote)
                assigned[vote] = entry
                return True
            for n, other in enumerate(holders[entry]):
                if place(other, seen):  # `other` moved to another entry: `vote` takes its seat
                    holders[entry][n] = vote
                    assigned[vote] = entry
                    return True
        return False

    size = sum(1 for vote in range(len(eligible)) if place(vote, set()))
    return size, assigned


def require_alone(
    quorum: int | None, approvers: tuple[str, ...] | None, entries: tuple[Requirement, ...]
) -> None:
    """`require` names who approves and how many: `approvers` and `quorum` (its one-entry
    shorthand) beside it would say it twice (ValueError); at most 20 approvals, by distinct people."""
    if quorum is not None:
        raise ValueError("require: quorum is require's one-entry shorthand: set one of them, not both")
    if approvers is not None:
        raise ValueError("require: each entry names its approvers: drop the rule's approvers")
    if not 1 <= len(entries) <= 10:
        raise ValueError(f"require: 1 to 10 entries ({len(entries)} given)")
    total = sum(entry.count for entry in entries)
    if total > 20:
        raise ValueError(f"require: at most 20 approvals in all ({total} asked)")
    if not any(p.startswith("S") for entry in entries for p in entry.approvers):
        people = sorted({p for entry in entries for p in entry.approvers})
        eligible = [[k for k, e in enumerate(entries) if p in e.approvers] for p in people]
        if matched([e.count for e in entries], eligible)[0] < total:
            raise ValueError(
                f"require: {total} approvals by distinct people cannot be found among those named"
            )
