"""Decisions recorded in Redis: `Store`'s part that runs the decide script (one atomic step per
decision: the first wins, the one that completes the set queues the resume, an action past its
limit is expired by Redis's clock). `Store` is the door; this is one of its rooms (the terms and
deadlines are `core.store.deadlines`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from core.keys import Keys, Partition
from core.protocol import PersonDecision, decision_payload
from core.records import (
    Approval,
    ApprovalStatus,
    Decided,
    DecisionResult,
    Gate,
    Outcome,
    RunState,
    Verdict,
)
from core.store.client import dumps

T = TypeVar("T")


SIGNOFF = "signoff"  # who decided, when no person did (an expiry)


def _verdict(reply: list[str]) -> Verdict:
    result = DecisionResult(reply[0])
    tool = reply[1] if len(reply) > 1 else ""
    allowed = tuple(reply[2].split(",")) if len(reply) > 2 and reply[2] else ()
    first = Decided.model_validate_json(reply[3]) if result is DecisionResult.TAKEN else None
    votes = int(reply[4]) if len(reply) > 4 and reply[4] else 0
    requester = reply[3] if result is DecisionResult.NOT_REQUESTER and len(reply) > 3 else ""
    return Verdict(result, tool, allowed, first, votes, requester)


class Decisions:
    """The decisions of `Store` (its scripts are registered there)."""

    redis: Any
    keys: Keys
    _decide: Any

    if TYPE_CHECKING:  # Store's own, which this is a part of

        async def each_partition(self, call: Callable[[Partition], Awaitable[T]]) -> list[T]: ...

        async def approval(self, approval_id: str) -> Approval | None: ...

        async def finish(
            self,
            approval: Approval,
            status: ApprovalStatus,
            error: str | None = None,
            replaced_by: str | None = None,
        ) -> None: ...

        async def set_run_state(
            self, thread_id: str, state: RunState, detail: str = "", tool: str = "", debounce_ms: int = 300
        ) -> None: ...

    def _decide_keys(self, approval_id: str) -> list[str]:
        partition = self.keys.of_approval(approval_id)
        return [
            self.keys.approval(approval_id),
            self.keys.decided(approval_id),
            self.keys.decisions(approval_id),
            partition.commands,
            partition.audit,
            self.keys.votes(approval_id),
            partition.audit_head,
        ]

    async def decide(
        self,
        approval_id: str,
        index: int,
        decision: PersonDecision,
        user: str,
        gate: Gate | None = None,
        team: str | None = None,
        seen: int | None = None,
    ) -> Verdict:
        """Check and record one decision in one atomic step (one round trip).

        The script refuses a missing approval or action, a decided action (the
        first decision wins), a closed approval, an action past its time limit
        (expiring it, by Redis's clock), a type the action does not allow, and a
        person the gate does not let decide. With a quorum, an approval is counted
        (once per person) until the quorum is reached, and an edit becomes a
        proposal that needs it; `seen` is the proposal the person's card showed
        (an approval of older arguments is refused). The decision that completes
        the set also queues the resume command. The caller has checked the
        decision itself with the protocol. A card routed under another policy (it
        changed since) is decided again with the gate's answer for the action's call.
        """
        return await self._checked_or_decided(
            approval_id, index, decision.type, decision_payload(decision), user, gate, team=team, seen=seen
        )

    async def check(
        self, approval_id: str, index: int, kind: str, user: str, gate: Gate | None = None
    ) -> Verdict:
        """The decide script's checks for a decision of `kind` by `user`, writing nothing (before
        a form opens: the person is refused at once rather than after filling it in)."""
        return await self._checked_or_decided(
            approval_id, index, kind, {"type": kind}, user, gate, check_only=True
        )

    async def _checked_or_decided(
        self,
        approval_id: str,
        index: int,
        kind: str,
        decision: Mapping[str, Any],
        user: str,
        gate: Gate | None,
        *,
        check_only: bool = False,
        team: str | None = None,
        seen: int | None = None,
    ) -> Verdict:
        gate = gate or Gate()
        verdict = await self._decided(approval_id, index, kind, decision, user, gate, check_only, team, seen)
        if verdict.result is DecisionResult.POLICY_CHANGED and gate.for_action is not None:
            approval = await self.approval(approval_id)
            if approval is None or not 0 <= index < approval.size:
                return Verdict(DecisionResult.MISSING if approval is None else DecisionResult.NO_ACTION)
            retooled = gate.for_action(approval, index)
            verdict = await self._decided(
                approval_id, index, kind, decision, user, retooled, check_only, team, seen
            )
        return verdict

    async def _decided(
        self,
        approval_id: str,
        index: int,
        kind: str,
        decision: Mapping[str, Any],
        user: str,
        gate: Gate,
        check_only: bool,
        team: str | None,
        seen: int | None,
    ) -> Verdict:
        reply = await self._decide(
            keys=self._decide_keys(approval_id),
            args=[
                str(index),
                kind,
                dumps(decision),
                user,
                team or "",
                dumps(gate.script_json()),
                "check" if check_only else "record",
                "" if seen is None else str(seen),
            ],
        )
        return _verdict(reply)

    async def decide_for_people(
        self,
        approval_id: str,
        outcome: Outcome,
        message: str,
        user: str = SIGNOFF,
        index: int | None = None,
        answer: Any = None,
        team: str | None = None,
    ) -> Verdict:
        """Decide every undecided action (or action `index`) for the people: an expiry or a
        withdrawal, through the decide script, so it and any click end in exactly one outcome.

        Each action is rejected with `message` (or, allowing no reject, responded with it; a
        question gets `answer`); an action that allows neither closes the approval unanswered.
        What an expiry decides was stored with the terms (`set_terms`) and wins; an action past
        its time limit is expired, not withdrawn.
        """
        first = {"answer": answer} if answer is not None else {"type": "reject", "message": message}
        reply = await self._decide(
            keys=self._decide_keys(approval_id),
            args=[
                "*" if index is None else str(index),
                outcome.value,
                dumps(first),
                user,
                team or "",  # (the requester's workspace, for a withdrawal)
                "{}",
                "close",
                "",
                dumps({"type": "respond", "message": message}),
            ],
        )
        verdict = _verdict(reply)
        if verdict.result is DecisionResult.UNANSWERABLE:
            await self.close_unanswered(approval_id)
        return verdict

    async def decide_by_policy(
        self, approval_id: str, index: int, decision: Mapping[str, Any], rule: str
    ) -> Verdict:
        """Record the policy's decision (a rule's `decide`) for action `index`, as `signoff` with
        outcome auto, naming `rule` in the record and the audit: through the decide script, so
        the first decision still wins (a second replica's is a no-op). Refused as not_allowed
        when the action does not allow that decision type: then people decide it."""
        return await self._unasked(approval_id, index, Outcome.AUTO, decision, rule)

    async def decide_trusted(
        self, approval_id: str, index: int, grant: Mapping[str, Any], rule: str
    ) -> Verdict:
        """Approve action `index` under a trust grant (`grant`: what `use_grant` returned), as
        `signoff` with outcome trusted, naming the grant, who granted it and `rule` in the record
        and the audit; through the decide script, so the first decision wins."""
        return await self._unasked(approval_id, index, Outcome.TRUSTED, {"type": "approve"}, rule, grant)

    async def _unasked(
        self,
        approval_id: str,
        index: int,
        outcome: Outcome,
        decision: Mapping[str, Any],
        rule: str,
        grant: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """A decision no one was asked for (outcome auto or trusted), through the decide script."""
        args = [str(index), outcome.value, dumps(decision), SIGNOFF, "", "{}", "close", "", ""]
        args += [str(decision["type"]), rule, *([dumps(grant)] if grant is not None else [])]
        return _verdict(await self._decide(keys=self._decide_keys(approval_id), args=args))

    async def close_unanswered(self, approval_id: str) -> None:
        """An approval the decide script closed unanswered (no action could be told): off the
        pending lists, its card refreshed, its run ended (it is never resumed; purged in time)."""
        approval = await self.approval(approval_id)
        if approval is not None and approval.status is ApprovalStatus.EXPIRED:
            await self.finish(approval, ApprovalStatus.EXPIRED, approval.error)
            await self.set_run_state(approval.thread_id, RunState.FINISHED, "closed unanswered")
