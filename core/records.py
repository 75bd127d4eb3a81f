"""The records both sides keep in Redis, and their states: pydantic models and enums.

One vocabulary for a run's lifecycle: `RunState` is what a run is doing
(running, waiting for a person, finished, failed), whether it is read from
Redis (the run's state), returned by the runner (`Outcome.state`), or shown on
the run's Slack status line.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.approval_requirements import Requirement
from core.conditions import Call
from core.keys import new_approval_id
from core.policy_file import PolicyFile, spoken
from core.protocol import DecisionRefused, PendingRequest, RequestKind, check_answer
from core.secrets import Redaction, conceal, mask_text, masked_deep, whole_values


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
    AUTO = "auto"  # the policy decided it: a rule with `decide`, no card
    TRUSTED = "trusted"  # approved under a trust grant (`core.grants`), no card


UNASKED = (Outcome.AUTO, Outcome.TRUSTED)  # decided with no card: said in the run's thread


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
    # whether its calls may use (and make) its requester's trust grants: a run POST /runs started
    # may not, unless SIGNOFF_API_GRANTS says so
    grants: bool = True


class Decided(_Record):
    """One person's decision on one action."""

    decision: dict[str, Any]
    user: str
    at: float
    team: str | None = None  # the person's workspace: one install serves one
    outcome: Outcome | None = None  # set when Signoff decided it (expired) or the requester withdrew it
    rule: str | None = None  # the rule that decided it (outcome auto, trusted), as people name it
    grant: dict[str, Any] | None = None  # outcome trusted: {id, by, until (ms), …} (`core.grants`)
    eligible: tuple[int, ...] = ()  # an approval under a `require`: the entries its person may fill
    # an approval proven with a passkey on Signoff's page: {"method": "passkey", "credential": id}
    step_up: dict[str, Any] | None = None


class Terms(_Record):
    """What the policy said when the card went out: kept with the approval, so a policy
    change or a replica with another file does not change a pending request's rules."""

    quorum: dict[int, int] = {}  # action index -> distinct approvals needed (1 when absent)
    # action index -> its rule's `require` (quorum: their counts' sum): every entry met by
    # distinct people
    require: dict[int, tuple[Requirement, ...]] = {}
    expires_at: dict[int, float] = {}  # action index -> when it expires
    timeout: dict[int, int] = {}  # action index -> its time limit, seconds
    remind_every: int | None = None
    escalations: dict[int, tuple[str, ...]] = {}  # after how long (s) -> who is told they may decide
    # per action: its rule's escalation (after how long, s) and who may decide it once escalated;
    # permission comes from here, as the notices do, whatever the policy says by then
    escalate_after: dict[int, int] = {}
    escalate_to: dict[int, tuple[str, ...]] = {}
    question_answer: str | None = None  # a question's answer when it expires
    # which rule of which policy (its fingerprint) routed each action (-1: [defaults]): a click
    # is then checked against that rule only, never by walking the policy
    policy: str = ""
    rules: dict[int, int] = {}
    # action index -> who its rule named as approvers (empty: anyone), as the card showed them;
    # None on a card from before they were kept. What `signoff pending` lists, whatever policy
    # file the operator's shell reads
    approvers: dict[int, tuple[str, ...]] | None = None
    # action index -> why its rule was chosen closed: a `when` could not read the call, so the
    # strictest rule it could have matched applies (`PolicyFile.match`); asked, never trusted
    unread: dict[int, str] = {}
    # the actions whose secret values an approver may open ("Show secret values"): their rule says
    # `reveal = true` and their arguments hold a secret
    reveal: tuple[int, ...] = ()
    # the actions whose Approve needs the approver's passkey (`step_up`), and whose Approve & trust
    # does (`step_up_trust`): the decide script refuses such an approval without the proof
    step_up: tuple[int, ...] = ()
    step_up_trust: tuple[int, ...] = ()


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
    shown_at: float | None = None  # when its card was first visible (Redis's clock): deadlines count from it
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
    grants: bool = True  # its run may use and make trust grants (`Run.grants`)

    @property
    def visible_since(self) -> float:
        """When people could first see it: its card's first post (deadlines count from then), or
        its pause while the card is not out (or for a record from before cards said so)."""
        return self.shown_at or self.created_at

    def expires(self, index: int) -> float | None:
        """When action `index` expires, if it has a time limit."""
        limit = self.terms.timeout.get(index) if self.terms else None
        if not limit:
            return None
        if self.shown_at is None and self.terms is not None and index in self.terms.expires_at:
            return self.terms.expires_at[index]  # (counted from the pause until the card is out)
        return self.visible_since + limit

    def escalated_to(self) -> tuple[str, ...]:
        """Who may decide because of an escalation that happened."""
        levels = self.terms.escalations if self.terms else {}
        return tuple(dict.fromkeys(i for after in self.escalated for i in levels.get(after, ())))

    def quorum(self, index: int) -> int:
        return self.terms.quorum.get(index, 1) if self.terms else 1

    def required(self, index: int) -> tuple[Requirement, ...]:
        """Action `index`'s `require` entries (none: a quorum, or one approval, decides)."""
        return self.terms.require.get(index, ()) if self.terms else ()

    def by_policy(self) -> tuple[int, ...]:
        """The actions decided with no one asked (a rule's `decide`, a trust grant): no card
        shows them."""
        return tuple(i for i, d in sorted(self.decided.items()) if d.outcome in UNASKED)

    @property
    def card_where(self) -> str:
        """The channel the card is in."""
        return self.card_channel or self.channel

    @property
    def size(self) -> int:
        """How many decisions complete it (a question takes one answer)."""
        return max(1, len(self.request.actions))

    def calls(self) -> list[Call]:
        """What a rule's `when` sees of each action (a question: one call of no tool; an MCP
        server's questions: one call of its tool, no arguments), as the approval was created."""
        calls = [(a.name, a.judged_args) for a in self.request.actions] or [(self.request.tool_name, {})]
        requester, now = self.requester or "", self.created_at
        return [Call(tool, args, requester, self.channel, self.graph, now) for tool, args in calls]


def rules_of(approval: Approval, policy: PolicyFile) -> list[int]:
    """Which rule applies to each action (a question: one; -1: `[defaults]`): the rules stored
    with the card's terms when they are this policy's (worked out once, when the card went out),
    else the strictest rule each call could match under this policy, no `when` evaluated
    (`PolicyFile.closed_match`: this is a click's path)."""
    return [rule_of(approval, policy, i) for i in range(approval.size)]


def rule_of(approval: Approval, policy: PolicyFile, index: int) -> int:
    """Which rule applies to action `index` (a question: 0), as `rules_of` says."""
    terms = approval.terms
    if terms is not None and terms.policy == policy.fingerprint and index in terms.rules:
        return terms.rules[index]
    return policy.closed_match(approval.calls()[index]).rule


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
    POLICY_CHANGED = "policy_changed"  # the card was routed under another policy: ask with the tools
    STEP_UP = "step_up"  # this person may approve, with their passkey on Signoff's page: not by a click


UNKNOWN = "unknown"  # a gate value: membership not known yet (a user group not fetched)


def expiry_message(limit: int | None) -> str:
    """What the agent reads when an action expired."""
    within = f"within {spoken(limit)}" if limit else "in time"
    return f"No decision {within}; the call was not run. Do not retry unless asked."


def expiry_decision(approval: Approval, index: int, terms: Terms) -> str | None:
    """What action `index` is decided with when its time limit passes (JSON as the resume sends
    it): a reject the agent can act on, else a respond, a question's configured answer (only if
    it fits the question's schema: else it waits for a person), an MCP server's questions
    cancelled, or "unanswerable" (nothing can be told: the approval closes, nothing runs).
    None: it does not expire."""
    if approval.request.kind is RequestKind.ELICITATION:  # the tool call is cancelled
        return json.dumps({"type": "elicit", "action": "cancel", "content": {}}, separators=(",", ":"))
    if approval.request.kind is RequestKind.QUESTION:
        if terms.question_answer is None:
            return None
        try:
            check_answer(approval.request, terms.question_answer)
        except DecisionRefused:
            return None
        return json.dumps({"answer": terms.question_answer}, separators=(",", ":"))
    message = expiry_message(terms.timeout.get(index))
    allowed = approval.request.actions[index].allowed_decisions
    if "reject" in allowed:
        return json.dumps({"type": "reject", "message": message}, separators=(",", ":"))
    if "respond" in allowed:
        return json.dumps({"type": "respond", "message": message}, separators=(",", ":"))
    return "unanswerable"


@dataclass(frozen=True)
class Gate:
    """What one person may decide, as the decide script applies it in Redis (one round trip).

    A card's terms remember which rule of which policy (its fingerprint) routed each action,
    so the script looks at one rule: `routes[k]` is what the person may do under rule k ("T"
    yes, "F" no, "U" unknown: a user group not read yet), `routes_barred[k]` whether rule k
    bars the requester; `default` / `requester_cannot_decide` are `[defaults]`'. A card of
    another policy (it changed since) is refused by the script as such, and decided again with
    `tools`: the live policy's answer for the action's call, by its tool name (`barred_tools`:
    its requester rule).
    Without a policy (`policy == ""`) every tool not in `tools` gets `default`.

    Escalations come from the card's terms (who the notice told), not from the live policy:
    `ids` are the person and the user groups they are in, `unknown` the groups not read yet.
    """

    default: bool | str = True
    requester_cannot_decide: bool = False
    tools: dict[str, bool | str] = field(default_factory=dict)
    barred_tools: dict[str, bool] = field(default_factory=dict)
    policy: str = ""
    routes: str = ""
    routes_barred: str = ""
    ids: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()
    # the same person's gate answering for one action (approval, index) by the live policy,
    # for a card of another policy
    for_action: Callable[[Approval, int], Gate] | None = field(default=None, compare=False, repr=False)

    def script_json(self) -> dict[str, Any]:
        """The gate as the decide script reads it."""
        return {
            "default": self.default,
            "requester": self.requester_cannot_decide,
            "tools": {
                t: [may, self.barred_tools.get(t, self.requester_cannot_decide)]
                for t, may in self.tools.items()
            },
            "policy": self.policy,
            "routes": self.routes,
            "barred": self.routes_barred,
            "ids": {i: True for i in self.ids},
            "unknown": {i: True for i in self.unknown},
        }


@dataclass(frozen=True)
class Verdict:
    result: DecisionResult
    tool: str = ""
    allowed: tuple[str, ...] = ()
    first: Decided | None = None  # who decided first, when TAKEN
    votes: int = 0  # approvals counted so far, when VOTED or VOTED_ALREADY
    requester: str = ""  # who may withdraw, when NOT_REQUESTER


def approval_for(
    request: PendingRequest,
    run: Run,
    origin: str,
    redact: Callable[[str], Sequence[Redaction]] | None = None,
    known: Sequence[str] = (),
) -> Approval:
    """A new approval record for a pending request of `run`: each action's secrets masked (found
    by name and shape, and the policy's `redact` paths for its tool), the originals kept aside
    (`ActionReview.hidden`); a question's text and an MCP server's messages with any secret the
    run's calls carried (`known`) masked too."""
    request = concealed(request, redact, known)
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
        grants=run.grants,
    )


def concealed(
    request: PendingRequest,
    redact: Callable[[str], Sequence[Redaction]] | None = None,
    known: Sequence[str] = (),
) -> PendingRequest:
    """The request as people may see it: `approval_for`'s masking. A preview (`core.previews`),
    made from the real arguments, is masked for the values the arguments mask whole (line by
    line too, as a diff shows them), every secret the run's calls carried, and by shape."""
    actions = []
    for action in request.actions:
        # (from the real arguments: a request concealed already is concealed the same again)
        rules = tuple(redact(action.name)) if redact else ()
        shown, hidden = conceal(action.real_args, rules)
        # the description may repeat the arguments (HumanInTheLoopMiddleware's "Args: {...}")
        said = mask_text(action.description, [*known, *whole_values(shown, hidden)])
        paths = tuple(rule.text for rule in rules)
        changed = {"args": shown, "hidden": hidden, "description": said, "redacted": paths}
        kept = not hidden and said == action.description and paths == action.redacted
        actions.append(action if kept else action.model_copy(update=changed))
    if any(a.preview is not None for a in actions):  # made from the real arguments: masked too
        secrets = [*known, *(v for a in actions for v in whole_values(a.args, a.hidden))]
        actions = [
            a.model_copy(update={"preview": a.preview.masked(lambda text: mask_text(text, secrets))})
            if a.preview is not None
            else a
            for a in actions
        ]
    update: dict[str, Any] = {"actions": tuple(actions)}
    if request.question is not None:
        update["question"] = masked_deep(request.question, known)
    if request.elicitations:
        update["elicitations"] = tuple(
            e.model_copy(update={"message": mask_text(e.message, known)}) for e in request.elicitations
        )
    return request.model_copy(update=update)
