"""Decisions, time limits and escalations, recorded in Redis: `Store`'s part that runs the decide
script (one atomic step per decision: the first wins, the one that completes the set queues the
resume, an action past its limit is expired by Redis's clock), keeps an approval's terms and
takes its deadlines. `Store` is the door; this module only holds a part of its rooms.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from core.keys import Keys, Partition
from core.records import (
    Approval,
    ApprovalStatus,
    Decided,
    DecisionResult,
    Gate,
    Outcome,
    RunState,
    Terms,
    Verdict,
    expiry_decision,
)

T = TypeVar("T")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


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
    """The decisions and deadlines of `Store` (its scripts are registered there)."""

    redis: Any
    keys: Keys
    _deadline_turn: int
    _decide: Any
    _set_terms: Any
    _escalate: Any
    _take_due: Any
    _done_due: Any

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
        ]

    async def decide(
        self,
        approval_id: str,
        index: int,
        decision: Mapping[str, Any],
        user: str,
        gate: Gate | None = None,
        check_only: bool = False,
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
        the set also queues the resume command. `check_only` runs the checks and
        writes nothing (before opening a modal). The caller has checked the
        decision itself with the protocol. A card routed under another policy (it
        changed since) is decided again with the gate's answer for its tools.
        """
        kind = str(decision.get("type", "answer"))
        gate = gate or Gate()
        verdict = await self._decided(approval_id, index, kind, decision, user, gate, check_only, team, seen)
        if verdict.result is DecisionResult.POLICY_CHANGED and gate.for_tools is not None:
            approval = await self.approval(approval_id)
            tools = tuple(a.name for a in approval.request.actions) if approval else ()
            retooled = gate.for_tools(tools or ("",))
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

    async def close_unanswered(self, approval_id: str) -> None:
        """An approval the decide script closed unanswered (no action could be told): off the
        pending lists, its card refreshed, its run ended (it is never resumed; purged in time)."""
        approval = await self.approval(approval_id)
        if approval is not None and approval.status is ApprovalStatus.EXPIRED:
            await self.finish(approval, ApprovalStatus.EXPIRED, approval.error)
            await self.set_run_state(approval.thread_id, RunState.FINISHED, "closed unanswered")

    async def set_terms(self, approval: Approval, terms: Terms) -> bool:
        """Keep the policy's terms with a pending approval and schedule its deadlines, once.

        Besides the terms (JSON, for people), the decide script gets per action: its quorum,
        its time limit (ms, Redis's clock: `created_at` is Redis's) and what its expiry decides,
        the rule that routed it, and its escalation."""
        start = approval.created_at
        fields: dict[str, Any] = {"policy": terms.policy} if terms.policy else {}
        for i, q in terms.quorum.items():
            if q > 1:
                fields[f"quorum:{i}"] = q
        for i, at in terms.expires_at.items():
            decided = expiry_decision(approval, i, terms)
            if decided is not None:
                fields[f"expires:{i}"] = int(at * 1000)
                fields[f"expire_with:{i}"] = decided
        for i, rule in terms.rules.items():
            fields[f"rule:{i}"] = rule
        for i, after in terms.escalate_after.items():
            fields[f"esc_after:{i}"] = after
            fields[f"esc_to:{i}"] = ",".join(terms.escalate_to.get(i, ()))
        due = {f"expire:{approval.approval_id}:{i}": at for i, at in terms.expires_at.items()}
        if terms.remind_every:
            due[f"remind:{approval.approval_id}"] = start + terms.remind_every
        for after in terms.escalations:
            due[f"escalate:{approval.approval_id}:{after}"] = start + after
        pairs = [str(v) for item in fields.items() for v in item]
        deadlines = [v for member, at in due.items() for v in (member, str(int(at * 1000)))]
        return bool(
            await self._set_terms(
                keys=[
                    self.keys.approval(approval.approval_id),
                    self.keys.of_approval(approval.approval_id).deadlines,
                ],
                args=[terms.model_dump_json(), len(fields), *pairs, *deadlines],
            )
        )

    async def escalate(self, approval_id: str, after: int, told: tuple[str, ...] = ()) -> bool:
        """From now on the `escalate_to` stored with the card for the actions escalating after
        `after` seconds may decide them too; True the first time. `told`: who the notice tells,
        for terms stored before per-action escalation (they may then decide every action)."""
        return bool(
            await self._escalate(
                keys=[self.keys.approval(approval_id), self.keys.of_approval(approval_id).audit],
                args=[after, ",".join(told)],
            )
        )

    async def time(self) -> float:
        """Redis's clock (seconds): every deadline and every recorded time is on it."""
        seconds, micros = await self.redis.time()
        return int(seconds) + int(micros) / 1_000_000

    async def take_deadlines(
        self, lease_ms: int, count: int = 10, now: float | None = None
    ) -> list[tuple[str, str]]:
        """Up to `count` (deadline, token) pairs due now, held for `lease_ms`: a sweeper that
        dies holding one lets it come due again, so each fires (its effects are idempotent).
        The partitions are asked in turn, from another one each time, so none waits behind a
        busy one and no more is taken than the sweeper fires within its lease."""
        at = "" if now is None else int(now * 1000)  # "": Redis's clock
        start, self._deadline_turn = self._deadline_turn, (self._deadline_turn + 1) % self.keys.count
        taken: list[tuple[str, str]] = []
        for n in range(self.keys.count):
            partition = self.keys.partitions[(start + n) % self.keys.count]
            reply = await self._take_due(
                keys=[partition.deadlines, partition.deadline_claims], args=[at, lease_ms, count - len(taken)]
            )
            taken += list(zip(reply[::2], reply[1::2], strict=True))
            if len(taken) >= count:
                break
        return taken

    async def done_deadline(self, item: str, token: str, again_at: float | None = None) -> None:
        """Done with a deadline; `again_at` (a time) schedules it once more (the next reminder)."""
        partition = self.keys.of_item(item)
        await self._done_due(
            keys=[partition.deadlines, partition.deadline_claims],
            args=[item, token, "" if again_at is None else int(again_at * 1000)],
        )

    async def deadline_count(self) -> int:
        return sum(await self.each_partition(lambda p: self.redis.zcard(p.deadlines)))
