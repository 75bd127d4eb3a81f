"""The records both sides keep in Redis, and their states: pydantic models and enums.

One vocabulary for a run's lifecycle: `RunState` is what a run is doing
(running, waiting for a person, finished, failed), whether it is read from
Redis (the run's state), returned by the runner (`Outcome.state`), or shown on
the run's Slack status line.
"""

from __future__ import annotations

import fnmatch
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_runner.keys import new_approval_id
from agent_runner.protocol import PendingRequest


def new_id() -> str:
    return uuid.uuid4().hex[:16]


class RunState(StrEnum):
    RUNNING = "running"  # the graph is working
    WAITING = "waiting"  # paused: an approval is pending
    FINISHED = "finished"  # answered; a new message continues it
    FAILED = "failed"  # the last step raised; Retry continues it


class ApprovalStatus(StrEnum):
    PENDING = "pending"  # waiting for decisions
    RESUMING = "resuming"  # every action decided; the resume command is queued
    RESUMED = "resumed"  # the runner resumed the thread with it
    FAILED = "failed"  # the runner refused the set (the error is on the record; offered again)
    EXPIRED = "expired"  # closed unanswered: a time limit passed on an action that allows no reject


class Outcome(StrEnum):
    """How an action was decided when no one clicked its buttons."""

    EXPIRED = "expired"  # its time limit passed: rejected (fail closed)
    WITHDRAWN = "withdrawn"  # the requester withdrew the request


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Run(_Record):
    """Where a LangGraph thread talks in Slack, and who started it."""

    thread_id: str
    graph: str
    channel: str
    thread_ts: str | None = None
    requester: str | None = None
    task: str = ""


class Decided(_Record):
    """One person's decision on one action."""

    decision: dict[str, Any]
    user: str
    at: float
    team: str | None = None  # the person's workspace: one install serves one
    outcome: Outcome | None = None  # set when Signoff decided it (expired) or the requester withdrew it


class Terms(_Record):
    """What the policy said when the card went out: kept with the approval, so a policy
    change or a replica with another file does not change a pending request's rules."""

    quorum: dict[int, int] = {}  # action index -> distinct approvals needed (1 when absent)
    expires_at: dict[int, float] = {}  # action index -> when it expires
    timeout: dict[int, int] = {}  # action index -> its time limit, seconds
    remind_every: int | None = None
    escalations: dict[int, tuple[str, ...]] = {}  # after how long (s) -> who may decide too from then
    question_answer: str | None = None  # a question's answer when it expires


class Approval(_Record):
    """One pending interrupt, as the bot shows it and the runner resumes it."""

    approval_id: str
    thread_id: str
    interrupt_id: str
    graph: str
    request: PendingRequest
    origin: str
    channel: str
    thread_ts: str | None = None
    requester: str | None = None
    created_at: float
    status: ApprovalStatus = ApprovalStatus.PENDING
    card_ts: str | None = None
    card_channel: str | None = None  # where the card is, when the policy routes it out of the run's channel
    decided: dict[int, Decided] = {}  # action index -> who decided it, when, how
    resumed_at: float | None = None
    error: str | None = None
    replaced_by: str | None = None  # a refused set: the approval that offers the pause again
    terms: Terms | None = None  # time limits and quorum, once the bot has set them
    escalated: tuple[int, ...] = ()  # the escalations (their `after`) that have happened
    votes: dict[int, list[Decided]] = {}  # action index -> approvals so far (quorum > 1)
    proposals: dict[int, Decided] = {}  # action index -> the edit waiting for the quorum
    revisions: dict[int, int] = {}  # action index -> edits proposed so far (an Approve names the one it saw)

    def escalated_to(self) -> tuple[str, ...]:
        """Who may decide because of an escalation that happened."""
        levels = self.terms.escalations if self.terms else {}
        return tuple(dict.fromkeys(i for after in self.escalated for i in levels.get(after, ())))

    def quorum(self, index: int) -> int:
        return self.terms.quorum.get(index, 1) if self.terms else 1

    @property
    def card_where(self) -> str:
        """The channel the card is in."""
        return self.card_channel or self.channel

    @property
    def size(self) -> int:
        """How many decisions complete it (a question takes one answer)."""
        return max(1, len(self.request.actions))


class DecisionResult(StrEnum):
    RECORDED = "recorded"  # stored; more actions wait
    COMPLETE = "complete"  # stored, and the resume command is queued
    ALLOWED = "allowed"  # (check only) this person may decide this action now
    TAKEN = "taken"  # someone decided this action first
    NOT_PENDING = "not_pending"  # the approval is resuming or done
    MISSING = "missing"  # no such approval
    NO_ACTION = "no_action"  # no such action in it
    NOT_ALLOWED = "not_allowed"  # that decision type is not allowed for the action
    REQUESTER = "requester"  # the requester may not decide (when that rule is on)
    NOT_APPROVER = "not_approver"  # not on the approver list for the tool
    GROUPS_UNKNOWN = "groups_unknown"  # the approver groups could not be loaded yet: try again
    VOTED = "voted"  # an approval counted; the quorum is not reached yet
    VOTED_ALREADY = "voted_already"  # this person's approval counts already (once)
    CHANGED = "changed"  # the arguments were edited since the card the person clicked was drawn
    NOT_REQUESTER = "not_requester"  # only the requester may withdraw
    UNANSWERABLE = "unanswerable"  # closed without a resume: an action allows neither reject nor respond


UNKNOWN = "unknown"  # a gate value: membership not known yet (a user group not fetched)


@dataclass(frozen=True)
class GateRule:
    """One policy rule as it applies to one person: the tools it covers (names or globs
    with * and ?), whether the person may decide them, and whether a requester may not."""

    tools: tuple[str, ...]
    may: bool | str
    requester_cannot_decide: bool = False
    escalated: bool | str = False  # may decide once the rule's escalation happened (escalate_to)
    escalate_after: int | None = None  # the rule's escalation, by its `escalate_after` (s)


@dataclass(frozen=True)
class Gate:
    """What one person may decide: the first rule whose tools match a tool decides,
    else `default`; `tools` is shorthand for rules of one exact name each.

    A value is True, False or UNKNOWN (refused, nothing written, "try again"). The
    decide script applies it in Redis (`scripts.GLOB_MATCH`); `may` does in Python.
    """

    default: bool | str = True
    tools: dict[str, bool | str] = field(default_factory=dict)
    requester_cannot_decide: bool = False
    rules: tuple[GateRule, ...] = ()
    default_escalated: bool | str = False
    default_escalate_after: int | None = None

    def all_rules(self) -> tuple[GateRule, ...]:
        named = tuple(GateRule((t,), may, self.requester_cannot_decide) for t, may in self.tools.items())
        return named + self.rules

    def may(self, tool: str, escalated: tuple[int, ...] = ()) -> tuple[bool | str, bool]:
        """(may decide, requester barred) for `tool`; `escalated`: the escalations that happened."""
        for rule in self.all_rules():
            if any(fnmatch.fnmatchcase(tool, pattern) for pattern in rule.tools):
                extra = rule.escalated if rule.escalate_after in escalated else False
                return _or_escalated(rule.may, extra), rule.requester_cannot_decide
        extra = self.default_escalated if self.default_escalate_after in escalated else False
        return _or_escalated(self.default, extra), self.requester_cannot_decide

    def script_json(self) -> dict[str, Any]:
        """The gate as the decide script reads it."""
        return {
            "default": {
                "may": self.default,
                "requester": self.requester_cannot_decide,
                "escalated": self.default_escalated,
                "after": self.default_escalate_after or False,
            },
            "rules": [
                {
                    "tools": list(rule.tools),
                    "may": rule.may,
                    "requester": rule.requester_cannot_decide,
                    "escalated": rule.escalated,
                    "after": rule.escalate_after or False,
                }
                for rule in self.all_rules()
            ],
        }


def _or_escalated(may: bool | str, escalated_may: bool | str) -> bool | str:
    """As the decide script: once a rule's escalation happened, its `escalate_to` may decide too."""
    if may is not True and escalated_may:
        return True if escalated_may is True else UNKNOWN
    return may


@dataclass(frozen=True)
class Verdict:
    result: DecisionResult
    tool: str = ""
    allowed: tuple[str, ...] = ()
    first: Decided | None = None  # who decided first, when TAKEN
    votes: int = 0  # approvals counted so far, when VOTED or VOTED_ALREADY
    requester: str = ""  # who may withdraw, when NOT_REQUESTER


def approval_for(request: PendingRequest, run: Run, origin: str) -> Approval:
    """A new approval record for a pending request of `run`."""
    return Approval(
        approval_id=new_approval_id(run.thread_id),
        thread_id=run.thread_id,
        interrupt_id=request.interrupt_id,
        graph=run.graph,
        request=request,
        origin=origin,
        channel=run.channel,
        thread_ts=run.thread_ts,
        requester=run.requester,
        created_at=time.time(),
    )
