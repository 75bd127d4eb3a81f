"""Time limits, reminders and escalations: durable deadlines, each fired once.

When a card goes out, the bot keeps the policy's terms with the approval and
schedules its deadlines in one sorted set in Redis (`Store.set_terms`), not in
a process's memory: a restart of every process loses none, and a deadline
that passed while everything was down fires on start. Every bot replica runs
this sweeper; a deadline is taken with a lease (as card refreshes are), so
one replica fires it, and a replica that dies holding it lets it come due
again. What firing does is idempotent: an expiry goes through the decide
script (an expiry racing a click ends in exactly one outcome), and each
reminder or escalation notice is posted once (`remind:<id>:<n>`).

* `expire:<approval>:<index>`: the action is rejected with a message the
  agent can act on, or (allowing no reject) responded with it; a question is
  answered with `[questions].answer`; the card says "Expired".
* `remind:<approval>`: the people who may still decide are notified again,
  with how long it has waited; then it is scheduled for the next period.
* `escalate:<approval>:<after>`: the `escalate_to` of the rules escalating after
  that long may decide it from now on (their own actions only), and hear so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from agent_runner.health import Health
from agent_runner.logs import get_logger
from agent_runner.metrics import OUTCOMES, REDIS_OUTAGES
from agent_runner.policy_file import spoken
from agent_runner.protocol import DecisionRefused, RequestKind, check_answer
from agent_runner.records import Approval, ApprovalStatus, DecisionResult, Outcome, Verdict
from agent_runner.store import Store
from agent_runner.streams import OUTAGE, Backoff, pause
from bot.routing import Router
from bot.text import escape

log = get_logger("deadlines")


def expiry_message(limit: int | None) -> str:
    """What the agent reads when an action expired."""
    within = f"within {spoken(limit)}" if limit else "in time"
    return f"No decision {within}; the call was not run. Do not retry unless asked."


class Deadlines:
    name = "deadline sweeper"

    def __init__(
        self,
        store: Store,
        router: Router,
        health: Health | None = None,
        lease_ms: int = 30_000,
        batch: int = 10,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.router = router
        self.health = health or Health()
        self.lease_ms = lease_ms
        self.batch = batch
        self.clock = clock
        self._failures: dict[str, int] = {}

    async def serve(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        while not stop.is_set():
            try:
                fired = await self.sweep()
                self.health.up(self.name)
                backoff.reset()
                if not fired:
                    await pause(stop, 0.2)
            except OUTAGE as exc:
                self.health.down(self.name, f"Redis unavailable: {type(exc).__name__}")
                log.warning("redis_unavailable", loop=self.name, error=repr(exc))
                REDIS_OUTAGES.labels(self.name).inc()
                await pause(stop, backoff.next())

    async def sweep(self) -> int:
        """Fire what is due now; returns how many deadlines were taken."""
        due = await self.store.take_deadlines(self.lease_ms, self.batch, now=self.clock())
        for item, token in due:
            await self.fire(item, token)
        return len(due)

    async def fire(self, item: str, token: str) -> None:
        kind, _, rest = item.partition(":")
        approval_id, _, index = rest.partition(":")
        again: float | None = None
        with structlog.contextvars.bound_contextvars(approval_id=approval_id, deadline=kind):
            try:
                approval = await self.store.approval(approval_id)
                if approval is not None and approval.terms:
                    with structlog.contextvars.bound_contextvars(
                        thread_id=approval.thread_id, interrupt_id=approval.interrupt_id
                    ):
                        if kind == "expire":  # (again after a failed notice: it is said once)
                            await self.expire(approval, int(index))
                        elif approval.status is not ApprovalStatus.PENDING:
                            pass  # decided: no reminder, no escalation
                        elif kind == "remind":
                            again = await self.remind(approval)
                        elif kind == "escalate":
                            await self.escalate(approval, int(index))
                self._failures.pop(item, None)
            except OUTAGE:
                raise
            except Exception as exc:  # Slack failed or refused: try again in a moment, a few times
                again = self._again(item, repr(exc))
        await self.store.done_deadline(item, token, again)

    async def expire(self, approval: Approval, index: int) -> None:
        terms = approval.terms
        assert terms is not None
        limit = terms.timeout.get(index)
        answer = None
        if approval.request.kind is RequestKind.QUESTION:
            answer = terms.question_answer
        if answer is not None and approval.status is ApprovalStatus.PENDING:
            try:
                check_answer(approval.request, answer)
            except DecisionRefused as refused:  # never an answer the graph would refuse
                log.error("question_cannot_expire", reason=str(refused))
                await self.router.slack.thread_reply(
                    approval,
                    f"⌛ This question is past its time limit ({spoken(limit or 0)}), but the configured "
                    "answer does not fit the form it asks for, so it still waits for a person.",
                    f"expired:{approval.approval_id}:{index}",
                )
                return
        verdict = await self.store.decide_for_people(
            approval.approval_id, Outcome.EXPIRED, expiry_message(limit), index=index, answer=answer
        )
        expired = verdict.result in (
            DecisionResult.RECORDED,
            DecisionResult.COMPLETE,
            DecisionResult.UNANSWERABLE,
        )
        if expired:
            log.info("approval_expired", index=index, result=verdict.result.value, limit_s=limit)
            OUTCOMES.labels("expired").inc()
            await self.store.touch_card(approval.approval_id)
        else:  # decided meanwhile (a click won), or expired by an earlier attempt whose notice failed
            earlier = approval.decided.get(index)
            if approval.status is ApprovalStatus.EXPIRED and (approval.error or "").startswith("expired"):
                verdict = Verdict(DecisionResult.UNANSWERABLE)
            elif earlier is None or earlier.outcome is not Outcome.EXPIRED:
                return
        actions = approval.request.actions
        what = f"`{escape(actions[index].name)}`" if actions else "The question"
        within = f"within {spoken(limit)}" if limit else "in time"
        if verdict.result is DecisionResult.UNANSWERABLE:
            text = (
                f"⌛ {what} expired: no decision {within}. It allows neither reject nor respond, so the "
                "agent was not resumed; nothing runs."
            )
        elif actions and verdict.result is DecisionResult.RECORDED:  # the rest of the batch still waits
            text = (
                f"⌛ {what} expired: no decision {within}, so it will not run. "
                "The agent hears once the rest is decided."
            )
        elif actions:
            text = f"⌛ {what} expired: no decision {within}, so it was not run. The agent was told."
        else:
            text = f"⌛ The question expired: no answer {within}. Signoff answered: {escape(answer or '')}"
        await self.router.slack.thread_reply(approval, text, f"expired:{approval.approval_id}:{index}")

    async def remind(self, approval: Approval) -> float | None:
        """Notify who may still decide; returns when the next reminder is due."""
        terms = approval.terms
        assert terms is not None and terms.remind_every
        waited = self.clock() - approval.created_at
        number = max(1, int(waited // terms.remind_every))
        line = await self.router.phone_line(approval)
        await self.router.notify(
            approval,
            f"⏰ Waiting {spoken(waited)} for a decision: {line}",
            f"remind:{approval.approval_id}:{number}",
            self.router.waiting_on(approval),
        )
        log.info("approval_reminded", number=number, waited_s=int(waited))
        return approval.created_at + (number + 1) * terms.remind_every

    async def escalate(self, approval: Approval, after: int) -> None:
        terms = approval.terms
        assert terms is not None
        to = terms.escalations.get(after, ())
        if await self.store.escalate(approval.approval_id, after):
            log.info("approval_escalated", to=list(to), after_s=after)
            await self.store.touch_card(approval.approval_id)
        line = await self.router.phone_line(approval)
        waited = spoken(self.clock() - approval.created_at)
        await self.router.notify(
            approval,
            f"⏫ Escalated after {waited} without a decision: {line}. You may decide it now",
            f"escalate:{approval.approval_id}:{after}",
            to,
        )

    def _again(self, item: str, error: str, most: int = 10) -> float | None:
        """When to try a failed deadline again; None (dropped, logged) after `most` failures."""
        failures = self._failures[item] = self._failures.get(item, 0) + 1
        if failures >= most:
            del self._failures[item]
            log.error("deadline_dropped", item=item, error=error)
            return None
        log.warning("deadline_failed", item=item, error=error, failures=failures)
        return self.clock() + 5
